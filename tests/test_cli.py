"""The command line's bad-input contract: one line on stderr, exit 2, no traceback."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest

from tests.conftest import assert_one_line_error, run_cli


def test_unknown_verb_and_option() -> None:
    assert_one_line_error(run_cli("fly"), "fly")
    assert_one_line_error(run_cli("logs", "x.h5", "--colour"), "--colour")


def test_unknown_robot() -> None:
    p = run_cli("record", "tank", "--port", "/dev/null", "--camera", "0", "--episodes", "1",
                "--out", "x.h5", "--driver", "excite:chirp")
    assert_one_line_error(p, "tank")


def test_missing_port(tmp_path: Path) -> None:
    img = tmp_path / "cam.jpg"
    import cv2

    cv2.imwrite(str(img), np.zeros((24, 32, 3), np.uint8))
    p = run_cli("record", "rc_car", "--port", str(tmp_path / "ttyNONE"), "--camera", str(img),
                "--episodes", "1", "--out", str(tmp_path / "x.h5"), "--driver", "excite:chirp")
    assert_one_line_error(p, "ttyNONE")
    assert not (tmp_path / "x.h5").exists()


def test_unreadable_camera(tmp_path: Path) -> None:
    p = run_cli("record", "rc_car", "--port", "/dev/null", "--camera", "http://127.0.0.1:9/stream",
                "--episodes", "1", "--out", str(tmp_path / "x.h5"), "--driver", "excite:chirp")
    assert_one_line_error(p, "camera")


def test_unknown_driver_and_signal(tmp_path: Path) -> None:
    base = ["record", "rc_car", "--port", "/dev/null", "--camera", "0", "--episodes", "1",
            "--out", str(tmp_path / "x.h5")]
    assert_one_line_error(run_cli(*base, "--driver", "excite:wiggle"), "wiggle")
    assert_one_line_error(run_cli(*base, "--driver", "autopilot"), "autopilot")
    assert_one_line_error(run_cli(*base, "--driver", "policy:" + str(tmp_path / "none.ckpt")),
                          "none.ckpt")


@pytest.mark.parametrize("kind", ["missing", "text", "truncated", "foreign"])
def test_logs_bad_files(tmp_path: Path, kind: str) -> None:
    f = tmp_path / "bad.h5"
    if kind == "text":
        f.write_text("not hdf5 at all\n")
    elif kind == "foreign":
        with h5py.File(f, "w") as h:
            h["data"] = np.arange(10)
    elif kind == "truncated":
        from realsim.logs import LogWriter

        with LogWriter(f, robot="rc_car", source="sim") as w:
            ep = w.begin_episode(driver="test", seed=0)
            ep.add_sensor_block(np.arange(500) * 0.02, np.arange(500) * 0.02,
                                yaw_rate=np.zeros(500), vbat=np.full(500, 8.0))
            ep.close()
        data = f.read_bytes()
        f.write_bytes(data[: len(data) // 3])
    p = run_cli("logs", str(f))
    assert_one_line_error(p, "bad.h5")

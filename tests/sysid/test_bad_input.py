"""Bad input: one line naming the file (and episode), exit status 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

from realsim.errors import UserError
from realsim.logs import LogWriter
from sysid.cli import main


def _run(*args: str) -> tuple[int, str]:
    r = subprocess.run([sys.executable, "-m", "sysid.cli", *args], capture_output=True, text=True,
                       timeout=120)
    return r.returncode, r.stderr


def test_wrong_robot(tmp_path: Path) -> None:
    log = tmp_path / "arm.h5"
    with LogWriter(log, robot="arm", source="real") as w:
        ep = w.begin_episode()
        ep.add_commands(np.arange(5) * 0.1, np.arange(5), np.zeros((5, 6)))
        ep.close()
    code, err = _run("fit", "rc_car", "--logs", str(log), "--out", str(tmp_path / "o"))
    assert code == 2
    assert err.count("\n") == 1 and str(log) in err and "arm" in err


def test_empty_log(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "empty.h5"
    LogWriter(log, robot="rc_car").close()
    assert main(["fit", "rc_car", "--logs", str(log), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(log) in err


def test_nan_in_stream(tmp_path: Path, synth_log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "nan.h5"
    bad.write_bytes(synth_log.read_bytes())
    with h5py.File(bad, "a") as f:
        f["episodes/ep_000001/sensors/yaw_rate"][7] = np.nan
    assert main(["fit", "rc_car", "--logs", str(bad), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(bad) in err and "ep_000001" in err and "yaw_rate" in err


def test_unknown_parameter(tmp_path: Path, synth_log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pf = tmp_path / "p.yaml"
    pf.write_text("robot: rc_car\nparams:\n  warp_drive: 3.0\n")
    assert main(["replay", "rc_car", "--log", str(synth_log), "--out", str(tmp_path / "o.h5"),
                 "--params", str(pf)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(pf) in err and "warp_drive" in err
    with pytest.raises(UserError, match="warp_drive"):
        from sysid.fit import FitConfig, run_fit

        run_fit(FitConfig("rc_car", [str(synth_log)], str(tmp_path / "o"), init=str(pf)))


def test_residual_hook(tmp_path: Path, synth_log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", "rc_car", "--log", str(synth_log), "--out", str(tmp_path / "o.h5"),
                 "--residual", str(tmp_path / "r.ckpt")]) == 2
    err = capsys.readouterr().err  # a missing checkpoint (or, before issue 4, no residual models)
    assert err.count("\n") == 1 and ("issue 4" in err or "r.ckpt" in err)

"""Log library: round trip, append, threads, reader errors, resampling, summary."""

from __future__ import annotations

import math
import threading
from pathlib import Path

import cv2
import h5py
import numpy as np
import pytest

from realsim.errors import LogFormatError, UserError
from realsim.logs import (
    FORMAT,
    FORMAT_VERSION,
    Episode,
    LogReader,
    LogWriter,
    Stream,
    control_timeline,
    resample,
    summarize,
)
from realsim.logs.reader import CameraStream


def _jpeg(value: int, size: tuple[int, int] = (24, 32)) -> bytes:
    img = np.full((*size, 3), value, np.uint8)
    img[:, :, 0] = 200  # blue in BGR
    ok, buf = cv2.imencode(".jpg", img)
    assert ok
    return buf.tobytes()


def _write_car(path: Path, n_eps: int = 2, close_last: bool = True) -> None:
    with LogWriter(path, robot="rc_car", source="real", attrs={"firmware": "fw1"}) as w:
        for e in range(n_eps):
            ep = w.begin_episode(driver="excite:chirp", seed=e)
            for i in range(100):
                t = i * 0.02
                if i % 2 == 0:
                    ep.add_command(t, i // 2, [0.5, -0.25])
                ep.add_sensors(t + 0.001, 10.0 + t, enc_rad=i * 0.1, yaw_rate=0.5,
                               accel=(1.0, 2.0), vbat=7.4, ack=i // 2 - 1, flags=4)
                if i % 5 == 0:
                    ep.add_frame("front", t, _jpeg(i))
            ep.set_attrs(dropped_lines=3)
            if close_last or e < n_eps - 1:
                ep.close(success=1, score=0.75)


def _one_line(e: pytest.ExceptionInfo, path: Path) -> str:
    msg = str(e.value)
    assert "\n" not in msg
    assert str(path) in msg
    return msg


# --------------------------------------------------------------- round trip
def test_roundtrip_car(tmp_path: Path) -> None:
    p = tmp_path / "car.h5"
    _write_car(p)
    with LogReader(p) as r:
        assert (r.robot, r.source, len(r)) == ("rc_car", "real", 2)
        assert r.episode_names == ["ep_000000", "ep_000001"]
        assert r.attrs["format"] == FORMAT and r.attrs["format_version"] == FORMAT_VERSION
        assert r.attrs["firmware"] == "fw1" and r.attrs["software"].startswith("realsim")
        assert "T" in r.attrs["created"]
        ep = r.episode(1)
        assert isinstance(ep, Episode) and ep.name == "ep_000001"
        assert ep.complete and ep.success == 1 and ep.score == 0.75
        assert ep.driver == "excite:chirp" and ep.seed == 1 and ep.start_unix > 1e9
        assert ep.attrs["dropped_lines"] == 3
        c, s = ep.command, ep.sensors
        assert isinstance(c, Stream) and len(c) == 50 and len(s) == 100
        assert c["action"].dtype == np.float32 and c["action"].shape == (50, 2)
        assert c["seq"].dtype == np.int64
        np.testing.assert_array_equal(c["seq"], np.arange(50))
        assert s["accel"].shape == (100, 2) and s["ack"].dtype == np.int64
        assert s["flags"].dtype == np.int64 and s["yaw_rate"].dtype == np.float64
        np.testing.assert_allclose(s["t_device"], 10.0 + np.arange(100) * 0.02)
        cam = ep.cameras["front"]
        assert isinstance(cam, CameraStream) and len(cam) == 20
        assert cam.frame(3) == _jpeg(15) and cam.jpeg[0] == _jpeg(0)
        img = cam.decode(2)
        assert img.shape == (24, 32, 3) and img.dtype == np.uint8
        assert img[0, 0, 2] > 150  # BGR blue became RGB channel 2
        assert ep.privileged is None and ep.judge is None
        assert ep.duration == pytest.approx(1.981)
        assert [e.name for e in r.episodes(complete_only=True)] == r.episode_names


def test_open_episode_at_exit_is_incomplete(tmp_path: Path) -> None:
    p = tmp_path / "c.h5"
    _write_car(p, n_eps=2, close_last=False)
    with LogReader(p) as r:
        assert r.episode(0).complete and not r.episode(1).complete
        assert len(r.episode(1).sensors) == 100  # flushed at exit
        assert [e.name for e in r.episodes(complete_only=True)] == ["ep_000000"]


def test_sim_privileged_and_judge(tmp_path: Path) -> None:
    p = tmp_path / "arm.h5"
    with LogWriter(p, robot="arm", source="sim") as w:
        ep = w.begin_episode(driver="teacher", seed=4)
        ep.add_commands(np.arange(10) * 0.1, np.arange(10), np.zeros((10, 6)))
        ep.add_sensor_block(np.arange(10) * 0.1, None, qpos=np.ones((10, 6)), voltage=np.full(10, 12.0))
        ep.add_privileged("qpos_full", np.arange(30.0).reshape(10, 3), t=np.arange(10) * 0.1)
        ep.add_privileged("cube_size", np.array([0.03, 0.03, 0.03]))
        ep.add_privileged("obj", np.zeros(2), t=1.5)
        ep.add_privileged("names", np.array(["param.a", "param.b"]))
        ep.set_judge(1, 0.9)
        ep.close()
        assert w.complete_episodes() == ["ep_000000"]
    with LogReader(p) as r:
        ep = r.episode("ep_000000")
        assert ep.privileged is None
        assert ep.success == 1 and ep.score == pytest.approx(0.9)
        assert ep.judge == {"success": 1, "score": pytest.approx(0.9)}
        assert np.isnan(ep.sensors["t_device"]).all()
        pe = r.episode(0, privileged=True)
        assert pe.privileged is not None
        assert pe.privileged["qpos_full"].shape == (10, 3)
        assert pe.privileged["qpos_full_t"].shape == (10,)
        np.testing.assert_array_equal(pe.privileged["cube_size"], [0.03] * 3)
        assert pe.privileged["obj"].shape == (1, 2)
        assert [x.decode() for x in pe.privileged["names"]] == ["param.a", "param.b"]


def test_privileged_refused_on_real(tmp_path: Path) -> None:
    with LogWriter(tmp_path / "r.h5", robot="rc_car", source="real") as w:
        ep = w.begin_episode()
        with pytest.raises(LogFormatError, match="privileged"):
            ep.add_privileged("qpos", np.zeros(3))


# ----------------------------------------------------------------- append
def _digests(p: Path) -> dict[str, bytes]:
    out = {}
    with h5py.File(p, "r") as f:
        def visit(name: str, obj: object) -> None:
            if isinstance(obj, h5py.Dataset):
                data = obj[()]
                if obj.dtype.kind == "O":
                    out[name] = b"".join(np.asarray(x).tobytes() for x in data)
                else:
                    out[name] = data.tobytes()
            attrs = getattr(obj, "attrs", {})
            out[name + "@attrs"] = repr(sorted((k, repr(v)) for k, v in attrs.items())).encode()
        f.visititems(visit)
    return out


def test_append_keeps_earlier_episodes_identical(tmp_path: Path) -> None:
    p = tmp_path / "a.h5"
    _write_car(p, n_eps=2)
    before = _digests(p)
    with LogWriter(p, robot="rc_car", source="real", attrs={"firmware": "other"}) as w:
        assert w.episode_names() == ["ep_000000", "ep_000001"]
        ep = w.begin_episode(driver="teleop")
        assert ep.name == "ep_000002"
        ep.add_sensors(0.0, 0.0, enc_rad=1.0)
        ep.close()
    after = _digests(p)
    for k, v in before.items():
        if k.startswith("episodes/"):
            assert after[k] == v, k
    with LogReader(p) as r:
        assert len(r) == 3 and r.attrs["firmware"] == "fw1"  # root attrs never rewritten


def test_explicit_episode_name(tmp_path: Path) -> None:
    p = tmp_path / "n.h5"
    with LogWriter(p, robot="rc_car", source="sim") as w:
        assert w.begin_episode(name="ep_000007").name == "ep_000007"
        assert w.begin_episode().name == "ep_000008"
        with pytest.raises(ValueError):
            w.begin_episode(name="ep_000007")


def test_append_wrong_robot_or_source(tmp_path: Path) -> None:
    p = tmp_path / "a.h5"
    _write_car(p, n_eps=1)
    with pytest.raises(LogFormatError) as e:
        LogWriter(p, robot="arm", source="real")
    assert "rc_car" in _one_line(e, p)
    with pytest.raises(LogFormatError) as e:
        LogWriter(p, robot="rc_car", source="sim")
    _one_line(e, p)
    # the failed attempts released the file
    with LogWriter(p, robot="rc_car", source="real") as w:
        assert w.complete_episodes() == ["ep_000000"]


def test_second_writer_refused(tmp_path: Path) -> None:
    p = tmp_path / "a.h5"
    with LogWriter(p, robot="rc_car", source="real"):
        with pytest.raises(LogFormatError) as e:
            LogWriter(p, robot="rc_car", source="real")
        assert "another process" in _one_line(e, p)


def test_read_live_file_in_process(tmp_path: Path) -> None:
    p = tmp_path / "live.h5"
    with LogWriter(p, robot="rc_car", source="real") as w:
        ep = w.begin_episode(driver="teleop")
        for i in range(20):
            ep.add_sensors(i * 0.02, i * 0.02, enc_rad=float(i))
        ep.flush()
        with LogReader(p) as r:
            e = r.episode(0)
            assert not e.complete and len(e.sensors) == 20
        assert "incomplete" in summarize(p)
        ep.close()


# ---------------------------------------------------------------- threads
def test_three_threads(tmp_path: Path) -> None:
    p = tmp_path / "t.h5"
    n = 600
    with LogWriter(p, robot="rc_car", source="real", flush_interval=0.01) as w:
        ep = w.begin_episode()

        def sensors() -> None:
            for i in range(n):
                ep.add_sensors(i * 1e-3, i * 1e-3, enc_rad=float(i), accel=(i, -i), ack=i)

        def commands() -> None:
            for i in range(n):
                ep.add_command(i * 1e-3, i, [i / n, -i / n])

        def frames() -> None:
            for i in range(n // 4):
                ep.add_frame("front", i * 4e-3, bytes([i % 256]) * (100 + i))

        ths = [threading.Thread(target=f) for f in (sensors, commands, frames)]
        for th in ths:
            th.start()
        for th in ths:
            th.join()
        ep.close()
    with LogReader(p) as r:
        e = r.episode(0)
        np.testing.assert_array_equal(e.sensors["enc_rad"], np.arange(n))
        np.testing.assert_array_equal(e.sensors["accel"][:, 1], -np.arange(n))
        np.testing.assert_array_equal(e.sensors["ack"], np.arange(n))
        np.testing.assert_array_equal(e.command["seq"], np.arange(n))
        cam = e.cameras["front"]
        assert len(cam) == n // 4
        assert all(cam.frame(i) == bytes([i % 256]) * (100 + i) for i in range(n // 4))


def test_background_flush_without_calls(tmp_path: Path) -> None:
    """A recorder that stalls after adding data still gets it to disk."""
    import time

    p = tmp_path / "s.h5"
    with LogWriter(p, robot="rc_car", source="real", flush_interval=0.1) as w:
        ep = w.begin_episode()
        ep.add_sensors(0.0, 0.0, enc_rad=1.0)
        time.sleep(0.5)
        with LogReader(p) as r:
            assert len(r.episode(0).sensors) == 1
        ep.close()


def test_missing_sensor_field_is_filled(tmp_path: Path) -> None:
    p = tmp_path / "f.h5"
    with LogWriter(p, robot="rc_car", source="real") as w:
        ep = w.begin_episode()
        ep.add_sensors(0.0, 0.0, enc_rad=1.0)
        ep.flush()
        ep.add_sensors(0.1, 0.1, enc_rad=2.0, ack=5)
        ep.close()
    with LogReader(p) as r:
        s = r.episode(0).sensors
        np.testing.assert_array_equal(s["ack"], [-1, 5])
        np.testing.assert_array_equal(s["enc_rad"], [1.0, 2.0])


# ------------------------------------------------------------ reader errors
def test_error_missing_file(tmp_path: Path) -> None:
    p = tmp_path / "nope.h5"
    with pytest.raises(UserError) as e:
        LogReader(p)
    assert "no such file" in _one_line(e, p)


def test_error_not_hdf5(tmp_path: Path) -> None:
    p = tmp_path / "x.h5"
    p.write_text("hello, not a log\n")
    with pytest.raises(LogFormatError) as e:
        LogReader(p)
    assert "not an HDF5" in _one_line(e, p)
    with pytest.raises(LogFormatError) as e:
        LogWriter(p, robot="rc_car", source="real")
    _one_line(e, p)
    assert p.read_text() == "hello, not a log\n"  # never clobbered


def test_error_empty_file(tmp_path: Path) -> None:
    p = tmp_path / "e.h5"
    p.write_bytes(b"")
    with pytest.raises(LogFormatError) as e:
        LogReader(p)
    _one_line(e, p)


def test_error_truncated(tmp_path: Path) -> None:
    p = tmp_path / "t.h5"
    _write_car(p, n_eps=2)
    data = p.read_bytes()
    for cut in (200, len(data) // 2, len(data) - 100):
        q = tmp_path / f"cut{cut}.h5"
        q.write_bytes(data[:cut])
        with pytest.raises(LogFormatError) as e:
            with LogReader(q) as r:  # some cuts only show when the data is read
                for _ in r.episodes():
                    pass
                for ep in r.episodes():
                    for c in ep.cameras.values():
                        c.jpeg  # noqa: B018
        _one_line(e, q)


def test_error_foreign_hdf5(tmp_path: Path) -> None:
    p = tmp_path / "f.h5"
    with h5py.File(p, "w") as f:
        f["x"] = np.arange(3)
    with pytest.raises(LogFormatError) as e:
        LogReader(p)
    assert "not a realsim log" in _one_line(e, p)
    with pytest.raises(LogFormatError) as e:
        LogWriter(p, robot="rc_car", source="real")
    _one_line(e, p)


def test_error_wrong_format_version(tmp_path: Path) -> None:
    p = tmp_path / "v.h5"
    _write_car(p, n_eps=1)
    with h5py.File(p, "r+") as f:
        f.attrs["format_version"] = 2
    with pytest.raises(LogFormatError) as e:
        LogReader(p)
    assert "format_version 2" in _one_line(e, p)


def test_error_length_mismatch(tmp_path: Path) -> None:
    p = tmp_path / "m.h5"
    _write_car(p, n_eps=1)
    with h5py.File(p, "r+") as f:
        f["episodes/ep_000000/sensors/yaw_rate"].resize((99,))
    with pytest.raises(LogFormatError) as e:
        LogReader(p)
    msg = _one_line(e, p)
    assert "episode ep_000000: dataset sensors/yaw_rate has 99 rows but sensors/t has 100" in msg


def test_error_unknown_episode(tmp_path: Path) -> None:
    p = tmp_path / "u.h5"
    _write_car(p, n_eps=1)
    with LogReader(p) as r:
        with pytest.raises(LogFormatError):
            r.episode("ep_000009")
        with pytest.raises(LogFormatError):
            r.episode(5)


# ------------------------------------------------------------- resampling
def test_resample_methods() -> None:
    t = np.array([0.0, 1.0, 2.0])
    x = np.array([0.0, 10.0, 20.0])
    tn = np.array([-1.0, 0.0, 0.4, 0.6, 1.0, 1.5, 2.0, 3.0])
    np.testing.assert_allclose(resample(t, x, tn), [0, 0, 4, 6, 10, 15, 20, 20])
    np.testing.assert_array_equal(resample(t, x, tn, "previous"), [0, 0, 0, 0, 10, 10, 20, 20])
    np.testing.assert_array_equal(resample(t, x, tn, "nearest"), [0, 0, 0, 10, 10, 10, 20, 20])
    x2 = np.stack([x, -x], axis=1)
    out = resample(t, x2, tn)
    assert out.shape == (8, 2)
    np.testing.assert_allclose(out[:, 1], -np.array([0, 0, 4, 6, 10, 15, 20, 20]))
    xi = np.array([1, 2, 3], dtype=np.int64)
    assert resample(t, xi, tn, "previous").dtype == np.int64
    with pytest.raises(ValueError):
        resample(t, x, tn, "cubic")
    with pytest.raises(ValueError):
        resample(t[:0], x[:0], tn)


def _synthetic_episode() -> Episode:
    cmd = Stream(np.array([0.25, 0.5]), {"seq": np.array([7, 8]),
                                         "action": np.array([[1, 2], [3, 4]], np.float32)})
    ts = np.arange(11) * 0.1
    sens = Stream(ts, {"t_device": ts + 5, "enc_rad": ts * 2, "ack": np.arange(11, dtype=np.int64),
                       "accel": np.stack([ts, -ts], 1)})
    cam = CameraStream(np.array([0.15, 0.55]), None, [b"a", b"b"])
    return Episode("ep_000000", {"complete": True}, cmd, sens, {"front": cam})


def test_control_timeline() -> None:
    ep = _synthetic_episode()
    tl = control_timeline(ep, rate_hz=4.0)
    np.testing.assert_allclose(tl["t"], [0, 0.25, 0.5, 0.75, 1.0])
    np.testing.assert_array_equal(tl["action"], [[0, 0], [1, 2], [3, 4], [3, 4], [3, 4]])
    np.testing.assert_array_equal(tl["seq"], [-1, 7, 8, 8, 8])
    np.testing.assert_allclose(tl["enc_rad"], np.array([0, 0.25, 0.5, 0.75, 1.0]) * 2)
    np.testing.assert_allclose(tl["t_device"], [5, 5.25, 5.5, 5.75, 6.0])
    np.testing.assert_array_equal(tl["ack"], [0, 2, 5, 7, 10])
    assert tl["accel"].shape == (5, 2)
    np.testing.assert_array_equal(tl["frame_front"], [-1, 0, 0, 1, 1])
    tl2 = control_timeline(ep, 10.0, t0=0.3, t1=0.6)
    np.testing.assert_allclose(tl2["t"], [0.3, 0.4, 0.5, 0.6])
    np.testing.assert_array_equal(tl2["action"][:, 0], [1, 1, 3, 3])


# ---------------------------------------------------------------- summary
def test_summarize(tmp_path: Path) -> None:
    p = tmp_path / "s.h5"
    _write_car(p, n_eps=2, close_last=False)
    text = summarize(p)
    assert "robot=rc_car" in text and "source=real" in text and "software realsim" in text
    assert "ep_000000" in text and "ep_000001" in text
    assert "commands 50 @ 25.0 Hz" in text
    assert "sensors 100 @ 50.0 Hz" in text
    assert "camera front: 20 frames @ 50.0 fps" not in text
    assert "camera front: 20 frames @ 10.0 fps" in text
    assert "max gap 0.100 s" in text
    assert "dropped_lines=3" in text
    assert "success=1" in text and "score=0.750" in text
    assert "total: 2 episodes (1 complete)" in text
    assert "verdict: 1 incomplete episode(s)" in text and "ep_000001" in text.splitlines()[-1]
    q = tmp_path / "ok.h5"
    _write_car(q, n_eps=1)
    assert summarize(q).splitlines()[-1] == "verdict: all episodes complete"


def test_nan_score_default(tmp_path: Path) -> None:
    p = tmp_path / "n.h5"
    with LogWriter(p, robot="arm", source="real") as w:
        w.begin_episode(driver="teleop", seed=None).close()
    with LogReader(p) as r:
        ep = r.episode(0)
        assert ep.success == -1 and math.isnan(ep.score) and ep.seed == -1 and ep.duration == 0.0

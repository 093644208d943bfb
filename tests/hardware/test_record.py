"""`realsim record rc_car` against `realsim emulate rc_car`: what the device saw is in the log."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from realsim.logs import LogReader
from tests.conftest import ROOT, assert_one_line_error, run_cli


def _record_args(emu, out: Path, episodes: int, seconds: float, *extra: str) -> list[str]:
    return ["record", "rc_car", "--port", emu.port, "--camera", emu.camera, "--episodes",
            str(episodes), "--seconds", str(seconds), "--driver", "excite:chirp", "--out", str(out),
            *extra]


def check_against_emulator(log: Path, stats: dict) -> None:
    """Every DRV the device parsed is in command/, every in-episode TLM in sensors/."""
    per_ep = stats["episodes"]
    with LogReader(log) as r:
        for k, name in enumerate(r.episode_names):
            ep = r.episode(name)
            dev = per_ep[str(k)]
            assert len(ep.command.t) == dev["drv_received"], (name, len(ep.command.t), dev)
            in_ep = (ep.sensors["flags"] & 4) != 0
            assert int(in_ep.sum()) == dev["tlm_sent"], (name, int(in_ep.sum()), dev)
            np.testing.assert_array_equal(ep.command["seq"], np.sort(ep.command["seq"]))
            assert ep.judge is not None and ep.success in (0, 1)


def test_record_matches_device_counters(emulated_car, tmp_path: Path) -> None:
    out = tmp_path / "car.h5"
    p = run_cli(*_record_args(emulated_car, out, 2, 4.0))
    assert p.returncode == 0, p.stderr
    check_against_emulator(out, emulated_car.stats())
    with LogReader(out) as r:
        assert r.robot == "rc_car" and r.source == "real" and len(r) == 2
        for ep in r.episodes():
            assert ep.complete
            cam = ep.cameras["front"]
            fps = (len(cam.t) - 1) / (cam.t[-1] - cam.t[0])
            assert fps >= 18.0, fps
            assert cam.jpeg[0][:2] == b"\xff\xd8"  # stored as received: a JPEG
            ack = ep.sensors["ack"]
            assert ack.max() == ep.command["seq"].max()  # the last command was acknowledged
            rate = (len(ep.command.t) - 1) / (ep.command.t[-1] - ep.command.t[0])
            assert 45 < rate < 55, rate
    p = run_cli("logs", str(out))
    assert p.returncode == 0 and "ep_000001" in p.stdout


def test_emulator_killed_mid_episode(emulated_car, tmp_path: Path) -> None:
    out = tmp_path / "car.h5"
    proc = subprocess.Popen([sys.executable, "-m", "realsim", *_record_args(emulated_car, out, 3, 5.0)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # well inside the second episode, however slow the start
        eps = emulated_car.stats()["episodes"]
        if eps.get("1", {}).get("tlm_sent", 0) > 100:
            break
        time.sleep(0.2)
    emulated_car.kill()
    _, err = proc.communicate(timeout=20)
    lines = [ln for ln in err.splitlines() if ln.startswith("realsim: error")]
    assert proc.returncode != 0 and len(lines) == 1 and "Traceback" not in err, err
    with LogReader(out) as r:
        eps = list(r.episodes())
        assert eps[0].complete and not eps[-1].complete
        assert len(eps[-1].sensors.t) > 50  # the open episode kept what arrived


class _StallingSource:
    """Stops sending commands for 0.6 s in the middle of the episode."""

    name = "test:stall"

    def begin(self, episode: int) -> int:
        return -1

    def act(self, obs):
        if 1.0 < obs.t < 1.6:
            time.sleep(0.6)
        return np.array([0.0, 0.1])


def test_host_stall_trips_watchdog(emulated_car, tmp_path: Path) -> None:
    from hardware.camera import CameraReader
    from hardware.rc_car import RcCarDriver
    from hardware.recorder import CarRecorder
    from realsim.logs import LogWriter

    out = tmp_path / "stall.h5"
    with RcCarDriver(emulated_car.port) as car, LogWriter(out, robot="rc_car", source="real") as w:
        cam = CameraReader(emulated_car.camera)
        CarRecorder(car, {"front": cam}, w).run(_StallingSource(), episodes=1, seconds=3.0)
    with LogReader(out) as r:
        ep = r.episode(0)
        flags, t = ep.sensors["flags"], ep.sensors.t
        tripped = (flags & 1) != 0
        assert tripped[(t > 1.35) & (t < 1.65)].any()  # 300 ms after the last command
        assert not tripped[(t > 0.5) & (t < 1.0)].any()
        assert not tripped[(t > 2.2)].any()  # cleared by the next command


def test_wrong_robot_log_refused(emulated_car, tmp_path: Path) -> None:
    from realsim.logs import LogWriter

    out = tmp_path / "arm.h5"
    with LogWriter(out, robot="arm", source="real"):
        pass
    assert_one_line_error(run_cli(*_record_args(emulated_car, out, 1, 1.0)), "arm")


@pytest.mark.slow
def test_kill9_record_then_resume(emulated_car, tmp_path: Path) -> None:
    """kill -9 at >= 10 random moments; closed episodes intact; --resume appends."""
    out = tmp_path / "car.h5"
    rng = random.Random(7)
    for k in range(10):
        proc = subprocess.Popen([sys.executable, "-m", "realsim",
                                 *_record_args(emulated_car, out, 40, 1.5, "--resume")],
                                cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(1.0, 6.0))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        with LogReader(out) as r:  # always readable
            eps = list(r.episodes())
            for ep in eps:
                if "yaw_rate" in ep.sensors.fields:  # killed before the first sample: empty
                    assert len(ep.sensors.t) == len(ep.sensors["yaw_rate"])
                if ep.complete:
                    assert ep.duration > 1.0 and len(ep.command.t) > 50, (k, ep.name)
    with LogReader(out) as r:
        before = {ep.name: len(ep.sensors.t) for ep in r.episodes()}
        n_complete = sum(ep.complete for ep in r.episodes())
    target = n_complete + 2
    p = run_cli(*_record_args(emulated_car, out, target, 1.5, "--resume"))
    assert p.returncode == 0, p.stderr
    assert "resuming" in p.stderr
    with LogReader(out) as r:
        eps = list(r.episodes())
        assert sum(ep.complete for ep in eps) == target
        for ep in eps:
            if ep.name in before:  # earlier episodes never rewritten
                assert len(ep.sensors.t) == before[ep.name]

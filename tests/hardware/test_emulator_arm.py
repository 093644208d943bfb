"""The emulated arm end to end: a subprocess, its ptys spoken to by `ArmDriver`, its cameras,
its judge, its injected bus faults, and `record_arm` into a log."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import cv2
import numpy as np
import pytest

from hardware.arm import HOME, ArmDriver
from hardware.emulators.launch import parse_ready_line
from realsim.errors import DeviceError

ROOT = Path(__file__).resolve().parents[2]


class Emu:
    """`hardware.emulators.arm.run` in a child process (what ``realsim emulate arm`` runs)."""

    def __init__(self, seed: int, reality: Path | None = None) -> None:
        code = ("from hardware.emulators.arm import run; "
                f"run(seed={seed}, reality={str(reality) if reality else None!r})")
        self.proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"})
        assert self.proc.stdout is not None
        self.line = self.proc.stdout.readline()
        self.ready = parse_ready_line(self.line)
        self.port, self.camera = self.ready["port"], self.ready["camera"]
        self.control = self.ready["control"]
        self.urls = dict(part.split("=", 1) for part in self.camera.split(","))

    def stats(self) -> dict:
        base = self.urls["front"].rsplit("/", 1)[0]
        with urllib.request.urlopen(base + "/stats", timeout=5) as r:
            return json.loads(r.read())

    def frame(self, name: str) -> np.ndarray:
        url = self.urls[name].rsplit("/", 1)[0] + "/frame.jpg"
        for _ in range(50):
            try:
                with urllib.request.urlopen(url, timeout=5) as r:
                    img = cv2.imdecode(np.frombuffer(r.read(), np.uint8), cv2.IMREAD_COLOR)
                    if img is not None:
                        return img
            except OSError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"no frame from {url}")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


@pytest.fixture(scope="module")
def emu() -> Iterator[Emu]:
    e = Emu(seed=4)
    yield e
    assert e.stop() == 0


def test_ready_line_and_cameras(emu: Emu) -> None:
    assert emu.line.startswith("port=/dev/") and " camera=front=http://127.0.0.1:" in emu.line
    assert ",wrist=http://127.0.0.1:" in emu.line and " control=/dev/" in emu.line
    for name in ("front", "wrist"):
        img = emu.frame(name)
        assert img.shape == (480, 640, 3)
        assert img.std() > 5  # a scene, not a blank frame


def test_servos_move_under_their_own_control_with_gravity_sag(emu: Emu) -> None:
    goal = np.array([0.4, 0.3, 1.0, 1.2, 0.8, 0.04])
    with ArmDriver(emu.port, emu.control) as arm:
        s0 = arm.read_state()
        assert np.allclose(s0.qpos, HOME, atol=0.12)  # powered up holding home (with some sag)
        t0 = time.monotonic()
        peak = 0.0
        while time.monotonic() - t0 < 1.5:
            arm.write_goals(goal)
            s = arm.read_state()
            peak = max(peak, float(np.abs(s.qvel[0])))
            time.sleep(0.01)
        assert np.allclose(s.qpos, goal, atol=0.1), s.qpos
        assert abs(s.qpos[1] - goal[1]) > 1e-3  # P control against gravity leaves an error
        assert abs(s.load[1]) > 0.05  # ... and holds it with load
        assert 1.0 < peak < 8.0  # speed-limited, not a teleport
        assert 6.0 < s.voltage < 8.5 and np.all((s.temperature > 10) & (s.temperature < 70))
        arm.episode_start(0)
        arm.episode_end(0)
        verdict = arm.wait_judge(0, 2.0)
        assert verdict is not None and verdict[0] == 0 and verdict[1] > 0
    st = emu.stats()
    assert st["jdg_sent"] >= 1 and st["episodes"]["0"]["success"] == 0
    assert "stall_torque" not in json.dumps(st)  # the truth is never served


def test_record_arm_writes_a_log(emu: Emu, tmp_path: Path) -> None:
    from hardware.arm_recorder import record_arm
    from realsim.logs import LogReader

    out = tmp_path / "arm.h5"
    names = record_arm(emu.port, emu.camera, emu.control, 1, 2.0, "excite:steps", out, seed=3)
    assert names == ["ep_000000"]
    with LogReader(out) as r:
        assert r.robot == "arm"
        (ep,) = list(r.episodes())
        assert ep.complete and ep.attrs["driver"] == "excite:steps" and ep.attrs["seed"] == 3
        assert ep.attrs["success"] in (0, 1) and np.isfinite(ep.attrs["score"])
        assert ep.attrs["loop_rate_hz"] > 25
    import h5py

    with h5py.File(out) as f:
        g = f["episodes/ep_000000"]
        qpos, act = g["sensors/qpos"][:], g["command/action"][:]
        assert qpos.shape[1] == 6 and act.shape == (len(g["command/t"]), 6) and len(qpos) > 50
        assert np.all(np.abs(act) <= 1.0)
        assert np.ptp(qpos, axis=0)[:5].min() > 0.01  # the excitation moved every joint
        assert len(g["camera/front/t"]) > 10 and len(g["camera/wrist/t"]) > 10


def test_bus_faults_are_counted_retried_and_a_lost_servo_is_a_clear_error(tmp_path: Path) -> None:
    reality = tmp_path / "faults.yaml"
    reality.write_text("fault_checksum_every: 10\nfault_corrupt_every: 23\nfault_garbage_every: 17\n"
                       "fault_drop_servo: 3\nfault_drop_after_s: 4.0\n")
    e = Emu(seed=1, reality=reality)
    try:
        with ArmDriver(e.port, e.control) as arm:
            for _ in range(40):
                arm.write_goals(HOME)
                arm.read_state()  # every read succeeds
            bus = e.stats()["bus"]
            c = arm.counts
            assert bus["checksum_injected"] > 10 and c["checksum"] >= bus["checksum_injected"] - 1
            assert c["retries"] >= c["checksum"] and c["garbage_bytes"] > 0
            while time.monotonic() < e_start(e) + 4.2:
                time.sleep(0.05)
            t = time.perf_counter()
            with pytest.raises(DeviceError) as err:
                for _ in range(20):
                    arm.read_state()
            assert str(err.value) == (f"servo 3 (elbow_flex) does not answer SYNC_READ on {e.port} "
                                      f"after 3 retries")
            assert time.perf_counter() - t < 1.0
    finally:
        assert e.stop() == 0


def e_start(e: Emu) -> float:
    """Monotonic time the emulator started its clock (its uptime subtracted from now)."""
    return time.monotonic() - e.stats()["uptime_s"]

"""The emulated arm's front end: a servo-bus pty, a control pty and two MJPEG cameras.

`run` is ``realsim emulate arm``: it draws a reality (`reality.RealityParams`,
seeded, optionally overridden by ``--reality FILE``, which may also switch on
bus faults), opens two ptys — the servo bus (STS3215 protocol, 1 Mbaud) and
the control port (EPS/EPE in, JDG out) — serves the ``front`` and ``wrist``
cameras on 127.0.0.1, prints ``port=<bus> camera=front=<url>,wrist=<url>
control=<control>`` once, and runs until SIGINT/SIGTERM.

Threads:

- the *device loop* (the calling thread) is the servos and the lab: it waits on
  both ptys with ``select`` (10 ms at most, never a busy wait), advances the
  physics to the present before answering any bus packet (so a SYNC_READ
  reports the state at the moment it is read), answers through `ServoBus`, and
  handles EPS (new cube and square, judge armed) and EPE (``JDG`` verdict);
- the *camera* thread asks a child process (its own interpreter, so drawing
  and JPEG encoding never hold the device loop's GIL) for both views of the
  world as it was one camera latency ago, about 30 frames/s each;
- the HTTP servers' threads serve the streams and ``/stats`` (on the front
  camera's server): bus and control counters, injected faults, episode
  verdicts. The true parameters are never served.

Ptys, the camera process and thread, the servers and the run loop are
`hardware.emulators.frontend`'s, shared with the car.
"""

from __future__ import annotations

import bisect
import select
import termios
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import realsim
from hardware import feetech, nmea
from hardware.emulators.arm.bus import ServoBus
from hardware.emulators.arm.reality import (
    RAD_PER_COUNT,
    ArmReality,
    RealityParams,
    TaskJudge,
    joint_to_motor,
    sample_scene,
)
from hardware.emulators.frontend import CameraProcess, FrontEnd, pty_read, pty_write, run_emulator
from hardware.emulators.mjpeg import MjpegServer

CAMERA_FPS = 30.0
"""Frames per second per camera (fewer when the host cannot draw that fast)."""
HISTORY_S = 0.01
"""The camera's state history is sampled this often, s."""
IDS = (1, 2, 3, 4, 5, 6)
NAME = "emu-arm"
FIRMWARE = f"realsim-{realsim.__version__}"

Snapshot = tuple[np.ndarray, np.ndarray, float, "tuple[float, float] | None"]
"""What a camera frame shows: joints (6,), cube position (3,), cube yaw, square centre."""


def _make_cameras(seed: int) -> Callable[[Snapshot], Sequence[bytes]]:
    """Both cameras (in the camera process): a snapshot -> (front, wrist) JPEGs."""
    from hardware.emulators.arm.render import ArmCameras  # OpenCV and the drawing: here only

    cams = ArmCameras(seed)
    return lambda snap: cams.jpegs(*snap)


class ArmEmulator(FrontEnd):
    """One emulated arm: `open` it, `serve` until `stop`, `close` it.

    Times: ``host`` = `time.monotonic` (s); ``t`` = reality time = host - t0 (s).
    """

    label = "arm"

    def __init__(self, seed: int = 0, reality: str | None = None, camera_port: int = 0) -> None:
        super().__init__(seed)
        self.params = RealityParams.from_yaml(reality, self.seed)
        self.arm = ArmReality(self.params, self.seed)
        self.t0 = time.monotonic()
        self.bus = ServoBus(IDS, faults=self.params.faults, seed=self.seed, refresh=self._refresh,
                            on_write=self._on_write, clock=time.monotonic)
        self._init_registers()
        self.reader = nmea.LineReader(nmea.HOST_TO_CAR)
        self.front = MjpegServer("127.0.0.1", camera_port)
        self.wrist = MjpegServer("127.0.0.1", camera_port + 1 if camera_port else 0)
        self._bus_fd = self._bus_slave = self._ctl_fd = self._ctl_slave = -1
        self.bus_path = self.control_path = ""
        self._hist: deque[tuple[float, Snapshot]] = deque(maxlen=64)
        self._hist_lock = threading.Lock()
        self.stats = {"bus_bytes_in": 0, "bus_write_dropped": 0, "jdg_sent": 0,
                      "frames_published": 0, "control_lines_dropped": 0, "episodes": {}}

    def _init_registers(self) -> None:
        """Angle limits (registers 9, 11) from the joint limits; present = home."""
        lo = joint_to_motor(np.array([-1.9, -1.7, -1.6, -1.7, -2.7, 0.0]))
        hi = joint_to_motor(np.array([1.9, 1.7, 1.6, 1.7, 2.7, 0.07]))
        for k, sid in enumerate(IDS):
            regs = self.bus.regs[sid]
            regs[9:11] = feetech.u16(int(round(2048 + lo[k] / RAD_PER_COUNT)))
            regs[11:13] = feetech.u16(int(round(2048 + hi[k] / RAD_PER_COUNT)))
            regs[42:44] = feetech.u16(int(self.arm.goal_counts[k]))
            regs[40] = 1  # powered up holding its position
            self.arm.set_torque(k, True)
            self._refresh(sid, regs)

    # -- lifecycle ------------------------------------------------------------------------------

    def open(self) -> str:
        """Open the ptys and the camera servers, start the cameras; return the ready line."""
        self.camera = CameraProcess(_make_cameras, (self.seed,), 2, "emu-arm-cameras", self.label)
        self._bus_fd, self._bus_slave, self.bus_path = self.open_pty()
        self._ctl_fd, self._ctl_slave, self.control_path = self.open_pty(termios.B115200)
        self.serve_cameras([self.front, self.wrist])
        self.t0 = time.monotonic()
        self.bus.t0 = self.t0
        self._record()
        self.start_camera_thread(CAMERA_FPS, self._frame)
        return (f"port={self.bus_path} camera=front={self.front.url},wrist={self.wrist.url} "
                f"control={self.control_path}")

    # -- device loop ------------------------------------------------------------------------------

    def serve(self) -> None:
        """Be the servos and the lab until `stop`; called on the thread that opened it."""
        fds = [self._bus_fd, self._ctl_fd]
        next_hist = time.monotonic()
        while not self._stop.is_set():
            try:
                ready, _, _ = select.select(fds, [], [], HISTORY_S)
            except (OSError, ValueError):
                break
            now = time.monotonic()
            self.arm.advance(now - self.t0)
            if self._bus_fd in ready:
                self._read_bus()
            if self._ctl_fd in ready:
                self._read_control(now)
            if now >= next_hist:
                self._record()
                next_hist = now + HISTORY_S

    def _read_bus(self) -> None:
        data = pty_read(self._bus_fd)
        if not data:
            return
        self.stats["bus_bytes_in"] += len(data)
        out = self.bus.handle(data)
        if out and not pty_write(self._bus_fd, self._bus_slave, out):
            self.stats["bus_write_dropped"] += 1

    def _refresh(self, sid: int, regs: bytearray) -> None:
        pos, spd, load, volt, temp = self.arm.present(IDS.index(sid))
        regs[56:58] = feetech.u16(feetech.to_sign_magnitude(pos, 15))
        regs[58:60] = feetech.u16(feetech.to_sign_magnitude(spd, 15))
        regs[60:62] = feetech.u16(feetech.to_sign_magnitude(load, 10))
        regs[62] = max(0, min(255, volt))
        regs[63] = max(0, min(255, temp))
        regs[66] = int(abs(spd) > 2)

    def _on_write(self, sid: int, addr: int, data: bytes) -> None:
        j = IDS.index(sid)
        end = addr + len(data)
        regs = self.bus.regs[sid]
        if addr <= 21 < end:
            self.arm.p_coef[j] = float(regs[21])
        if addr <= 40 < end:
            self.arm.set_torque(j, bool(regs[40]))
        if addr <= 42 and 43 < end:
            self.arm.set_goal(j, feetech.sign_magnitude(regs[42] | regs[43] << 8, 15))

    def _read_control(self, now: float) -> None:
        data = pty_read(self._ctl_fd)
        if not data:
            return
        for m in self.reader.feed(data):
            if m.type == "EPS":
                self._episode_start(m.int(0))
            elif m.type == "EPE":
                self._episode_end(m.int(0))
            elif m.type == "HLO":
                pty_write(self._ctl_fd, self._ctl_slave, nmea.encode("INF", 1, FIRMWARE, NAME, 0))
        with self._lock:
            self.stats["control_lines_dropped"] = self.reader.dropped

    def _episode_start(self, ep: int) -> None:
        if self.episode is not None:
            self._finish()
        scene = sample_scene(np.random.default_rng([self.seed, 3, ep]))
        self.arm.objects.reset(scene, self.arm.t)
        self.arm.judge = TaskJudge(self.arm.t)
        self.episode = ep
        with self._lock:
            self.stats["episodes"][str(ep)] = {"cube": list(scene.cube), "square": list(scene.square),
                                               "sync_reads": self.bus.stats["sync_reads"],
                                               "sync_writes": self.bus.stats["sync_writes"],
                                               "success": None, "score": None}
        self._record()

    def _finish(self) -> tuple[int, float]:
        assert self.arm.judge is not None and self.episode is not None
        success, score = self.arm.judge.verdict(self.arm.objects)
        with self._lock:
            e = self.stats["episodes"][str(self.episode)]
            e["success"], e["score"] = success, round(score, 4)
            e["sync_reads"] = self.bus.stats["sync_reads"] - e["sync_reads"]
            e["sync_writes"] = self.bus.stats["sync_writes"] - e["sync_writes"]
        self.episode = None
        self.arm.judge = None
        return success, score

    def _episode_end(self, ep: int) -> None:
        if self.episode is None or self.episode != ep:
            return
        success, score = self._finish()
        if pty_write(self._ctl_fd, self._ctl_slave, nmea.encode("JDG", ep, success, f"{score:.4f}")):
            with self._lock:
                self.stats["jdg_sent"] += 1

    # -- cameras ----------------------------------------------------------------------------------

    def _record(self) -> None:
        o = self.arm.objects
        snap: Snapshot = (self.arm.joints(), o.pos.copy(), float(o.yaw),
                          None if o.scene is None else tuple(o.scene.square))
        with self._hist_lock:
            self._hist.append((self.arm.t, snap))

    def _snapshot_at(self, t: float) -> Snapshot:
        with self._hist_lock:
            hist = list(self._hist)
        i = bisect.bisect_right([h[0] for h in hist], t) - 1
        return hist[max(i, 0)][1]

    def _frame(self) -> None:
        """Both cameras' frames of the world one camera latency ago, published."""
        assert self.camera is not None
        snap = self._snapshot_at(time.monotonic() - self.t0 - self.params.cam_latency)
        front, wrist = self.camera.frames(snap)
        self.front.publish(front)
        self.wrist.publish(wrist)
        with self._lock:
            self.stats["frames_published"] += 1

    # -- stats --------------------------------------------------------------------------------------

    def more_stats(self) -> dict[str, Any]:
        """``bus``: the servo bus's counters (`ServoBus.stats`)."""
        return {"bus": dict(self.bus.stats)}


def run(
    seed: int = 0,
    reality: str | None = None,
    camera_port: int = 0,
    ready: Callable[[str], object] = print,
) -> None:
    """``realsim emulate arm``: serve an emulated arm until SIGINT/SIGTERM, then return.

    ``seed`` draws the reality, the camera poses and every episode's scene;
    ``reality`` is an optional YAML file overriding any `RealityParams` field,
    including the bus faults ``fault_drop_servo``, ``fault_drop_after_s``,
    ``fault_checksum_every``, ``fault_corrupt_every``, ``fault_garbage_every``
    (a bad file raises `realsim.errors.UserError` before anything opens);
    ``camera_port`` 0 picks free ports (else front on it, wrist on the next).
    ``ready`` gets ``port=<bus> camera=front=<url>,wrist=<url> control=<pty>`` once.
    """
    run_emulator(ArmEmulator(seed=seed, reality=reality, camera_port=camera_port), ready)

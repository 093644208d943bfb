"""The emulated RC car's front end: a pseudo-terminal speaking protocol v1, an MJPEG camera.

`run` is ``realsim emulate rc_car``: it draws a reality (`reality.RealityParams`,
seeded, optionally overridden by ``--reality FILE``), opens a pty whose slave
is the "USB serial port", serves the front camera on 127.0.0.1, prints
``port=<path> camera=<url>`` once, and runs until SIGINT/SIGTERM.

Threads:

- the *device loop* (the calling thread) is the microcontroller: it reads host
  bytes from the pty master (``select`` with a timeout, never a busy wait),
  frames them with `hardware.nmea.LineReader`, answers ``HLO``, acknowledges
  ``DRV`` at once and queues it through the command latency, handles
  ``STP``/``EPS``/``EPE`` (scene reset, the judge, ``JDG``), runs the watchdog
  and sends ``TLM`` every 20 ms of its *own* clock (which drifts by
  ``clock_ppm`` against the host's and starts at a random offset), integrating
  the physics to each deadline in 1 ms substeps;
- the *camera* thread asks a child process (its own interpreter, so rendering
  never holds the device loop's GIL) for about 20 frames/s of the world as it
  was one camera latency ago and publishes them;
- the HTTP server's threads serve ``/stream``, ``/frame.jpg`` and ``/stats``
  (counters, compared by tests against what a recorder logged). The true
  parameters are never served: nothing on the host side may read them, so a
  fit can only learn them from the wire, as with a real car.

The pty, the camera process and thread, the server and the run loop are
`hardware.emulators.frontend`'s, shared with the arm.
"""

from __future__ import annotations

import bisect
import math
import select
import termios
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import realsim
from hardware import nmea
from hardware.emulators.frontend import CameraProcess, FrontEnd, pty_read, pty_write, run_emulator
from hardware.emulators.mjpeg import MjpegServer
from hardware.emulators.rc_car.reality import DT, CarReality, RealityParams
from hardware.emulators.rc_car.render import CarCamera
from realsim.robots.rc_car.task import Scene, TaskJudge, sample_scene

TELEMETRY_HZ = 50
"""TLM lines per second of the microcontroller's clock."""
WATCHDOG_S = 0.3
"""No DRV for this long (s) -> neutral steering, full brake, flag bit 0."""
CAMERA_FPS = 20.0
"""Camera frames per second."""
NAME = "emu-rc-car"
FIRMWARE = f"realsim-{realsim.__version__}"

FLAG_WATCHDOG = 1
FLAG_BATTERY_LOW = 2
FLAG_EPISODE = 4


def _make_camera(params: RealityParams, seed: int) -> Callable[[Any], Sequence[bytes]]:
    """The front camera (in the camera process): (pose, scene) -> its one JPEG."""
    cam = CarCamera(params, seed)
    return lambda request: (cam.jpeg(*request),)


class RcCarEmulator(FrontEnd):
    """One emulated car: `open` it, `serve` until a stop event, `close` it.

    Times: ``host`` = `time.monotonic` (s); ``t`` = reality time = host - t0 (s);
    ``t_us`` = the microcontroller's clock (us, uint32, drifting, wraps).
    """

    label = "rc_car"

    def __init__(self, seed: int = 0, reality: str | None = None, camera_port: int = 0) -> None:
        super().__init__(seed)
        self.params = RealityParams.from_yaml(reality, self.seed)
        self.car = CarReality(self.params, self.seed)
        self.reader = nmea.LineReader(nmea.HOST_TO_CAR)
        self.server = MjpegServer("127.0.0.1", camera_port)
        self._rnd = np.random.default_rng([self.seed, 4])
        self._master = -1
        self._slave = -1
        self.port_path = ""
        # microcontroller state
        self.ack = -1
        self.watchdog = True
        self._last_drv = -math.inf
        self.judge: TaskJudge | None = None
        self.scene: Scene | None = None
        self._scene_gen = 0
        # pose history for the camera: (t, x, y, yaw, scene, generation)
        self._hist: deque[tuple[float, float, float, float, Scene | None, int]] = deque(maxlen=256)
        self._hist_lock = threading.Lock()
        # counters
        self.stats = {
            "drv_received": 0,
            "hlo_received": 0,
            "stp_received": 0,
            "tlm_sent": 0,
            "tlm_write_dropped": 0,
            "jdg_sent": 0,
            "frames_published": 0,
            "lines_dropped": dict(self.reader.counts),
            "lines_dropped_total": 0,
            "episodes": {},
        }
        self._late: deque[float] = deque(maxlen=3000)  # TLM write time - deadline (s)

    # -- lifecycle --------------------------------------------------------------------------

    def open(self) -> str:
        """Open the pty and the camera server, start the camera; return the ready line."""
        self.camera = CameraProcess(_make_camera, (self.params, self.seed), 1, "emu-rc-car-camera",
                                    self.label)
        self._master, self._slave, self.port_path = self.open_pty(termios.B115200)
        self.serve_cameras([self.server])
        self.t0 = time.monotonic()
        self._record_pose()
        self.start_camera_thread(CAMERA_FPS, self._frame)
        return f"port={self.port_path} camera={self.server.url}"

    # -- clocks -------------------------------------------------------------------------------

    def _t_us(self, k: int) -> int:
        return (self.params.clock_offset_us + k * (1_000_000 // TELEMETRY_HZ)) % 2**32

    def _host_of_tick(self, k: int) -> float:
        return self.t0 + k / TELEMETRY_HZ / (1.0 + self.params.clock_ppm * 1e-6)

    # -- device loop ------------------------------------------------------------------------

    def serve(self) -> None:
        """Be the microcontroller until `stop`; called on the thread that opened it."""
        k = 1
        master = self._master
        while not self._stop.is_set():
            deadline = self._host_of_tick(k)
            now = time.monotonic()
            wait = deadline - now
            if wait > 0:
                try:
                    ready, _, _ = select.select([master], [], [], min(wait, 0.05))
                except (OSError, ValueError):
                    break
                if ready:
                    self._read_host()
                self._check_watchdog(time.monotonic())
                continue
            self._tick(k, deadline)
            k += 1
            if time.monotonic() - self._host_of_tick(k) > 0.2:  # stalled (suspend?): skip ahead
                k = int((time.monotonic() - self.t0) * TELEMETRY_HZ) + 1

    def _read_host(self) -> None:
        data = pty_read(self._master)
        if not data:
            return
        msgs = self.reader.feed(data)
        now = time.monotonic()
        for m in msgs:
            self._handle(m, now)
        with self._lock:
            self.stats["lines_dropped"] = dict(self.reader.counts)
            self.stats["lines_dropped_total"] = self.reader.dropped

    def _write(self, line: bytes) -> bool:
        return pty_write(self._master, self._slave, line)  # nobody reads: old bytes are lost

    def _handle(self, m: nmea.Message, now: float) -> None:
        t = now - self.t0
        typ = m.type
        if typ == "DRV":
            seq = m.int(0)
            steer = max(-1000, min(1000, m.int(1)))
            throttle = max(-1000, min(1000, m.int(2)))
            self.ack = seq
            self._last_drv = now
            self.watchdog = False
            self.car.command(t, steer / 1000.0, throttle / 1000.0)
            with self._lock:
                self.stats["drv_received"] += 1
                if self.episode is not None:
                    self.stats["episodes"][str(self.episode)]["drv_received"] += 1
        elif typ == "HLO":
            with self._lock:
                self.stats["hlo_received"] += 1
            self._write(nmea.encode("INF", 1, FIRMWARE, NAME, TELEMETRY_HZ))
        elif typ == "STP":
            with self._lock:
                self.stats["stp_received"] += 1
            self.car.command(t, 0.0, -1.0)
        elif typ == "EPS":
            self._episode_start(m.int(0), t)
        elif typ == "EPE":
            self._episode_end(m.int(0), t)

    def _check_watchdog(self, now: float) -> None:
        if not self.watchdog and now - self._last_drv > WATCHDOG_S:
            self.watchdog = True
            self.car.command(now - self.t0, 0.0, -1.0)

    def _advance(self, t: float) -> None:
        car, judge = self.car, self.judge
        while car.t + DT <= t + 1e-9:
            car.step(DT)
            if judge is not None:
                judge.update(car.t, car.x, car.y)

    def _record_pose(self) -> None:
        c = self.car
        with self._hist_lock:
            self._hist.append((c.t, c.x, c.y, c.yaw, self.scene, self._scene_gen))

    def _episode_start(self, ep: int, t: float) -> None:
        self._advance(t)
        if self.episode is not None:  # EPS without EPE: close the open one silently
            self._finish_episode()
        self.car.reset_pose()
        self.scene = sample_scene(np.random.default_rng([self.seed, 3, ep]))
        self.judge = TaskJudge(self.scene, t_start=self.car.t)
        self.judge.update(self.car.t, self.car.x, self.car.y)
        self.episode = ep
        self._scene_gen += 1
        with self._lock:
            self.stats["episodes"][str(ep)] = {
                "drv_received": 0,
                "tlm_sent": 0,
                "first_tlm_t_us": None,
                "last_tlm_t_us": None,
                "success": None,
                "score": None,
                "cone_xy": list(self.scene.cone_xy),
                "distractor_xy": None
                if self.scene.distractor_xy is None
                else list(self.scene.distractor_xy),
            }
        self._record_pose()

    def _finish_episode(self) -> tuple[int, float]:
        assert self.judge is not None and self.episode is not None
        success, score = self.judge.verdict()
        with self._lock:
            e = self.stats["episodes"][str(self.episode)]
            e["success"], e["score"] = success, round(score, 3)
        self.episode = None
        self.judge = None
        return success, score

    def _episode_end(self, ep: int, t: float) -> None:
        self._advance(t)
        self.car.command(t, 0.0, -1.0)  # centre and brake, as for STP
        if self.episode is None:
            return  # nothing to judge
        success, score = self._finish_episode()
        if self._write(nmea.encode("JDG", ep, success, f"{score:.3f}")):
            with self._lock:
                self.stats["jdg_sent"] += 1

    def _tick(self, k: int, deadline: float) -> None:
        self._check_watchdog(deadline)
        self._advance(deadline - self.t0)
        self._record_pose()
        tel = self.car.telemetry()
        flags = (
            (FLAG_WATCHDOG if self.watchdog else 0)
            | (FLAG_BATTERY_LOW if tel.battery_low else 0)
            | (FLAG_EPISODE if self.episode is not None else 0)
        )
        t_us = (self._t_us(k) + int(self._rnd.integers(0, 30))) % 2**32  # loop jitter
        line = nmea.encode("TLM", self.ack, t_us, tel.enc, tel.gz, tel.ax, tel.ay, tel.vbat, flags)
        ok = self._write(line)
        self._late.append(time.monotonic() - deadline)
        if not ok:
            with self._lock:
                self.stats["tlm_write_dropped"] += 1
            return
        with self._lock:
            self.stats["tlm_sent"] += 1
            if self.episode is not None:
                e = self.stats["episodes"][str(self.episode)]
                e["tlm_sent"] += 1
                if e["first_tlm_t_us"] is None:
                    e["first_tlm_t_us"] = t_us
                e["last_tlm_t_us"] = t_us

    # -- camera -----------------------------------------------------------------------------

    def _pose_at(self, t: float) -> tuple[tuple[float, float, float], Scene | None]:
        with self._hist_lock:
            hist = list(self._hist)
        times = [h[0] for h in hist]
        i = bisect.bisect_right(times, t) - 1
        if i < 0:
            h = hist[0]
            return (h[1], h[2], h[3]), h[4]
        a = hist[i]
        if i + 1 < len(hist) and hist[i + 1][5] == a[5] and hist[i + 1][0] > a[0]:
            b = hist[i + 1]
            f = min(1.0, (t - a[0]) / (b[0] - a[0]))
            dyaw = math.remainder(b[3] - a[3], 2 * math.pi)
            return (a[1] + f * (b[1] - a[1]), a[2] + f * (b[2] - a[2]), a[3] + f * dyaw), a[4]
        return (a[1], a[2], a[3]), a[4]

    def _frame(self) -> None:
        """One camera frame of the world one camera latency ago, published."""
        assert self.camera is not None
        pose, scene = self._pose_at(time.monotonic() - self.t0 - self.params.cam_latency)
        (jpeg,) = self.camera.frames((pose, scene))
        self.server.publish(jpeg)
        with self._lock:
            self.stats["frames_published"] += 1

    # -- stats --------------------------------------------------------------------------------

    def more_stats(self) -> dict[str, Any]:
        """``tlm_late_ms``: how late TLM lines left against their deadlines (ms)."""
        late = np.array(self._late) * 1e3
        if not late.size:
            return {}
        return {"tlm_late_ms": {"p50": round(float(np.percentile(late, 50)), 3),
                                "p99": round(float(np.percentile(late, 99)), 3),
                                "max": round(float(late.max()), 3)}}


def run(
    seed: int = 0,
    reality: str | None = None,
    camera_port: int = 0,
    ready: Callable[[str], object] = print,
) -> None:
    """``realsim emulate rc_car``: serve an emulated car until SIGINT/SIGTERM, then return.

    ``seed`` draws the reality, the noise and every episode's cone layout;
    ``reality`` is an optional YAML file overriding any `RealityParams` field
    (a bad file raises `realsim.errors.UserError` before anything opens);
    ``camera_port`` 0 picks a free port. ``ready`` gets the line
    ``port=<pty path> camera=<url>`` exactly once, when both are up.
    """
    run_emulator(RcCarEmulator(seed=seed, reality=reality, camera_port=camera_port), ready)

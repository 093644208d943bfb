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
"""

from __future__ import annotations

import bisect
import copy
import math
import multiprocessing
import os
import select
import signal
import sys
import termios
import threading
import time
import tty
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np

import realsim
from hardware import nmea
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


def _render_worker(conn: Any, params: RealityParams, seed: int) -> None:
    """Child process: build the camera, then turn (pose, scene) requests into JPEG bytes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop
    try:
        cam = CarCamera(params, seed)
        conn.send("ready")
        while True:
            msg = conn.recv()
            if msg is None:
                break
            pose, scene = msg
            conn.send_bytes(cam.jpeg(pose, scene))
    except (EOFError, OSError, KeyboardInterrupt):
        pass


class _Renderer:
    """The camera in its own process, so rendering never holds the device loop's GIL.

    Falls back to rendering in the calling thread when a process cannot be started.
    """

    def __init__(self, params: RealityParams, seed: int) -> None:
        self._params, self._seed = params, seed
        self._local: CarCamera | None = None
        self._proc: Any = None
        self._conn: Any = None
        try:
            ctx = multiprocessing.get_context("spawn")
            parent, child = ctx.Pipe()
            proc = ctx.Process(
                target=_render_worker, args=(child, params, seed), name="emu-rc-car-camera", daemon=True
            )
            proc.start()
            child.close()
            if not parent.poll(60.0) or parent.recv() != "ready":
                raise OSError("camera process did not start")
            self._proc, self._conn = proc, parent
        except (OSError, EOFError, RuntimeError) as e:
            print(f"emulate rc_car: camera in-process ({e})", file=sys.stderr)
            self._local = CarCamera(params, seed)

    def jpeg(self, pose: tuple[float, float, float], scene: Scene | None) -> bytes:
        """One frame, as `CarCamera.jpeg`."""
        if self._local is not None:
            return self._local.jpeg(pose, scene)
        self._conn.send((pose, scene))
        return self._conn.recv_bytes()

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.send(None)
            except (OSError, ValueError):
                pass
            self._proc.join(2.0)
            if self._proc.is_alive():
                self._proc.kill()
                self._proc.join(1.0)
            self._conn.close()
            self._conn = None


class RcCarEmulator:
    """One emulated car: `open` it, `serve` until a stop event, `close` it.

    Times: ``host`` = `time.monotonic` (s); ``t`` = reality time = host - t0 (s);
    ``t_us`` = the microcontroller's clock (us, uint32, drifting, wraps).
    """

    def __init__(self, seed: int = 0, reality: str | None = None, camera_port: int = 0) -> None:
        self.seed = int(seed)
        self.params = RealityParams.from_yaml(reality, self.seed)
        self.car = CarReality(self.params, self.seed)
        self.camera: _Renderer | None = None
        self.reader = nmea.LineReader(nmea.HOST_TO_CAR)
        self.server = MjpegServer("127.0.0.1", camera_port)
        self._rnd = np.random.default_rng([self.seed, 4])
        self._master = -1
        self._slave = -1
        self.port_path = ""
        self.t0 = 0.0
        # microcontroller state
        self.ack = -1
        self.watchdog = True
        self._last_drv = -math.inf
        self.episode: int | None = None
        self.judge: TaskJudge | None = None
        self.scene: Scene | None = None
        self._scene_gen = 0
        # pose history for the camera: (t, x, y, yaw, scene, generation)
        self._hist: deque[tuple[float, float, float, float, Scene | None, int]] = deque(maxlen=256)
        self._hist_lock = threading.Lock()
        # counters
        self._lock = threading.Lock()
        self.stats: dict[str, Any] = {
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
        self._stop = threading.Event()
        self._cam_thread: threading.Thread | None = None

    # -- lifecycle --------------------------------------------------------------------------

    def open(self) -> str:
        """Open the pty and the camera server, start the camera; return the ready line."""
        self.camera = _Renderer(self.params, self.seed)
        master, slave = os.openpty()
        tty.setraw(slave)  # no echo, no CR/NL translation, bytes pass as they are
        attrs = termios.tcgetattr(slave)
        attrs[4] = attrs[5] = termios.B115200
        termios.tcsetattr(slave, termios.TCSANOW, attrs)
        os.set_blocking(master, False)
        self._master, self._slave = master, slave
        self.port_path = os.ttyname(slave)
        self.server.add_json_route("/stats", self.snapshot)
        self.server.start()
        self.t0 = time.monotonic()
        self._record_pose()
        self._cam_thread = threading.Thread(
            target=self._camera_loop, name="emu-camera", daemon=True
        )
        self._cam_thread.start()
        return f"port={self.port_path} camera={self.server.url}"

    def close(self) -> None:
        """Stop the camera, close the server and the pty. Idempotent."""
        self._stop.set()
        if self._cam_thread is not None:
            self._cam_thread.join(timeout=2.0)
            self._cam_thread = None
        if self.camera is not None:
            self.camera.close()
        self.server.close()
        for fd in (self._master, self._slave):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._master = self._slave = -1

    def stop(self) -> None:
        """Ask `serve` to return (thread- and signal-safe)."""
        self._stop.set()

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
        try:
            data = os.read(self._master, 4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            return
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
        for attempt in range(2):
            try:
                os.write(self._master, line)
                return True
            except BlockingIOError:
                if attempt == 0:  # nobody reads the port: old bytes are lost, as on USB
                    try:
                        termios.tcflush(self._slave, termios.TCIFLUSH)
                    except termios.error:
                        pass
            except OSError:
                return False
        return False

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

    def _camera_loop(self) -> None:
        assert self.camera is not None
        period = 1.0 / CAMERA_FPS
        nxt = time.monotonic()
        while not self._stop.is_set():
            now = time.monotonic()
            pose, scene = self._pose_at(now - self.t0 - self.params.cam_latency)
            try:
                jpeg = self.camera.jpeg(pose, scene)
            except (EOFError, OSError, ValueError) as e:  # the camera process went away
                if not self._stop.is_set():
                    print(f"emulate rc_car: camera stopped: {type(e).__name__}: {e}", file=sys.stderr)
                return
            except Exception as e:  # a renderer bug must not take the serial side down
                print(f"emulate rc_car: camera: {type(e).__name__}: {e}", file=sys.stderr)
                self._stop.wait(period)
                continue
            self.server.publish(jpeg)
            with self._lock:
                self.stats["frames_published"] += 1
            nxt += period
            delay = nxt - time.monotonic()
            if delay < -period:
                nxt = time.monotonic()
            elif delay > 0:
                self._stop.wait(delay)

    # -- stats --------------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """A copy of the counters (served as ``GET /stats``)."""
        with self._lock:
            s = copy.deepcopy(self.stats)
        late = np.array(self._late) * 1e3
        if late.size:
            s["tlm_late_ms"] = {
                "p50": round(float(np.percentile(late, 50)), 3),
                "p99": round(float(np.percentile(late, 99)), 3),
                "max": round(float(late.max()), 3),
            }
        s["uptime_s"] = round(time.monotonic() - self.t0, 3)
        s["seed"] = self.seed
        s["episode_open"] = self.episode
        return s


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
    emu = RcCarEmulator(seed=seed, reality=reality, camera_port=camera_port)
    previous: dict[int, Any] = {}
    in_main = threading.current_thread() is threading.main_thread()
    if in_main:
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, lambda *_: emu.stop())
    old_switch = sys.getswitchinterval()
    sys.setswitchinterval(0.0005)  # the device loop wins the GIL from HTTP threads quickly
    try:
        line = emu.open()
        ready(line)
        try:
            sys.stdout.flush()
        except (OSError, ValueError):
            pass
        emu.serve()
    finally:
        emu.close()
        sys.setswitchinterval(old_switch)
        for sig, h in previous.items():
            signal.signal(sig, h)

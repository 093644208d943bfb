"""Record episodes from a robot on the wire into the log format.

The control loop runs on the host at a fixed rate. When that rate equals the
robot's telemetry rate, the loop phase-locks to the telemetry: each command is
sent a few milliseconds before the robot's next telemetry sample, so it is
acknowledged in that very sample and acts on the freshest data. Telemetry and
camera frames arrive on their own threads and go straight into the log;
nothing the robot sent between the episode's start and end marker is dropped.

Action sources (the `--driver` of `realsim record`) are plain objects with
`begin(episode) -> seed` and `act(t, obs) -> action | Control`. This module
knows wires and logs; it never imports a learner: a policy arrives here as an
action source built by the CLI.
"""

from __future__ import annotations

import math
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol

import numpy as np

from realsim.errors import DeviceError
from realsim.logs import LogWriter

FLAG_WATCHDOG = 1
FLAG_BATTERY_LOW = 2
FLAG_IN_EPISODE = 4


class Control(Enum):
    """What an interactive source can ask for instead of an action."""

    NEXT = "next"  # end this episode now, keep it
    RERECORD = "rerecord"  # end this episode, mark it discarded, record it again
    QUIT = "quit"  # end this episode, keep it, stop recording


@dataclass
class Observation:
    """What a policy may see at a control tick: robot-legal streams only."""

    t: float  # s since episode start
    telemetry: Any | None  # the latest hardware.rc_car.Telemetry (or None before the first)
    frame: tuple[float, bytes] | None  # latest (host time, JPEG) from the front camera


class ActionSource(Protocol):
    """Anything `record` can drive the robot with."""

    name: str  # stored as the episode's `driver` attribute

    def begin(self, episode: int) -> int:
        """Prepare episode `episode` (file-wide index); return its seed (-1 if none)."""
        ...

    def act(self, obs: Observation) -> np.ndarray | Control:
        """Return the action, Shape: (A,), in [-1, 1], or a Control."""
        ...


class PhaseLock:
    """Tick schedule at `period` seconds, pulled towards `lead` s before telemetry.

    A first-order phase-locked loop: each tick compares the next deadline with
    the predicted arrival of the next telemetry sample minus `lead`, and moves
    the deadline by `gain` of the error. With no telemetry it is a plain fixed
    rate clock, so period jitter stays that of `time.sleep`.
    """

    def __init__(self, period: float, lead: float = 0.004, gain: float = 0.1,
                 max_step: float = 0.0003) -> None:
        # max_step: a late telemetry line (host busy) must not jerk the loop's period;
        # the phase drifts only slowly (clock ppm), so small steps always keep up.
        self.period, self.lead, self.gain, self.max_step = period, lead, gain, max_step
        self.next = time.monotonic() + period

    def correct(self, last_tlm: float | None, tlm_period: float | None) -> None:
        if last_tlm is None or tlm_period is None:
            return
        if abs(tlm_period - self.period) > 0.1 * self.period:
            return  # different rates: nothing to lock to
        target = last_tlm + tlm_period - self.lead
        err = (target - self.next + self.period / 2) % self.period - self.period / 2
        self.next += max(-self.max_step, min(self.max_step, self.gain * err))

    def wait(self) -> float:
        """Sleep until the next tick; return how late (s) the tick is."""
        now = time.monotonic()
        if self.next > now:
            time.sleep(self.next - now)
            now = time.monotonic()
        late = now - self.next
        self.next += self.period
        if late > self.period:  # fell far behind: don't try to catch up in a burst
            self.next = now + self.period
        return late


@dataclass
class EpisodeStats:
    """Live figures of one episode, for the progress line and the log's attrs."""

    ticks: int = 0
    overruns: int = 0  # ticks that started more than half a period late
    periods: list[float] = field(default_factory=list)
    frames: int = 0
    tlm: int = 0
    vbat: float = math.nan


class CarRecorder:
    """Records episodes from an `hardware.rc_car.RcCarDriver` and camera readers.

    Typical use (what `realsim record rc_car` does)::

        with RcCarDriver(port) as car, CameraReader(url) as cam:
            rec = CarRecorder(car, {"front": cam}, writer, rate_hz=50)
            rec.run(source, episodes=3, seconds=10)
    """

    def __init__(self, car: Any, cameras: dict[str, Any], writer: LogWriter, *,
                 rate_hz: float = 50.0, progress: Callable[[str], None] | None = None) -> None:
        self.car, self.cameras, self.writer = car, cameras, writer
        self.rate_hz = rate_hz
        self.progress = progress or _stderr_progress
        self._lock = threading.Lock()
        self._ep: Any = None  # the log episode being written, or None
        self._t0 = 0.0  # monotonic time of the episode's EPS
        self._ep_index = -1
        self._closing = False  # EPE sent: stop at the first TLM outside the episode
        self._after_epe = threading.Event()
        self._judge: tuple[int, float] | None = None
        self._judged = threading.Event()
        self.stats = EpisodeStats()
        car.on_telemetry = self._on_telemetry
        car.on_judge = self._on_judge
        for name, cam in cameras.items():
            cam.on_frame = self._frame_handler(name)

    # ---- callbacks from the driver's and cameras' threads ----
    def _on_telemetry(self, tlm: Any) -> None:
        with self._lock:
            ep = self._ep
            if ep is None:
                return
            if self._closing and not (tlm.flags & FLAG_IN_EPISODE):
                self._after_epe.set()
                return
            ep.add_sensors(tlm.t_host - self._t0, tlm.t_device, enc_rad=tlm.enc_rad,
                           yaw_rate=tlm.yaw_rate, accel=tlm.accel, vbat=tlm.vbat,
                           ack=tlm.ack, flags=tlm.flags)
            self.stats.tlm += 1
            self.stats.vbat = tlm.vbat

    def _on_judge(self, episode: int, success: int, score: float) -> None:
        if episode == self._ep_index:
            self._judge = (int(success), float(score))
            self._judged.set()

    def _frame_handler(self, name: str) -> Callable[[float, bytes], None]:
        def on_frame(t_host: float, jpeg: bytes) -> None:
            with self._lock:
                if self._ep is not None and not self._closing:
                    self._ep.add_frame(name, t_host - self._t0, jpeg)
                    self.stats.frames += 1
        return on_frame

    # ---- the loop ----
    def run(self, source: ActionSource, episodes: int, seconds: float) -> list[str]:
        """Record `episodes` episodes of at most `seconds` each; return their names.

        A `Control.RERECORD` from the source closes the episode with
        discarded=True (it stays in the file: nothing recorded is lost) and
        records it again; `Control.QUIT` stops after the current episode.
        """
        names: list[str] = []
        done = 0
        while done < episodes:
            name, control = self.record_episode(source, seconds, label=f"{done + 1}/{episodes}")
            names.append(name)
            if control is Control.RERECORD:
                continue
            done += 1
            if control is Control.QUIT:
                break
        return names

    def record_episode(self, source: ActionSource, seconds: float,
                       label: str = "") -> tuple[str, Control | None]:
        """Record one episode: EPS, control loop, EPE, JDG. Returns (name, control)."""
        car = self.car
        index = len(self.writer.episode_names())
        seed = source.begin(index)
        self.stats = EpisodeStats()
        self._judge, self._closing = None, False
        self._judged.clear()
        self._after_epe.clear()
        dropped0 = car.dropped
        ep = self.writer.begin_episode(driver=source.name, seed=seed)
        period = 1.0 / self.rate_hz
        clock = PhaseLock(period)
        with self._lock:
            self._ep_index = index
            self._t0 = time.monotonic()
            self._ep = ep
        car.episode_start(index)
        control: Control | None = None
        last_tick = None
        last_print = 0.0
        warned = False
        try:
            while True:
                clock.correct(getattr(car, "last_tlm_host_time", None), car.telemetry_period())
                late = clock.wait()
                now = time.monotonic()
                t = now - self._t0
                if t >= seconds:
                    break
                if last_tick is not None:
                    self.stats.periods.append(now - last_tick)
                last_tick = now
                self.stats.ticks += 1
                if late > period / 2:
                    self.stats.overruns += 1
                cam = self.cameras.get("front")
                obs = Observation(t=t, telemetry=car.latest,
                                  frame=cam.latest() if cam is not None else None)
                out = source.act(obs)
                if isinstance(out, Control):
                    control = out
                    break
                action = np.clip(np.asarray(out, dtype=np.float64), -1.0, 1.0)
                t_send = time.monotonic() - self._t0
                seq = car.drive(float(action[0]), float(action[1]))
                ep.add_command(t_send, seq, action)
                if now - last_print > 0.5:
                    last_print = now
                    rate = self._loop_rate()
                    if not warned and self.stats.ticks > 25 and rate < 0.9 * self.rate_hz:
                        warned = True
                        self.progress(f"warning: control loop runs at {rate:.1f} Hz, slower "
                                      f"than the {self.rate_hz:.0f} Hz asked")
                    self.progress(self._status(label, t, seconds, dropped0))
        except DeviceError:
            with self._lock:
                self._ep = None
            ep.set_attrs(dropped_lines=int(car.dropped - dropped0), error="device lost")
            ep.flush()  # kept, complete=False: nothing recorded is lost
            raise
        car.episode_end(index)
        with self._lock:
            self._closing = True
        self._after_epe.wait(0.5)
        self._judged.wait(1.0)
        with self._lock:
            self._ep = None
        periods = np.asarray(self.stats.periods)
        ep.set_attrs(
            dropped_lines=int(car.dropped - dropped0),
            loop_rate_hz=float(self._loop_rate()),
            loop_overruns=int(self.stats.overruns),
            loop_jitter_p99_s=float(np.percentile(np.abs(periods - period), 99)) if len(periods) else math.nan,
            discarded=control is Control.RERECORD,
        )
        if self._judge is not None:
            ep.set_judge(*self._judge)
        ep.close()
        verdict = "" if self._judge is None else f"  JDG success={self._judge[0]} score={self._judge[1]:.3f}"
        self.progress(self._status(label, min(time.monotonic() - self._t0, seconds), seconds, dropped0)
                      + verdict + "\n")
        return ep.name, control

    def _loop_rate(self) -> float:
        p = self.stats.periods[-50:]
        return 1.0 / float(np.mean(p)) if p else math.nan

    def _status(self, label: str, t: float, seconds: float, dropped0: int) -> str:
        fps = " ".join(f"{n} {c.fps():.1f} fps" for n, c in self.cameras.items())
        return (f"episode {label}  {t:5.1f}/{seconds:.0f} s  loop {self._loop_rate():5.1f} Hz  "
                f"{fps}  dropped {self.car.dropped - dropped0}  vbat {self.stats.vbat:.2f} V")


def _stderr_progress(msg: str) -> None:
    """One status line, rewritten in place on a terminal; whole lines otherwise."""
    if msg.endswith("\n") or not sys.stderr.isatty():
        if msg.startswith("episode") and not msg.endswith("\n"):
            return  # keep CI logs short: only finished episodes and warnings
        sys.stderr.write("\r" + msg.rstrip("\n") + "\n")
    else:
        sys.stderr.write("\r" + msg + "\x1b[K")
    sys.stderr.flush()

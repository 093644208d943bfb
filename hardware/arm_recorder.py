"""Record episodes from the arm on the wire into the log format.

The servo bus is polled, so the arm's loop differs from the car's: each tick
(``rate_hz``, 50 by default) sends the goals (one SYNC_WRITE) and then reads
the state (one SYNC_READ); the state is logged with the host time its last
reply arrived (the servos have no clock: ``t_device`` is NaN). Camera frames
arrive on their readers' threads and go straight into the log. Between
episodes the arm is driven slowly back to its home pose (not logged), so every
episode starts at rest at home; then EPS on the control port, the loop, EPE,
and the JDG verdict when the control port gives one.

`record_arm` is ``realsim record arm``; `arm_excitation` (in
`realsim.robots.arm.excite`) maps ``sine|steps|smooth`` into the joint box.
"""

from __future__ import annotations

import math
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from hardware.arm import HOME, ArmDriver, ArmState, denormalise
from hardware.recorder import ActionSource, Control, EpisodeStats, PhaseLock, _stderr_progress
from realsim.errors import DeviceError, UserError
from realsim.logs import LogWriter
from realsim.robots.arm.excite import SIGNALS, arm_excitation

__all__ = ["ArmObservation", "ArmRecorder", "arm_excitation", "move_to", "record_arm"]

HOME_SPEED = 0.8
"""Joint speed of the move back home between episodes, rad/s (gripper: 0.05 m/s)."""
SETTLE_S = 0.3
"""Hold at home this long before an episode starts, s."""


@dataclass
class ArmObservation:
    """What a policy may see at a control tick: robot-legal streams only.

    t: s since episode start; state: the latest `ArmState` (None before the first);
    frames: latest (host time, JPEG) per camera name.
    """

    t: float
    state: ArmState | None
    frames: dict[str, tuple[float, bytes] | None] = field(default_factory=dict)

    @property
    def telemetry(self) -> ArmState | None:
        """`state`, under the name the car's `hardware.recorder.Observation` uses."""
        return self.state

    @property
    def frame(self) -> tuple[float, bytes] | None:
        """The front camera's latest frame."""
        return self.frames.get("front")


def move_to(arm: ArmDriver, goal: np.ndarray, speed: float = HOME_SPEED, settle: float = SETTLE_S,
            rate_hz: float = 50.0) -> ArmState:
    """Drive the arm to ``goal`` (rad, gripper m) on a straight joint-space line at
    ``speed`` rad/s, hold ``settle`` s; returns the last state."""
    state = arm.read_state()
    start = state.qpos.copy()
    goal = np.asarray(goal, dtype=np.float64)
    scale = np.array([1, 1, 1, 1, 1, 0.05 / speed], dtype=np.float64)  # gripper in m/s
    duration = float(np.max(np.abs(goal - start) / (speed * scale)))
    t0 = time.monotonic()
    period = 1.0 / rate_hz
    while True:
        t = time.monotonic() - t0
        w = 1.0 if duration <= 0 else min(1.0, t / duration)
        arm.write_goals(start + w * (goal - start))
        state = arm.read_state()
        if t >= duration + settle:
            return state
        time.sleep(period)


class ArmRecorder:
    """Records episodes from an `hardware.arm.ArmDriver` and camera readers.

    Typical use (what `record_arm` does)::

        with ArmDriver(port, control) as arm:
            rec = ArmRecorder(arm, {"front": cam1, "wrist": cam2}, writer)
            rec.run(source, episodes=3, seconds=10)
    """

    def __init__(self, arm: ArmDriver, cameras: dict[str, Any], writer: LogWriter, *,
                 rate_hz: float = 50.0, home: np.ndarray | None = None,
                 progress: Callable[[str], None] | None = None) -> None:
        self.arm, self.cameras, self.writer = arm, cameras, writer
        self.rate_hz = rate_hz
        self.home = HOME.copy() if home is None else np.asarray(home, dtype=np.float64)
        self.progress = progress or _stderr_progress
        self._lock = threading.Lock()
        self._ep: Any = None
        self._t0 = 0.0
        self.stats = EpisodeStats()
        for name, cam in cameras.items():
            cam.on_frame = self._frame_handler(name)

    def _frame_handler(self, name: str) -> Callable[[float, bytes], None]:
        def on_frame(t_host: float, jpeg: bytes) -> None:
            with self._lock:
                if self._ep is not None:
                    self._ep.add_frame(name, t_host - self._t0, jpeg)
                    self.stats.frames += 1
        return on_frame

    def run(self, source: ActionSource, episodes: int, seconds: float) -> list[str]:
        """Record ``episodes`` episodes of at most ``seconds`` s each; return their names.

        `Control.RERECORD` keeps the episode (discarded=True) and records it
        again; `Control.QUIT` stops after the current one.
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
        """Home, EPS, the loop (SYNC_WRITE then SYNC_READ per tick), EPE, JDG."""
        arm = self.arm
        move_to(arm, self.home, rate_hz=self.rate_hz)
        index = len(self.writer.episode_names())
        seed = source.begin(index)
        self.stats = EpisodeStats()
        faults0 = arm.bus.faults
        counts0 = dict(arm.bus.counts)
        ep = self.writer.begin_episode(driver=source.name, seed=seed)
        period = 1.0 / self.rate_hz
        clock = PhaseLock(period)
        with self._lock:
            self._t0 = time.monotonic()
            self._ep = ep
        arm.episode_start(index)
        control: Control | None = None
        last_tick: float | None = None
        last_print = 0.0
        rtt: list[float] = []
        try:
            while True:
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
                obs = ArmObservation(t, arm.latest, {n: c.latest() for n, c in self.cameras.items()})
                out = source.act(obs)  # type: ignore[arg-type]
                if isinstance(out, Control):
                    control = out
                    break
                action = np.clip(np.asarray(out, dtype=np.float64).reshape(6), -1.0, 1.0)
                t_send = time.monotonic() - self._t0
                arm.write_goals(denormalise(action))
                ep.add_command(t_send, self.stats.ticks - 1, action)
                a = time.monotonic()
                state = arm.read_state()
                rtt.append(state.t_host - a)
                ep.add_sensors(state.t_host - self._t0, math.nan, qpos=state.qpos, qvel=state.qvel,
                               load=state.load, voltage=state.voltage,
                               temperature=state.temperature)
                self.stats.tlm += 1
                self.stats.vbat = state.voltage
                if now - last_print > 0.5:
                    last_print = now
                    self.progress(self._status(label, t, seconds, faults0))
        except DeviceError as e:
            with self._lock:
                self._ep = None
            ep.set_attrs(bus_faults=int(arm.bus.faults - faults0), error=str(e))
            ep.flush()  # kept, complete=False: nothing recorded is lost
            raise
        arm.episode_end(index)
        judge = arm.wait_judge(index, 1.0)
        with self._lock:
            self._ep = None
        periods = np.asarray(self.stats.periods)
        counts = {k: int(v - counts0.get(k, 0)) for k, v in arm.bus.counts.items()}
        ep.set_attrs(
            bus_faults=int(arm.bus.faults - faults0),
            bus_retries=counts["retries"],
            bus_counts=", ".join(f"{k}={v}" for k, v in counts.items() if v),
            loop_rate_hz=float(self._loop_rate()),
            loop_overruns=int(self.stats.overruns),
            loop_jitter_p99_s=float(np.percentile(np.abs(periods - period), 99))
            if len(periods) else math.nan,
            sync_read_p50_s=float(np.median(rtt)) if rtt else math.nan,
            sync_read_p99_s=float(np.percentile(rtt, 99)) if rtt else math.nan,
            discarded=control is Control.RERECORD,
        )
        if judge is not None:
            ep.set_judge(*judge)
        ep.close()
        verdict = "" if judge is None else f"  JDG success={judge[0]} score={judge[1]:.3f}"
        self.progress(self._status(label, min(time.monotonic() - self._t0, seconds), seconds,
                                   faults0) + verdict + "\n")
        return ep.name, control

    def _loop_rate(self) -> float:
        p = self.stats.periods[-50:]
        return 1.0 / float(np.mean(p)) if p else math.nan

    def _status(self, label: str, t: float, seconds: float, faults0: int) -> str:
        fps = " ".join(f"{n} {c.fps():.1f} fps" for n, c in self.cameras.items())
        return (f"episode {label}  {t:5.1f}/{seconds:.0f} s  loop {self._loop_rate():5.1f} Hz  "
                f"{fps}  bus faults {self.arm.bus.faults - faults0}  "
                f"retries {self.arm.bus.counts['retries']}  {self.stats.vbat:.1f} V")


def _source(driver: Any, seconds: float, seed: int) -> Any:
    """An action source: one given as an object, ``excite:<signal>`` or ``policy:<checkpoint>``
    (a student checkpoint of the arm, `student.deploy.PolicySource`)."""
    if not isinstance(driver, str):
        return driver
    kind, _, arg = driver.partition(":")
    if kind == "excite":
        if arg not in SIGNALS:
            raise UserError(f"unknown excitation signal {arg!r} for the arm: "
                            f"expected one of {', '.join(SIGNALS)}")
        from hardware.sources import ExcitationSource

        return ExcitationSource(arg, lambda s, sd: arm_excitation(arg, s, sd), seconds, seed)
    if kind == "policy":
        if not Path(arg).is_file():
            raise UserError(f"policy:{arg}: no such checkpoint")
        from student.deploy import PolicySource

        src = PolicySource(arg)
        if src.robot != "arm":
            raise UserError(f"policy:{arg}: a policy for {src.robot}, not the arm")
        return src
    raise UserError(f"driver {driver!r}: record_arm builds excite:<signal> and policy:<checkpoint>; "
                    "pass a teleop source as an object")


def record_arm(port: str, camera_spec: str, control: str | None, episodes: int, seconds: float,
               driver: Any, out: str | os.PathLike[str], seed: int = 0, resume: bool = False,
               rate_hz: float = 50.0) -> list[str]:
    """``realsim record arm``: record ``episodes`` episodes into ``out`` (appending).

    driver: ``"excite:sine|steps|smooth"`` or an action source object (policy,
    teleop) with ``name``, ``begin``, ``act``. With ``resume`` the file is topped
    up to ``episodes`` complete, non-discarded episodes. Returns the names of the
    episodes recorded. Raises `UserError`/`DeviceError` (one line) on bad input
    or a robot that does not answer.
    """
    from hardware.camera import CameraReader, parse_camera_spec
    from realsim.logs import LogReader

    if episodes < 1 or seconds <= 0 or rate_hz <= 0:
        raise UserError("record: --episodes, --seconds and --rate must be positive")
    source = _source(driver, seconds, seed)
    if getattr(source, "robot", "arm") != "arm":  # e.g. a car's student checkpoint
        raise UserError(f"{source.name}: a policy for {source.robot}, not the arm")
    out = Path(out)
    todo = episodes
    if out.exists():
        with LogReader(out) as r:
            if r.robot != "arm":
                raise UserError(f"{out}: a log of {r.robot}, not arm")
            eps = list(r.episodes())
        kept = [e for e in eps if e.complete and not e.attrs.get("discarded", False)]
        if resume:
            todo = max(episodes - len(kept), 0)
            print(f"resuming {out}: {len(kept)} of {episodes} episodes complete; "
                  f"recording {todo} more", file=sys.stderr)
        else:
            print(f"appending to {out} ({len(eps)} episodes already there)", file=sys.stderr)
    if todo == 0:
        return []
    cams = parse_camera_spec(camera_spec)
    readers = {name: CameraReader(src, name=name) for name, src in cams.items()}
    try:
        for cam in readers.values():
            cam.open_check(timeout=5.0)
        with ArmDriver(port, control) as arm:
            for cam in readers.values():
                cam.start()
            attrs = {"host": os.uname().nodename, "port": port, "camera": camera_spec,
                     "control": control or "", "bus": "feetech sts3215, pyserial, 1000000 baud"}
            with LogWriter(out, robot="arm", source="real", attrs=attrs) as writer:
                rec = ArmRecorder(arm, readers, writer, rate_hz=rate_hz)
                return rec.run(source, episodes=todo, seconds=seconds)
    finally:
        for cam in readers.values():
            cam.stop()
        close = getattr(source, "close", None)
        if close:
            close()

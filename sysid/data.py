"""Logs -> validated episodes -> replay segments with their target signals.

A *segment* is a whole episode started at rest, or a window of one started
from a state estimate (``window`` > 0), so that a long episode's drift does not
dominate the error. Targets are the compared signals on the sensor sample times,
as the robot adapter defines them (``RobotAdapter.signals_of``, applied alike to
logged and simulated fields). The car's are defined here (``SIGNALS`` ...
``signals_of``; dynamics/ and the cycle use them too): yaw rate, wheel speed
(centred difference of ``enc_rad``) and the two accelerations, all smoothed by the
same short moving average that is applied to the simulated signals. Sample
times come from the device's clock mapped onto the host clock (``sensor_times``):
host arrival stamps bunch when the reader is late, and a burst turned an encoder
step into a wheel-speed spike; commands stay on their host send times.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from realsim.errors import UserError
from realsim.logs import LogReader
from realsim.logs.resample import device_timeline
from sysid.robot_adapter import RobotAdapter

SIGNALS = ("yaw_rate", "wheel_speed", "accel_x", "accel_y")
SCALE_FLOOR = {"yaw_rate": 0.05, "wheel_speed": 1.0, "accel_x": 0.2, "accel_y": 0.2}
# weight of each signal in the fit's error: the accelerometers carry sensor noise and, in
# the simulator, contact chatter that jumps with tiny parameter changes (a non-smooth
# objective); they inform the fit but do not dominate it
WEIGHT = {"yaw_rate": 1.0, "wheel_speed": 1.0, "accel_x": 0.1, "accel_y": 0.2}
UNITS = {"yaw_rate": "rad/s", "wheel_speed": "rad/s", "accel_x": "m/s^2", "accel_y": "m/s^2"}
SMOOTH = 5  # samples of the moving average (0.1 s at 50 Hz)
BURN_IN = 0.3  # s: least lead-in of a window started from an estimate (left out of the error)
LEAD = 1.0  # s: default lead-in simulated before a window's scored samples
START_SPAN = 0.5  # s: a window's start is the steadiest sample this far before its lead-in


@dataclass
class LogEpisode:
    """One usable episode. Shapes: cmd_t (N,), cmd_action (N, A), sensor_t (M,)."""

    file: str
    name: str
    cmd_t: np.ndarray
    cmd_action: np.ndarray
    sensor_t: np.ndarray
    sensors: dict[str, np.ndarray]
    signals: dict[str, np.ndarray] = field(default_factory=dict)
    attrs: dict[str, Any] = field(default_factory=dict)
    robot: str = "rc_car"

    @property
    def key(self) -> str:
        return f"{Path(self.file).name}:{self.name}"

    @property
    def uid(self) -> str:
        """Unique among all logs: the cycle's iterations hold files of one name (steps.h5)."""
        return f"{self.file}:{self.name}"

    @property
    def seconds(self) -> float:
        return float(self.sensor_t[-1] - self.sensor_t[0])


@dataclass
class Segment:
    """One replay unit: the episode, the replay input, which samples count."""

    episode: LogEpisode
    inp: Any
    idx: np.ndarray  # (K,) sensor sample indices of the episode covered by the rollout
    mask: np.ndarray  # (K,) bool, samples that enter the error


def _smooth(x: np.ndarray) -> np.ndarray:
    if len(x) < SMOOTH:
        return x.astype(float)
    k = np.ones(SMOOTH) / SMOOTH
    pad = np.pad(x.astype(float), (SMOOTH // 2, SMOOTH // 2), mode="edge")
    return np.convolve(pad, k, mode="valid")


def _despike(x: np.ndarray) -> np.ndarray:
    """Running median of SMOOTH samples: removes single-sample contact spikes."""
    if len(x) < SMOOTH:
        return x.astype(float)
    pad = np.pad(x.astype(float), (SMOOTH // 2, SMOOTH // 2), mode="edge")
    return np.median(np.lib.stride_tricks.sliding_window_view(pad, SMOOTH), axis=1)


def signals_of(t: np.ndarray, out: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The car's compared signals from raw sensor fields. Shapes: t (M,) -> each (M,)."""
    enc = np.asarray(out["enc_rad"], float)
    n = len(t)
    lo, hi = np.clip(np.arange(n) - 2, 0, n - 1), np.clip(np.arange(n) + 2, 0, n - 1)
    # host receive stamps can repeat (packets read in bursts): floor each span at half its
    # nominal length so a burst cannot turn an encoder step into a huge speed
    period = float(np.median(np.diff(t))) if n > 1 and np.median(np.diff(t)) > 0 else 0.02
    dt = np.where(hi > lo, np.maximum(t[hi] - t[lo], 0.5 * (hi - lo) * period), 1.0)
    ws = np.where(hi > lo, (enc[hi] - enc[lo]) / np.maximum(dt, 1e-6), 0.0)
    acc = np.asarray(out["accel"], float).reshape(n, -1)
    return {"yaw_rate": _smooth(np.asarray(out["yaw_rate"], float)), "wheel_speed": _smooth(ws),
            "accel_x": _smooth(_despike(acc[:, 0])), "accel_y": _smooth(_despike(acc[:, 1]))}


def sensor_times(sensors: Any) -> np.ndarray:
    """When each sensor sample was taken, on the host clock of the commands. Shape: (M,).

    The host stamps a sample on arrival, and a late reader stamps a burst of them with
    (nearly) one time; the device's own clock (``t_device``) keeps their true spacing, so
    the samples go on the device timeline mapped onto the host clock
    (``realsim.logs.resample.device_timeline``). Without a device clock: the host stamps."""
    t = np.asarray(sensors.t, float)
    if "t_device" not in sensors:
        return t
    return device_timeline(t, np.asarray(sensors["t_device"], float))


def load_logs(paths: Sequence[str | Path], adapter: RobotAdapter) -> list[LogEpisode]:
    """Every complete, non-discarded episode of every log, validated.

    Raises a one-line UserError naming the file (and episode, dataset) for a log
    of another robot, a log with no usable episode, or NaNs in a used stream.
    """
    out: list[LogEpisode] = []
    for path in paths:
        p = Path(path)
        with LogReader(p) as r:
            if r.robot != adapter.robot:
                raise UserError(f"{p}: a log of {r.robot}, not {adapter.robot}")
            n0 = len(out)
            for ep in r.episodes(complete_only=True):
                if ep.attrs.get("discarded", False):
                    continue
                out.append(_episode(p, ep, adapter))
            if len(out) == n0:
                raise UserError(f"{p}: no complete episode with commands and sensor samples")
    return out


def _episode(p: Path, ep: Any, adapter: RobotAdapter) -> LogEpisode:
    where = f"{p}: episode {ep.name}"
    if len(ep.command) == 0 or len(ep.sensors) < 2 * SMOOTH:
        raise UserError(f"{where}: empty (commands {len(ep.command)}, sensor samples {len(ep.sensors)})")
    for name in adapter.required_fields:
        if name not in ep.sensors:
            raise UserError(f"{where}: dataset sensors/{name} is missing")
    fields = adapter.required_fields + tuple(k for k in adapter.optional_fields if k in ep.sensors)
    streams = {"command/t": ep.command.t, "command/action": ep.command["action"],
               "sensors/t": ep.sensors.t}
    streams |= {f"sensors/{k}": ep.sensors[k] for k in fields}
    for k, v in streams.items():
        if not np.all(np.isfinite(np.asarray(v, float))):
            raise UserError(f"{where}: dataset {k} holds NaN or inf")
    sensors = {k: np.asarray(ep.sensors[k], float) for k in fields}
    e = LogEpisode(str(p), ep.name, np.asarray(ep.command.t, float),
                   np.asarray(ep.command["action"], float), sensor_times(ep.sensors),
                   sensors, attrs=dict(ep.attrs), robot=adapter.robot)
    e.signals = adapter.signals_of(e.sensor_t, sensors)
    return e


def sim_signals(adapter: RobotAdapter, seg: Segment, sim: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Compared signals of one simulated segment, like with like: an optional field the
    log lacks (e.g. the arm's qvel) is left out of the sim's too. Each (K,)."""
    opt = set(adapter.optional_fields) - set(seg.episode.sensors)
    fields = {k: v for k, v in sim.items() if k not in opt} if opt else sim
    return adapter.signals_of(np.asarray(seg.inp.sensor_t), fields)


def split_holdout(episodes: list[LogEpisode], holdout: str | None) -> tuple[list[LogEpisode], list[LogEpisode]]:
    """Deterministic split. ``holdout``: a fraction ("0.25": every 1/f-th episode,
    the default) or comma-separated episode names (``ep_000003``, ``file.h5:ep_000003``, or
    ``dir/file.h5:ep_000003``: a name with a folder means that one file, where logs of one
    base name sit in several folders, as in the cycle's iterations)."""
    spec = "0.25" if holdout is None else holdout.strip()
    try:
        frac = float(spec)
    except ValueError:
        names = {s.strip() for s in spec.split(",") if s.strip()}
        # each name under the form an episode answers to (a path part resolved) -> as given
        wanted = {(f"{Path(n.rsplit(':', 1)[0]).resolve()}:{n.rsplit(':', 1)[1]}"
                   if "/" in n and ":" in n else n): n for n in names}
        hits = [(e, {e.name, e.key, f"{Path(e.file).resolve()}:{e.name}"} & wanted.keys())
                for e in episodes]
        held = [e for e, h in hits if h]
        missing = sorted(names - {wanted[k] for _, h in hits for k in h})
        if missing:
            raise UserError(f"--holdout: no episode {missing[0]!r} in the logs") from None
    else:
        if not 0 <= frac < 1:
            raise UserError(f"--holdout: fraction {frac} must be in [0, 1)")
        step = int(round(1 / frac)) if frac > 0 else 0
        held = [e for i, e in enumerate(episodes) if step and i % step == step - 1]
    train = [e for e in episodes if e not in held]
    if not train:
        raise UserError("--holdout leaves no episode to fit on")
    return train, held


def _quiet_start(e: LogEpisode, t_latest: float, adapter: RobotAdapter, span: float = START_SPAN) -> int:
    """Sample in [t_latest - span, t_latest] where the robot is steadiest
    (``adapter.unsteadiness``: the car's |accel|, the arm's joint speeds): there the state
    estimate (the car: no lateral slip, wheels rolling) is closest to the truth."""
    t = e.sensor_t
    lo, hi = np.searchsorted(t, t_latest - span), np.searchsorted(t, t_latest, side="right")
    if hi <= lo:
        return int(max(1, min(lo, len(t) - 1)))
    a = np.asarray(adapter.unsteadiness(e.signals))[lo:hi]
    return int(max(1, lo + int(np.argmin(a))))


def make_segments(episodes: Sequence[LogEpisode], adapter: RobotAdapter,
                  window: float = 0.0, lead: float = LEAD) -> list[Segment]:
    """Whole episodes from rest (``window`` <= 0) or windows of ``window`` s.

    A window scoring samples [t_k, t_k + window) starts simulating ``lead`` s earlier
    (at t_k - lead, from the state estimate there), so the estimate's errors (lateral
    velocity, wheel slip, servo lag) have decayed before the samples that count; the
    first window of an episode starts at rest at the episode start instead.
    """
    segs: list[Segment] = []
    for e in episodes:
        t = e.sensor_t
        starts = [0] if window <= 0 else list(np.searchsorted(t, np.arange(t[0], t[-1] - window / 2, window)))
        for k, i0 in enumerate(starts):
            i1 = starts[k + 1] if k + 1 < len(starts) else len(t)
            s0 = 0 if i0 == 0 else _quiet_start(e, t[i0] - max(lead, BURN_IN), adapter)
            idx = np.arange(s0, i1)
            init = adapter.estimate_init(e.signals, s0) if s0 > 0 else None
            t0 = float(t[s0]) if s0 > 0 else 0.0
            sens = {f: v[idx] for f, v in e.sensors.items()}
            inp = adapter.make_input(e.cmd_t, e.cmd_action, t[idx], sens, t0, init)
            mask = idx >= i0
            segs.append(Segment(e, inp, idx, mask))
    return segs


def signal_scales(episodes: Sequence[LogEpisode], adapter: RobotAdapter | None = None) -> dict[str, float]:
    """Per-signal std over the (training) episodes, floored (``adapter.scale_floor``) so a
    still log stays finite. ``adapter``: default the episodes' robot's."""
    if adapter is None:
        from sysid.robot_adapter import get_adapter

        adapter = get_adapter(episodes[0].robot)
    return {s: max(float(np.std(np.concatenate([e.signals[s] for e in episodes]))), adapter.scale_floor[s])
            for s in adapter.signals}

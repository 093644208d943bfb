"""Excitation signals for system identification, seeded and bounded.

A fit can only find what the logs excite: yaw inertia needs fast steering
reversals, the deadband needs throttle that dwells near zero, the brake needs
negative throttle at speed, the servo speed needs steps. Each signal here is a
pure function of time and a seed, so an episode can be regenerated exactly
from its (driver, seed) attributes.

Signals return values in [-1, 1] per channel; the robot folders decide which
channel means what and how far each may go (`ChannelLimits`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from realsim.errors import UserError

SIGNALS = ("chirp", "steps", "prbs", "smooth")


@dataclass(frozen=True)
class ChannelLimits:
    """Where one action channel may go during excitation.

    low/high bound the signal (e.g. the car's throttle rarely needs full brake
    for long, and a real room is small); `centre` is the level the signal
    varies around.
    """

    low: float = -1.0
    high: float = 1.0
    centre: float = 0.0


Signal = Callable[[float], np.ndarray]


def _scale(x: np.ndarray, lim: ChannelLimits) -> np.ndarray:
    """Map a unit signal x in [-1, 1] around `centre` into [low, high]."""
    up = lim.high - lim.centre
    down = lim.centre - lim.low
    return np.where(x >= 0, lim.centre + x * up, lim.centre + x * down)


def chirp(limits: list[ChannelLimits], seconds: float, seed: int,
          f0: float = 0.2, f1: float = 2.0) -> Signal:
    """Linear frequency sweep f0 -> f1 Hz per channel, random phase per channel.

    Channel k > 0 sweeps at a slower, offset rate so channels are not collinear.
    """
    rng = np.random.default_rng(seed)
    phases = rng.uniform(0, 2 * np.pi, len(limits))
    rates = [1.0] + [float(rng.uniform(0.25, 0.5)) for _ in limits[1:]]

    def f(t: float) -> np.ndarray:
        tt = np.clip(t / max(seconds, 1e-6), 0.0, 1.0)
        out = []
        for k, lim in enumerate(limits):
            fa, fb = f0 * rates[k], f1 * rates[k]
            phase = 2 * np.pi * (fa * t + 0.5 * (fb - fa) * tt * t) + phases[k]
            out.append(_scale(np.asarray(np.sin(phase)), lim))
        return np.asarray(out, dtype=np.float64)

    return f


def _hold_schedule(rng: np.random.Generator, seconds: float, hold: tuple[float, float],
                   n_ch: int, draw: Callable[[np.random.Generator], float]) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per channel: switch times (K,) and held unit levels (K,)."""
    sched = []
    for _ in range(n_ch):
        times, levels, t = [0.0], [draw(rng)], 0.0
        while t < seconds + 1.0:
            t += float(rng.uniform(*hold))
            times.append(t)
            levels.append(draw(rng))
        sched.append((np.asarray(times), np.asarray(levels)))
    return sched


def _held(sched: list[tuple[np.ndarray, np.ndarray]], limits: list[ChannelLimits]) -> Signal:
    def f(t: float) -> np.ndarray:
        out = []
        for (times, levels), lim in zip(sched, limits, strict=True):
            i = int(np.searchsorted(times, t, side="right")) - 1
            out.append(_scale(np.asarray(levels[max(i, 0)]), lim))
        return np.asarray(out, dtype=np.float64)

    return f


def steps(limits: list[ChannelLimits], seconds: float, seed: int,
          hold: tuple[float, float] = (0.4, 1.5)) -> Signal:
    """Random piecewise-constant levels, uniform in [-1, 1], held 0.4-1.5 s."""
    rng = np.random.default_rng(seed)
    sched = _hold_schedule(rng, seconds, hold, len(limits), lambda r: float(r.uniform(-1, 1)))
    return _held(sched, limits)


def prbs(limits: list[ChannelLimits], seconds: float, seed: int,
         hold: tuple[float, float] = (0.15, 0.6)) -> Signal:
    """Pseudo-random binary sequence: each channel flips between -0.8 and +0.8."""
    rng = np.random.default_rng(seed)
    sched = _hold_schedule(rng, seconds, hold, len(limits),
                           lambda r: 0.8 if r.random() < 0.5 else -0.8)
    return _held(sched, limits)


def smooth(limits: list[ChannelLimits], seconds: float, seed: int,
           n_sines: int = 6, f_max: float = 1.5) -> Signal:
    """Sum of random sinusoids (0.05..f_max Hz), normalised into [-1, 1]."""
    rng = np.random.default_rng(seed)
    freqs = rng.uniform(0.05, f_max, (len(limits), n_sines))
    amps = rng.uniform(0.2, 1.0, (len(limits), n_sines))
    amps /= amps.sum(axis=1, keepdims=True)
    phases = rng.uniform(0, 2 * np.pi, (len(limits), n_sines))

    def f(t: float) -> np.ndarray:
        x = np.sum(amps * np.sin(2 * np.pi * freqs * t + phases), axis=1)
        return np.asarray([_scale(np.asarray(v), lim) for v, lim in zip(x, limits, strict=True)])

    return f


_FACTORIES = {"chirp": chirp, "steps": steps, "prbs": prbs, "smooth": smooth}


def make_signal(name: str, limits: list[ChannelLimits], seconds: float, seed: int) -> Signal:
    """Build excitation signal `name` (one of SIGNALS) for the given channels.

    Returns f(t) -> action of shape (len(limits),), within each channel's limits.
    """
    if name not in _FACTORIES:
        raise UserError(f"unknown excitation signal {name!r}: expected one of {', '.join(SIGNALS)}")
    return _FACTORIES[name](limits, seconds, seed)

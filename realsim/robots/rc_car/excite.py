"""The car's excitation for system identification: which channel goes where.

Action = [steer, throttle] in [-1, 1]. The excitation must be informative AND open-loop
predictable: a log of the car spinning or sliding sideways (full throttle with full
lock, or braking hard in a turn) is chaotic, so a replay from the logged commands can
match it only by luck, and a fit to it learns nothing. So:

- throttle stays in a moderate band: a per-episode top level drawn in 0.35..0.6 (episode
  variety: top speed, drag and back-EMF show at different speeds), centre 0.22 (a
  little above the ESC deadband's upper bound, so the car keeps moving), and brake
  pulses down to -0.35 (the brake and the deadband);
- the steering amplitude shrinks as the car gets faster, so the lateral acceleration
  stays below a per-episode limit (2.5..4.5 m/s^2, well inside the tyres' grip) from a
  speed estimate of the throttle history (first-order lag to a top speed of 3.5 m/s);
  it never shrinks below 0.3 (steering gain and trim stay observable), and it is halved
  while braking (no locked-rear slides in a turn);
- the first 0.3 s ramp up from rest, so the first sample shows the car at rest.
"""

from __future__ import annotations

import numpy as np

from realsim.excitation import ChannelLimits, Signal, make_signal

STEER = ChannelLimits(low=-1.0, high=1.0, centre=0.0)
THROTTLE = ChannelLimits(low=-0.35, high=0.5, centre=0.22)
TOP_SPEED = 3.5  # m/s at full throttle (datasheet: 3 to 4)
DEADBAND = 0.07  # middle of the datasheet's ESC deadband range
LAT_ACCEL = (2.5, 4.5)  # m/s^2: per-episode limit on v^2 * steer_angle / wheelbase
STEER_ANGLE = 0.40  # rad at full command (datasheet middle)
WHEELBASE = 0.185
MIN_STEER = 0.3  # least steering amplitude, whatever the speed
RAMP = 0.3  # s from rest
_DT = 0.01  # s: grid of the speed estimate


def car_excitation(signal: str, seconds: float, seed: int) -> Signal:
    """f(t) -> [steer, throttle] for one episode. Shape: (2,)."""
    rng = np.random.default_rng([seed, 7])
    top = float(rng.uniform(0.35, 0.6))
    a_lat = float(rng.uniform(*LAT_ACCEL))
    thr = ChannelLimits(low=THROTTLE.low, high=top, centre=THROTTLE.centre)
    base = make_signal(signal, [STEER, thr], seconds, seed)

    # speed estimate along the episode's own throttle history (deterministic in t)
    n = int(np.ceil((seconds + 1.0) / _DT)) + 1
    grid = _DT * np.arange(n)
    v = np.zeros(n)
    for k in range(1, n):
        u = float(base(grid[k - 1])[1]) * min(1.0, grid[k - 1] / RAMP)
        target = TOP_SPEED * max(0.0, (u - DEADBAND) / (1 - DEADBAND))
        tau = 0.25 if u < -DEADBAND else 0.5  # brakes stop the car faster than the motor speeds it
        v[k] = v[k - 1] + (target - v[k - 1]) * (_DT / tau)
    v_lim = np.clip(a_lat * WHEELBASE / (STEER_ANGLE * np.maximum(v, 1e-3) ** 2), MIN_STEER, 1.0)

    def f(t: float) -> np.ndarray:
        a = np.array(base(t), dtype=np.float64)
        amp = float(np.interp(t, grid, v_lim))
        if a[1] < -DEADBAND:
            amp *= 0.5
        a[0] *= amp
        if t < RAMP:
            a = a * (t / RAMP)
        return np.clip(a, -1.0, 1.0)

    return f

"""The car's excitation for system identification: which channel goes where.

Action = [steer, throttle] in [-1, 1]. Steering sweeps its whole range (the
full-command angle and trim are parameters to find). Throttle is centred a
little above the ESC deadband's upper bound so the car keeps moving, reaches
into the brake (negative) to excite the brake and tyre slip, and stays below
full power so a real car stays inside a room.
"""

from __future__ import annotations

import numpy as np

from realsim.excitation import ChannelLimits, Signal, make_signal

STEER = ChannelLimits(low=-1.0, high=1.0, centre=0.0)
THROTTLE = ChannelLimits(low=-0.6, high=0.7, centre=0.2)


def car_excitation(signal: str, seconds: float, seed: int) -> Signal:
    """f(t) -> [steer, throttle] for one episode. Shape: (2,)."""
    base = make_signal(signal, [STEER, THROTTLE], seconds, seed)
    ramp = 0.3  # s: start gently from rest so the first sample shows the car at rest

    def f(t: float) -> np.ndarray:
        a = base(t)
        if t < ramp:
            a = a * (t / ramp)
        return np.clip(a, -1.0, 1.0)

    return f

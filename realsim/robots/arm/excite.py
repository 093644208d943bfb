"""The arm's excitation for system identification: which channel goes where.

Action = per joint the goal normalised over its limits (log_format.md). Each channel
moves inside a joint-space box around home (constants.HOME) that lies inside the joint
limits and keeps the fingertips >= 4 cm above the table at every corner of the box
(tests/robots/test_arm_model.py checks it): the pan swings +-1 rad, the lift leans back
and forward, the elbow and wrist flex around their home bend (gravity load changes sign
across the box, which is what shows backlash, masses and friction), the roll turns
+-1.5 rad and the gripper opens and closes over most of its range. Goals are in rad
(gripper m); `BOX_LO` / `BOX_HI` Shape: (6,).
"""

from __future__ import annotations

import numpy as np

from realsim.errors import UserError
from realsim.excitation import ChannelLimits, Signal, make_signal
from realsim.robots.arm import constants as C

SIGNALS = ("sine", "steps", "smooth")
"""The arm's excitation signals (cli.md): `realsim record arm --driver excite:<signal>`."""

BOX_LO = np.array([-1.0, -0.5, 0.4, 0.2, -1.5, 0.0])
BOX_HI = np.array([1.0, 0.3, 1.3, 1.5, 1.5, 0.06])
BOX_CENTRE = np.array([0.0, 0.0, 0.9, 1.0, 0.0, 0.03])


def _norm(g: np.ndarray) -> np.ndarray:
    lo, hi = np.array(C.LIMITS_LO), np.array(C.LIMITS_HI)
    return 2.0 * (np.asarray(g) - lo) / (hi - lo) - 1.0


CHANNELS: list[ChannelLimits] = [
    ChannelLimits(low=float(a), high=float(b), centre=float(c))
    for a, b, c in zip(_norm(BOX_LO), _norm(BOX_HI), _norm(BOX_CENTRE), strict=True)
]


def arm_excitation(signal: str, seconds: float, seed: int) -> Signal:
    """f(t) -> normalised goals (6,) for one episode (`realsim.excitation` signals:
    "sine" is the chirp sweep). Starts at home and blends into the signal over 1 s."""
    if signal not in SIGNALS:
        raise UserError(f"unknown arm excitation {signal!r}: expected one of {', '.join(SIGNALS)}")
    base = make_signal("chirp" if signal == "sine" else signal, CHANNELS, seconds, seed)
    home = _norm(np.array(C.HOME))
    ramp = 1.0

    def f(t: float) -> np.ndarray:
        a = base(t)
        if t < ramp:
            a = home + (a - home) * (t / ramp)
        return np.clip(a, -1.0, 1.0)

    return f

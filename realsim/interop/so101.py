"""The arm's SI units <-> LeRobot's SO-101 convention.

LeRobot's SO-101 follower (``lerobot/robots/so101_follower``) names its six motor
features ``shoulder_pan.pos`` ... ``gripper.pos`` (the same joints, in the same
order, as realsim's arm) and normalises each reading per motor:

* body joints (1-5): ``MotorNormMode.DEGREES`` when the robot was configured with
  ``use_degrees=True``: ``(raw - mid) * 360 / 4095`` degrees, ``mid`` being the
  middle of the calibrated range; otherwise ``RANGE_M100_100``: -100..100 over the
  calibrated ``range_min..range_max``.
* gripper: ``RANGE_0_100``: 0..100 over the calibrated range.

Assumptions (documented, not checkable from a dataset):

* degrees: LeRobot's zero (middle of the calibrated range) is realsim's joint zero
  (arm.md: count 2048, the arm straight up) and the signs agree. A calibration
  whose middle is elsewhere shows up as a constant offset per joint.
* -100..100: needs the calibration file (``~/.cache/huggingface/lerobot/
  calibration/robots/so101_follower/<id>.json``: per motor ``range_min``,
  ``range_max``, ``drive_mode``) to reach degrees; without it the conversion is
  refused rather than guessed.
* gripper: 0 % = closed, 100 % = fully open = ``GRIPPER_MAX`` (0.07 m, arm.md).

``action`` in a LeRobot dataset is the goal position in the same units as the
state; realsim's command/action is that goal normalised over the joint limits
into [-1, 1] (log_format.md).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from realsim.errors import UserError

JOINTS = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper")
"""realsim's arm joints = LeRobot SO-101 motors, in bus id order 1..6."""
NAMES = tuple(f"{j}.pos" for j in JOINTS)
"""LeRobot's feature names for the six positions."""
UNITS = ("degrees", "m100")
MAX_RES = 4095.0  # LeRobot's STS3215 resolution - 1 in its degree formula


def _limits() -> tuple[np.ndarray, np.ndarray, float]:
    from realsim.robots.arm import constants as C

    return np.asarray(C.LIMITS_LO, float), np.asarray(C.LIMITS_HI, float), float(C.GRIPPER_MAX)


def si_to_lerobot(q: np.ndarray) -> np.ndarray:
    """Joint positions rad (gripper m) -> degrees (gripper 0..100 %). Shape: (..., 6)."""
    _, _, gmax = _limits()
    q = np.asarray(q, np.float64)
    out = np.degrees(q)
    out[..., 5] = q[..., 5] / gmax * 100.0
    return out


def lerobot_to_si(v: np.ndarray, units: str = "degrees",
                  calibration: dict[str, dict[str, float]] | None = None) -> np.ndarray:
    """SO-101 readings or goals -> rad (gripper m). Shape: (..., 6).

    ``units="degrees"``: body joints in degrees. ``units="m100"``: body joints in
    -100..100, converted through ``calibration`` (LeRobot's calibration JSON).
    """
    _, _, gmax = _limits()
    v = np.asarray(v, np.float64)
    out = np.empty_like(v)
    if units == "degrees":
        out[..., :5] = np.radians(v[..., :5])
    elif units == "m100":
        if calibration is None:
            raise UserError("import lerobot: --units m100 needs --calibration FILE.json (LeRobot's "
                            "calibration file of the follower arm) to reach joint angles")
        for i, j in enumerate(JOINTS[:5]):
            c = calibration[j]
            lo, hi = float(c["range_min"]), float(c["range_max"])
            n = -v[..., i] if int(c.get("drive_mode", 0)) else v[..., i]
            raw = (np.clip(n, -100.0, 100.0) + 100.0) / 200.0 * (hi - lo) + lo
            out[..., i] = np.radians((raw - (lo + hi) / 2.0) * 360.0 / MAX_RES)
    else:
        raise UserError(f"unknown units {units!r}: expected one of {', '.join(UNITS)}")
    out[..., 5] = np.clip(v[..., 5], 0.0, 100.0) / 100.0 * gmax
    return out


def lerobot_rate_to_si(v: np.ndarray) -> np.ndarray:
    """Velocities deg/s (gripper %/s) -> rad/s (gripper m/s); no offset, no clipping. Shape: (..., 6)."""
    _, _, gmax = _limits()
    out = np.radians(np.asarray(v, np.float64))
    out[..., 5] = np.asarray(v, np.float64)[..., 5] / 100.0 * gmax
    return out


def action_to_goal(a: np.ndarray) -> np.ndarray:
    """realsim action in [-1, 1] -> joint goals rad (gripper m). Shape: (..., 6)."""
    lo, hi, _ = _limits()
    return lo + (np.asarray(a, np.float64) + 1.0) * 0.5 * (hi - lo)


def goal_to_action(q: np.ndarray) -> np.ndarray:
    """Joint goals rad (gripper m) -> realsim action, clipped to [-1, 1]. Shape: (..., 6)."""
    lo, hi, _ = _limits()
    return np.clip(2.0 * (np.asarray(q, np.float64) - lo) / (hi - lo) - 1.0, -1.0, 1.0)


def load_calibration(path: str | Path) -> dict[str, dict[str, float]]:
    """LeRobot's per-motor calibration JSON; one-line UserError if unusable."""
    p = Path(path)
    try:
        cal = json.loads(p.read_text())
    except FileNotFoundError:
        raise UserError(f"no such file: {p}") from None
    except (OSError, ValueError) as e:
        raise UserError(f"{p}: not a LeRobot calibration file ({e})") from None
    missing = [j for j in JOINTS[:5] if not isinstance(cal, dict) or j not in cal
               or not {"range_min", "range_max"} <= set(cal[j])]
    if missing:
        raise UserError(f"{p}: calibration lacks range_min/range_max for {', '.join(missing)}")
    return cal


def joint_order(names: list[str] | dict[str, list[str]] | None, width: int, feature: str) -> list[int]:
    """Column of each realsim joint in a LeRobot vector feature named ``names``.

    Accepts ``shoulder_pan.pos`` or bare ``shoulder_pan``; a feature of width 6
    without names is taken in SO-101 order. One-line UserError otherwise.
    """
    if isinstance(names, dict):  # LeRobot v2 style {"motors": [...]}
        names = next((v for v in names.values() if isinstance(v, list)), None)
    if names:
        bare = [str(n).removesuffix(".pos") for n in names]
        if all(j in bare for j in JOINTS):
            return [bare.index(j) for j in JOINTS]
        if width == 6 and not any(j in bare for j in JOINTS):
            pass  # generic names ("motor_0", "dim"...): fall through to SO-101 order
        else:
            missing = [j for j in JOINTS if j not in bare]
            raise UserError(f"{feature}: not an SO-101 arm (no {', '.join(missing)} among its names)")
    if width != 6:
        raise UserError(f"{feature}: {width} values per frame, an SO-101 arm has 6")
    return list(range(6))


def check_range(q: np.ndarray, where: str) -> str | None:
    """A warning if converted positions leave the joint limits by more than 0.3 rad."""
    lo, hi, _ = _limits()
    over = np.maximum(np.nanmax(q, axis=0) - hi, lo - np.nanmin(q, axis=0))
    bad = [f"{JOINTS[i]} ({over[i]:+.2f} rad)" for i in range(6) if over[i] > 0.3]
    if not bad:
        return None
    return (f"{where}: positions beyond the joint limits: {', '.join(bad)}; wrong --units or "
            "calibration? (assumed: zero = middle of the calibrated range)")

"""The arm's uncertain quantities as named parameters (nominal value, range, how applied).

Every quantity arm.md marks *uncertain* that the simulator can express is one
`ParamSpec` in `PARAMS` (camera poses and fields of view are visual and live in the
scene's randomization, not here). `applies`:

- ``"spec"``: an MjSpec edit when the model is built (`model.apply_params`);
- ``"actuation"``: the command path ahead of MuJoCo (latency), numpy (`sim.py`).

Per-joint quantities (friction, armature, backlash) exist for the five revolute joints.
Each of the six servos has its own stall torque and no-load speed (``stall_torque_<joint>``,
``no_load_speed_<joint>``): the datasheet gives them as ranges, and servos of one type
differ by more than the fit can otherwise absorb (one shared slew speed left a fast
wrist_roll 40 % off on emulated arms). The position gain is shared (one P_Coefficient
register value, 32, on every servo) and acts on the drive's duty, so each servo's gain
in N m/rad is servo_kp x stall_torque_<joint> / STALL_REF. The gripper's servo acts
through its lever (constants.GRIPPER_LEVER). A servo's damping is its back-EMF:
damping = stall_torque / no_load_speed (so a saturated servo slews at the no-load speed).

Old parameter files with one shared ``stall_torque`` / ``no_load_speed`` still load: the
shared value goes to every servo (`ArmParams`).

Ranges are the datasheet's where it gives one, physically sensible otherwise; they are
the prior box that system identification searches.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from realsim.params import ParamSet, ParamSpec
from realsim.robots.arm import constants as C

_JOINT_PARAMS: list[ParamSpec] = []
for _j in C.ARM_JOINTS:
    _JOINT_PARAMS += [
        ParamSpec(
            f"friction_{_j}",
            0.03,
            0.0,
            0.15,
            "N m",
            "spec",
            f"{_j}: Coulomb friction of the servo's gear train (motor hinge frictionloss)",
        ),
        ParamSpec(
            f"armature_{_j}",
            0.003,
            0.001,
            0.012,
            "kg m^2",
            "spec",
            f"{_j}: rotor inertia reflected through the gearbox (motor hinge armature)",
        ),
        ParamSpec(
            f"backlash_{_j}",
            0.01,
            0.0,
            0.04,
            "rad",
            "spec",
            f"{_j}: total gear play (play hinge range +-backlash/2)",
        ),
    ]

STALL_REF = 1.55
"""N m: the stall torque at which servo_kp is stated (the datasheet range's middle)."""

_SERVO_PARAMS: list[ParamSpec] = []
for _j in C.JOINTS:
    _SERVO_PARAMS += [
        ParamSpec(
            f"stall_torque_{_j}",
            STALL_REF,
            1.2,
            1.9,
            "N m",
            "spec",
            f"{_j} servo: stall torque at 7.4 V (datasheet range); actuator forcerange"
            + (" (/ GRIPPER_LEVER on the opening)" if _j == C.JOINTS[-1] else "")
            + "; scales its position gain",
        ),
        ParamSpec(
            f"no_load_speed_{_j}",
            5.0,
            4.0,
            6.0,
            "rad/s",
            "spec",
            f"{_j} servo: no-load speed (datasheet range); damping = stall torque / "
            "no-load speed (back-EMF)",
        ),
    ]

PARAMS: tuple[ParamSpec, ...] = (
    ParamSpec(
        "mass_upper_arm",
        0.11,
        0.08,
        0.14,
        "kg",
        "spec",
        "upper arm link without servos (datasheet range); uniform rod shoulder -> elbow",
    ),
    ParamSpec(
        "mass_forearm",
        0.11,
        0.08,
        0.14,
        "kg",
        "spec",
        "forearm link without servos (datasheet range); uniform rod elbow -> wrist",
    ),
    ParamSpec(
        "servo_kp",
        15.0,
        5.0,
        40.0,
        "N m/rad",
        "spec",
        "servo position gain in physical units (P_Coefficient 32) for a servo of stall "
        "torque STALL_REF; servo j's actuator kp is servo_kp stall_torque_j / STALL_REF "
        "(the gain sets the duty); the gripper's / GRIPPER_LEVER^2 on the opening",
    ),
    *_SERVO_PARAMS,
    *_JOINT_PARAMS,
    ParamSpec(
        "cube_mass",
        0.03,
        0.01,
        0.05,
        "kg",
        "spec",
        "the red cube's mass (datasheet range)",
    ),
    ParamSpec(
        "cube_friction",
        0.8,
        0.4,
        1.2,
        "1",
        "spec",
        "the cube's sliding friction with table and pads (cube geom priority wins)",
    ),
    ParamSpec(
        "latency",
        0.02,
        0.005,
        0.05,
        "s",
        "actuation",
        "host send to the servo acting on a goal (USB adapter + bus): recorded goals "
        "take effect this long after their timestamps",
    ),
)

class ArmParams(ParamSet):
    """A complete, validated set of the arm's uncertain parameters (see `realsim.params`)."""

    SPECS = PARAMS
    ROBOT = "arm"
    __slots__ = ()

    def __init__(self, values: Mapping[str, float] | None = None, **kw: Any) -> None:
        given = dict(values or {})
        for k in [k for k in kw if k in LEGACY_SHARED]:
            given[k] = kw.pop(k)
        for old in LEGACY_SHARED:  # one shared value (older files): every servo gets it
            if old in given:
                v = given.pop(old)
                for j in C.JOINTS:
                    given.setdefault(f"{old}_{j}", v)
        for k in ("ci95", "identifiable"):
            if kw.get(k):
                kw[k] = {n: x for n, x in kw[k].items() if n not in LEGACY_SHARED}
        super().__init__(given, **kw)


LEGACY_SHARED = ("stall_torque", "no_load_speed")
"""Parameter names of the one-value-for-all-servos model, accepted on input."""

PARAM_NAMES: tuple[str, ...] = ArmParams.names()
PARAM_BY_NAME: dict[str, ParamSpec] = ArmParams.by_name()
SPEC_PARAMS: tuple[str, ...] = ArmParams.spec_names()
param_table = ArmParams.table


def servo_values(params: Mapping[str, float], name: str) -> np.ndarray:
    """Per-servo values of `name` ("stall_torque" or "no_load_speed"), JOINTS order.

    Shape: (6,)."""
    return np.array([params[f"{name}_{j}"] for j in C.JOINTS], dtype=np.float64)

"""The arm's uncertain quantities as named parameters (nominal value, range, how applied).

Every quantity arm.md marks *uncertain* that the simulator can express is one
`ParamSpec` in `PARAMS` (camera poses and fields of view are visual and live in the
scene's randomization, not here). `applies`:

- ``"spec"``: an MjSpec edit when the model is built (`model.apply_params`);
- ``"actuation"``: the command path ahead of MuJoCo (latency), numpy (`sim.py`).

Per-joint quantities (friction, armature, backlash) exist for the five revolute joints;
the gripper's servo shares the gain, torque and speed of the others through its lever
(constants.GRIPPER_LEVER). The servo's damping is its back-EMF: damping =
stall_torque / no_load_speed (so a saturated servo slews at the no-load speed).

Ranges are the datasheet's where it gives one, physically sensible otherwise; they are
the prior box that system identification searches.
"""

from __future__ import annotations

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
        "servo position gain in physical units (P_Coefficient 32); position actuator kp; "
        "the gripper's is servo_kp / GRIPPER_LEVER^2 on the opening",
    ),
    ParamSpec(
        "stall_torque",
        1.55,
        1.2,
        1.9,
        "N m",
        "spec",
        "servo stall torque at 7.4 V (datasheet range); actuator forcerange; the gripper "
        "squeezes with stall_torque / GRIPPER_LEVER",
    ),
    ParamSpec(
        "no_load_speed",
        5.0,
        4.0,
        6.0,
        "rad/s",
        "spec",
        "servo no-load speed (datasheet range); motor hinge damping = stall_torque / "
        "no_load_speed (back-EMF)",
    ),
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

PARAM_NAMES: tuple[str, ...] = tuple(p.name for p in PARAMS)
PARAM_BY_NAME: dict[str, ParamSpec] = {p.name: p for p in PARAMS}
SPEC_PARAMS: tuple[str, ...] = tuple(p.name for p in PARAMS if p.applies == "spec")


class ArmParams(ParamSet):
    """A complete, validated set of the arm's uncertain parameters (see `realsim.params`)."""

    SPECS = PARAMS
    ROBOT = "arm"
    __slots__ = ()


def param_table() -> str:
    """The parameter table as Markdown (for docs and reports)."""
    return ArmParams.table()

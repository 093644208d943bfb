"""What the student needs to know about each robot, in one place: `ROBOTS[name]` -> `RobotSpec`.

Everything else in `student/` is robot-agnostic: the dataset, model, training,
execution strategies, evaluation and deployment read the robot's action size,
camera frame, telemetry sensor fields, simulator and rates from here. Adding a
robot is adding a `RobotSpec` (and its telemetry features in `student.features`).

No simulator or hardware is imported at module level (the CLI's `--help` must
stay cheap); `env_spec` is a 'module:callable' string built in worker processes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from realsim.errors import UserError


@dataclass(frozen=True)
class RobotSpec:
    """One robot as the student sees it.

    action_dim: A, the action vector's size (the log's command/action width).
    camera_size: (W, H) of the robot's camera frame (spec); `crop_rows` are its rows.
    cameras: the camera names the robot has (a config chooses a subset).
    env_spec: the closed-loop simulation environment, 'module:callable'.
    control_hz: the control rate of the teacher's data and of the evaluation; deploy
        runs at it by default (an action chunk's ticks are this rate's ticks).
    seconds: the task's judged window (s): evaluation and deploy episode length.
    variants: whether evaluation alternates a scene variant (the car's distractor
        cone) on every other episode.
    idle_action: the action before the policy has its first camera frame, from the
        latest telemetry dict (may be None). Shape: (A,).
    relative_dims: action dims that may be predicted relative to the measured joint
        position (`StudentConfig.relative_actions`): the arm's five revolute joints.
    joint_lo, joint_hi: the limits that normalise the telemetry's qpos onto the action
        scale (a = 2 (q - lo) / (hi - lo) - 1). Shape: (A,) each; None without qpos.
    """

    name: str
    action_dim: int
    camera_size: tuple[int, int]
    cameras: tuple[str, ...]
    env_spec: str
    control_hz: float
    seconds: float
    variants: bool
    idle_action: Callable[[Mapping[str, Any] | None], np.ndarray]
    relative_dims: tuple[int, ...] = ()
    joint_lo: tuple[float, ...] | None = None
    joint_hi: tuple[float, ...] | None = None


def _car_idle(_: Mapping[str, Any] | None) -> np.ndarray:
    """Centred steering, coasting."""
    return np.zeros(2)


_ARM_LO = np.array([-1.9, -1.7, -1.6, -1.7, -2.7, 0.0])
_ARM_HI = np.array([1.9, 1.7, 1.6, 1.7, 2.7, 0.07])
"""The arm's joint limits (spec/arm.md; the gripper in m): the action normalisation."""


def _arm_idle(tel: Mapping[str, Any] | None) -> np.ndarray:
    """Hold the arm where it is (its measured joints as normalised goals); home if unknown."""
    if tel is None or "qpos" not in tel:
        q = np.array([0.0, 0.0, 1.2, 1.4, 0.0, 0.0])
    else:
        q = np.asarray(tel["qpos"], np.float64).reshape(6)
    return np.clip(2.0 * (q - _ARM_LO) / (_ARM_HI - _ARM_LO) - 1.0, -1.0, 1.0)


ROBOTS: dict[str, RobotSpec] = {
    "rc_car": RobotSpec("rc_car", 2, (320, 240), ("front",),
                        "realsim.robots.rc_car.scene:CarTaskEnv", 50.0, 10.0, True, _car_idle),
    "arm": RobotSpec("arm", 6, (640, 480), ("front", "wrist"),
                     "realsim.robots.arm.scene:ArmTaskEnv", 25.0, 20.0, False, _arm_idle,
                     (0, 1, 2, 3, 4), tuple(_ARM_LO), tuple(_ARM_HI)),
}


def robot_spec(name: str) -> RobotSpec:
    """The `RobotSpec` of `name`; UserError for an unknown robot."""
    try:
        return ROBOTS[name]
    except KeyError:
        raise UserError(f"unknown robot {name!r}: the student drives {', '.join(ROBOTS)}") from None

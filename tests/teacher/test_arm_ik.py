"""The arm's privileged IK pick-and-place teacher."""

from __future__ import annotations

import math

import numpy as np
import pytest

from realsim.robots.arm import constants as C
from realsim.robots.arm.scene import ArmRandomization, ArmTaskEnv, episode_seed
from teacher.arm_ik import GRASP_POINT, ArmIK, ArmTeacher, grasp_frame, run_teacher_episode


def test_grasp_frame_is_a_rotation_with_horizontal_jaws() -> None:
    for xy, tilt, yaw in [
        ((0.2, 0.05), 0.0, 0.7),
        ((0.3, -0.1), 0.5, None),
        ((0.15, 0.0), -0.3, 2.0),
    ]:
        R = grasp_frame(xy, tilt, yaw)
        np.testing.assert_allclose(R.T @ R, np.eye(3), atol=1e-9)
        assert np.linalg.det(R) == pytest.approx(1.0)
        assert R[2, 2] == pytest.approx(-math.cos(tilt))  # approach tilted from straight down
    R = grasp_frame((0.2, 0.0), 0.0, 0.3)
    assert abs(R[:, 1] @ [math.cos(0.3), math.sin(0.3), 0.0]) == pytest.approx(
        1.0, abs=1e-9
    ) or abs(R[:, 1] @ [-math.sin(0.3), math.cos(0.3), 0.0]) == pytest.approx(1.0, abs=1e-9)


def test_ik_reaches_the_workspace_straight_down() -> None:
    ik = ArmIK()
    rng = np.random.default_rng(0)
    teacher = ArmTeacher(0.04)
    for _ in range(10):
        xy = np.array([rng.uniform(0.15, 0.3), rng.uniform(-0.12, 0.12)])
        plan = teacher.plan_pair(np.array(C.HOME[:5]), GRASP_POINT, xy, None, rng.uniform(-3, 3))
        assert plan is not None
        x, R = ik.fk(plan["q"])
        np.testing.assert_allclose(x + R @ GRASP_POINT, plan["pos"], atol=1.5e-3)
        assert np.all(plan["q"] >= np.array(C.LIMITS_LO[:5])) and np.all(
            plan["q"] <= np.array(C.LIMITS_HI[:5])
        )


def test_teacher_solves_a_few_episodes() -> None:
    env = ArmTaskEnv(render=False)
    teacher = ArmTeacher(1.0 / env.control_hz)
    wins = 0
    for k in range(3):
        ok, score = run_teacher_episode(env, episode_seed(11, k), teacher)
        wins += ok
        assert score < 0.06 or not ok
    assert wins == 3


@pytest.mark.slow
def test_teacher_success_rate_over_100_randomized_episodes() -> None:
    env = ArmTaskEnv(render=False, randomization=ArmRandomization())
    teacher = ArmTeacher(1.0 / env.control_hz)
    wins = sum(run_teacher_episode(env, episode_seed(0, k), teacher)[0] for k in range(100))
    assert wins >= 99

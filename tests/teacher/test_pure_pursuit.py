"""The privileged teacher solves reach-the-cone under the randomization; the DAgger gate."""

from __future__ import annotations

import pytest

from realsim.randomization import Randomization
from realsim.robots.rc_car.scene import CarTaskEnv
from teacher.pure_pursuit import PurePursuitTeacher, run_teacher_episode
from teacher.recoverability import teacher_recovers


def _success_rate(seeds: range, distractor: bool | None = None) -> float:
    env = CarTaskEnv(render=False)
    teacher = PurePursuitTeacher()
    ok = 0
    for s in seeds:
        env.reset(s, distractor=distractor)
        ok += run_teacher_episode(env, teacher)[0]
    return ok / len(seeds)


def test_teacher_solves_randomized_episodes() -> None:
    assert _success_rate(range(100, 120)) == 1.0


def test_teacher_avoids_the_distractor() -> None:
    assert _success_rate(range(200, 210), distractor=True) == 1.0


@pytest.mark.slow
def test_teacher_success_over_200_episodes() -> None:
    assert _success_rate(range(10_000, 10_200)) >= 0.99


def test_recoverability_gate() -> None:
    env = CarTaskEnv(randomization=Randomization(), render=False)
    env.reset(7, distractor=False)
    for _ in range(25):  # 0.5 s idling: plenty of time left
        env.step([0.0, 0.0])
    early = env.get_state()
    while env.t < 9.6:  # 0.4 s left, 1-3 m to go from rest: hopeless
        env.step([0.0, 0.0])
    late = env.get_state()
    assert teacher_recovers(early)
    assert not teacher_recovers(late)
    # the same state with the cone moved right next to the car is recoverable again
    from realsim.robots.rc_car.task import Scene

    assert teacher_recovers(late, scene=Scene(cone_xy=(0.45, 0.0)))

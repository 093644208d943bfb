"""Recoverability gate for DAgger: can the teacher still succeed from a given state?

A student rollout visits states the teacher never would; labelling a hopeless state
(the distractor already touched, too little time left, heading away at speed into the
blue cone) with teacher actions teaches nothing useful. `teacher_recovers` restores a
`CarTaskEnv.get_state()` snapshot and lets the privileged teacher drive the rest of
the 10 s window, without rendering.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from realsim.robots.rc_car.params import CarParams
from realsim.robots.rc_car.task import Scene
from teacher.pure_pursuit import PurePursuitTeacher


def teacher_recovers(
    env_state: dict[str, Any],
    scene: Scene | None = None,
    params: CarParams | None = None,
    seed: int | None = None,
) -> bool:
    """True if the teacher, started from `env_state`, succeeds before the time limit.

    env_state: `CarTaskEnv.get_state()` (physics, actuation queue, judge, draw, scene).
    scene: override the state's cone layout (None: the state's own).
    params: physics to continue with (None: the state's episode's).
    seed: reseeds the continuation's action noise (None: continue the state's stream).
    """
    from realsim.randomization import Randomization
    from realsim.robots.rc_car.scene import CarTaskEnv

    state = dict(env_state)
    if scene is not None:
        state["scene"] = scene
    env = CarTaskEnv(randomization=Randomization.none(), render=False)
    env.set_state(state, params=params)
    if seed is not None:
        env.rng = np.random.default_rng(seed)
    teacher = PurePursuitTeacher()
    while not env.done:
        env.step(teacher.act(env.privileged()))
    env.close()
    success, _ = env.verdict()
    return bool(success)

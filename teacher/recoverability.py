"""Recoverability gate for DAgger: can the teacher still succeed from a given state?

A student rollout visits states the teacher never would; labelling a hopeless state
(the distractor already touched, too little time left, heading away at speed into the
blue cone) with teacher actions teaches nothing useful. `teacher_recovers` restores a
`CarTaskEnv.get_state()` snapshot and lets the privileged teacher drive the rest of
the 10 s window, without rendering. The continuation starts with a fresh teacher (it
plans from the restored state, as `realsim.dagger` relabels) and, unless `seed` is
given, continues the snapshot's own noise streams: the same snapshot always gets the
same verdict.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from realsim.robots.rc_car.params import CarParams
from realsim.robots.rc_car.task import Scene
from teacher.pure_pursuit import PurePursuitTeacher

if TYPE_CHECKING:
    from realsim.robots.rc_car.scene import CarTaskEnv


def gate_env(control_hz: float = 50.0, residual: Any = None) -> CarTaskEnv:
    """A camera-free `CarTaskEnv` to pass as `teacher_recovers(..., env=)` for many checks.

    Reusing one saves rebuilding the MuJoCo model per check: `set_state` rebuilds only
    when the snapshot comes from another episode (another draw or scene). control_hz and
    residual must match the environment the snapshots come from."""
    from realsim.randomization import Randomization
    from realsim.robots.rc_car.scene import CarTaskEnv

    return CarTaskEnv(
        randomization=Randomization.none(), render=False, control_hz=control_hz, residual=residual
    )


def teacher_recovers(
    env_state: dict[str, Any],
    scene: Scene | None = None,
    params: CarParams | None = None,
    seed: int | None = None,
    env: CarTaskEnv | None = None,
) -> bool:
    """True if the teacher, started from `env_state`, succeeds before the time limit.

    env_state: `CarTaskEnv.get_state()` (physics, actuation queue, judge, draw, scene).
    scene: override the state's cone layout (None: the state's own).
    params: physics to continue with (None: the state's episode's).
    seed: reseeds the continuation's action noise (None: continue the state's stream).
    env: a camera-free environment to run the continuation in (`gate_env()`; reused and
        left open); None: a fresh one, closed afterwards.
    """
    state = dict(env_state)
    if scene is not None:
        state["scene"] = scene
    own = env is None
    run = gate_env() if env is None else env
    try:
        run.set_state(state, params=params)
        if seed is not None:
            run.rng = np.random.default_rng(seed)
        teacher = PurePursuitTeacher()
        while not run.done:
            run.step(teacher.act(run.privileged()))
        success, _ = run.verdict()
    finally:
        if own:
            run.close()
    return bool(success)

"""realsim/robots/rc_car: the reference 1/16 RC car (spec: rc_car.md).

- `constants`: every MJCF name used in code, geometry, fixed physical constants.
- `params`: the uncertain quantities (`PARAMS`, `CarParams`).
- `model`: `build_spec` / `build_model` / `attach_car` (car.xml + MjSpec edits).
- `actuation`: latency, watchdog, ESC, steering map (numpy, per physics step).
- `sim`: `replay_batch` (open loop, batched `mujoco.rollout`), `CarSim` (closed loop).
- `task` (separate): the reach-the-cone task rules.
"""

from __future__ import annotations

from realsim.robots.rc_car.model import attach_car, build_model, build_spec
from realsim.robots.rc_car.params import PARAMS, CarParams, ParamSpec
from realsim.robots.rc_car.sim import CarSim, ReplayInput, replay, replay_batch

__all__ = [
    "PARAMS",
    "CarParams",
    "CarSim",
    "ParamSpec",
    "ReplayInput",
    "attach_car",
    "build_model",
    "build_spec",
    "replay",
    "replay_batch",
]

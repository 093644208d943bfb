"""realsim/robots/arm: the reference desktop arm, SO-101 class (spec: arm.md).

- `constants`: every MJCF name used in code, geometry, fixed physical constants.
- `params`: the uncertain quantities (`PARAMS`, `ArmParams`).
- `model`: `build_spec` / `build_model` (arm.xml + MjSpec edits), `ArmLayout`.
- `sim`: `replay_batch` (open loop, batched `mujoco.rollout`), `ArmSim` (closed loop).
- `task`: cube/target sampling and the success rule; `scene`: `ArmTaskEnv`.
- `excite`: excitation channel limits for system identification.
"""

from __future__ import annotations

import os

# headless offscreen rendering (scene.py); must be set before mujoco is first imported
os.environ.setdefault("MUJOCO_GL", "egl")

from realsim.robots.arm.model import build_model, build_spec  # noqa: E402
from realsim.robots.arm.params import PARAMS, ArmParams  # noqa: E402

__all__ = ["PARAMS", "ArmParams", "build_model", "build_spec"]

"""The RC car's `RobotTeach` adapter for `teacher.generate` (the reach-the-cone task).

Per episode, privileged/ holds: pose (M, 3) (x, y, yaw), velocity (M, 3) (v_forward,
v_left, yaw_rate), qpos (M, nq), qvel (M, nv) on the sensor times; cone_xy (2,),
distractor_xy (2,) (NaN if none); randomization (K,) with randomization_names (K,)
(`realsim.randomization.Draw.flat`). One camera, "front".
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from realsim.errors import UserError
from realsim.robots.rc_car import constants as C

if TYPE_CHECKING:
    from teacher.generate import TeachConfig


@dataclass(frozen=True)
class CarTeach:
    """`teacher.generate.RobotTeach` for the rc_car (see the protocol for each member)."""

    robot: str = "rc_car"
    cameras: tuple[str, ...] = ("front",)
    action_dim: int = 2  # [steer, throttle]
    sensor_fields: tuple[str, ...] = C.SENSOR_FIELDS
    control_hz: float = 50.0  # the car's command rate (rc_car.md: 20-50 Hz)
    camera_fps: float = 20.0  # the car's camera (about 20 frames/s)

    def randomization(self, data: dict[str, Any] | None) -> dict[str, Any]:
        from realsim.randomization import Randomization

        return Randomization.from_dict(data).to_dict()

    def load_params(self, path: str) -> dict[str, Any]:
        from realsim.robots.rc_car.params import CarParams

        if not Path(path).is_file():
            raise UserError(f"no such file: {path}")
        return CarParams.from_yaml(path).to_dict()

    def load_randomization(self, path: str) -> dict[str, Any]:
        from realsim.randomization import Randomization

        return Randomization.from_yaml(path).to_dict()

    def check_residual(self, path: str) -> str:
        from realsim.residual import load_residual

        p = Path(path)
        if not p.is_file():
            raise UserError(f"no such file: {path}")
        load_residual(p, self.robot)
        return str(p.resolve())

    def make_env(self, cfg: TeachConfig) -> Any:
        from realsim.randomization import Randomization
        from realsim.robots.rc_car.params import CarParams
        from realsim.robots.rc_car.scene import CarTaskEnv

        return CarTaskEnv(
            params=CarParams.from_dict(cfg.params) if cfg.params is not None else None,
            randomization=Randomization.from_dict(cfg.randomization),
            image_size=cfg.image_size,
            control_hz=cfg.control_hz,
            camera_fps=cfg.camera_fps,
            residual=cfg.residual,  # loaded here, once per worker process
        )

    def teacher_options(self, pairs: Sequence[str]) -> tuple[tuple[str, Any], ...]:
        if pairs:
            raise UserError("teach rc_car: the pure-pursuit teacher takes no --teacher options")
        return ()

    def make_teacher(self, env: Any, seed: int = 0,
                     options: Sequence[tuple[str, Any]] = ()) -> Any:
        from teacher.pure_pursuit import PurePursuitTeacher

        return PurePursuitTeacher()

    def frames(self, obs: Any) -> Iterable[tuple[str, float, bytes]]:
        if obs.frame_jpeg is not None:
            yield "front", obs.frame_t, obs.frame_jpeg

    def series(self, priv: dict[str, Any]) -> dict[str, Any]:
        return {k: priv[k] for k in ("pose", "velocity", "qpos", "qvel")}

    def static(self, env: Any) -> dict[str, np.ndarray]:
        scene = env.scene
        dxy = scene.distractor_xy if scene.distractor_xy is not None else (np.nan, np.nan)
        return {
            "cone_xy": np.asarray(scene.cone_xy, dtype=np.float64),
            "distractor_xy": np.asarray(dxy, dtype=np.float64),
        }

    def draw_flat(self, env: Any) -> dict[str, float]:
        return env.draw.flat()


CAR = CarTeach()

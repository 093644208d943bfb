"""What sysid needs to know about a robot, behind one small interface.

``get_adapter(robot)`` returns a :class:`RobotAdapter`: the uncertain
parameter table, a batched open-loop replay (``mujoco.rollout`` underneath),
how to turn a logged episode (or a window of it) into a replay input, and
which fitted signals to compare. The arm plugs in here later with its own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from realsim.errors import UserError
from realsim.robots import check_robot


class ParamLike(Protocol):
    """The fields of a parameter-table row sysid reads."""

    name: str
    nominal: float
    low: float
    high: float
    unit: str


ReplayFn = Callable[[Sequence[Mapping[str, float]], Sequence[Any], int],
                    list[list[dict[str, np.ndarray]]]]


@dataclass
class RobotAdapter:
    """One robot as sysid sees it.

    ``make_input(cmd_t, cmd_action, sensor_t, sensors, t0, init)`` builds the replay
    input of one episode window (sensor_t (M,) are the samples in the window,
    sensors the logged fields on them); ``estimate_init(signals, i)`` guesses the
    state at sample i from processed logged signals (None: start at rest).
    """

    robot: str
    parameters: tuple[ParamLike, ...]
    replay_batch: ReplayFn
    make_input: Callable[..., Any]
    estimate_init: Callable[[Mapping[str, np.ndarray], int], Mapping[str, float] | None]
    required_fields: tuple[str, ...]
    backend: str  # which simulator the replay runs
    load_params: Callable[[str], dict[str, float]]  # parameter file -> values; UserError names the file
    # parameters that only add a constant to one compared signal (sensor biases): their
    # Jacobian column is known without simulating (param name -> signal name)
    offsets: Mapping[str, str] = field(default_factory=dict)

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.parameters]

    @property
    def nominal(self) -> dict[str, float]:
        return {p.name: float(p.nominal) for p in self.parameters}

    def spec(self, name: str) -> ParamLike:
        for p in self.parameters:
            if p.name == name:
                return p
        raise KeyError(name)


def _rc_car() -> RobotAdapter:
    """The RC car through ``realsim.robots.rc_car`` (params, sim.replay_batch)."""
    from realsim.robots.rc_car import constants as C
    from realsim.robots.rc_car import sim
    from realsim.robots.rc_car.actuation import initial_steer
    from realsim.robots.rc_car.model import cached_model
    from realsim.robots.rc_car.params import PARAMS, CarParams

    def replay(params_list: Sequence[Mapping[str, float]], inputs: Sequence[Any],
               nthread: int = 2) -> list[list[dict[str, np.ndarray]]]:
        cps = [p if isinstance(p, CarParams) else CarParams(dict(p), strict=False) for p in params_list]
        return sim.replay_batch(cps, inputs, nthread)

    def make_input(cmd_t: np.ndarray, cmd_action: np.ndarray, sensor_t: np.ndarray,
                   sensors: Mapping[str, np.ndarray], t0: float = 0.0,
                   init: Mapping[str, float] | None = None) -> Any:
        q = v = None
        if init:  # moving window start: nominal rest pose, estimated velocities, steering held
            nom = CarParams()
            model = cached_model(nom)
            q, v = sim.rest_state(model, nom.spec_key())
            speed = init["speed"]
            v[0], v[5] = speed, init["yaw_rate"]
            for j in C.WHEEL_JOINTS:
                v[model.joint(j).dofadr[0]] = speed / C.WHEEL_RADIUS
            for j, a in zip(C.STEER_JOINTS, initial_steer(cmd_t, cmd_action, nom, t0), strict=True):
                q[model.joint(j).qposadr[0]] = a
        return sim.ReplayInput(command_t=cmd_t, action=cmd_action, sensor_t=sensor_t,
                               vbat=np.asarray(sensors["vbat"], float),
                               enc0=float(sensors["enc_rad"][0]), initial_qpos=q, initial_qvel=v)

    def estimate_init(sig: Mapping[str, np.ndarray], i: int) -> Mapping[str, float] | None:
        return {"speed": float(sig["wheel_speed"][i]) * C.WHEEL_RADIUS,
                "yaw_rate": float(sig["yaw_rate"][i])}

    def load_params(path: str) -> dict[str, float]:
        if not Path(path).is_file():
            raise UserError(f"no such parameter file: {path}")
        return dict(CarParams.from_yaml(Path(path), strict=False))

    return RobotAdapter("rc_car", tuple(PARAMS), replay, make_input, estimate_init,
                        ("enc_rad", "yaw_rate", "accel", "vbat"), "rc_car.sim", load_params,
                        {"gyro_bias": "yaw_rate", "accel_bias_x": "accel_x", "accel_bias_y": "accel_y"})


def get_adapter(robot: str) -> RobotAdapter:
    """The adapter for ``robot``; one-line UserError for robots sysid cannot fit yet."""
    check_robot(robot)
    if robot == "rc_car":
        return _rc_car()
    raise UserError(f"fit/replay {robot}: no system identification for this robot yet (issue 7)")

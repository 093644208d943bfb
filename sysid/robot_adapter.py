"""What sysid needs to know about a robot, behind one small interface.

``get_adapter(robot)`` returns a :class:`RobotAdapter`: the uncertain
parameter table, a batched open-loop replay (``mujoco.rollout`` underneath),
how to turn a logged episode (or a window of it) into a replay input, which
signals to compare (names, the function computing them from raw sensor fields,
scale floors, weights, units) and which sensor fields a replay writes. The car
(``_rc_car``) and the arm (``_arm``) each fill one in; nothing else in sysid
knows which robot it fits.
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
# (t (M,), raw sensor fields on t) -> compared signals, each (M,)
SignalsFn = Callable[[np.ndarray, Mapping[str, np.ndarray]], dict[str, np.ndarray]]
# (simulated fields of one episode, the logged episode's sensors group) -> fields to write
ReplayFieldsFn = Callable[[Mapping[str, np.ndarray], Any], dict[str, np.ndarray]]


def _unset(*_: Any) -> Any:
    raise NotImplementedError("this RobotAdapter does not define it")


@dataclass
class RobotAdapter:
    """One robot as sysid sees it.

    ``make_input(cmd_t, cmd_action, sensor_t, sensors, t0, init)`` builds the replay
    input of one episode window (sensor_t (M,) are the samples in the window,
    sensors the logged fields on them); ``estimate_init(signals, i)`` guesses the
    state at sample i from processed logged signals (None: start at rest).

    Compared signals: ``signals`` names them (the residual's row order);
    ``signals_of(t, fields)`` computes them (each (M,)) from raw sensor fields on t (M,),
    logged or simulated alike; ``scale_floor`` and ``weight`` per signal set the
    normalisation (std over the training logs, floored) and the weight in the error;
    ``unsteadiness(signals)`` (M,) is least where a window is best started from an
    estimate. ``optional_fields`` are loaded when a log has them (and compared only
    then); ``replay_fields(sim, src_sensors)`` are the fields `realsim replay` writes;
    ``headline`` the signals `realsim fit` prints.
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
    signals: tuple[str, ...] = ()
    signals_of: SignalsFn = _unset
    scale_floor: Mapping[str, float] = field(default_factory=dict)
    weight: Mapping[str, float] = field(default_factory=dict)
    units: Mapping[str, str] = field(default_factory=dict)
    unsteadiness: Callable[[Mapping[str, np.ndarray]], np.ndarray] = _unset
    optional_fields: tuple[str, ...] = ()
    replay_fields: ReplayFieldsFn = _unset
    headline: tuple[str, ...] = ()

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

    def unsteadiness(sig: Mapping[str, np.ndarray]) -> np.ndarray:
        return np.abs(sig["accel_x"]) + np.abs(sig["accel_y"])  # steady: least |accel|

    def replay_fields(out: Mapping[str, np.ndarray], src: Any) -> dict[str, np.ndarray]:
        extra = {k: src[k] for k in ("ack", "flags") if k in src}  # not simulated: copied
        return {"enc_rad": out["enc_rad"], "yaw_rate": out["yaw_rate"], "accel": out["accel"],
                "vbat": out["vbat"], **extra}

    from sysid import data as D  # the car's compared signals (kept there for dynamics/, cycle)

    return RobotAdapter("rc_car", tuple(PARAMS), replay, make_input, estimate_init,
                        ("enc_rad", "yaw_rate", "accel", "vbat"), "rc_car.sim", load_params,
                        {"gyro_bias": "yaw_rate", "accel_bias_x": "accel_x", "accel_bias_y": "accel_y"},
                        signals=D.SIGNALS, signals_of=D.signals_of, scale_floor=D.SCALE_FLOOR,
                        weight=D.WEIGHT, units=D.UNITS, unsteadiness=unsteadiness,
                        replay_fields=replay_fields, headline=("yaw_rate", "wheel_speed"))


# ------------------------------------------------------------------------------- the arm
ARM_Q_FLOOR, ARM_V_FLOOR = 0.02, 0.1  # rad, rad/s (the gripper: / 10, in m and m/s)
ARM_V_WEIGHT = 0.3  # velocities are noisier (servo speed registers, differences) than angles


def arm_signals_of(t: np.ndarray, out: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The arm's compared signals: per joint its position ``q_<joint>`` (the reading as
    logged, rad / m) and velocity ``v_<joint>`` (``qvel`` when given, else the centred
    difference of ``qpos``; smoothed like the car's signals).

    Shapes: t (M,), out["qpos"] (M, 6), out["qvel"] (M, 6) optional -> each (M,).
    """
    from realsim.robots.arm import constants as AC
    from sysid.data import _smooth

    n = len(t)
    q = np.asarray(out["qpos"], float).reshape(n, AC.NJ)
    if "qvel" in out:
        v = np.asarray(out["qvel"], float).reshape(n, AC.NJ)
    elif n > 1:
        tt = np.asarray(t, float)
        lo, hi = np.clip(np.arange(n) - 1, 0, n - 1), np.clip(np.arange(n) + 1, 0, n - 1)
        period = max(float(np.median(np.diff(tt))), 1e-3)
        dt = np.maximum(tt[hi] - tt[lo], 0.5 * (hi - lo) * period)
        v = (q[hi] - q[lo]) / np.maximum(dt, 1e-6)[:, None]
    else:
        v = np.zeros_like(q)
    sig = {f"q_{j}": q[:, i].copy() for i, j in enumerate(AC.JOINTS)}
    sig |= {f"v_{j}": _smooth(v[:, i]) for i, j in enumerate(AC.JOINTS)}
    return sig


def _arm() -> RobotAdapter:
    """The arm through ``realsim.robots.arm`` (ArmParams, sim.replay_batch on mujoco.rollout).

    Whole episodes start at rest in the first logged reading (cli.md); windows start in the
    reading at their first sample moving at the logged joint velocities (``qvel0``).
    """
    from realsim.robots.arm import constants as AC
    from realsim.robots.arm import sim
    from realsim.robots.arm.params import PARAMS, ArmParams

    joints = AC.JOINTS

    def replay(params_list: Sequence[Mapping[str, float]], inputs: Sequence[Any],
               nthread: int = 2) -> list[list[dict[str, np.ndarray]]]:
        aps = [p if isinstance(p, ArmParams) else ArmParams(dict(p), strict=False) for p in params_list]
        return sim.replay_batch(aps, inputs, nthread)

    def make_input(cmd_t: np.ndarray, cmd_action: np.ndarray, sensor_t: np.ndarray,
                   sensors: Mapping[str, np.ndarray], t0: float = 0.0,
                   init: Mapping[str, float] | None = None) -> Any:
        temp = sensors.get("temperature")
        q0 = np.asarray(sensors["qpos"], float).reshape(-1, AC.NJ)[0]
        v0 = None
        if init:
            q0 = np.array([init[f"q_{j}"] for j in joints])
            v0 = np.array([init[f"v_{j}"] for j in joints])
        return sim.ReplayInput(command_t=cmd_t, action=cmd_action, sensor_t=sensor_t, qpos0=q0,
                               voltage=sensors.get("voltage"),
                               temperature0=None if temp is None else np.asarray(temp, float)[0],
                               qvel0=v0)

    def estimate_init(sig: Mapping[str, np.ndarray], i: int) -> Mapping[str, float] | None:
        return {f"{k}_{j}": float(sig[f"{k}_{j}"][i]) for k in ("q", "v") for j in joints}

    def unsteadiness(sig: Mapping[str, np.ndarray]) -> np.ndarray:
        return np.sum([np.abs(sig[f"v_{j}"]) for j in AC.ARM_JOINTS], axis=0)

    def load_params(path: str) -> dict[str, float]:
        if not Path(path).is_file():
            raise UserError(f"no such parameter file: {path}")
        return dict(ArmParams.from_yaml(Path(path), strict=False))

    def replay_fields(out: Mapping[str, np.ndarray], src: Any) -> dict[str, np.ndarray]:
        return {k: np.asarray(out[k]) for k in ("qpos", "qvel", "load", "voltage", "temperature")}

    sigs = tuple(f"{k}_{j}" for k in ("q", "v") for j in joints)
    grip = {f"q_{joints[-1]}", f"v_{joints[-1]}"}
    floor = {s: (ARM_Q_FLOOR if s.startswith("q_") else ARM_V_FLOOR) * (0.1 if s in grip else 1.0)
             for s in sigs}
    weight = {s: 1.0 if s.startswith("q_") else ARM_V_WEIGHT for s in sigs}
    units = {s: ("m" if s in grip else "rad") + ("" if s.startswith("q_") else "/s") for s in sigs}
    return RobotAdapter("arm", tuple(PARAMS), replay, make_input, estimate_init, ("qpos",),
                        "arm.sim", load_params, {}, signals=sigs, signals_of=arm_signals_of,
                        scale_floor=floor, weight=weight, units=units, unsteadiness=unsteadiness,
                        optional_fields=("qvel", "voltage", "temperature"),
                        replay_fields=replay_fields,
                        headline=tuple(f"q_{j}" for j in AC.ARM_JOINTS))


def get_adapter(robot: str) -> RobotAdapter:
    """The adapter for ``robot``; one-line UserError for robots sysid cannot fit yet."""
    check_robot(robot)
    if robot == "rc_car":
        return _rc_car()
    if robot == "arm":
        return _arm()
    raise UserError(f"fit/replay {robot}: no system identification for this robot yet")

"""Simulating the arm: batched open-loop replay (`replay_batch`) and closed loop (`ArmSim`).

The command path (arm.md: goals per joint, clamped to the limits by the servo): an action
a in [-1, 1] per joint (log_format.md) is the goal lo + (a + 1) (hi - lo) / 2; a goal
sent at host time t acts at t + latency; before the first command the servos hold the
pose the episode starts in. Each physics step's goal is the exact time average of that
piecewise-constant signal over the step (results vary continuously with latency). It
depends on commands and parameters only, so for replay it is computed in numpy for a
whole episode (`goal_sequence`) and the physics runs entirely in `mujoco.rollout`.

Sensor outputs (log_format.md, arm): qpos (M, 6) output angles (rad) and jaw opening (m);
qvel (M, 6); load (M, 6) actuator force / its limit, signed (positive pushes the joint
positive); voltage (M,) V (replay: the logged one; ArmSim: V_SUPPLY sagging with load);
temperature (M, 6) deg C (a first-order thermal model driven by load^2, from the first
logged value). Replay outputs are noise-free; `ArmSim` adds reading noise.
"""

from __future__ import annotations

import atexit
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import mujoco
import numpy as np
from mujoco import rollout as mj_rollout
from scipy.signal import lfilter

from realsim.logs.resample import step_average
from realsim.robots.arm import constants as C
from realsim.robots.arm.model import ArmLayout, build_spec, cached_model, max_force, rest_qpos
from realsim.robots.arm.params import ArmParams

_FULL = mujoco.mjtState.mjSTATE_FULLPHYSICS
_CTRL = mujoco.mjtState.mjSTATE_CTRL
LO = np.array(C.LIMITS_LO)
HI = np.array(C.LIMITS_HI)


# ---------------------------------------------------------------------------------------
# the command path
# ---------------------------------------------------------------------------------------
def action_to_goal(action: np.ndarray) -> np.ndarray:
    """Normalised actions (..., 6) in [-1, 1] -> goals (rad, gripper m), clipped to limits."""
    a = np.clip(np.asarray(action, dtype=np.float64), -1.0, 1.0)
    return LO + 0.5 * (a + 1.0) * (HI - LO)


def goal_to_action(goal: np.ndarray) -> np.ndarray:
    """Goals (..., 6) -> normalised actions in [-1, 1] (log_format.md, arm)."""
    g = np.asarray(goal, dtype=np.float64)
    return np.clip(2.0 * (g - LO) / (HI - LO) - 1.0, -1.0, 1.0)


def goal_sequence(
    command_t: np.ndarray,
    action: np.ndarray,
    params: Mapping[str, float],
    hold: np.ndarray,
    t0: float,
    nstep: int,
    dt: float = C.TIMESTEP,
) -> np.ndarray:
    """Per-physics-step goals for an open-loop replay.

    command_t (N,) host send times (s), action (N, 6); hold (6,) the goals before the
    first command acts; physics step k spans [t0 + k dt, t0 + (k+1) dt].
    Returns Shape: (nstep, 6) in actuator order.
    """
    t = np.asarray(command_t, dtype=np.float64).reshape(-1) + params["latency"]
    goals = action_to_goal(np.asarray(action).reshape(-1, C.NJ))
    order = np.argsort(t, kind="stable")
    grid = t0 + dt * np.arange(nstep + 1)
    return step_average(t[order], goals[order], np.asarray(hold, dtype=np.float64), grid)


class GoalStream:
    """The same command path, one command at a time (closed-loop simulation).

    `push(t_send, action)` queues a command (times must not decrease); `average(t, dt)` is
    the goal mean over [t, t + dt]. Shape: (6,).
    """

    def __init__(self, params: Mapping[str, float], hold: np.ndarray) -> None:
        self.latency = float(params["latency"])
        self.hold = np.asarray(hold, dtype=np.float64).copy()
        self._t: list[float] = []
        self._v: list[np.ndarray] = []

    def push(self, t_send: float, action: np.ndarray) -> None:
        """Queue a command sent at `t_send` (s); it acts at t_send + latency."""
        tau = float(t_send) + self.latency
        if self._t and tau < self._t[-1]:
            raise ValueError("commands must be pushed in time order")
        self._t.append(tau)
        self._v.append(action_to_goal(np.asarray(action, dtype=np.float64).reshape(C.NJ)))

    def prune(self, t: float) -> None:
        """Forget commands superseded before time t (keeps memory bounded)."""
        j = int(np.searchsorted(self._t, t, side="right")) - 1
        if j > 0:
            self.hold = self._v[j - 1]
            del self._t[:j]
            del self._v[:j]

    def value(self, s: float) -> np.ndarray:
        """Goal at time s. Shape: (6,)."""
        j = int(np.searchsorted(self._t, s, side="right")) - 1
        return self.hold if j < 0 else self._v[j]

    def average(self, t: float, dt: float) -> np.ndarray:
        """Exact mean over [t, t + dt] of the piecewise-constant goal. Shape: (6,)."""
        end = t + dt
        cuts = sorted([t] + [c for c in self._t if t < c < end]) + [end]
        acc = np.zeros(C.NJ)
        for a, b in zip(cuts[:-1], cuts[1:], strict=True):
            if b > a:
                acc += self.value(0.5 * (a + b)) * (b - a)
        return acc / dt


# ---------------------------------------------------------------------------------------
# inputs and the initial state
# ---------------------------------------------------------------------------------------
@dataclass
class ReplayInput:
    """One episode (or window of one) to replay open loop.

    command_t: Shape: (N,) host send times of the goals, s since episode start.
    action: Shape: (N, 6) normalised goals in [-1, 1] (log_format.md, arm).
    sensor_t: Shape: (M,) times to output sensor samples at (the log's sensors/t); the
        simulation starts at sensor_t[0] with the arm at rest in `qpos0`.
    qpos0: Shape: (6,) the first logged reading (rad, gripper m).
    voltage: Shape: (M,) logged supply voltage (V), copied to the output.
    temperature0: Shape: (6,) first logged temperatures (deg C); default T_AMBIENT.
    initial_qpos, initial_qvel: Shape: (nq,), (nv,) full MuJoCo state to start from
        (windows started mid-episode); then `initial_hold` (6,) are the goals acting
        before the first command (default: the motor angles).
    qvel0: Shape: (6,) joint velocities (rad/s, gripper m/s) to start with, in the pose
        `qpos0` (windows started mid-motion from a logged reading); default at rest.
    """

    command_t: np.ndarray
    action: np.ndarray
    sensor_t: np.ndarray
    qpos0: np.ndarray
    voltage: np.ndarray | None = None
    temperature0: np.ndarray | None = None
    initial_qpos: np.ndarray | None = None
    initial_qvel: np.ndarray | None = None
    initial_hold: np.ndarray | None = None
    qvel0: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.command_t = np.asarray(self.command_t, dtype=np.float64).reshape(-1)
        self.action = np.asarray(self.action, dtype=np.float64).reshape(-1, C.NJ)
        self.sensor_t = np.asarray(self.sensor_t, dtype=np.float64).reshape(-1)
        self.qpos0 = np.asarray(self.qpos0, dtype=np.float64).reshape(C.NJ)
        if self.voltage is None:
            self.voltage = np.full(len(self.sensor_t), C.V_SUPPLY)
        self.voltage = np.asarray(self.voltage, dtype=np.float64).reshape(-1)
        if self.temperature0 is None:
            self.temperature0 = np.full(C.NJ, C.T_AMBIENT)
        self.temperature0 = np.asarray(self.temperature0, dtype=np.float64).reshape(C.NJ)
        if len(self.command_t) != len(self.action):
            raise ValueError(f"command_t {self.command_t.shape} vs action {self.action.shape}")
        if len(self.sensor_t) < 1 or len(self.voltage) != len(self.sensor_t):
            raise ValueError(f"sensor_t {self.sensor_t.shape} vs voltage {self.voltage.shape}")
        if np.any(np.diff(self.sensor_t) < 0):
            raise ValueError("sensor_t must not decrease")

    @classmethod
    def from_log(
        cls, command: Mapping[str, np.ndarray], sensors: Mapping[str, np.ndarray]
    ) -> ReplayInput:
        """From an episode's `command/*` and `sensors/*` datasets (log_format.md names)."""
        qpos = np.asarray(sensors["qpos"], dtype=np.float64)
        temp = sensors.get("temperature")
        return cls(
            command_t=command["t"],
            action=command["action"],
            sensor_t=sensors["t"],
            qpos0=qpos[0],
            voltage=sensors.get("voltage"),
            temperature0=None if temp is None or len(temp) == 0 else np.asarray(temp)[0],
        )

    @property
    def nstep(self) -> int:
        """Physics steps needed so that step-start times cover the last sensor time."""
        span = float(self.sensor_t[-1] - self.sensor_t[0])
        return int(math.floor(span / C.TIMESTEP + 1e-9)) + 2


def initial_state(
    model: mujoco.MjModel, params: ArmParams, ep: ReplayInput
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(qpos (nq,), qvel (nv,), hold goals (6,)) a replay starts from."""
    if ep.initial_qpos is not None:
        q = np.asarray(ep.initial_qpos, dtype=np.float64).copy()
        v = (
            np.zeros(model.nv)
            if ep.initial_qvel is None
            else np.asarray(ep.initial_qvel, dtype=np.float64).copy()
        )
        if ep.initial_hold is not None:
            hold = np.asarray(ep.initial_hold, dtype=np.float64).copy()
        else:
            lay = ArmLayout(model)
            hold = np.r_[q[lay.motor_q], q[lay.finger_q].sum()]
        return q, v, hold
    q, hold = rest_qpos(model, params, ep.qpos0)
    v = np.zeros(model.nv)
    if ep.qvel0 is not None:  # moving start: the motor hinges (and both fingers) at speed
        lay = ArmLayout(model)
        w = np.asarray(ep.qvel0, dtype=np.float64).reshape(C.NJ)
        v[lay.motor_v] = w[:5]
        v[lay.finger_v] = 0.5 * w[5]
    return q, v, hold


def full_state(
    model: mujoco.MjModel, data: mujoco.MjData, q: np.ndarray, v: np.ndarray, t: float
) -> np.ndarray:
    """FULLPHYSICS state vector of (qpos, qvel, time) with everything else reset."""
    mujoco.mj_resetData(model, data)
    data.qpos[:] = q
    data.qvel[:] = v
    data.time = t
    out = np.empty(mujoco.mj_stateSize(model, _FULL))
    mujoco.mj_getState(model, data, out, _FULL)
    return out


# ---------------------------------------------------------------------------------------
# sensors
# ---------------------------------------------------------------------------------------
def temperature_series(load: np.ndarray, t_start: np.ndarray, dt: float) -> np.ndarray:
    """First-order servo temperatures driven by load^2.

    T_{k+1} = T0 + a (T_k - T0) + (1 - a) THERMAL_RISE load_k^2, a = exp(-dt / tau).
    load: Shape: (K, 6) per step; t_start: Shape: (6,). Returns Shape: (K, 6): row k is
    the temperature at the start of step k.
    """
    a = math.exp(-dt / C.THERMAL_TAU)
    x = (1 - a) * C.THERMAL_RISE * np.asarray(load) ** 2
    rise = lfilter([0.0, 1.0], [1.0, -a], x, axis=0)  # rise_k = sum_{i<k} a^(k-1-i) x_i
    return t_start[None, :] + rise


def sensors_on_times(
    sens: np.ndarray, t0: float, ep: ReplayInput, params: ArmParams
) -> dict[str, np.ndarray]:
    """Per-step sensordata -> the log's arm fields on ep.sensor_t.

    sens: Shape: (K, NSENSOR), row k = sensors of the state at t0 + k * TIMESTEP.
    """
    grid = t0 + C.TIMESTEP * np.arange(sens.shape[0])
    st = ep.sensor_t
    load_steps = sens[:, C.FRC_SLICE] / max_force(params)[None, :]
    temp_steps = temperature_series(load_steps, ep.temperature0, C.TIMESTEP)

    def at(x: np.ndarray) -> np.ndarray:
        return np.stack([np.interp(st, grid, x[:, i]) for i in range(x.shape[1])], axis=1)

    return {
        "qpos": at(sens[:, C.POS_SLICE]),
        "qvel": at(sens[:, C.VEL_SLICE]),
        "load": at(load_steps),
        "voltage": np.asarray(ep.voltage, dtype=np.float64).copy(),
        "temperature": at(temp_steps),
    }


# ---------------------------------------------------------------------------------------
# batched replay
# ---------------------------------------------------------------------------------------
_POOLS: dict[int, mj_rollout.Rollout] = {}
_MAX_SENSOR_DOUBLES = 2e7  # per rollout call (160 MB of sensordata); larger batches split


def _pool(nthread: int) -> mj_rollout.Rollout:
    if nthread not in _POOLS:
        _POOLS[nthread] = mj_rollout.Rollout(nthread=nthread if nthread > 1 else 0)
    return _POOLS[nthread]


@atexit.register
def _close_pools() -> None:
    for p in _POOLS.values():
        p.close()
    _POOLS.clear()


def rollout_controls(
    models: Sequence[mujoco.MjModel], init: np.ndarray, controls: np.ndarray, nthread: int = 2
) -> np.ndarray:
    """Raw batched physics: `mujoco.rollout` returning sensordata only.

    models: nbatch models of one structure; init: Shape: (nbatch, nstate) FULLPHYSICS
    states; controls: Shape: (nbatch, nstep, 6). Returns Shape: (nbatch, nstep, NSENSOR);
    row k = sensors of the state before step k.
    """
    nbatch, nstep, _ = controls.shape
    m0 = models[0]
    datas = [mujoco.MjData(m0) for _ in range(max(1, nthread))]
    sens = np.empty((nbatch, nstep, m0.nsensordata))
    _pool(nthread).rollout(
        list(models),
        datas,
        np.ascontiguousarray(init),
        np.ascontiguousarray(controls),
        control_spec=_CTRL.value,
        skip_checks=True,
        nstep=nstep,
        initial_warmstart=np.zeros((nbatch, m0.nv)),
        state=None,
        sensordata=sens,
        chunk_size=max(1, nbatch // (4 * max(1, nthread))),
    )
    return sens


def _buckets(lengths: Sequence[int], slack: float = 1.15) -> list[list[int]]:
    """Group episode indices of similar length (padding <= slack) to share a rollout call."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    groups: list[list[int]] = []
    for i in order:
        if groups and lengths[i] <= slack * lengths[groups[-1][0]]:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def replay_batch(
    params_list: Sequence[ArmParams], episodes: Sequence[ReplayInput], nthread: int = 2
) -> list[list[dict[str, np.ndarray]]]:
    """Open-loop replay of every episode under every parameter set, batched in C.

    Returns out[p][e]: the log's arm sensor fields (module doc) of episode e under
    params_list[p], on episodes[e].sensor_t. Episodes of similar length share one
    `mujoco.rollout` call over len(params_list) x len(group) trajectories.
    """
    P, E = len(params_list), len(episodes)
    out: list[list[dict[str, np.ndarray]]] = [[{} for _ in range(E)] for _ in range(P)]
    if P == 0 or E == 0:
        return out
    models = [cached_model(p) for p in params_list]
    data0 = mujoco.MjData(models[0])
    lengths = [ep.nstep for ep in episodes]
    for group in _buckets(lengths):
        kmax = max(lengths[e] for e in group)
        pairs = [(p, e) for p in range(P) for e in group]
        per_call = max(1, int(_MAX_SENSOR_DOUBLES // (kmax * C.NSENSOR)))
        for s in range(0, len(pairs), per_call):
            chunk = pairs[s : s + per_call]
            ctrl = np.empty((len(chunk), kmax, C.NU))
            init = np.empty((len(chunk), mujoco.mj_stateSize(models[0], _FULL)))
            for b, (p, e) in enumerate(chunk):
                ep, prm, k = episodes[e], params_list[p], lengths[e]
                t0 = float(ep.sensor_t[0])
                q, v, hold = initial_state(models[p], prm, ep)
                ctrl[b, :k] = goal_sequence(ep.command_t, ep.action, prm, hold, t0, k)
                ctrl[b, k:] = ctrl[b, k - 1]
                init[b] = full_state(models[p], data0, q, v, t0)
            sens = rollout_controls([models[p] for p, _ in chunk], init, ctrl, nthread)
            for b, (p, e) in enumerate(chunk):
                ep = episodes[e]
                out[p][e] = sensors_on_times(
                    sens[b, : lengths[e]], float(ep.sensor_t[0]), ep, params_list[p]
                )
    return out


def replay(
    params: ArmParams, episodes: Sequence[ReplayInput], nthread: int = 2
) -> list[dict[str, np.ndarray]]:
    """`replay_batch` for one parameter set: one sensor dict per episode."""
    return replay_batch([params], episodes, nthread)[0]


def replay_reference(params: ArmParams, ep: ReplayInput) -> dict[str, np.ndarray]:
    """Slow reference for `replay_batch`: mj_step in Python, goals streamed through
    `GoalStream` as a closed-loop sim would. Same outputs to float tolerance."""
    model = cached_model(params)
    data = mujoco.MjData(model)
    q, v, hold = initial_state(model, params, ep)
    t0 = float(ep.sensor_t[0])
    mujoco.mj_setState(model, data, full_state(model, data, q, v, t0), _FULL)
    data.qacc_warmstart[:] = 0.0
    stream = GoalStream(params, hold)
    order = np.argsort(ep.command_t, kind="stable")
    ct, ca = ep.command_t[order], ep.action[order]
    nxt, dt, K = 0, model.opt.timestep, ep.nstep
    sens = np.empty((K, model.nsensordata))
    for k in range(K):
        t = t0 + k * dt
        while nxt < len(ct) and ct[nxt] <= t + dt:
            stream.push(float(ct[nxt]), ca[nxt])
            nxt += 1
        data.ctrl[:] = stream.average(t, dt)
        mujoco.mj_step(model, data)
        sens[k] = data.sensordata
    return sensors_on_times(sens, t0, ep, params)


# ---------------------------------------------------------------------------------------
# closed loop
# ---------------------------------------------------------------------------------------
class ArmSim:
    """Closed-loop simulation of the arm (teachers, environments, emulators).

    `step(action, dt_control)` sends one goal command at the current time, advances the
    physics through the same command path as replay (latency, clamping, servos in
    MuJoCo) and returns one telemetry sample (the log's arm fields + "t"). Same seed, same
    actions -> same rollout. (`realsim.sim.HybridArmSim`: the same with a learned residual
    inside every physics step.)

    spec: optional scene from `model.build_spec(params)` with additions (it is compiled
    as given; its arm must carry the same params).
    """

    def __init__(
        self,
        params: ArmParams | None = None,
        *,
        spec: mujoco.MjSpec | None = None,
        noise: bool = True,
    ) -> None:
        self.params = params or ArmParams()
        self.model = (spec or build_spec(self.params)).compile()
        self.data = mujoco.MjData(self.model)
        self.layout = ArmLayout(self.model)
        self.noise = noise
        self._fmax = max_force(self.params)
        self._thermal_a = math.exp(-self.model.opt.timestep / C.THERMAL_TAU)
        self.reset()

    # --- episode ---------------------------------------------------------------------------
    def reset(
        self,
        seed: int | None = None,
        joints: Sequence[float] | np.ndarray = C.HOME,
        cube_pose: np.ndarray | None = None,
        target_xy: Sequence[float] | None = None,
        temperature: np.ndarray | float = C.T_AMBIENT,
    ) -> dict[str, Any]:
        """Arm at rest in servo reading `joints` (6,) holding it, cube at `cube_pose` (7,)
        (default parked off the workspace), target square centred at `target_xy`.
        Returns the first telemetry sample. `seed` drives the reading noise."""
        m, d, lay = self.model, self.data, self.layout
        self.rng = np.random.default_rng(seed)
        q, hold = rest_qpos(m, self.params, np.asarray(joints, dtype=np.float64), cube_pose)
        mujoco.mj_resetData(m, d)
        d.qpos[:] = q
        if target_xy is not None:
            d.mocap_pos[lay.target_mocap] = [float(target_xy[0]), float(target_xy[1]), 0.0]
        self.stream = GoalStream(self.params, hold)
        self.seq = -1
        self.temperature = np.broadcast_to(np.asarray(temperature, dtype=np.float64), (6,)).copy()
        self._t_base = self.temperature.copy()
        d.ctrl[:] = hold
        mujoco.mj_forward(m, d)
        return self._telemetry()

    def step(
        self, action: np.ndarray | Sequence[float], dt_control: float = 0.04
    ) -> dict[str, Any]:
        """Send `action` (6,) normalised goals now, run `dt_control` s (rounded to whole
        physics steps), return the telemetry sample at the end."""
        m, d = self.model, self.data
        self.seq += 1
        self.stream.push(float(d.time), np.asarray(action, dtype=np.float64))
        dt = m.opt.timestep
        n = max(1, int(round(dt_control / dt)))
        rise = (1 - self._thermal_a) * C.THERMAL_RISE
        for _ in range(n):
            d.ctrl[:] = self.stream.average(float(d.time), dt)
            self._before_physics_step()
            mujoco.mj_step(m, d)
            load = d.sensordata[C.FRC_SLICE] / self._fmax
            base = self._t_base
            self.temperature = base + self._thermal_a * (self.temperature - base) + rise * load**2
        self.stream.prune(float(d.time) - 1.0)
        return self._telemetry()

    def _before_physics_step(self) -> None:
        """Called before every mj_step, after the step's goals are in data.ctrl: nothing
        here; `realsim.sim.HybridArmSim` applies its learned residual."""

    def goal_now(self) -> np.ndarray:
        """The goals acting at the current time (rad, gripper m). Shape: (6,)."""
        return self.stream.value(float(self.data.time)).copy()

    # --- outputs ---------------------------------------------------------------------------
    def _telemetry(self) -> dict[str, Any]:
        """One telemetry sample (the log's arm fields and t) from the current state."""
        d = self.data
        sd = d.sensordata
        qpos = sd[C.POS_SLICE].copy()
        qvel = sd[C.VEL_SLICE].copy()
        load = sd[C.FRC_SLICE] / self._fmax
        if self.noise:
            qpos = qpos + C.QPOS_NOISE * self.rng.standard_normal(6) * np.r_[np.ones(5), 0.01]
            load = load + C.LOAD_NOISE * self.rng.standard_normal(6)
        voltage = C.V_SUPPLY - C.V_SAG * float(np.abs(sd[C.FRC_SLICE] / self._fmax).sum())
        return {
            "t": np.float64(d.time),
            "qpos": qpos,
            "qvel": qvel,
            "load": np.clip(load, -1.0, 1.0),
            "voltage": np.float64(voltage),
            "temperature": self.temperature.copy(),
        }

    # --- privileged state (teachers only) --------------------------------------------------
    @property
    def time(self) -> float:
        """Simulation time (s) since reset."""
        return float(self.data.time)

    def joints(self) -> np.ndarray:
        """Exact servo readings (output angles, opening). Shape: (6,)."""
        return self.layout.joint_qpos(self.data.qpos)

    def cube_pose(self) -> np.ndarray:
        """Cube position (3,) + quaternion (4,) (w, x, y, z). Shape: (7,)."""
        a = self.layout.cube_q
        return self.data.qpos[a : a + 7].copy()

    def cube_velocity(self) -> np.ndarray:
        """Cube linear (3,) then angular (3,) velocity (world, m/s, rad/s). Shape: (6,)."""
        a = self.layout.cube_v
        return self.data.qvel[a : a + 6].copy()

    def target_xy(self) -> np.ndarray:
        """Centre of the green square (m). Shape: (2,)."""
        return self.data.mocap_pos[self.layout.target_mocap, :2].copy()

    def cube_contacts(self) -> tuple[bool, bool, bool]:
        """(touching the left pad, the right pad, the table)."""
        lay, d = self.layout, self.data
        left = right = table = False
        for i in range(d.ncon):
            c = d.contact[i]
            g1, g2 = int(c.geom[0]), int(c.geom[1])
            if lay.cube_geom not in (g1, g2):
                continue
            other = g2 if g1 == lay.cube_geom else g1
            left |= other == lay.pad_geoms[0]
            right |= other == lay.pad_geoms[1]
            table |= other == lay.table_geom
        return left, right, table

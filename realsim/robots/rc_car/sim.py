"""Simulating the car: batched open-loop replay (`replay_batch`) and closed loop (`CarSim`).

`replay_batch` is what system identification calls many times: for every (parameter set,
episode) pair it re-applies the episode's recorded commands at their recorded times
(through the latency model) from the car at rest at the origin, and returns the simulated
sensor streams on the log's sensor timestamps. The command path is precomputed in numpy
(`actuation.control_sequence`), so the physics runs entirely in `mujoco.rollout`: C,
multithreaded, one MjModel per parameter set in the same batch.

`replay_reference` is the same replay as a plain Python step loop through the streaming
actuation `CarSim` uses; tests check the two agree.

Sensor outputs (log_format.md, rc_car): enc_rad (M,) rad, continuing from the episode's
first logged value; yaw_rate (M,) rad/s; accel (M, 2) m/s^2 (body x, y; gravity-free on
level ground); vbat (M,) V (replay: the logged one, which also fed the motor); ack (M,)
int64; flags (M,) int64. Replay outputs are noise-free expectations (biases applied);
`CarSim` adds noise.
"""

from __future__ import annotations

import atexit
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import mujoco
import numpy as np
from mujoco import rollout as mj_rollout

from realsim.robots.rc_car import constants as C
from realsim.robots.rc_car.actuation import (
    DUTY,
    StreamingActuation,
    control_sequence,
    initial_steer,
)
from realsim.robots.rc_car.model import build_spec, cached_model
from realsim.robots.rc_car.params import CarParams

_FULL = mujoco.mjtState.mjSTATE_FULLPHYSICS
_CTRL = mujoco.mjtState.mjSTATE_CTRL


# ---------------------------------------------------------------------------------------
# inputs and the initial state
# ---------------------------------------------------------------------------------------
@dataclass
class ReplayInput:
    """One episode (or window of one) to replay open loop.

    command_t: Shape: (N,) host send times of the commands, s since episode start.
    action: Shape: (N, 2) [steer, throttle] in [-1, 1].
    sensor_t: Shape: (M,) times to output sensor samples at (the log's sensors/t); the
        simulation starts at sensor_t[0], in `initial_qpos`/`initial_qvel` or else at rest
        at the origin (steering settled on the command acting then).
    vbat: Shape: (M,) logged battery voltage (V) on sensor_t; it feeds the motor.
    enc0: the first logged enc_rad (rad); the simulated encoder continues from it.
    command_seq: Shape: (N,) wire sequence numbers for `ack` (default 0..N-1).
    initial_qpos, initial_qvel: Shape: (nq,), (nv,) full MuJoCo state to start from
        (windows started mid-episode from a state estimate); None = at rest, origin.
    """

    command_t: np.ndarray
    action: np.ndarray
    sensor_t: np.ndarray
    vbat: np.ndarray
    enc0: float = 0.0
    command_seq: np.ndarray | None = None
    initial_qpos: np.ndarray | None = None
    initial_qvel: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.command_t = np.asarray(self.command_t, dtype=np.float64).reshape(-1)
        self.action = np.asarray(self.action, dtype=np.float64).reshape(-1, 2)
        self.sensor_t = np.asarray(self.sensor_t, dtype=np.float64).reshape(-1)
        self.vbat = np.asarray(self.vbat, dtype=np.float64).reshape(-1)
        if len(self.command_t) != len(self.action):
            raise ValueError(f"command_t {self.command_t.shape} vs action {self.action.shape}")
        if len(self.sensor_t) < 1 or len(self.vbat) != len(self.sensor_t):
            raise ValueError(f"sensor_t {self.sensor_t.shape} vs vbat {self.vbat.shape}")
        if np.any(np.diff(self.sensor_t) < 0):
            raise ValueError("sensor_t must not decrease")

    @classmethod
    def from_log(
        cls, command: Mapping[str, np.ndarray], sensors: Mapping[str, np.ndarray]
    ) -> ReplayInput:
        """From an episode's `command/*` and `sensors/*` datasets (log_format.md names)."""
        enc = np.asarray(sensors["enc_rad"], dtype=np.float64)
        return cls(
            command_t=command["t"],
            action=command["action"],
            sensor_t=sensors["t"],
            vbat=sensors["vbat"],
            enc0=float(enc[0]) if len(enc) else 0.0,
            command_seq=np.asarray(command["seq"]) if "seq" in command else None,
        )

    @property
    def nstep(self) -> int:
        """Physics steps needed so that step-start times cover the last sensor time."""
        span = float(self.sensor_t[-1] - self.sensor_t[0])
        return int(math.floor(span / C.TIMESTEP + 1e-9)) + 2


_REST_CACHE: dict[tuple[float, ...], tuple[np.ndarray, np.ndarray]] = {}


_SETTLE_S = 0.4  # s on the floor, braked, before a replay starts
_SETTLE_CTRL = (0.0, 0.0, 0.0, 1.0)


def _rest_from_settled(qpos: np.ndarray, nv: int) -> tuple[np.ndarray, np.ndarray]:
    """Settled qpos -> rest pose at the origin: x, y, yaw, joints and velocities zeroed."""
    q = qpos.copy()
    q[0:2] = 0.0
    w, x, y, z = q[3:7]  # remove the (tiny) yaw, keep the settled pitch and roll
    yaw = math.atan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z))
    res = np.zeros(4)
    mujoco.mju_mulQuat(res, np.array([math.cos(yaw / 2), 0.0, 0.0, -math.sin(yaw / 2)]), q[3:7])
    q[3:7] = res / np.linalg.norm(res)
    q[7:] = 0.0  # joints: wheels and steering
    return q, np.zeros(nv)


def rest_state(
    model: mujoco.MjModel, key: tuple[float, ...] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(qpos (nq,), qvel (nv,)) of the car settled on the floor at the origin, heading +x,
    wheel angles and steering zero. Cached by `key` (CarParams.spec_key())."""
    if key is not None and key in _REST_CACHE:
        q, v = _REST_CACHE[key]
        return q.copy(), v.copy()
    d = mujoco.MjData(model)
    mujoco.mj_resetData(model, d)
    d.ctrl[:] = _SETTLE_CTRL
    for _ in range(int(round(_SETTLE_S / model.opt.timestep))):
        mujoco.mj_step(model, d)
    q, v = _rest_from_settled(d.qpos, model.nv)
    if key is not None:
        _REST_CACHE[key] = (q.copy(), v.copy())
    return q, v


def settle_batch(
    models: Sequence[mujoco.MjModel], keys: Sequence[tuple[float, ...]], nthread: int = 2
) -> None:
    """Fill the rest-state cache for every uncached key with one batched rollout (same
    result as `rest_state`'s step loop)."""
    todo = {}
    for m, k in zip(models, keys, strict=True):
        if k not in _REST_CACHE and k not in todo:
            todo[k] = m
    if not todo:
        return
    ms = list(todo.values())
    d = mujoco.MjData(ms[0])
    init = np.stack([_full_state(m, d, _reset_qpos(m, d), np.zeros(m.nv), 0.0) for m in ms])
    nstep = int(round(_SETTLE_S / ms[0].opt.timestep))
    ctrl = np.broadcast_to(np.asarray(_SETTLE_CTRL), (len(ms), nstep, C.NU))
    nstate = init.shape[1]
    state = np.empty((len(ms), nstep, nstate))
    _pool(nthread).rollout(
        ms,
        [mujoco.MjData(ms[0]) for _ in range(max(1, nthread))],
        init,
        np.ascontiguousarray(ctrl),
        control_spec=_CTRL.value,
        skip_checks=True,
        nstep=nstep,
        initial_warmstart=np.zeros((len(ms), ms[0].nv)),
        state=state,
        sensordata=np.empty((len(ms), nstep, ms[0].nsensordata)),
        chunk_size=1,
    )
    for b, (k, m) in enumerate(todo.items()):
        mujoco.mj_setState(m, d, state[b, -1], _FULL)
        _REST_CACHE[k] = _rest_from_settled(d.qpos, m.nv)


def _reset_qpos(model: mujoco.MjModel, data: mujoco.MjData) -> np.ndarray:
    mujoco.mj_resetData(model, data)
    return data.qpos.copy()


def _qpos_adr(model: mujoco.MjModel, joint: str) -> int:
    return int(model.jnt_qposadr[mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, joint)])


def initial_qpos_qvel(
    model: mujoco.MjModel, params: CarParams, ep: ReplayInput
) -> tuple[np.ndarray, np.ndarray]:
    """Start state of a replay: the episode's own, or at rest with the steering settled."""
    if ep.initial_qpos is not None:
        q = np.asarray(ep.initial_qpos, dtype=np.float64).copy()
        v = (
            np.asarray(ep.initial_qvel, dtype=np.float64).copy()
            if ep.initial_qvel is not None
            else np.zeros(model.nv)
        )
        return q, v
    q, v = rest_state(model, params.spec_key())
    sl, sr = initial_steer(ep.command_t, ep.action, params, float(ep.sensor_t[0]))
    q[_qpos_adr(model, C.FRONT_LEFT_STEER)] = sl
    q[_qpos_adr(model, C.FRONT_RIGHT_STEER)] = sr
    return q, v


def _full_state(
    model: mujoco.MjModel, data: mujoco.MjData, q: np.ndarray, v: np.ndarray, t: float
) -> np.ndarray:
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
def telemetry_meta(ep: ReplayInput) -> tuple[np.ndarray, np.ndarray]:
    """ack and flags (M,) int64 a car would report at the sensor times.

    ack: seq of the last command sent at or before the sample (-1 before any); flags:
    bit 0 no command for WATCHDOG_S (or none yet), bit 1 vbat < V_LOW_FLAG, bit 2 always
    (inside an episode). Command transit time is not modelled here.
    """
    seq = (
        np.asarray(ep.command_seq, dtype=np.int64)
        if ep.command_seq is not None
        else np.arange(len(ep.command_t), dtype=np.int64)
    )
    order = np.argsort(ep.command_t, kind="stable")
    ct, seq = ep.command_t[order], seq[order]
    j = np.searchsorted(ct, ep.sensor_t, side="right") - 1
    if len(ct) == 0:
        ack, last = (
            np.full(len(ep.sensor_t), -1, dtype=np.int64),
            np.full(len(ep.sensor_t), -np.inf),
        )
    else:
        ack = np.where(j >= 0, seq[np.maximum(j, 0)], -1).astype(np.int64)
        last = np.where(j >= 0, ct[np.maximum(j, 0)], -np.inf)
    flags = np.full(len(ep.sensor_t), C.FLAG_EPISODE, dtype=np.int64)
    flags |= np.where(ep.sensor_t - last > C.WATCHDOG_S, C.FLAG_WATCHDOG, 0)
    flags |= np.where(ep.vbat < C.V_LOW_FLAG, C.FLAG_BATTERY_LOW, 0)
    return ack, flags


def sensors_on_times(
    sens: np.ndarray,
    t0: float,
    ep: ReplayInput,
    params: Mapping[str, float],
    meta: tuple[np.ndarray, np.ndarray] | None = None,
) -> dict[str, np.ndarray]:
    """Per-step sensordata -> the log's rc_car fields on ep.sensor_t.

    sens: Shape: (K, nsensordata), row k = sensors of the state at t0 + k * TIMESTEP.
    """
    grid = t0 + C.TIMESTEP * np.arange(sens.shape[0])
    st = ep.sensor_t
    enc = np.interp(st, grid, sens[:, C.ENCODER_INDEX]) - sens[0, C.ENCODER_INDEX] + ep.enc0
    yaw = np.interp(st, grid, sens[:, C.GYRO_SLICE.start + 2]) + params["gyro_bias"]
    ax = np.interp(st, grid, sens[:, C.ACCEL_SLICE.start]) + params["accel_bias_x"]
    ay = np.interp(st, grid, sens[:, C.ACCEL_SLICE.start + 1]) + params["accel_bias_y"]
    ack, flags = meta if meta is not None else telemetry_meta(ep)
    return {
        "enc_rad": enc,
        "yaw_rate": yaw,
        "accel": np.stack([ax, ay], axis=1),
        "vbat": ep.vbat.copy(),
        "ack": ack.copy(),
        "flags": flags.copy(),
    }


# ---------------------------------------------------------------------------------------
# batched replay
# ---------------------------------------------------------------------------------------
_POOLS: dict[int, mj_rollout.Rollout] = {}
_MAX_SENSOR_DOUBLES = 2e7  # per rollout call (160 MB of sensordata); larger batches are split


def _pool(nthread: int) -> mj_rollout.Rollout:
    if nthread not in _POOLS:
        _POOLS[nthread] = mj_rollout.Rollout(nthread=nthread if nthread > 1 else 0)
    return _POOLS[nthread]


@atexit.register
def _close_pools() -> None:
    for p in _POOLS.values():
        p.close()
    _POOLS.clear()


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


def rollout_controls(
    models: Sequence[mujoco.MjModel],
    init: np.ndarray,
    controls: np.ndarray,
    nthread: int = 2,
) -> np.ndarray:
    """Raw batched physics: `mujoco.rollout` without the state output.

    models: nbatch models of one structure; init: Shape: (nbatch, nstate) FULLPHYSICS
    states; controls: Shape: (nbatch, nstep, nu). Returns sensordata, Shape:
    (nbatch, nstep, nsensordata); row k = sensors at the state before step k.
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


def replay_batch(
    params_list: Sequence[CarParams],
    episodes: Sequence[ReplayInput],
    nthread: int = 2,
) -> list[list[dict[str, np.ndarray]]]:
    """Open-loop replay of every episode under every parameter set, batched in C.

    Returns out[p][e]: the log's rc_car sensor fields (see module doc) of episode e under
    params_list[p], on episodes[e].sensor_t. Episodes of different lengths are grouped by
    length (padding at most 15 %); each group is one `mujoco.rollout` call over
    len(params_list) x len(group) trajectories.
    """
    P, E = len(params_list), len(episodes)
    out: list[list[dict[str, np.ndarray]]] = [[{} for _ in range(E)] for _ in range(P)]
    if P == 0 or E == 0:
        return out
    models = [cached_model(p) for p in params_list]
    settle_batch(models, [p.spec_key() for p in params_list], nthread)
    data0 = mujoco.MjData(models[0])
    metas = [telemetry_meta(ep) for ep in episodes]
    lengths = [ep.nstep for ep in episodes]
    for group in _buckets(lengths):
        kmax = max(lengths[e] for e in group)
        all_pairs = [(p, e) for p in range(P) for e in group]
        per_call = max(1, int(_MAX_SENSOR_DOUBLES // (kmax * models[0].nsensordata)))
        for start in range(0, len(all_pairs), per_call):
            _replay_pairs(
                all_pairs[start : start + per_call],
                kmax,
                lengths,
                models,
                params_list,
                episodes,
                metas,
                data0,
                nthread,
                out,
            )
    return out


def _replay_pairs(
    pairs: list[tuple[int, int]],
    kmax: int,
    lengths: Sequence[int],
    models: Sequence[mujoco.MjModel],
    params_list: Sequence[CarParams],
    episodes: Sequence[ReplayInput],
    metas: Sequence[tuple[np.ndarray, np.ndarray]],
    data0: mujoco.MjData,
    nthread: int,
    out: list[list[dict[str, np.ndarray]]],
) -> None:
    """One `mujoco.rollout` call over (param index, episode index) pairs; fills `out`."""
    ctrl = np.empty((len(pairs), kmax, C.NU))
    init = np.empty((len(pairs), mujoco.mj_stateSize(models[0], _FULL)))
    for b, (p, e) in enumerate(pairs):
        ep, prm = episodes[e], params_list[p]
        t0 = float(ep.sensor_t[0])
        k = lengths[e]
        ctrl[b, :k] = control_sequence(ep.command_t, ep.action, prm, t0, k, ep.sensor_t, ep.vbat)
        ctrl[b, k:] = ctrl[b, k - 1]
        q, v = initial_qpos_qvel(models[p], prm, ep)
        init[b] = _full_state(models[p], data0, q, v, t0)
    sens = rollout_controls([models[p] for p, _ in pairs], init, ctrl, nthread)
    for b, (p, e) in enumerate(pairs):
        ep = episodes[e]
        out[p][e] = sensors_on_times(
            sens[b, : lengths[e]], float(ep.sensor_t[0]), ep, params_list[p], metas[e]
        )


def replay(
    params: CarParams, episodes: Sequence[ReplayInput], nthread: int = 2
) -> list[dict[str, np.ndarray]]:
    """`replay_batch` for one parameter set: one sensor dict per episode."""
    return replay_batch([params], episodes, nthread)[0]


# ---------------------------------------------------------------------------------------
# reference: the same replay as a Python step loop (streaming actuation)
# ---------------------------------------------------------------------------------------
def replay_reference(params: CarParams, ep: ReplayInput) -> dict[str, np.ndarray]:
    """Slow reference for `replay_batch`: mj_step in Python, commands streamed through
    `StreamingActuation` as a closed-loop sim would. Same outputs to float tolerance."""
    model = cached_model(params)
    data = mujoco.MjData(model)
    q, v = initial_qpos_qvel(model, params, ep)
    state = _full_state(model, data, q, v, float(ep.sensor_t[0]))
    mujoco.mj_setState(model, data, state, _FULL)
    data.qacc_warmstart[:] = 0.0
    act = StreamingActuation(params)
    order = np.argsort(ep.command_t, kind="stable")
    ct, ca = ep.command_t[order], ep.action[order]
    nxt = 0
    dt = model.opt.timestep
    t0 = float(ep.sensor_t[0])
    K = ep.nstep
    sens = np.empty((K, model.nsensordata))
    for k in range(K):
        t = t0 + k * dt
        while nxt < len(ct) and ct[nxt] <= t + dt:  # sent before this step ends
            act.push(float(ct[nxt]), ca[nxt])
            nxt += 1
        u = act.average(t, dt)
        u[DUTY] *= float(np.interp(t + 0.5 * dt, ep.sensor_t, ep.vbat))
        data.ctrl[:] = u
        mujoco.mj_step(model, data)
        sens[k] = data.sensordata
    return sensors_on_times(sens, t0, ep, params)


# ---------------------------------------------------------------------------------------
# closed loop
# ---------------------------------------------------------------------------------------
class Battery:
    """2S LiPo: open-circuit voltage over state of charge, internal resistance.

    V = OCV(soc) - BATTERY_R_INT * I; soc falls by I dt / capacity.
    """

    def __init__(self, soc: float = 1.0) -> None:
        self.soc = float(np.clip(soc, 0.0, 1.0))
        self.current = 0.0

    @property
    def voltage(self) -> float:
        """Terminal voltage (V) at the last drawn current."""
        ocv = float(np.interp(self.soc, C.BATTERY_SOC, C.BATTERY_OCV))
        return ocv - C.BATTERY_R_INT * self.current

    def draw(self, current: float, dt: float) -> None:
        """Draw `current` (A, >= 0) for `dt` (s)."""
        self.current = max(0.0, float(current))
        self.soc = max(0.0, self.soc - self.current * dt / (3600.0 * C.BATTERY_CAPACITY_AH))


class CarSim:
    """Closed-loop simulation of the car for controllers, teachers and emulators.

    `step(action, dt_control)` sends one command (as the host would, at the current time),
    advances the physics through the same actuation model as replay (latency, watchdog,
    deadband, ESC, Ackermann, servo in MuJoCo) with a battery model feeding the motor,
    and returns one telemetry sample. Same seed, same actions -> same rollout.

    spec: optional scene from `model.build_spec(params)` with additions (cones, textures);
    its car must carry the same params (it is compiled as given).
    """

    def __init__(
        self,
        params: CarParams | None = None,
        *,
        spec: mujoco.MjSpec | None = None,
        noise: bool = True,
        quantize_encoder: bool = True,
    ) -> None:
        self.params = params or CarParams()
        self.model = (spec or build_spec(self.params)).compile()
        self.data = mujoco.MjData(self.model)
        self.noise = noise
        self.quantize_encoder = quantize_encoder
        self._root_qadr = _qpos_adr(self.model, C.ROOT_JOINT)
        self._root_vadr = int(
            self.model.jnt_dofadr[
                mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_JOINT, C.ROOT_JOINT)
            ]
        )
        self._drive = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_ACTUATOR, C.ACT_DRIVE)
        self._act_ids = [
            mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_ACTUATOR, n) for n in C.ACTUATORS
        ]
        self._sens_adr = {
            n: int(
                self.model.sensor_adr[mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_SENSOR, n)]
            )
            for n in (C.SENSOR_GYRO, C.SENSOR_ACCEL, C.SENSOR_ENCODER)
        }
        # where each joint of the bare car model lives in this (maybe larger) scene's qpos
        ref = cached_model(self.params)
        self._qpos_map: list[tuple[int, int, int]] = []
        for j in range(ref.njnt):
            name = mujoco.mj_id2name(ref, mujoco.mjtObj.mjOBJ_JOINT, j)
            dst = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_JOINT, name)
            if dst < 0:
                raise ValueError(f"scene has no joint {name!r}: build it with model.build_spec")
            n = {0: 7, 1: 4, 2: 1, 3: 1}[int(ref.jnt_type[j])]
            self._qpos_map.append((int(self.model.jnt_qposadr[dst]), int(ref.jnt_qposadr[j]), n))
        self.reset()

    # --- episode ---------------------------------------------------------------------------
    def reset(
        self,
        seed: int | None = None,
        pose: tuple[float, float, float] = (0.0, 0.0, 0.0),
        soc: float = 1.0,
    ) -> dict[str, np.ndarray]:
        """Car at rest at `pose` (x m, y m, yaw rad), braked, steering neutral; returns the
        first telemetry sample. `seed` drives the sensor noise."""
        m, d = self.model, self.data
        self.rng = np.random.default_rng(seed)
        # the car settled alone (the scene may hold other things), then placed at `pose`
        q_rest, _ = rest_state(cached_model(self.params), self.params.spec_key())
        x, y, yaw = pose
        car_q = q_rest.copy()
        car_q[0:2] = (x, y)
        res = np.zeros(4)
        mujoco.mju_mulQuat(
            res, np.array([math.cos(yaw / 2), 0.0, 0.0, math.sin(yaw / 2)]), q_rest[3:7]
        )
        car_q[3:7] = res
        mujoco.mj_resetData(m, d)
        for dst, src, n in self._qpos_map:
            d.qpos[dst : dst + n] = car_q[src : src + n]
        self.actuation = StreamingActuation(self.params)
        self.battery = Battery(soc)
        self.seq = -1
        self.last_cmd_t = -math.inf
        d.ctrl[:] = 0.0
        d.ctrl[self._act_ids[3]] = 1.0
        mujoco.mj_forward(m, d)
        self._enc0 = float(d.sensordata[self._sens_adr[C.SENSOR_ENCODER]])
        return self._telemetry()

    def step(
        self, action: np.ndarray | Sequence[float], dt_control: float = 0.05
    ) -> dict[str, np.ndarray]:
        """Send `action` [steer, throttle] now, run `dt_control` s (rounded to whole
        physics steps), return the telemetry sample at the end."""
        m, d = self.model, self.data
        t = float(d.time)
        self.seq += 1
        self.last_cmd_t = t
        self.actuation.push(t, np.asarray(action, dtype=np.float64))
        n = max(1, int(round(dt_control / m.opt.timestep)))
        dt = m.opt.timestep
        ke = self.params["back_emf"]
        for _ in range(n):
            t = float(d.time)
            u = self.actuation.average(t, dt)
            duty = u[DUTY]
            u[DUTY] *= self.battery.voltage
            d.ctrl[self._act_ids] = u
            mujoco.mj_step(m, d)
            motor_current = max(0.0, float(d.actuator_force[self._drive])) / ke
            self.battery.draw(duty * motor_current, dt)
        self.actuation.prune(float(d.time) - 1.0)
        return self._telemetry()

    # --- outputs ---------------------------------------------------------------------------
    def _telemetry(self) -> dict[str, np.ndarray]:
        """One telemetry sample (the log's fields) from the sensors of the last step."""
        d, p = self.data, self.params
        sd = d.sensordata
        ga, aa = self._sens_adr[C.SENSOR_GYRO], self._sens_adr[C.SENSOR_ACCEL]
        enc = float(sd[self._sens_adr[C.SENSOR_ENCODER]]) - self._enc0
        if self.quantize_encoder:
            enc = round(enc / C.ENCODER_RAD_PER_COUNT) * C.ENCODER_RAD_PER_COUNT
        yaw = float(sd[ga + 2]) + p["gyro_bias"]
        acc = np.array([sd[aa] + p["accel_bias_x"], sd[aa + 1] + p["accel_bias_y"]])
        if self.noise:
            yaw += C.GYRO_NOISE * self.rng.standard_normal()
            acc = acc + C.ACCEL_NOISE * self.rng.standard_normal(2)
        vbat = self.battery.voltage
        flags = C.FLAG_EPISODE
        if float(d.time) - self.last_cmd_t > C.WATCHDOG_S:
            flags |= C.FLAG_WATCHDOG
        if vbat < C.V_LOW_FLAG:
            flags |= C.FLAG_BATTERY_LOW
        return {
            "t": np.float64(d.time),
            "enc_rad": np.float64(enc),
            "yaw_rate": np.float64(yaw),
            "accel": acc,
            "vbat": np.float64(vbat),
            "ack": np.int64(self.seq),
            "flags": np.int64(flags),
        }

    # --- privileged state (teachers only) --------------------------------------------------
    @property
    def time(self) -> float:
        """Simulation time (s) since reset."""
        return float(self.data.time)

    @property
    def pose(self) -> np.ndarray:
        """(x, y, yaw) of the body frame in the world (m, m, rad). Shape: (3,)."""
        a = self._root_qadr
        x, y = self.data.qpos[a : a + 2]
        w, qx, qy, qz = self.data.qpos[a + 3 : a + 7]
        yaw = math.atan2(2 * (w * qz + qx * qy), 1 - 2 * (qy * qy + qz * qz))
        return np.array([x, y, yaw])

    @property
    def velocity(self) -> np.ndarray:
        """(v_forward, v_left, yaw_rate) in the body frame (m/s, m/s, rad/s). Shape: (3,)."""
        a = self._root_vadr
        vw = self.data.qvel[a : a + 3]
        yaw = self.pose[2]
        c, s = math.cos(yaw), math.sin(yaw)
        return np.array([c * vw[0] + s * vw[1], -s * vw[0] + c * vw[1], self.data.qvel[a + 5]])

    def wheel_speeds(self) -> np.ndarray:
        """Wheel angular speeds (rad/s) in WHEEL_JOINTS order. Shape: (4,)."""
        m = self.model
        ids = [mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, n) for n in C.WHEEL_JOINTS]
        return np.array([self.data.qvel[m.jnt_dofadr[i]] for i in ids])

    def steer_angles(self) -> np.ndarray:
        """Left, right front-wheel steering angles (rad). Shape: (2,)."""
        return np.array([self.data.qpos[_qpos_adr(self.model, n)] for n in C.STEER_JOINTS])

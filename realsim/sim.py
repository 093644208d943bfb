"""The simulator entry point: fitted parameters plus an optional learned residual.

Every consumer (replay, teacher and student data generation, evaluation, the cycle,
residual training) gets its simulator here, the same way, for either robot::

    sim = load_simulator("rc_car", params="fit/params.yaml", residual="res.pt")
    outs = sim.replay(episodes)            # batched open loop, like replay_batch
    car = sim.closed_loop(spec=scene_spec) # a CarSim (ArmSim) whose physics runs the residual

Without a residual `replay` *is* the robot's ``sim.replay_batch``. With one, the
residual's bounded output is applied inside the MuJoCo step as a generalised force
(`data.qfrc_applied`: the car's free joint, rear wheels and steering knuckles; the arm's motor hinges,
where its servos act), recomputed every ``period`` physics steps from the history of
the simulated state and held in between: the state is never overwritten. Open loop,
each trajectory runs as `mujoco.rollout` calls of ``period`` steps (the force enters
through the control spec, CTRL | QFRC_APPLIED), carrying the full physics state *and*
the solver warm start between calls, so a zero residual reproduces the fitted
simulator bit for bit; one batched torch forward per period serves all trajectories,
and ``nthread`` worker threads (each with its own MjData) advance them in between, with
results independent of nthread.

What differs between the robots is one *layout* class each (`CarLayout`,
`ArmResidualLayout`, same methods): where the robot lives in the state, its residual
features and reduced state, how an output becomes a generalised force, and its own
sim module's command path, start state and sensors. The rest is shared.

Closed loop, `ResidualHook.apply(data, aux)` is the per-physics-step hook
(`HybridCarSim` and `HybridArmSim` call it; any other step loop can too).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mujoco
import numpy as np
from mujoco import rollout as mj_rollout

from realsim.errors import UserError
from realsim.params import ParamSet
from realsim.residual import STATE_OUTPUTS, Residual, load_residual, robot_io
from realsim.robots import check_robot
from realsim.robots.arm import constants as AC
from realsim.robots.arm import sim as arm_sim
from realsim.robots.arm.model import ArmLayout
from realsim.robots.arm.model import cached_model as arm_cached_model
from realsim.robots.arm.params import ArmParams
from realsim.robots.rc_car import constants as C
from realsim.robots.rc_car import sim as car_sim
from realsim.robots.rc_car.actuation import DUTY
from realsim.robots.rc_car.model import cached_model
from realsim.robots.rc_car.params import CarParams

_FULL = mujoco.mjtState.mjSTATE_FULLPHYSICS
_SPEC = int(mujoco.mjtState.mjSTATE_CTRL | mujoco.mjtState.mjSTATE_QFRC_APPLIED)
# divergence: any non-finite value or a speed no RC car reaches
DIVERGED_SPEED = 15.0  # m/s
DIVERGED_YAW_RATE = 30.0  # rad/s
# ... or a joint speed no servo arm reaches (no-load speeds are 4 .. 6 rad/s)
DIVERGED_JOINT_SPEED = 50.0  # rad/s


# ---------------------------------------------------------------------------------------
# where the car lives in a model's state
# ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CarLayout:
    """Addresses of the car's joints in a (car or scene) model.

    root_q / root_v: free-joint qpos / dof address; rear: rear-wheel dof addresses;
    steer_q / steer_v: front steering joint qpos / dof addresses; nq, nv: model sizes.
    """

    root_q: int
    root_v: int
    rear: tuple[int, int]
    steer_q: tuple[int, int]
    steer_v: tuple[int, int]
    nq: int
    nv: int

    @classmethod
    def of(cls, model: mujoco.MjModel) -> CarLayout:
        def jid(name: str) -> int:
            j = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, name)
            if j < 0:
                raise ValueError(f"model has no joint {name!r}")
            return j

        r = jid(C.ROOT_JOINT)
        return cls(
            root_q=int(model.jnt_qposadr[r]),
            root_v=int(model.jnt_dofadr[r]),
            rear=tuple(int(model.jnt_dofadr[jid(n)]) for n in C.WHEEL_JOINTS[:2]),  # type: ignore[arg-type]
            steer_q=tuple(int(model.jnt_qposadr[jid(n)]) for n in C.STEER_JOINTS),  # type: ignore[arg-type]
            steer_v=tuple(int(model.jnt_dofadr[jid(n)]) for n in C.STEER_JOINTS),  # type: ignore[arg-type]
            nq=int(model.nq),
            nv=int(model.nv),
        )

    def yaw(self, qpos: np.ndarray) -> np.ndarray:
        """Heading (rad) from the free joint's quaternion. qpos Shape: (B, nq) -> (B,)."""
        w, x, y, z = (qpos[:, self.root_q + 3 + i] for i in range(4))
        return np.arctan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z))

    def steer(self, qpos: np.ndarray) -> np.ndarray:
        """Mean front steering angle (rad). qpos Shape: (B, nq) -> (B,)."""
        return 0.5 * (qpos[:, self.steer_q[0]] + qpos[:, self.steer_q[1]])

    def reduced(self, qpos: np.ndarray, qvel: np.ndarray) -> np.ndarray:
        """[vx, vy (body frame, m/s), yaw rate (rad/s), mean rear-wheel speed (rad/s),
        mean front steering angle (rad)].

        The steering angle is state: the steering servo integrates its command (and a
        steering torque output) over several periods, so a change of it now acts on the
        yaw rate later; residual training's linear model must carry it.
        qpos Shape: (B, nq), qvel Shape: (B, nv) -> Shape: (B, 5).
        """
        yaw = self.yaw(qpos)
        c, s = np.cos(yaw), np.sin(yaw)
        v = qvel[:, self.root_v : self.root_v + 2]
        return np.stack(
            [
                c * v[:, 0] + s * v[:, 1],
                -s * v[:, 0] + c * v[:, 1],
                qvel[:, self.root_v + 5],
                0.5 * (qvel[:, self.rear[0]] + qvel[:, self.rear[1]]),
                self.steer(qpos),
            ],
            axis=1,
        )

    def features(
        self, qpos: np.ndarray, qvel: np.ndarray, ctrl: np.ndarray, vbat: np.ndarray
    ) -> np.ndarray:
        """Residual input features (realsim.residual.FEATURES) at one instant.

        qpos (B, nq), qvel (B, nv), ctrl (B, 4) the step's control (actuator order),
        vbat (B,) V. Returns Shape: (B, len(FEATURES)).
        """
        red = self.reduced(qpos, qvel)  # vx, vy, yaw rate, wheel speed, steering angle
        return np.column_stack(
            [red, 0.5 * (ctrl[:, 0] + ctrl[:, 1]), ctrl[:, DUTY], ctrl[:, 3], vbat]
        )

    def to_qfrc(self, out: np.ndarray, names: Sequence[str], yaw: np.ndarray) -> np.ndarray:
        """Residual force outputs (B, n) -> generalised force Shape: (B, nv).

        fx, fy act at the body origin in the chassis frame (rotated to the world frame the
        free joint's translational dofs use), mz about the body z axis, tau on the rear
        differential tendon (qfrc = J^T tau: tau/2 on each rear wheel), tau_steer on each
        steering knuckle's hinge (where the servo's own torque acts).
        """
        q = np.zeros((out.shape[0], self.nv))
        c, s = np.cos(yaw), np.sin(yaw)
        col = {n: out[:, i] for i, n in enumerate(names)}
        fx, fy = col.get("fx", 0.0), col.get("fy", 0.0)
        q[:, self.root_v] = c * fx - s * fy
        q[:, self.root_v + 1] = s * fx + c * fy
        q[:, self.root_v + 5] = col.get("mz", 0.0)
        tau = col.get("tau", 0.0)
        q[:, self.rear[0]] = 0.5 * tau
        q[:, self.rear[1]] = 0.5 * tau
        ts = col.get("tau_steer", 0.0)
        q[:, self.steer_v[0]] = ts
        q[:, self.steer_v[1]] = ts
        return q

    def correct_state(
        self, qvel: np.ndarray, out: np.ndarray, names: Sequence[str], yaw: np.ndarray
    ) -> np.ndarray:
        """Ablation only: add velocity increments (dvx, dvy body frame, dr, dw) to qvel.

        qvel (B, nv), out (B, n) -> new qvel (B, nv)."""
        v = qvel.copy()
        c, s = np.cos(yaw), np.sin(yaw)
        col = {n: out[:, i] for i, n in enumerate(names)}
        dvx, dvy = col.get("dvx", 0.0), col.get("dvy", 0.0)
        v[:, self.root_v] += c * dvx - s * dvy
        v[:, self.root_v + 1] += s * dvx + c * dvy
        v[:, self.root_v + 5] += col.get("dr", 0.0)
        for a in self.rear:
            v[:, a] += col.get("dw", 0.0)
        return v


    # --- the layout interface the hybrid simulator uses (ArmResidualLayout: the same) ---
    robot = "rc_car"
    nu = C.NU
    state_step = np.array([0.05, 0.05, 0.1, 1.0, 0.01])
    """Finite-difference steps of the reduced state [vx, vy, yaw rate, wheel speed, steer]."""

    def force(self, out: np.ndarray, names: Sequence[str], qpos: np.ndarray) -> np.ndarray:
        """Residual outputs (B, n) at states qpos (B, nq) -> qfrc Shape: (B, nv)."""
        return self.to_qfrc(out, names, self.yaw(qpos))

    def correct(self, qvel: np.ndarray, out: np.ndarray, names: Sequence[str], qpos: np.ndarray) -> np.ndarray:
        """Ablation: `correct_state` at states qpos (B, nq). Returns new qvel (B, nv)."""
        return self.correct_state(qvel, out, names, self.yaw(qpos))

    def perturb(self, qpos: np.ndarray, qvel: np.ndarray, ds: np.ndarray) -> None:
        """Add reduced-state increments ds (B, 5) to the states, in place (the steering
        angle's to both knuckles)."""
        qvel[:] = self.correct_state(qvel, ds[:, :4], STATE_OUTPUTS, self.yaw(qpos))
        for a in self.steer_q:
            qpos[:, a] += ds[:, 4]

    def hook_dofs(self) -> np.ndarray:
        """The dofs a force residual writes (free joint, rear wheels, steering knuckles)."""
        return np.r_[np.arange(self.root_v, self.root_v + 6), np.array(self.rear), np.array(self.steer_v)]

    @staticmethod
    def diverged(red: np.ndarray) -> bool:
        """See module function `diverged`."""
        return diverged(red)

    @staticmethod
    def cached_model(params: ParamSet) -> mujoco.MjModel:
        return cached_model(params)

    @staticmethod
    def start(
        model: mujoco.MjModel, data: mujoco.MjData, params: ParamSet, ep: Any, nstep: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """(FULLPHYSICS start state (nstate,), per-step controls (nstep, nu)) of a replay."""
        q, v = car_sim.initial_qpos_qvel(model, params, ep)
        t0 = float(ep.sensor_t[0])
        ctrl = car_sim.control_sequence(ep.command_t, ep.action, params, t0, nstep, ep.sensor_t, ep.vbat)
        return car_sim._full_state(model, data, q, v, t0), ctrl

    @staticmethod
    def aux(ep: Any, t: np.ndarray) -> np.ndarray:
        """The auxiliary feature (battery voltage, V) at times t. Shape: (len(t),)."""
        return np.interp(t, ep.sensor_t, ep.vbat)

    @staticmethod
    def sensors_on_times(sens: np.ndarray, ep: Any, params: ParamSet) -> dict[str, np.ndarray]:
        return car_sim.sensors_on_times(sens, float(ep.sensor_t[0]), ep, params)

    @staticmethod
    def replay_batch(params: ParamSet, episodes: Sequence[Any], nthread: int) -> list[dict[str, np.ndarray]]:
        return car_sim.replay_batch([params], episodes, nthread)[0]


@dataclass(frozen=True)
class ArmResidualLayout:
    """The arm as the hybrid simulator sees it (same methods as `CarLayout`).

    Reduced state: the five revolute joints' output angles (rad; motor + play hinge, what
    the encoder reads) then their speeds (rad/s), Shape: (B, 10); features: that and the
    goals acting on those joints (`realsim.residual.ARM_FEATURES`); outputs
    ``tau_<joint>``: torques on the motor hinges (where the servo acts).
    motor_q, play_q, motor_v, play_v: Shape: (5,) addresses; nq, nv: model sizes.
    """

    motor_q: tuple[int, ...]
    play_q: tuple[int, ...]
    motor_v: tuple[int, ...]
    play_v: tuple[int, ...]
    nq: int
    nv: int

    robot = "arm"
    nu = AC.NU
    state_step = np.r_[np.full(5, 0.01), np.full(5, 0.1)]
    """Finite-difference steps of the reduced state (rad, rad/s)."""

    @classmethod
    def of(cls, model: mujoco.MjModel) -> ArmResidualLayout:
        lay = ArmLayout(model)
        return cls(tuple(int(i) for i in lay.motor_q), tuple(int(i) for i in lay.play_q),
                   tuple(int(i) for i in lay.motor_v), tuple(int(i) for i in lay.play_v),
                   int(model.nq), int(model.nv))

    def reduced(self, qpos: np.ndarray, qvel: np.ndarray) -> np.ndarray:
        """[output angles (5), output speeds (5)]. (B, nq), (B, nv) -> Shape: (B, 10)."""
        mq, pq, mv, pv = (list(x) for x in (self.motor_q, self.play_q, self.motor_v, self.play_v))
        return np.concatenate([qpos[:, mq] + qpos[:, pq], qvel[:, mv] + qvel[:, pv]], axis=1)

    def features(self, qpos: np.ndarray, qvel: np.ndarray, ctrl: np.ndarray, aux: np.ndarray) -> np.ndarray:
        """Residual features: reduced state and the five joint goals (ctrl (B, 6) the step's
        goals). aux is not used. Returns Shape: (B, 15)."""
        return np.concatenate([self.reduced(qpos, qvel), ctrl[:, :5]], axis=1)

    def force(self, out: np.ndarray, names: Sequence[str], qpos: np.ndarray) -> np.ndarray:
        """Outputs ``tau_<joint>`` (B, n) -> qfrc on the motor hinges, Shape: (B, nv)."""
        q = np.zeros((out.shape[0], self.nv))
        for i, n in enumerate(names):
            q[:, self.motor_v[AC.ARM_JOINTS.index(n.removeprefix("tau_"))]] = out[:, i]
        return q

    def correct(self, qvel: np.ndarray, out: np.ndarray, names: Sequence[str], qpos: np.ndarray) -> np.ndarray:
        raise ValueError("arm: no state-overwriting residual (ablation is the car's)")

    def perturb(self, qpos: np.ndarray, qvel: np.ndarray, ds: np.ndarray) -> None:
        """Add reduced-state increments ds (B, 10) to the motor hinges, in place."""
        qpos[:, list(self.motor_q)] += ds[:, :5]
        qvel[:, list(self.motor_v)] += ds[:, 5:]

    def hook_dofs(self) -> np.ndarray:
        """The dofs a residual writes: the five motor hinges."""
        return np.array(self.motor_v)

    @staticmethod
    def diverged(red: np.ndarray) -> bool:
        """True if reduced states (..., 10) hold a non-finite value or an impossible speed."""
        return bool(not np.all(np.isfinite(red)) or np.any(np.abs(red[..., 5:]) > DIVERGED_JOINT_SPEED))

    @staticmethod
    def cached_model(params: ParamSet) -> mujoco.MjModel:
        return arm_cached_model(params)

    @staticmethod
    def start(
        model: mujoco.MjModel, data: mujoco.MjData, params: ParamSet, ep: Any, nstep: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """(FULLPHYSICS start state (nstate,), per-step goals (nstep, 6)) of a replay."""
        q, v, hold = arm_sim.initial_state(model, params, ep)
        t0 = float(ep.sensor_t[0])
        ctrl = arm_sim.goal_sequence(ep.command_t, ep.action, params, hold, t0, nstep)
        return arm_sim.full_state(model, data, q, v, t0), ctrl

    @staticmethod
    def aux(ep: Any, t: np.ndarray) -> np.ndarray:
        """Supply voltage (V) at times t (recorded; not a feature). Shape: (len(t),)."""
        return np.interp(t, ep.sensor_t, ep.voltage)

    @staticmethod
    def sensors_on_times(sens: np.ndarray, ep: Any, params: ParamSet) -> dict[str, np.ndarray]:
        return arm_sim.sensors_on_times(sens, float(ep.sensor_t[0]), ep, params)

    @staticmethod
    def replay_batch(params: ParamSet, episodes: Sequence[Any], nthread: int) -> list[dict[str, np.ndarray]]:
        return arm_sim.replay_batch([params], episodes, nthread)[0]


LAYOUTS: dict[str, Any] = {"rc_car": CarLayout, "arm": ArmResidualLayout}
"""robot -> its layout class (`.of(model)` gives the layout of a model)."""
PARAM_CLASSES: dict[str, type[ParamSet]] = {"rc_car": CarParams, "arm": ArmParams}


def layout_of(robot: str, model: mujoco.MjModel) -> Any:
    """The hybrid-simulator layout of `robot` in `model` (a robot or a scene model)."""
    return LAYOUTS[robot].of(model)


def split_state(model: mujoco.MjModel, state: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """FULLPHYSICS states (B, nstate) -> (qpos (B, nq), qvel (B, nv)) views."""
    nq, nv = model.nq, model.nv
    return state[:, 1 : 1 + nq], state[:, 1 + nq : 1 + nq + nv]


def diverged(red: np.ndarray) -> bool:
    """True if the car's reduced states (..., 5) hold a non-finite value or an impossible speed."""
    if not np.all(np.isfinite(red)):
        return True
    return bool(
        np.any(np.abs(red[..., :2]) > DIVERGED_SPEED)
        or np.any(np.abs(red[..., 2]) > DIVERGED_YAW_RATE)
        or np.any(np.abs(red[..., 3]) > DIVERGED_SPEED / C.WHEEL_RADIUS)
    )


# ---------------------------------------------------------------------------------------
# one trajectory's record (residual training reads it)
# ---------------------------------------------------------------------------------------
@dataclass
class Trajectory:
    """A hybrid open-loop replay, on the residual's period grid.

    K physics steps, P = period, J = ceil(K / P) periods. Shapes:
    state (J + 1, nstate): FULLPHYSICS state at each period start (last: the end; in
    the "state" ablation: before the correction);
    warmstart (J + 1, nv): solver warm start there; feat (J + 1, F): features there;
    out (J, n_out): residual output applied over each period (zeros without one);
    ctrl (K, nu): per-step controls; t (J + 1,): times of the period starts (s);
    sens (K, nsensordata): per-step sensordata (row k = state at the start of step k);
    aux (J + 1,): the layout's auxiliary signal at the period starts (the car's battery
    voltage, the arm's supply voltage).
    """

    state: np.ndarray
    warmstart: np.ndarray
    feat: np.ndarray
    out: np.ndarray
    ctrl: np.ndarray
    t: np.ndarray
    sens: np.ndarray
    aux: np.ndarray

    @property
    def vbat(self) -> np.ndarray:
        """The car's battery voltage at the period starts (= aux). Shape: (J + 1,)."""
        return self.aux


class _Worker:
    """Advances trajectories one period at a time on its own MjData (one per thread).

    Each trajectory is its own serial `mujoco.rollout` call, so the solver warm start it
    ends with (read back from the MjData) carries into its next period exactly.
    """

    def __init__(self, model: mujoco.MjModel, nu: int) -> None:
        self.model = model
        self.nu = nu
        self.data = mujoco.MjData(model)
        self.rollout = mj_rollout.Rollout(nthread=0)
        self.stbuf = np.empty((1, 0, mujoco.mj_stateSize(model, _FULL)))
        self.u = np.empty((1, 0, nu + model.nv))

    def run(
        self,
        jobs: Sequence[tuple[int, np.ndarray, np.ndarray]],
        j: int,
        P: int,
        K: np.ndarray,
        ctrl: Sequence[np.ndarray],
        state: np.ndarray,
        warm: np.ndarray,
        sens: Sequence[np.ndarray],
    ) -> None:
        """Period j of each job (episode e, start state (nstate,), held qfrc (nv,)):
        writes state[e, j + 1], warm[e, j + 1] and sens[e][j P : j P + n]."""
        m, d = self.model, self.data
        if self.stbuf.shape[1] < P:
            self.stbuf = np.empty((1, P, self.stbuf.shape[2]))
            self.u = np.empty((1, P, self.u.shape[2]))
        for e, s0, qfrc in jobs:
            k0 = j * P
            n = min(P, int(K[e]) - k0)
            self.u[0, :n, : self.nu] = ctrl[e][k0 : k0 + n]
            self.u[0, :n, self.nu :] = qfrc
            self.rollout.rollout(
                [m],
                [d],
                s0[None],
                self.u[:, :n],
                control_spec=_SPEC,
                skip_checks=True,
                nstep=n,
                initial_warmstart=warm[e, j : j + 1],
                state=self.stbuf[:, :n],
                sensordata=sens[e][None, k0 : k0 + n],
            )
            state[e, j + 1] = self.stbuf[0, n - 1]
            warm[e, j + 1] = d.qacc_warmstart


# ---------------------------------------------------------------------------------------
# the hybrid simulator
# ---------------------------------------------------------------------------------------
class HybridSim:
    """Fitted simulator of one robot, optionally corrected by a learned residual.

    robot: "rc_car" or "arm"; params: the fitted (or nominal) parameters of that robot;
    residual: a loaded `Residual` (of that robot) or None.
    """

    def __init__(self, robot: str, params: ParamSet, residual: Residual | None = None) -> None:
        check_robot(robot)
        if residual is not None and residual.cfg.robot != robot:
            raise UserError(f"residual for {residual.cfg.robot}, not {robot}")
        self.robot = robot
        self.params = params
        self.residual = residual
        self._lay_cls = LAYOUTS[robot]
        self.model = self._lay_cls.cached_model(params)
        self.layout = self._lay_cls.of(self.model)
        self.nfeat = len(robot_io(robot).features)
        self.period = residual.cfg.period if residual is not None else 10
        self._data = mujoco.MjData(self.model)
        self._wk: list[_Worker] = []
        self._pool: ThreadPoolExecutor | None = None
        self._npool = 0

    # --- open loop -----------------------------------------------------------------------
    def replay(self, episodes: Sequence[Any], nthread: int = 2) -> list[dict[str, np.ndarray]]:
        """Open-loop replay of each episode (the robot's `sim.ReplayInput`): the log's
        sensor fields on its sensor_t.

        Same contract and outputs as the robot's ``sim.replay_batch(...)[0]`` (which it
        calls when there is no residual).
        """
        if self.residual is None:
            return self._lay_cls.replay_batch(self.params, episodes, nthread)
        trajs = self.rollout(episodes, nthread=nthread)
        return [self.sensors(ep, tr) for ep, tr in zip(episodes, trajs, strict=True)]

    def sensors(self, ep: Any, tr: Trajectory) -> dict[str, np.ndarray]:
        """A trajectory's sensordata -> the log's sensor fields on ep.sensor_t."""
        return self._lay_cls.sensors_on_times(tr.sens, ep, self.params)

    def rollout(
        self,
        episodes: Sequence[Any],
        residual: Residual | None | str = "default",
        nthread: int = 1,
    ) -> list[Trajectory]:
        """Hybrid open-loop rollouts, one `Trajectory` per episode.

        residual: "default" = this simulator's; None = the fitted simulator on the same
        period grid (zero force). nthread: worker threads that advance the trajectories
        between residual evaluations (each trajectory always on its own MjData call, so
        the result does not depend on nthread).
        """
        res = self.residual if isinstance(residual, str) else residual
        m, lay, P = self.model, self.layout, self.period
        if res is not None and res.cfg.period != P:
            P = res.cfg.period
        prm = self.params
        E = len(episodes)
        K = np.array([ep.nstep for ep in episodes])
        J = (K + P - 1) // P
        Jm = int(J.max()) if E else 0
        nstate = mujoco.mj_stateSize(m, _FULL)
        nf = self.nfeat
        # padded per-period arrays (E, Jm + 1, ...); each episode's rows past J[e] unused
        state = np.zeros((E, Jm + 1, nstate))
        warm = np.zeros((E, Jm + 1, m.nv))
        feat = np.zeros((E, Jm + 1, nf))
        nout = len(res.cfg.outputs) if res is not None else 0
        out = np.zeros((E, Jm, nout))
        sens = [np.empty((int(k), m.nsensordata)) for k in K]
        t0 = np.array([float(ep.sensor_t[0]) for ep in episodes])
        tgrid = t0[:, None] + m.opt.timestep * P * np.arange(Jm + 1)[None, :]
        vb = np.stack([lay.aux(ep, tg) for tg, ep in zip(tgrid, episodes, strict=True)]) \
            if E else np.zeros((0, 1))
        d0 = self._data
        ctrl = []
        for e, ep in enumerate(episodes):
            state[e, 0], c = lay.start(m, d0, prm, ep, int(K[e]))
            ctrl.append(c)
        # controls at each period start, (E, Jm + 1, nu) (the end row: the last control)
        c0 = np.stack([c[np.minimum(np.arange(Jm + 1) * P, len(c) - 1)] for c in ctrl]) if E else None
        H = res.cfg.history if res is not None else 1
        ring = np.zeros((E, H, nf))  # feature history, oldest first
        workers = self._workers(max(1, min(nthread, E)))
        for j in range(Jm):
            live = np.flatnonzero(j < J)
            qpos, qvel = split_state(m, state[live, j])
            f = lay.features(qpos, qvel, c0[live, j], vb[live, j])
            feat[live, j] = f
            qfrc = np.zeros((len(live), m.nv))
            starts = state[live, j]
            if res is not None:
                if j == 0:
                    ring[live] = f[:, None, :]
                else:
                    ring[live, :-1] = ring[live, 1:]
                    ring[live, -1] = f
                o = res(ring[live])
                out[live, j] = o
                if res.cfg.mode == "force":
                    qfrc = lay.force(o, res.cfg.outputs, qpos)
                else:  # ablation: overwrite velocities at the period boundary
                    starts = starts.copy()
                    starts[:, 1 + m.nq : 1 + m.nq + m.nv] = lay.correct(qvel, o, res.cfg.outputs, qpos)
            jobs = [(int(e), starts[i], qfrc[i]) for i, e in enumerate(live)]
            args = (j, P, K, ctrl, state, warm, sens)
            if len(workers) == 1:
                workers[0].run(jobs, *args)
            else:
                chunks = [jobs[w :: len(workers)] for w in range(len(workers))]
                assert self._pool is not None
                futs = [self._pool.submit(wk.run, ch, *args) for wk, ch in zip(workers, chunks, strict=True) if ch]
                for fu in futs:
                    fu.result()
        for e in range(E):  # features at the end state
            je = int(J[e])
            qpos, qvel = split_state(m, state[e, je : je + 1])
            feat[e, je] = lay.features(qpos, qvel, ctrl[e][min(je * P, int(K[e]) - 1)][None], vb[e, je : je + 1])[0]
        return [
            Trajectory(state[e, : J[e] + 1], warm[e, : J[e] + 1], feat[e, : J[e] + 1], out[e, : J[e]],
                       ctrl[e], tgrid[e, : J[e] + 1], sens[e], vb[e, : J[e] + 1])
            for e in range(E)
        ]

    def _workers(self, n: int) -> list[_Worker]:
        """n step workers (each its own MjData and serial rollout), made once."""
        while len(self._wk) < n:
            self._wk.append(_Worker(self.model, self.layout.nu))
        if n > 1 and self._npool < n:
            if self._pool is not None:
                self._pool.shutdown()
            self._pool, self._npool = ThreadPoolExecutor(max_workers=n), n
        return self._wk[:n]

    def advance(
        self,
        state: np.ndarray,
        warmstart: np.ndarray,
        ctrl: np.ndarray,
        qfrc: np.ndarray,
        nthread: int = 2,
    ) -> np.ndarray:
        """Batched: run each start state for ctrl.shape[1] steps with a held force.

        state (B, nstate) FULLPHYSICS, warmstart (B, nv), ctrl (B, n, nu), qfrc (B, nv).
        Returns the end states, Shape: (B, nstate). (Residual training's sensitivities.)
        """
        B, n, _ = ctrl.shape
        u = np.concatenate([ctrl, np.broadcast_to(qfrc[:, None, :], (B, n, qfrc.shape[1]))], axis=2)
        out = np.empty((B, n, state.shape[1]))
        car_sim._pool(nthread).rollout(
            [self.model] * B,
            [mujoco.MjData(self.model) for _ in range(max(1, nthread))],
            np.ascontiguousarray(state),
            np.ascontiguousarray(u),
            control_spec=_SPEC,
            skip_checks=True,
            nstep=n,
            initial_warmstart=np.ascontiguousarray(warmstart),
            state=out,
            sensordata=np.empty((B, n, self.model.nsensordata)),
            chunk_size=max(1, B // (4 * max(1, nthread))),
        )
        return out[:, -1]

    # --- closed loop ---------------------------------------------------------------------
    def closed_loop(self, spec: mujoco.MjSpec | None = None, **kw: Any) -> Any:
        """A closed-loop robot in this simulator: the car a plain `CarSim` without a
        residual, else a `HybridCarSim` that runs the residual inside its steps (the arm:
        `ArmSim` / `HybridArmSim`). spec / kw: as the robot's sim class (scene spec,
        noise, ...)."""
        if self.robot == "arm":
            if self.residual is None:
                return arm_sim.ArmSim(self.params, spec=spec, **kw)
            return HybridArmSim(self.params, self.residual, spec=spec, **kw)
        if self.residual is None:
            return car_sim.CarSim(self.params, spec=spec, **kw)
        return HybridCarSim(self.params, self.residual, spec=spec, **kw)


# ---------------------------------------------------------------------------------------
# closed-loop hook
# ---------------------------------------------------------------------------------------
class ResidualHook:
    """Runs a residual inside a closed-loop MuJoCo step loop (either robot).

    Call `reset()` when an episode starts, then `apply(data, aux)` once before every
    `mj_step(model, data)`, after `data.ctrl` holds that step's control. Every
    `period`-th call (the first one included) it reads the robot's state and control from
    `data`, pushes the features into its history, evaluates the residual and writes the
    generalised force into `data.qfrc_applied` at the robot's residual dofs (the car's
    free joint, two rear wheels and steering knuckles; the arm's motor hinges; other dofs untouched); the
    calls in between re-write the same held force. In the car's ablation mode "state"
    it adds velocity increments to `data.qvel` instead. The scene model may hold more
    than the robot: addresses come from joint names.
    """

    def __init__(self, residual: Residual, model: mujoco.MjModel) -> None:
        self.residual = residual
        self.layout = layout_of(residual.cfg.robot, model)
        self.period = residual.cfg.period
        self._dofs = self.layout.hook_dofs()
        self.reset()

    def reset(self) -> None:
        """Forget the history; the next `apply` computes a fresh output."""
        self._hist: list[np.ndarray] = []
        self._count = 0
        self._qfrc = np.zeros(len(self._dofs))
        self.last_output = np.zeros(len(self.residual.cfg.outputs))

    def apply(self, data: mujoco.MjData, aux: float = 0.0) -> None:
        """Call before each mj_step (see class doc). aux: the layout's auxiliary signal
        now (the car's battery voltage, V; unused by the arm)."""
        lay, cfg = self.layout, self.residual.cfg
        if self._count % self.period == 0:
            qpos, qvel = data.qpos[None, :], data.qvel[None, :]
            f = lay.features(qpos, qvel, data.ctrl[None, : lay.nu], np.array([aux]))[0]
            self._hist.append(f)
            if len(self._hist) > cfg.history:
                self._hist.pop(0)
            hist = [self._hist[0]] * (cfg.history - len(self._hist)) + self._hist
            o = self.residual(np.asarray(hist)[None])
            self.last_output = o[0]
            if cfg.mode == "force":
                self._qfrc = lay.force(o, cfg.outputs, qpos)[0, self._dofs]
            else:
                data.qvel[:] = lay.correct(qvel, o, cfg.outputs, qpos)[0]
        if cfg.mode == "force":
            data.qfrc_applied[self._dofs] = self._qfrc
        self._count += 1


class HybridCarSim(car_sim.CarSim):
    """`CarSim` whose physics steps run a residual through a `ResidualHook`.

    Same constructor as CarSim plus the residual; same API (reset, step, telemetry,
    privileged state). The hook sees the battery's terminal voltage.
    """

    def __init__(
        self, params: CarParams | None, residual: Residual, *, spec: mujoco.MjSpec | None = None, **kw: Any
    ) -> None:
        self._residual = residual
        super().__init__(params, spec=spec, **kw)
        self.hook = ResidualHook(residual, self.model)

    def reset(self, *a: Any, **kw: Any) -> dict[str, np.ndarray]:
        tel = super().reset(*a, **kw)
        if hasattr(self, "hook"):
            self.hook.reset()
        self.data.qfrc_applied[:] = 0.0
        return tel

    def step(self, action: np.ndarray | Sequence[float], dt_control: float = 0.05) -> dict[str, np.ndarray]:
        """As CarSim.step, with the residual applied inside every physics step."""
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
            vbat = self.battery.voltage
            u[DUTY] *= vbat
            d.ctrl[self._act_ids] = u
            self.hook.apply(d, vbat)
            mujoco.mj_step(m, d)
            motor_current = max(0.0, float(d.actuator_force[self._drive])) / ke
            self.battery.draw(duty * motor_current, dt)
        self.actuation.prune(float(d.time) - 1.0)
        return self._telemetry()


class HybridArmSim(arm_sim.ArmSim):
    """`ArmSim` whose physics steps run a residual through a `ResidualHook`.

    Same constructor as ArmSim plus the residual; same API (reset, step, telemetry,
    privileged state): ArmSim calls `_before_physics_step` before every mj_step, after
    the step's goals are in `data.ctrl`; here that runs the hook.
    """

    def __init__(
        self, params: ArmParams | None, residual: Residual, *, spec: mujoco.MjSpec | None = None, **kw: Any
    ) -> None:
        if residual.cfg.robot != "arm":
            raise UserError(f"residual for {residual.cfg.robot}, not arm")
        super().__init__(params, spec=spec, **kw)
        self.hook = ResidualHook(residual, self.model)

    def reset(self, *a: Any, **kw: Any) -> dict[str, Any]:
        self.data.qfrc_applied[:] = 0.0
        tel = super().reset(*a, **kw)
        if hasattr(self, "hook"):
            self.hook.reset()
        return tel

    def _before_physics_step(self) -> None:
        if hasattr(self, "hook"):
            self.hook.apply(self.data)


# ---------------------------------------------------------------------------------------
# the entry point
# ---------------------------------------------------------------------------------------
def load_params(robot: str, params: ParamSet | Mapping[str, float] | str | Path | None) -> Any:
    """Parameters of `robot` (its `CarParams` / `ArmParams`) from a parameter set, a
    mapping, a params.yaml path, or None (nominal)."""
    check_robot(robot)
    cls = PARAM_CLASSES[robot]
    if params is None:
        return cls()
    if isinstance(params, cls):
        return params
    if isinstance(params, ParamSet):
        raise UserError(f"parameters for {params.ROBOT}, not {robot}")
    if isinstance(params, Mapping):
        return cls(dict(params), strict=False)
    p = Path(params)
    if not p.is_file():
        raise UserError(f"no such parameter file: {p}")
    return cls.from_yaml(p, strict=False)


def load_simulator(
    robot: str,
    params: ParamSet | Mapping[str, float] | str | Path | None = None,
    residual: Residual | str | Path | None = None,
) -> HybridSim:
    """The simulator every consumer uses: fitted params (nominal if None) and an optional
    residual checkpoint (path or loaded `Residual`, checked to be `robot`'s)."""
    prm = load_params(robot, params)
    res = load_residual(residual, robot) if isinstance(residual, (str, Path)) else residual
    if res is not None and res.cfg.robot != robot:
        raise UserError(f"residual for {res.cfg.robot}, not {robot}")
    return HybridSim(robot, prm, res)


__all__ = [
    "ArmResidualLayout",
    "CarLayout",
    "HybridArmSim",
    "HybridCarSim",
    "HybridSim",
    "ResidualHook",
    "Trajectory",
    "diverged",
    "layout_of",
    "load_params",
    "load_residual",
    "load_simulator",
]

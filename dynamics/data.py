"""Logs + fitted parameters -> what residual training needs, on the residual's period grid.

Pipeline (one *linearisation pass*, repeated by the trainer with the current residual):

1. Each training episode is replayed open loop in the hybrid simulator (fitted params +
   current residual; none on the first pass) from rest, or (the car) in *anchors* of W
   periods restarted from a state estimate (W = 1: the one-step ablation). This gives
   the simulated reduced state s_j at every period start (the robot layout's: the car
   [vx, vy, yaw rate, wheel speed], S = 4; the arm the five joint angles and speeds,
   S = 10), the features the residual saw, and the output f_j it applied.
2. Sensitivities of the simulator over one period, by finite differences in MuJoCo
   (batched `mujoco.rollout`, same warm start as the trajectory):
   A_j = d s_{j+1} / d s_j (S x S) and G_j = d s_{j+1} / d f_j (S x n_out).
3. Targets (`OBSERVED`): the logged signals that sysid compares and that are part of the
   reduced state, at the period starts: the car's yaw rate (minus the fitted gyro bias)
   and wheel speed, the arm's five joint angles and speed readings.

The trainer then unrolls s_j + delta_j with delta_{j+1} = A_j delta_j + G_j (f_theta - f_j)
in torch over many periods: a multi-step loss through a first-order model of the real
simulator around its own rollout (a Gauss-Newton step per pass).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from realsim.errors import UserError
from realsim.residual import STATE_OUTPUTS, Residual, ResidualConfig
from realsim.robots.rc_car import constants as C
from realsim.robots.rc_car import sim as car_sim
from realsim.robots.rc_car.actuation import initial_steer
from realsim.sim import CarLayout, HybridSim, Trajectory, split_state
from sysid.data import LogEpisode, signal_scales

# the car's finite-difference steps of the reduced state [vx, vy, r, w] (kept for callers;
# each layout carries its own: `state_step`), and of each output
STATE_STEP = CarLayout.state_step
OUT_STEP_FRAC = 0.1  # of the output's bound


@dataclass(frozen=True)
class Observed:
    """The logged signals the residual's loss compares with the reduced state.

    signals: sysid signal names (`RobotAdapter.signals`); index: each one's place in the
    layout's reduced state; offsets: signal -> fitted parameter subtracted from the log
    (a sensor bias the simulated state does not carry); weight: each one's weight in the
    loss (its scale is divided by sqrt(weight)).
    """

    signals: tuple[str, ...]
    index: tuple[int, ...]
    offsets: dict[str, str]
    weight: tuple[float, ...] | None = None


_ARM = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll")
OBSERVED: dict[str, Observed] = {
    "rc_car": Observed(("yaw_rate", "wheel_speed"), (2, 3), {"yaw_rate": "gyro_bias"}),
    # the arm: joint angles, and the servos' speed readings at sysid's lower weight
    # (ARM_V_WEIGHT: noisier); both are in its reduced state
    "arm": Observed(tuple(f"q_{j}" for j in _ARM) + tuple(f"v_{j}" for j in _ARM), tuple(range(10)),
                    {}, (1.0,) * 5 + (0.3,) * 5),
}


@dataclass
class Linearised:
    """One pass over E segments, padded to J periods (S reduced-state size, O observed
    signals). Shapes:

    A (E, J, S, S); G (E, J, S, n); fbar (E, J, n); sbar (E, J + 1, S);
    feat (E, J + 1, F); y (E, J + 1, O) targets (`OBSERVED`; NaN: none);
    length (E,) periods per segment; index (O,) the targets' places in the state;
    contracted: the share of periods whose A `linearise` contracted.
    """

    A: np.ndarray
    G: np.ndarray
    fbar: np.ndarray
    sbar: np.ndarray
    feat: np.ndarray
    y: np.ndarray
    length: np.ndarray
    index: tuple[int, ...] = (2, 3)
    contracted: float = 0.0  # share of periods whose A was contracted (`contract`)


def load_episodes(paths: Sequence[str], robot: str = "rc_car") -> list[LogEpisode]:
    """sysid's validated episodes, with sensor samples placed on the device clock.

    The host stamps a sample when it *arrives*; on a busy host samples arrive in bursts,
    and a derivative over host times (the wheel speed) explodes. The device clock
    (sensors/t_device) ticks evenly; it is mapped onto the host timeline by the smallest
    arrival delay seen in the episode (tens of ppm of drift are negligible over an
    episode). Episodes without a device clock keep their host times.
    """
    from realsim.logs import LogReader
    from sysid.data import load_logs
    from sysid.robot_adapter import get_adapter

    ad = get_adapter(robot)
    eps = load_logs(list(paths), ad)
    by_file: dict[str, list[LogEpisode]] = {}
    for e in eps:
        by_file.setdefault(e.file, []).append(e)
    for f, group in by_file.items():
        with LogReader(f) as r:
            for e in group:
                src = r.episode(e.name)
                if "t_device" not in src.sensors:
                    continue
                td = np.asarray(src.sensors["t_device"], dtype=np.float64)
                if len(td) != len(e.sensor_t) or not np.all(np.isfinite(td)) or np.any(np.diff(td) <= 0):
                    continue
                rel = td - td[0]
                e.sensor_t = rel + float(np.min(e.sensor_t - rel))
                e.signals = ad.signals_of(e.sensor_t, e.sensors)
    return eps


def replay_input(e: LogEpisode) -> Any:
    """A logged episode as its robot's replay input, whole, from rest (the car at the
    origin, the arm in its first measured pose): the sysid adapter's `make_input`."""
    from sysid.robot_adapter import get_adapter

    return get_adapter(e.robot).make_input(e.cmd_t, e.cmd_action, e.sensor_t, e.sensors)


def targets_on(e: LogEpisode, t: np.ndarray, params: Mapping[str, float] | float,
               observed: Observed | None = None) -> np.ndarray:
    """Logged observed signals (`OBSERVED`, offsets removed) at times t (NaN outside).

    params: the fitted parameters (for the offsets; a float: the car's gyro bias).
    Shape: (len(t), O)."""
    obs = observed or OBSERVED[e.robot]
    if not isinstance(params, Mapping):
        params = {"gyro_bias": float(params)}
    out = np.full((len(t), len(obs.signals)), np.nan)
    inside = (t >= e.sensor_t[0]) & (t <= e.sensor_t[-1])
    for i, sig in enumerate(obs.signals):
        off = float(params[obs.offsets[sig]]) if sig in obs.offsets else 0.0
        out[inside, i] = np.interp(t[inside], e.sensor_t, e.signals[sig]) - off
    return out


def anchors(sim: HybridSim, e: LogEpisode, window: int) -> list[car_sim.ReplayInput]:
    """Replay inputs of `window` periods each, restarted from a state estimate.

    The estimate at a period start: the car at rest pose with the logged yaw rate, the
    logged wheel speed on every wheel, forward speed = wheel speed x radius, no side
    slip, steering settled on the command acting then. window <= 0: the whole episode
    from rest (exact start).
    """
    if window <= 0:
        return [replay_input(e)]
    if sim.robot != "rc_car":
        raise UserError(f"train-residual {sim.robot}: --anchor must be 0 (whole episodes from rest)")
    m, prm = sim.model, sim.params
    dt = C.TIMESTEP * sim.period
    t0s = np.arange(e.sensor_t[0], e.sensor_t[-1] - dt, window * dt)
    tgt = targets_on(e, t0s, prm["gyro_bias"])
    q0, _ = car_sim.rest_state(m, prm.spec_key())
    lay = sim.layout
    out = []
    for t0, (r, w) in zip(t0s, tgt, strict=True):
        q, v = q0.copy(), np.zeros(m.nv)
        if t0 > e.sensor_t[0]:
            v[lay.root_v] = w * C.WHEEL_RADIUS
            v[lay.root_v + 5] = r
            for j in C.WHEEL_JOINTS:
                v[m.joint(j).dofadr[0]] = w
        sl, sr = initial_steer(e.cmd_t, e.cmd_action, prm, float(t0))
        q[lay.steer_q[0]], q[lay.steer_q[1]] = sl, sr
        t1 = min(float(t0 + window * dt), float(e.sensor_t[-1]))
        keep = (e.sensor_t >= t0) & (e.sensor_t <= t1)
        st = np.r_[t0, e.sensor_t[keep & (e.sensor_t > t0)]]
        end = t0 + window * dt - 1e-6  # cover the window (never before the last sample)
        if st[-1] < end:
            st = np.r_[st, end]
        out.append(
            car_sim.ReplayInput(
                command_t=e.cmd_t,
                action=e.cmd_action,
                sensor_t=st,
                vbat=np.interp(st, e.sensor_t, e.sensors["vbat"]),
                initial_qpos=q,
                initial_qvel=v,
            )
        )
    return out


def sensitivities(
    sim: HybridSim, trajs: Sequence[Trajectory], cfg: ResidualConfig, batch: int = 6000
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Finite-difference A (J, S, S), G (J, S, n) of each trajectory's periods."""
    m, lay, P = sim.model, sim.layout, cfg.period
    names = cfg.outputs
    nout = len(names)
    bounds = np.array(cfg.bounds())
    step = lay.state_step
    S = len(step)
    nstate_pert = S
    nforce_pert = nout if cfg.mode == "force" else 0
    nvar = 1 + nstate_pert + nforce_pert
    # collect every (trajectory, period) start
    rows: list[tuple[int, int]] = [(i, j) for i, tr in enumerate(trajs) for j in range(len(tr.out))]
    N = len(rows)
    ends = np.empty((N, nvar, S))
    for b0 in range(0, N, batch):
        sub = rows[b0 : b0 + batch]
        n = len(sub)
        ctrl = np.empty((n, P, lay.nu))
        for k, (i, j) in enumerate(sub):
            c = trajs[i].ctrl[j * P : (j + 1) * P]
            ctrl[k, : len(c)] = c
            ctrl[k, len(c) :] = c[-1]
        X = np.stack([trajs[i].state[j] for i, j in sub])
        W = np.stack([trajs[i].warmstart[j] for i, j in sub])
        qpos, qvel = split_state(m, X)
        fb = np.stack([trajs[i].out[j] for i, j in sub]) if nout else np.zeros((n, 0))
        if cfg.mode == "force":
            qf0 = lay.force(fb, names, qpos)
        else:
            qf0 = np.zeros((n, m.nv))
            newv = lay.correct(qvel, fb, names, qpos)
            X = X.copy()
            X[:, 1 + m.nq : 1 + m.nq + m.nv] = newv
        states, qfrcs = [X], [qf0]
        for a in range(S):  # state perturbations along the reduced coordinates
            Xp = X.copy()
            ds = np.zeros((n, S))
            ds[:, a] = step[a]
            qp, qv = split_state(m, Xp)
            lay.perturb(qp, qv, ds)
            states.append(Xp)
            qfrcs.append(qf0)
        for k in range(nforce_pert):
            fp = fb.copy()
            fp[:, k] += OUT_STEP_FRAC * bounds[k]
            states.append(X)
            qfrcs.append(lay.force(fp, names, qpos))
        allS = np.concatenate(states)
        endS = sim.advance(
            allS,
            np.tile(W, (nvar, 1)),
            np.tile(ctrl, (nvar, 1, 1)),
            np.concatenate(qfrcs),
        )
        q_e, v_e = split_state(m, endS)
        red = lay.reduced(q_e, v_e).reshape(nvar, n, S)
        ends[b0 : b0 + n] = red.transpose(1, 0, 2)
    base = ends[:, 0]
    A = (ends[:, 1 : 1 + S] - base[:, None]) / step[:, None]  # (N, S in, S out)
    A = A.transpose(0, 2, 1)
    if cfg.mode == "force":
        G = (ends[:, 1 + S :] - base[:, None]) / (OUT_STEP_FRAC * bounds)[:, None]
        G = G.transpose(0, 2, 1)
    else:  # a velocity increment at the period start: G = A restricted to the outputs
        idx = [STATE_OUTPUTS.index(o) for o in names]
        G = A[:, :, idx]
    As, Gs, k = [], [], 0
    for tr in trajs:
        J = len(tr.out)
        As.append(A[k : k + J])
        Gs.append(G[k : k + J])
        k += J
    return As, Gs


def contract(A: np.ndarray, max_radius: float) -> tuple[np.ndarray, float]:
    """Each period's A scaled down to spectral radius `max_radius` where it exceeds it.

    A finite difference taken across a non-smooth event (backlash taken up, a joint
    sticking or breaking free) can show a one-period map that expands a perturbation many
    times, which the simulator's own rollout never does; unrolled over hundreds of periods
    such maps amplify any change of the residual's output without bound and the fit
    diverges. Shape: A (..., S, S). Returns the scaled A and the share of periods scaled.
    """
    rho = np.abs(np.linalg.eigvals(A)).max(axis=-1)
    scale = np.minimum(1.0, max_radius / np.maximum(rho, 1e-12))
    return A * scale[..., None, None], float(np.mean(scale < 1.0)) if scale.size else 0.0


def linearise(
    sim: HybridSim,
    episodes: Sequence[LogEpisode],
    residual: Residual | None,
    cfg: ResidualConfig,
    window: int = 0,
    max_radius: float | None = None,
) -> tuple[Linearised, list[Trajectory]]:
    """One linearisation pass (module doc) over the episodes' anchors.

    max_radius: if given, each period's A is contracted to that spectral radius
    (`contract`); None: the finite differences as they are."""
    segs: list[tuple[LogEpisode, Any]] = []
    for e in episodes:
        for a in anchors(sim, e, window):
            segs.append((e, a))
    if residual is None:
        from realsim.residual import zero_residual

        residual = zero_residual(cfg)
    trajs = sim.rollout([a for _, a in segs], residual=residual)
    if window > 0:  # keep the anchor's own periods only
        trajs = [_cut(tr, window, cfg.period) for tr in trajs]
    As, Gs = sensitivities(sim, trajs, cfg)
    contracted = 0.0
    if max_radius is not None:
        done = [contract(A, max_radius) for A in As]
        As = [a for a, _ in done]
        lengths = [len(a) for a in As]
        contracted = float(np.dot([sh for _, sh in done], lengths) / max(1, sum(lengths)))
    obs = OBSERVED[sim.robot]
    E = len(trajs)
    J = max(len(tr.out) for tr in trajs)
    n = len(cfg.outputs)
    S = len(sim.layout.state_step)
    lin = Linearised(
        A=np.zeros((E, J, S, S)),
        G=np.zeros((E, J, S, n)),
        fbar=np.zeros((E, J, n)),
        sbar=np.zeros((E, J + 1, S)),
        feat=np.zeros((E, J + 1, trajs[0].feat.shape[1])),
        y=np.full((E, J + 1, len(obs.signals)), np.nan),
        length=np.array([len(tr.out) for tr in trajs]),
        index=obs.index,
        contracted=contracted,
    )
    for i, ((e, _), tr) in enumerate(zip(segs, trajs, strict=True)):
        Ji = len(tr.out)
        lin.A[i, :Ji], lin.G[i, :Ji], lin.fbar[i, :Ji] = As[i], Gs[i], tr.out
        q, v = split_state(sim.model, tr.state)
        lin.sbar[i, : Ji + 1] = sim.layout.reduced(q, v)
        lin.feat[i, : Ji + 1] = tr.feat
        lin.y[i, : Ji + 1] = targets_on(e, tr.t, sim.params, obs)
    return lin, trajs


def _cut(tr: Trajectory, periods: int, P: int) -> Trajectory:
    """The first `periods` periods of a trajectory."""
    J = min(periods, len(tr.out))
    return Trajectory(
        tr.state[: J + 1], tr.warmstart[: J + 1], tr.feat[: J + 1], tr.out[:J],
        tr.ctrl[: J * P], tr.t[: J + 1], tr.sens[: J * P], tr.aux[: J + 1],
    )


def scales(episodes: Sequence[LogEpisode]) -> np.ndarray:
    """Loss scales of the observed signals (`OBSERVED`: the car's [yaw rate, wheel
    speed]; std over the training episodes, floored, / sqrt(weight)). Shape: (O,)."""
    s = signal_scales(list(episodes))
    obs = OBSERVED[episodes[0].robot]
    w = np.asarray(obs.weight) if obs.weight is not None else np.ones(len(obs.signals))
    return np.array([s[k] for k in obs.signals]) / np.sqrt(w)


def feature_stats(lin: Linearised) -> tuple[np.ndarray, np.ndarray]:
    """Mean and std of the features over valid periods. Shapes: (F,), (F,)."""
    rows = np.concatenate([lin.feat[i, : lin.length[i] + 1] for i in range(len(lin.length))])
    return rows.mean(axis=0), rows.std(axis=0)

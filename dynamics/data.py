"""Logs + fitted parameters -> what residual training needs, on the residual's period grid.

Pipeline (one *linearisation pass*, repeated by the trainer with the current residual):

1. Each training episode is replayed open loop in the hybrid simulator (fitted params +
   current residual; none on the first pass) from rest, or in *anchors* of W periods
   restarted from a state estimate (W = 1: the one-step ablation). This gives the
   simulated reduced state s_j = [vx, vy, yaw rate, wheel speed] at every period start,
   the features the residual saw, and the output f_j it applied.
2. Sensitivities of the simulator over one period, by finite differences in MuJoCo
   (batched `mujoco.rollout`, same warm start as the trajectory):
   A_j = d s_{j+1} / d s_j (4 x 4) and G_j = d s_{j+1} / d f_j (4 x n_out).
3. Targets: the logged yaw rate (minus the fitted gyro bias) and wheel speed (sysid's
   smoothed signals) at the period starts.

The trainer then unrolls s_j + delta_j with delta_{j+1} = A_j delta_j + G_j (f_theta - f_j)
in torch over many periods: a multi-step loss through a first-order model of the real
simulator around its own rollout (a Gauss-Newton step per pass).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from realsim.residual import Residual, ResidualConfig
from realsim.robots.rc_car import constants as C
from realsim.robots.rc_car import sim as car_sim
from realsim.robots.rc_car.actuation import initial_steer
from realsim.sim import HybridSim, Trajectory, split_state
from sysid.data import LogEpisode, signal_scales, signals_of

# finite-difference steps of the reduced state [vx, vy, r, w] and of each output
STATE_STEP = np.array([0.05, 0.05, 0.1, 1.0])
OUT_STEP_FRAC = 0.1  # of the output's bound


@dataclass
class Linearised:
    """One pass over E segments, padded to J periods. Shapes:

    A (E, J, 4, 4); G (E, J, 4, n); fbar (E, J, n); sbar (E, J + 1, 4);
    feat (E, J + 1, F); y (E, J + 1, 2) targets [yaw rate, wheel speed] (NaN: none);
    length (E,) periods per segment.
    """

    A: np.ndarray
    G: np.ndarray
    fbar: np.ndarray
    sbar: np.ndarray
    feat: np.ndarray
    y: np.ndarray
    length: np.ndarray


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

    eps = load_logs(list(paths), get_adapter(robot))
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
                e.signals = signals_of(e.sensor_t, e.sensors)
    return eps


def replay_input(e: LogEpisode) -> car_sim.ReplayInput:
    """A logged episode as the simulator's replay input (from rest at the origin)."""
    return car_sim.ReplayInput(
        command_t=e.cmd_t,
        action=e.cmd_action,
        sensor_t=e.sensor_t,
        vbat=e.sensors["vbat"],
        enc0=float(e.sensors["enc_rad"][0]),
    )


def targets_on(e: LogEpisode, t: np.ndarray, gyro_bias: float) -> np.ndarray:
    """Logged [yaw rate - bias, wheel speed] at times t (NaN outside). Shape: (len(t), 2)."""
    out = np.full((len(t), 2), np.nan)
    inside = (t >= e.sensor_t[0]) & (t <= e.sensor_t[-1])
    out[inside, 0] = np.interp(t[inside], e.sensor_t, e.signals["yaw_rate"]) - gyro_bias
    out[inside, 1] = np.interp(t[inside], e.sensor_t, e.signals["wheel_speed"])
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
    """Finite-difference A (J, 4, 4), G (J, 4, n) of each trajectory's periods."""
    m, lay, P = sim.model, sim.layout, cfg.period
    names = cfg.outputs
    nout = len(names)
    bounds = np.array(cfg.bounds())
    nstate_pert = 4
    nforce_pert = nout if cfg.mode == "force" else 0
    nvar = 1 + nstate_pert + nforce_pert
    # collect every (trajectory, period) start
    rows: list[tuple[int, int]] = [(i, j) for i, tr in enumerate(trajs) for j in range(len(tr.out))]
    N = len(rows)
    ends = np.empty((N, nvar, 4))
    for b0 in range(0, N, batch):
        sub = rows[b0 : b0 + batch]
        S = np.stack([trajs[i].state[j] for i, j in sub])
        W = np.stack([trajs[i].warmstart[j] for i, j in sub])
        n = len(sub)
        ctrl = np.empty((n, P, C.NU))
        for k, (i, j) in enumerate(sub):
            c = trajs[i].ctrl[j * P : (j + 1) * P]
            ctrl[k, : len(c)] = c
            ctrl[k, len(c) :] = c[-1]
        qpos, qvel = split_state(m, S)
        yaw = lay.yaw(qpos)
        fb = np.stack([trajs[i].out[j] for i, j in sub]) if nout else np.zeros((n, 0))
        if cfg.mode == "force":
            qf0 = lay.to_qfrc(fb, names, yaw)
        else:
            qf0 = np.zeros((n, m.nv))
            newv = lay.correct_state(qvel, fb, names, yaw)
            S = S.copy()
            S[:, 1 + m.nq : 1 + m.nq + m.nv] = newv
        states, qfrcs = [S], [qf0]
        for a in range(4):  # state perturbations along the reduced coordinates
            Sp = S.copy()
            dv = np.zeros((n, 4))
            dv[:, a] = STATE_STEP[a]
            _, qv = split_state(m, Sp)
            qv[:] = lay.correct_state(qv, dv, ("dvx", "dvy", "dr", "dw"), yaw)
            states.append(Sp)
            qfrcs.append(qf0)
        for k in range(nforce_pert):
            fp = fb.copy()
            fp[:, k] += OUT_STEP_FRAC * bounds[k]
            states.append(S)
            qfrcs.append(lay.to_qfrc(fp, names, yaw))
        allS = np.concatenate(states)
        endS = sim.advance(
            allS,
            np.tile(W, (nvar, 1)),
            np.tile(ctrl, (nvar, 1, 1)),
            np.concatenate(qfrcs),
        )
        q_e, v_e = split_state(m, endS)
        red = lay.reduced(q_e, v_e).reshape(nvar, n, 4)
        ends[b0 : b0 + n] = red.transpose(1, 0, 2)
    base = ends[:, 0]
    A = (ends[:, 1:5] - base[:, None]) / STATE_STEP[:, None]  # (N, 4 in, 4 out)
    A = A.transpose(0, 2, 1)
    if cfg.mode == "force":
        G = (ends[:, 5:] - base[:, None]) / (OUT_STEP_FRAC * bounds)[:, None]
        G = G.transpose(0, 2, 1)
    else:  # a velocity increment at the period start: G = A restricted to the outputs
        idx = [("dvx", "dvy", "dr", "dw").index(o) for o in names]
        G = A[:, :, idx]
    As, Gs, k = [], [], 0
    for tr in trajs:
        J = len(tr.out)
        As.append(A[k : k + J])
        Gs.append(G[k : k + J])
        k += J
    return As, Gs


def linearise(
    sim: HybridSim,
    episodes: Sequence[LogEpisode],
    residual: Residual | None,
    cfg: ResidualConfig,
    window: int = 0,
) -> tuple[Linearised, list[Trajectory]]:
    """One linearisation pass (module doc) over the episodes' anchors."""
    segs: list[tuple[LogEpisode, car_sim.ReplayInput]] = []
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
    E = len(trajs)
    J = max(len(tr.out) for tr in trajs)
    n = len(cfg.outputs)
    lin = Linearised(
        A=np.zeros((E, J, 4, 4)),
        G=np.zeros((E, J, 4, n)),
        fbar=np.zeros((E, J, n)),
        sbar=np.zeros((E, J + 1, 4)),
        feat=np.zeros((E, J + 1, trajs[0].feat.shape[1])),
        y=np.full((E, J + 1, 2), np.nan),
        length=np.array([len(tr.out) for tr in trajs]),
    )
    gb = sim.params["gyro_bias"]
    for i, ((e, _), tr) in enumerate(zip(segs, trajs, strict=True)):
        Ji = len(tr.out)
        lin.A[i, :Ji], lin.G[i, :Ji], lin.fbar[i, :Ji] = As[i], Gs[i], tr.out
        q, v = split_state(sim.model, tr.state)
        lin.sbar[i, : Ji + 1] = sim.layout.reduced(q, v)
        lin.feat[i, : Ji + 1] = tr.feat
        lin.y[i, : Ji + 1] = targets_on(e, tr.t, gb)
    return lin, trajs


def _cut(tr: Trajectory, periods: int, P: int) -> Trajectory:
    """The first `periods` periods of a trajectory."""
    J = min(periods, len(tr.out))
    return Trajectory(
        tr.state[: J + 1], tr.warmstart[: J + 1], tr.feat[: J + 1], tr.out[:J],
        tr.ctrl[: J * P], tr.t[: J + 1], tr.sens[: J * P], tr.vbat[: J + 1],
    )


def scales(episodes: Sequence[LogEpisode]) -> np.ndarray:
    """Loss scales [yaw rate, wheel speed] (std over the training episodes, floored)."""
    s = signal_scales(list(episodes))
    return np.array([s["yaw_rate"], s["wheel_speed"]])


def feature_stats(lin: Linearised) -> tuple[np.ndarray, np.ndarray]:
    """Mean and std of the features over valid periods. Shapes: (F,), (F,)."""
    rows = np.concatenate([lin.feat[i, : lin.length[i] + 1] for i in range(len(lin.length))])
    return rows.mean(axis=0), rows.std(axis=0)

"""Must-show: held-out error of `realsim fit` against `mujoco.sysid` on the same data, at equal wall time.

    python experiments/vs_mujoco_sysid.py [--logs-dir /tmp/bench_fit_logs] [--minutes 5]
        [--ours /tmp/bench_fit_out] [--budget S] [--clock cpu|wall] [--eps 1.5e-8 1e-4]

1. Ours: ``realsim fit`` with its defaults on the cached emulated log of
   ``experiments/bench_fit_time.py`` (recorded there if missing). If ``--ours DIR`` holds
   that fit's params.yaml it is reused, else the fit runs here (in-process). Its time is
   mujoco.sysid's budget unless ``--budget`` is given: by default its CPU seconds
   (``--clock cpu``: both run two rollout threads, and on a machine shared with other
   work, CPU time is what equal wall time on idle cores would give each; ``--clock wall``
   for wall seconds).
2. mujoco.sysid: the same training episodes, cut into the same windows (same starts, same
   state estimates) as our refinement stage uses, as ``SystemTrajectory``s of one
   ``ModelSequences``; a ``ParameterDict`` of the parameters its API can express; its
   residual pipeline (``build_residual_fn``: ``sysid_rollout`` = ``mujoco.rollout`` per
   trajectory and per finite-difference column) with a ``build_model`` that writes the
   candidate into the MjSpec and compiles it, and a ``modify_residual`` that computes the
   same compared signals, weights and normalisation as ours; its optimizer
   (``mujoco.sysid.optimize``, backend ``mujoco`` = ``mujoco.minimize.least_squares``)
   from the nominal values, stopped at the budget (best point so far). One run
   per ``--eps`` (its finite-difference step; 1.5e-8 is mujoco.minimize's default).
3. Both parameter sets are scored by the same metric: every held-out episode replayed
   whole, open loop from rest, RMSE of yaw rate and wheel speed (physical units).

What mujoco.sysid cannot express, and so stays at nominal in its run (printed too): the
parameters applied in our command path before MuJoCo (``deadband``, ``steer_max``,
``steer_trim``, ``latency``): a ``SystemTrajectory``'s controls are data, fixed before
the rollout, so a parameter that changes how commands become controls has no place in
its pipeline short of replacing its rollout (``custom_rollout``) by ours. The controls
are therefore computed once with those four at nominal. Spec parameters (MjSpec edits)
and the three sensor biases (added in ``modify_residual``, as its bias signal modifier
would) are free, as in our fit. Windows that start at rest use the nominal model's
settled rest pose (a trajectory's initial state is data too).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import mujoco
import numpy as np
import yaml
from absl import logging as absl_logging
from mujoco import sysid

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_fit_time import load_avg, record_logs  # noqa: E402

from realsim.robots.rc_car import sim  # noqa: E402
from realsim.robots.rc_car.actuation import control_sequence  # noqa: E402
from realsim.robots.rc_car.model import apply_params, build_spec  # noqa: E402
from realsim.robots.rc_car.params import PARAM_BY_NAME, CarParams  # noqa: E402
from sysid.data import (  # noqa: E402
    SIGNALS,
    WEIGHT,
    Segment,
    load_logs,
    make_segments,
    signal_scales,
    signals_of,
    split_holdout,
)
from sysid.fit import FitConfig, run_fit, subset  # noqa: E402
from sysid.objective import rmse  # noqa: E402
from sysid.robot_adapter import get_adapter  # noqa: E402

STEP_LOOP = ("deadband", "steer_max", "steer_trim", "latency")  # applied before MuJoCo
BIASES = {"gyro_bias": "yaw_rate", "accel_bias_x": "accel_x", "accel_bias_y": "accel_y"}


absl_logging.set_verbosity(absl_logging.ERROR)  # our 'sensordata' are the compared signals, not MjSensors


class OutOfTime(Exception):
    """Raised inside the residual when the time budget is spent."""


def build_model_fn() -> sysid.BuildModelFn:
    """``(ParameterDict, MjSpec) -> MjModel``: the candidate's spec parameters written into
    the MjSpec (our ``model.apply_params`` plus the tyre contact pairs), then compiled.
    Compiled models are memoised by value (the same candidate compiles to the same model)."""
    memo: dict[tuple[float, ...], mujoco.MjModel] = {}

    def build(params: sysid.ParameterDict, spec: mujoco.MjSpec) -> mujoco.MjModel:
        vals = {k: float(params[k].value[0]) for k in params.keys()}
        key = tuple(sorted(vals.items()))
        if key not in memo:
            cp = CarParams(vals, strict=False)
            apply_params(spec, cp)
            mu = cp["tyre_mu"]
            for pair in spec.pairs:
                g = mu if "rear" in pair.name else mu * _front_ratio()
                pair.friction = [g, g, 0.005, 0.0001, 0.0001]
                pair.solreffriction = [0.0, -cp["tyre_slip_damping"]]
            memo[key] = spec.compile()
        return memo[key]

    return build


def _front_ratio() -> float:
    from realsim.robots.rc_car import constants as C

    return float(C.FRONT_GRIP_RATIO)


def make_sequences(segs: Sequence[Segment], nominal: CarParams) -> tuple[sysid.ModelSequences, dict[int, int]]:
    """One ModelSequences: per segment, controls on the physics grid (step-loop parameters
    at nominal), the nominal initial state, and the compared signals as 'sensordata'.
    Returns it and a map id(measured TimeSeries) -> segment index."""
    spec = build_spec(nominal)
    model = spec.compile()
    d = mujoco.MjData(model)
    inits, ctrls, meas = [], [], []
    ids: dict[int, int] = {}
    for j, s in enumerate(segs):
        inp = s.inp
        t0, k = float(inp.sensor_t[0]), inp.nstep
        u = control_sequence(inp.command_t, inp.action, nominal, t0, k, inp.sensor_t, inp.vbat)
        u = np.vstack([u, u[-1:]])  # sysid drops the last control: nstep rows are simulated
        ctrls.append(sysid.TimeSeries(t0 + sim.C.TIMESTEP * np.arange(k + 1), u,
                                      sysid.TimeSeries.compute_all_control_mapping(model)))
        q, v = sim.initial_qpos_qvel(model, nominal, inp)
        inits.append(sim._full_state(model, d, q, v, t0))
        y = np.stack([s.episode.signals[n][s.idx] for n in SIGNALS], axis=1)
        ts = sysid.TimeSeries(np.asarray(inp.sensor_t), y, {n: (sysid.SignalType.CustomObs, np.array([i]))
                                                           for i, n in enumerate(SIGNALS)})
        meas.append(ts)
        ids[id(ts)] = j
    ms = sysid.ModelSequences("rc_car", spec, [f"seg{j}" for j in range(len(segs))], inits, ctrls, meas,
                              allow_missing_sensors=True)
    return ms, ids


def make_residual(segs: Sequence[Segment], ids: Mapping[int, int], scales: Mapping[str, float],
                  nominal: CarParams) -> sysid.ModifyResidualFn:
    """modify_residual: predicted sensordata -> our compared signals -> weighted, normalised
    residual (exactly ``sysid.objective.Objective``'s, bias parameters added here)."""
    count = int(sum(s.mask.sum() for s in segs)) * len(SIGNALS)
    sc = {s: scales[s] / WEIGHT[s] for s in SIGNALS}

    def modify(params: sysid.ParameterDict, pred: sysid.TimeSeries, measured: sysid.TimeSeries,
               model: mujoco.MjModel, return_pred_all: bool, **_: object):
        seg = segs[ids[id(measured)]]
        vals = {**nominal, **{k: float(params[k].value[0]) for k in params.keys()}}
        inp = seg.inp
        out = sim.sensors_on_times(pred.data[: inp.nstep], float(inp.sensor_t[0]), inp, vals)
        ssig = signals_of(np.asarray(inp.sensor_t), out)
        parts = [((ssig[s] - seg.episode.signals[s][seg.idx]) / sc[s])[seg.mask] for s in SIGNALS]
        r = np.concatenate(parts) / math.sqrt(count)
        r = np.where(np.isfinite(r), r, 1e3)
        y = np.stack([ssig[s] for s in SIGNALS], axis=1)
        return r, sysid.TimeSeries(measured.times, y, measured.signal_mapping), measured

    return modify


def run_sysid(segs: Sequence[Segment], scales: Mapping[str, float], names: Sequence[str], budget: float,
              eps: float, nthread: int = 2, clock: str = "cpu") -> tuple[dict[str, float], dict[str, float]]:
    """mujoco.sysid.optimize from nominal, stopped after ``budget`` s of ``clock`` ("cpu":
    this process's CPU time, all threads; "wall"). Returns (best values, stats)."""
    now = time.process_time if clock == "cpu" else time.perf_counter
    nominal = CarParams()
    pd = sysid.ParameterDict()
    for n in names:
        p = PARAM_BY_NAME[n]
        pd.add(sysid.Parameter(n, nominal=p.nominal, min_value=p.low, max_value=p.high))
    ms, ids = make_sequences(segs, nominal)
    fn = sysid.build_residual_fn(models_sequences=[ms], build_model=build_model_fn(),
                                 modify_residual=make_residual(segs, ids, scales, nominal),
                                 n_threads=nthread, resample_true=False)
    t_start, w_start = now(), time.perf_counter()
    best: dict[str, object] = {"cost": math.inf, "x": pd.as_vector().copy()}
    stats = {"residual_calls": 0, "columns": 0}

    def timed(x: np.ndarray, params: sysid.ParameterDict, **kw: object):
        if now() - t_start > budget:
            raise OutOfTime
        res, pr, rc = fn(x, params, **kw)
        stats["residual_calls"] += 1
        X = x.reshape(len(x), -1)  # columns: the candidates of this call (finite differences too)
        stats["columns"] += X.shape[1]
        costs = sum(np.sum(np.reshape(r, (len(r), -1)) ** 2, axis=0) for r in res)
        k = int(np.argmin(costs))
        if costs[k] < best["cost"]:
            best.update(cost=float(costs[k]), x=X[:, k].copy())
        return res, pr, rc

    try:
        sysid.optimize(pd, timed, optimizer="mujoco", verbose=False, max_iters=1000, eps=eps)
        stopped = "converged"
    except OutOfTime:
        stopped = "budget"
    wall, used = time.perf_counter() - w_start, now() - t_start
    pd.update_from_vector(np.asarray(best["x"]))
    vals = {n: float(pd[n].value[0]) for n in names}
    stats.update(wall=round(wall, 1), used=round(used, 1), cost=best["cost"], stopped=stopped)
    return vals, stats


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--logs-dir", default="/tmp/bench_fit_logs")
    ap.add_argument("--minutes", type=float, default=5.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--ours", default="/tmp/bench_fit_out", help="our fit's DIR (reused if it holds params.yaml)")
    ap.add_argument("--budget", type=float, default=None, help="mujoco.sysid's seconds (default: our fit's)")
    ap.add_argument("--clock", choices=("cpu", "wall"), default="cpu",
                    help="budget in CPU seconds of the process (default: load-independent on a shared "
                         "machine; both run 2 rollout threads) or wall seconds")
    ap.add_argument("--eps", type=float, nargs="+", default=[np.finfo(float).eps ** 0.5, 1e-4])
    a = ap.parse_args()
    log = record_logs(Path(a.logs_dir), a.minutes, a.seed)
    ad = get_adapter("rc_car")
    cfg = FitConfig("rc_car", [str(log)], a.ours)
    pfile = Path(a.ours) / "params.yaml"
    doc = yaml.safe_load(pfile.read_text()) if pfile.exists() else None
    if doc is None or doc["fit"]["logs"].keys() != {str(log)}:
        print(f"running our fit ({load_avg()})")
        run_fit(cfg, log=lambda s: None)
        doc = yaml.safe_load(pfile.read_text())
    ours = {n: float(e["value"]) for n, e in doc["params"].items()}
    wall_ours = float(doc["fit"]["wall_s"]["total"])
    cpu_ours = float(doc["fit"].get("cpu_s", {}).get("process", wall_ours))
    budget = a.budget if a.budget is not None else (cpu_ours if a.clock == "cpu" else wall_ours)

    episodes = load_logs([str(log)], ad)
    train, held = split_holdout(episodes, cfg.holdout)
    scales = signal_scales(train)
    segs = subset(make_segments(train, ad, cfg.window), cfg.refine_seconds)
    free = [n for n, e in doc["params"].items() if e.get("fitted", True)]
    names = [n for n in free if n not in STEP_LOOP]
    held_segs = make_segments(held, ad, 0.0)

    rows = [("nominal", ad.nominal, "-"),
            (f"realsim fit ({len(free)} params)", ours, f"{wall_ours:.0f}/{cpu_ours:.0f}")]
    extra = []
    for eps in a.eps:
        print(f"mujoco.sysid eps={eps:.3g}: {len(names)} params, {len(segs)} windows "
              f"({sum(float(s.inp.sensor_t[-1] - s.inp.sensor_t[0]) for s in segs):.0f} s), budget {budget:.1f} "
              f"{a.clock} s, "
              f"{load_avg()}", flush=True)
        vals, st = run_sysid(segs, scales, names, budget, eps, clock=a.clock)
        cpu_used = st["used"] if a.clock == "cpu" else float("nan")
        rows.append((f"mujoco.sysid eps={eps:.2g} ({len(names)} params)", {**ad.nominal, **vals},
                     f"{st['wall']:.0f}/{cpu_used:.0f}"))
        extra.append(f"  eps={eps:.3g}: stopped by {st['stopped']}, {st['residual_calls']} residual calls, "
                     f"{st['columns']} parameter sets simulated, training cost {st['cost']:.4g}")
    res, _ = rmse(ad, held_segs, [r[1] for r in rows], 2)
    print(f"\nheld-out ({len(held)} episodes, whole, open loop from rest); {load_avg()}")
    print(f"{'':38s} {'wall/CPU s':>10s} {'yaw_rate RMSE':>14s} {'wheel_speed RMSE':>17s}")
    for (label, _, wall), r in zip(rows, res, strict=True):
        rn = res[0]
        print(f"{label:38s} {wall:>10s} {r['yaw_rate']:8.4f} ({r['yaw_rate'] / rn['yaw_rate']:.2f}x) "
              f"{r['wheel_speed']:9.3f} ({r['wheel_speed'] / rn['wheel_speed']:.2f}x)")
    print("\n".join(extra))
    print(f"left at nominal for mujoco.sysid (applied in our command path before MuJoCo; its "
          f"trajectories' controls are fixed data): {', '.join(n for n in free if n in STEP_LOOP)}")
    print(f"cores {os.cpu_count()}")


if __name__ == "__main__":
    main()

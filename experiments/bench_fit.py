"""Benchmark: objective evaluations/s vs raw mujoco.rollout on the same batch, and fit wall time.

    python experiments/bench_fit.py [--minutes 5] [--skip-fit]

1. Throughput: 16 candidate parameter sets x 20 s of synthetic logs, evaluated by
   ``sysid.objective.Objective.losses`` (controls, rollout, sensor mapping, residual) vs
   the same batch through ``rc_car.sim.rollout_controls`` (raw ``mujoco.rollout`` only,
   controls and initial states prepared beforehand). Target ratio >= 0.8.
2. Wall time of a fit of all uncertain parameters on ``--minutes`` of synthetic logs
   (target <= 60 s on 2 cores), with the held-out RMSE nominal -> fitted.

The must-show figures on emulated (not synthetic) logs come from
``experiments/bench_fit_time.py`` (wall and CPU time of ``realsim fit`` on 5 minutes of
``realsim emulate rc_car`` logs) and ``experiments/vs_mujoco_sysid.py`` (held-out error
against ``mujoco.sysid`` on the same data and parameters at equal time).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from realsim.robots.rc_car import sim
from realsim.robots.rc_car.actuation import control_sequence
from realsim.robots.rc_car.model import cached_model
from realsim.robots.rc_car.params import CarParams
from sysid.data import load_logs, make_segments, signal_scales
from sysid.fit import FitConfig, run_fit
from sysid.objective import Objective
from sysid.robot_adapter import get_adapter
from sysid.synth import write_synthetic

TRUE = {"motor_gain": 0.06, "back_emf": 0.082, "rolling_resistance": 0.04, "steer_max": 0.42,
        "steer_trim": 0.02, "latency": 0.03, "gyro_bias": 0.01, "com_x": 0.105, "tyre_mu": 0.7}


def throughput(log: Path, k: int = 16) -> None:
    ad = get_adapter("rc_car")
    eps = load_logs([log], ad)[:2]
    segs = make_segments(eps, ad, 0.0)
    obj = Objective(ad, segs, signal_scales(eps), ad.names, {}, 2)
    U = np.random.default_rng(0).uniform(0.2, 0.8, (k, len(ad.names)))
    obj.losses(U[:2])  # warm up pools
    t = time.perf_counter()
    obj.losses(U)
    t_obj = time.perf_counter() - t
    params = [CarParams(obj.to_params(u), strict=False) for u in U]
    models, init, ctrl = [], [], []
    import mujoco
    d = mujoco.MjData(cached_model(params[0]))
    for p in params:
        m = cached_model(p)
        for s in segs:
            inp = s.inp
            q, v = sim.initial_qpos_qvel(m, p, inp)
            models.append(m)
            init.append(sim._full_state(m, d, q, v, float(inp.sensor_t[0])))
            ctrl.append(control_sequence(inp.command_t, inp.action, p, float(inp.sensor_t[0]),
                                         inp.nstep, inp.sensor_t, inp.vbat))
    n = min(len(c) for c in ctrl)
    t = time.perf_counter()
    sim.rollout_controls(models, np.array(init), np.array([c[:n] for c in ctrl]), 2)
    t_raw = time.perf_counter() - t
    secs = sum(float(s.inp.sensor_t[-1] - s.inp.sensor_t[0]) for s in segs)
    print(f"batch: {k} candidates x {secs:.0f} s of logs")
    print(f"objective: {k / t_obj:.2f} evaluations/s ({t_obj:.2f} s)")
    print(f"raw mujoco.rollout: {k / t_raw:.2f} evaluations/s ({t_raw:.2f} s)")
    print(f"ratio objective/raw: {t_raw / t_obj:.2f} (target >= 0.8)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=5.0)
    ap.add_argument("--skip-fit", action="store_true")
    a = ap.parse_args()
    ad = get_adapter("rc_car")
    with tempfile.TemporaryDirectory() as tmp:
        n = int(round(a.minutes * 60 / 10))
        log = write_synthetic(Path(tmp) / "bench.h5", {**ad.nominal, **TRUE}, episodes=n, seconds=10.0, seed=7)
        throughput(log)
        if a.skip_fit:
            return
        t = time.perf_counter()
        res = run_fit(FitConfig("rc_car", [str(log)], str(Path(tmp) / "fit")), log=lambda s: None)
        wall = time.perf_counter() - t
        print(f"fit of {len(res.names)} parameters on {a.minutes:g} min of logs: {wall:.1f} s wall "
              f"(target <= 60 s); stages {res.meta['wall_s']}")
        h = res.rmse.get("heldout", {})
        for s in ("yaw_rate", "wheel_speed"):
            if h:
                print(f"held-out {s} RMSE: nominal {h['nominal'][s]:.4g} -> fitted {h['fitted'][s]:.4g}")
        for nm in res.names:
            tv = {**ad.nominal, **TRUE}[nm]
            print(f"  {nm:20s} fitted {res.fitted[nm]:.4g} true {tv:.4g} identifiable {res.identifiable[nm]}")


if __name__ == "__main__":
    main()

"""Cost of a hybrid (fitted + residual) open-loop step against a plain MuJoCo step, batched.

    python experiments/bench_hybrid.py [--batch 16] [--seconds 10] [--repeat 3] [--members 1]

Plain: `robots.rc_car.sim.rollout_controls` (one `mujoco.rollout` call over the batch,
serial and with 2 threads). Hybrid: `realsim.sim.HybridSim.rollout` with the default
residual (history 5, 64x64 MLP, held 10 steps): per trajectory one rollout call per
period (its exact solver warm start carries over), one batched forward per period for
the whole batch, the trajectories split over ``nthread`` worker threads. Prints
microseconds per trajectory-step and the ratios at equal thread counts; the best of
`repeat` runs is taken (the machine is shared: quote `uptime` with the figures).
"""

from __future__ import annotations

import argparse
import time

import mujoco
import numpy as np
import torch

from realsim.residual import Residual, ResidualConfig, ResidualNet
from realsim.robots.rc_car import sim as car_sim
from realsim.robots.rc_car.params import CarParams
from realsim.sim import HybridSim
from sysid.synth import car_commands


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--members", type=int, default=1,
                    help="residual ensemble size (train-residual --ensemble K): K networks averaged")
    a = ap.parse_args()
    torch.set_num_threads(1)
    p = CarParams()
    eps = []
    for k in range(a.batch):
        ct, ca = car_commands(("steps", "chirp", "prbs", "smooth")[k % 4], a.seconds, k)
        st = np.arange(0.01, a.seconds, 0.02)
        eps.append(car_sim.ReplayInput(ct, ca, st, np.full(len(st), 8.0)))
    m = car_sim.cached_model(p)
    d = mujoco.MjData(m)
    K = eps[0].nstep
    ctrl = np.stack([car_sim.control_sequence(e.command_t, e.action, p, 0.01, K, e.sensor_t, e.vbat) for e in eps])
    init = np.stack([car_sim._full_state(m, d, *car_sim.initial_qpos_qvel(m, p, e), 0.01) for e in eps])
    net = ResidualNet(ResidualConfig(members=a.members))
    with torch.no_grad():  # a non-zero output from every member
        for member in (net.ens if net.ens is not None else [net]):
            member.head.weight.normal_(0, 0.3)
    res = Residual(net.eval(), {})
    hyb = HybridSim("rc_car", p, res)
    steps = a.batch * K

    def best(f) -> float:  # noqa: ANN001
        ts = []
        for _ in range(a.repeat):
            t = time.perf_counter()
            f()
            ts.append(time.perf_counter() - t)
        return min(ts) / steps * 1e6

    plain1 = best(lambda: car_sim.rollout_controls([m] * a.batch, init, ctrl, nthread=1))
    plain2 = best(lambda: car_sim.rollout_controls([m] * a.batch, init, ctrl, nthread=2))
    zero = best(lambda: hyb.rollout(eps, residual=None))
    hybrid1 = best(lambda: hyb.rollout(eps, nthread=1))
    hybrid2 = best(lambda: hyb.rollout(eps, nthread=2))
    print(f"batch {a.batch} x {K} steps ({a.seconds} s); us per trajectory-step, best of {a.repeat}")
    print(f"plain mujoco.rollout, 1 thread   : {plain1:7.2f}")
    print(f"plain mujoco.rollout, 2 threads  : {plain2:7.2f}")
    print(f"hybrid, zero force (no network)  : {zero:7.2f}  ({zero / plain1:.2f} x plain, 1 thread)")
    print(f"hybrid with residual, 1 thread   : {hybrid1:7.2f}  ({hybrid1 / plain1:.2f} x plain, 1 thread)")
    print(f"hybrid with residual, 2 threads  : {hybrid2:7.2f}  ({hybrid2 / plain2:.2f} x plain, 2 threads)")


if __name__ == "__main__":
    main()

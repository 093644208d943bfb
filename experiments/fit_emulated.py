"""Must-show: fit the simulator to logs of the emulated car, judge it on held-out episodes.

    python experiments/fit_emulated.py [--seed 1] [--reality R.yaml] [--per-driver 3] [--seconds 10] [--out DIR]
    python experiments/fit_emulated.py --logs a.h5 b.h5 [--out DIR]   # existing logs

Records ``--per-driver`` episodes per excitation driver (steps, chirp, prbs, smooth) from
``realsim emulate rc_car`` through ``realsim record`` (the user's path: serial port and
camera only; the emulator's true parameters are never read: it does not serve them),
fits with the default ``realsim fit`` settings on the training episodes (every 4th is
held out), and prints the held-out open-loop RMSE of yaw rate and wheel speed, nominal
vs fitted, and their ratio (target <= 0.5). The metric: every held-out episode replayed
WHOLE (10 s) open loop from rest at its start, from the recorded commands alone,
compared on all its sensor samples (the same samples and smoothing for nominal and
fitted; RMSE over the pooled samples of the held-out episodes).

    python experiments/fit_emulated.py --reality experiments/reality_edge.yaml   # edge car
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from _emulated import record_emulated


def record(out: Path, seed: int, per_driver: int, seconds: float, reality: str | None = None) -> Path:
    """Record per_driver episodes of every driver into one log; returns its path."""
    tag = f"_{Path(reality).stem}" if reality else ""
    return record_emulated(out / f"emu_seed{seed}{tag}.h5", seed, per_driver, seconds, reality)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--logs", nargs="*", help="existing rc_car logs (skip recording)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--reality", default=None, help="reality YAML for the emulator (realsim emulate --reality)")
    ap.add_argument("--per-driver", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--out", default="/tmp/fit_emulated")
    ap.add_argument("--trials", type=int, default=None, help="search trials (default: realsim fit's)")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    logs = [str(p) for p in a.logs] if a.logs else [str(record(out, a.seed, a.per_driver, a.seconds, a.reality))]
    print(f"logs: {' '.join(logs)} ({time.perf_counter() - t:.0f} s to record)")

    from sysid.fit import FitConfig, run_fit

    kw = {"trials": a.trials} if a.trials is not None else {}
    t = time.perf_counter()
    res = run_fit(FitConfig("rc_car", logs, str(out / "fit"), **kw), log=lambda s: print(f"  {s}"))
    print(f"fit: {len(res.names)} parameters, {len(res.train)} training / {len(res.held)} held-out "
          f"episodes, {time.perf_counter() - t:.1f} s wall, stages {res.meta['wall_s']}")
    for n in res.names:
        ci = f"+- {res.half[n]:.3g}" if res.identifiable[n] else "not identifiable (see params.yaml)"
        print(f"  {n:20s} {res.fitted[n]:.4g} {ci}  (nominal {res.prior[n]:.4g})")
    h = res.rmse["heldout"]
    for s in ("yaw_rate", "wheel_speed"):
        nom, fit = h["nominal"][s], h["fitted"][s]
        print(f"held-out {s} RMSE: nominal {nom:.4g} -> fitted {fit:.4g}, ratio {fit / nom:.2f} "
              f"(target <= 0.5)")
    print(f"{out / 'fit' / 'params.yaml'}")


if __name__ == "__main__":
    main()

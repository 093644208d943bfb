"""Must-show: the learned residual on held-out episodes of the emulated car.

    python experiments/residual_heldout.py --seed 3 --logs-dir /tmp/residual_heldout \
        [--per-driver 6] [--seconds 10] [--trials 60] [--passes 3] [--epochs 40] \
        [--history 10] [--horizon 0] [--batch 4] [--max-out mz=0.6,fy=4]

1. records ``--per-driver`` episodes of every excitation driver (steps, chirp, prbs,
   smooth) from ``realsim emulate rc_car --seed N`` through ``realsim record`` (the user's
   path: serial port and camera only), cached as LOGS_DIR/emu_seed{N}_{per}x{seconds}s.h5;
2. fits with ``realsim fit rc_car --trials T`` (every 4th episode held out, the default),
   cached as LOGS_DIR/fit_seed{N}_{per}x{seconds}s_t{T}/params.yaml;
3. trains the residual with ``realsim train-residual`` on the same log and split
   (LOGS_DIR/residual_seed{N}_....pt; retrained unless ``--reuse``);
4. replays every held-out episode WHOLE (10 s) open loop from rest, from its recorded
   commands alone, in the nominal, fitted and fitted + residual simulators, and prints
   the pooled RMSE of yaw rate and wheel speed (sysid's smoothed signals, device-clock
   sample times), the ratios to fit alone (target <= 0.5) and the episodes that diverged
   (non-finite state, |v| > 15 m/s or |yaw rate| > 30 rad/s at any period).

The emulator's true parameters are never read. Writes LOGS_DIR/heldout_seed{N}....json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from _emulated import record_emulated


def run(cmd: list[str]) -> str:
    """Run a realsim verb; its stdout (stderr shown on failure)."""
    print("$ " + " ".join(cmd), flush=True)
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"failed ({r.returncode}): {r.stderr.strip()[-800:]}")
    return r.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=3, help="emulator seed (realsim emulate --seed)")
    ap.add_argument("--logs-dir", default="/tmp/residual_heldout", help="cache of logs, fits, residuals")
    ap.add_argument("--per-driver", type=int, default=6)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--trials", type=int, default=60, help="realsim fit --trials")
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=40)
    ap.add_argument("--history", type=int, default=10, help="realsim train-residual --history (10: the car's default)")
    ap.add_argument("--horizon", type=int, default=0)
    ap.add_argument("--batch", type=int, default=4, help="realsim train-residual --batch")
    ap.add_argument("--max-out", default="", help="realsim train-residual --max-out (e.g. mz=0.6,fy=4)")
    ap.add_argument("--train-seed", type=int, default=0)
    ap.add_argument("--reuse", action="store_true", help="reuse an existing residual checkpoint")
    ap.add_argument("--data-only", action="store_true", help="record and fit, then stop")
    a = ap.parse_args()
    d = Path(a.logs_dir)
    d.mkdir(parents=True, exist_ok=True)
    tag = f"seed{a.seed}_{a.per_driver}x{a.seconds:g}s"
    log = d / f"emu_{tag}.h5"
    if not log.exists():
        t = time.perf_counter()
        record_emulated(log, a.seed, a.per_driver, a.seconds)
        print(f"recorded {log} in {time.perf_counter() - t:.0f} s", flush=True)
    fit = d / f"fit_{tag}_t{a.trials}"
    params = fit / "params.yaml"
    if not params.exists():
        t = time.perf_counter()
        run([sys.executable, "-m", "realsim", "fit", "rc_car", "--logs", str(log), "--out", str(fit),
             "--trials", str(a.trials)])
        print(f"fitted {params} in {time.perf_counter() - t:.0f} s", flush=True)
    if a.data_only:
        return
    mtag = ("_m" + a.max_out.replace("=", "").replace(",", "_")) if a.max_out else ""
    rtag = f"h{a.history}_z{a.horizon}_p{a.passes}_e{a.epochs}_b{a.batch}{mtag}_s{a.train_seed}"
    ckpt = d / f"residual_{tag}_t{a.trials}_{rtag}.pt"
    if not (a.reuse and ckpt.exists()):
        t = time.perf_counter()
        out = run([sys.executable, "-m", "realsim", "train-residual", "rc_car", "--params", str(params),
                   "--logs", str(log), "--out", str(ckpt), "--passes", str(a.passes),
                   "--epochs", str(a.epochs), "--history", str(a.history), "--horizon", str(a.horizon),
                   "--batch", str(a.batch), "--seed", str(a.train_seed)]
                  + (["--max-out", a.max_out] if a.max_out else []))
        print(out.strip().splitlines()[-1], f"({time.perf_counter() - t:.0f} s)", flush=True)

    from dynamics.data import load_episodes
    from dynamics.train import evaluate
    from realsim.sim import load_simulator
    from sysid.data import split_holdout

    eps = load_episodes([str(log)])
    train, held = split_holdout(eps, "0.25")
    rows = {
        "nominal": evaluate(load_simulator("rc_car", None, None), held, None),
        "fitted": evaluate(load_simulator("rc_car", params, None), held, None),
    }
    sim = load_simulator("rc_car", params, ckpt)
    rows["fitted + residual"] = evaluate(sim, held, sim.residual)
    fa = rows["fitted"]
    print(f"\nheld-out: {len(held)} episodes of {a.seconds:g} s (trained on {len(train)}), whole-episode open loop")
    print("| simulator | yaw-rate RMSE (rad/s) | / fit alone | wheel-speed RMSE (rad/s) | / fit alone | diverged |")
    print("|---|---|---|---|---|---|")
    for name, m in rows.items():
        print(f"| {name} | {m['rmse_yaw_rate']:.4f} | {m['rmse_yaw_rate'] / fa['rmse_yaw_rate']:.2f} "
              f"| {m['rmse_wheel_speed']:.3f} | {m['rmse_wheel_speed'] / fa['rmse_wheel_speed']:.2f} "
              f"| {len(m['diverged'])}/{m['episodes']} |")
    (d / f"heldout_{tag}_t{a.trials}_{rtag}.json").write_text(json.dumps(
        {k: {kk: v for kk, v in m.items() if kk != "per_episode"} for k, m in rows.items()}, indent=1))


if __name__ == "__main__":
    main()

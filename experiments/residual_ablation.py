"""Residual ablation: one-step vs multi-step loss, force injection vs state correction,
with vs without history input. Held-out open-loop RMSE (whole 10 s episodes from rest).

    python experiments/residual_ablation.py --params FIT/params.yaml --logs LOG.h5 \
        --out experiments/out/ablation [--passes 3] [--epochs 40] [--only 0,2]

LOG.h5 and FIT/params.yaml: what `experiments/residual_heldout.py --data-only` records
and fits (24 episodes of 10 s from `realsim emulate rc_car --seed 3`, excite drivers;
`realsim fit` on the same log). Variants can run as separate processes (``--only``,
each writing its own OUT/variant{i}.json); the table is rebuilt from every
OUT/variant*.json present. Every variant trains on the
same deterministic split (every 4th episode held out) and is compared with the fitted
simulator alone. Writes OUT/ablation.md and OUT/ablation.json.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from dynamics.data import load_episodes
from dynamics.train import TrainConfig, train_residual
from realsim.residual import FORCE_OUTPUTS, STATE_OUTPUTS

VARIANTS: dict[str, dict] = {
    "multi-step (whole episode), force, the robot's history (default)": {},
    "one-step loss (1-period segments from a state estimate)": {"horizon": 1, "anchor": 1},
    "state correction": {"mode": "state", "outputs": STATE_OUTPUTS},
    "no history (1 sample)": {"history": 1},
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--params", required=True)
    ap.add_argument("--logs", nargs="+", required=True)
    ap.add_argument("--out", default="experiments/out/ablation")
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=40)
    ap.add_argument("--batch", type=int, default=4, help="segments per optimiser step")
    ap.add_argument("--only", help="comma-separated variant indices (0-based)")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    eps = load_episodes(a.logs)
    names = list(VARIANTS)
    pick = [int(i) for i in a.only.split(",")] if a.only else range(len(names))
    for i in pick:
        name = names[i]
        kw = {"outputs": FORCE_OUTPUTS, **VARIANTS[name]}
        cfg = TrainConfig(params=a.params, logs=a.logs, out=str(out / f"variant{i}.pt"),
                          passes=a.passes, epochs=a.epochs, batch=a.batch, logdir=str(out / f"tb{i}"), **kw)
        print(f"== {name}", flush=True)
        r = train_residual(cfg, episodes=eps, log=lambda s: print("  " + s, flush=True))
        fa, fr = r.metrics["fit_alone"]["held"], r.metrics["fit_plus_residual"]["held"]
        row = {"index": i, "variant": name, **{k: v for k, v in kw.items() if k != "outputs"},
               "fit_yaw": fa["rmse_yaw_rate"], "fit_wheel": fa["rmse_wheel_speed"],
               "res_yaw": fr["rmse_yaw_rate"], "res_wheel": fr["rmse_wheel_speed"],
               "diverged": len(fr["diverged"]), "episodes": fr["episodes"]}
        (out / f"variant{i}.json").write_text(json.dumps(row, indent=1))
    rows = sorted((json.loads(f.read_text()) for f in out.glob("variant*.json")), key=lambda r: r["index"])
    (out / "ablation.json").write_text(json.dumps(rows, indent=1))
    lines = ["| variant | held-out yaw RMSE (rad/s) | ratio | held-out wheel RMSE (rad/s) | ratio | diverged |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['variant']} | {r['res_yaw']:.3f} (fit {r['fit_yaw']:.3f}) | {r['res_yaw'] / r['fit_yaw']:.2f} "
                     f"| {r['res_wheel']:.2f} (fit {r['fit_wheel']:.2f}) | {r['res_wheel'] / r['fit_wheel']:.2f} "
                     f"| {r['diverged']}/{r['episodes']} |")
    (out / "ablation.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

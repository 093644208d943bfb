"""Validation loss against closed-loop success, per checkpoint (why val loss never picks a model).

    python experiments/valloss_vs_success.py CKPT_epoch*.pt [--sim-episodes 50] [--emu-episodes 20]
        [--resume]

The checkpoints come from `realsim train-student ... --set keep_all=true` (each
carries its epoch's validation loss). For each: robust closed-loop sim success
(fresh seeds) and, unless --emu-episodes 0, success on `realsim emulate rc_car`
from JDG verdicts (deploy, real time: 10 s per episode). Prints and writes a
table and the Spearman rank correlations of val loss with each success. --resume keeps
the rows already in --out/valloss_vs_success.json (same checkpoint path) and evaluates
only the new checkpoints, so the emulated runs (real time) can be done in pieces.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from scipy.stats import spearmanr  # noqa: E402

from student.evaluate import Evaluator  # noqa: E402


def emulated_success(ckpt: str, episodes: int, seed: int, seconds: float) -> float:
    from hardware.emulators.launch import EmulatorProcess
    from student.deploy import deploy

    with tempfile.TemporaryDirectory() as d, EmulatorProcess("rc_car", seed=seed) as emu:
        _, wins, judged = deploy(ckpt, emu.port, emu.camera, episodes, Path(d) / "dep.h5",
                                 seconds=seconds)
    return wins / judged if judged else float("nan")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("checkpoints", nargs="+")
    p.add_argument("--sim-episodes", type=int, default=50)
    p.add_argument("--emu-episodes", type=int, default=20)
    p.add_argument("--emu-seed", type=int, default=5)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--seed", type=int, default=300_000)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--out", default="experiments/results")
    p.add_argument("--resume", action="store_true", help="reuse rows of a previous run")
    a = p.parse_args(argv)
    prev: dict[str, dict] = {}
    js = Path(a.out) / "valloss_vs_success.json"
    if a.resume and js.is_file():
        prev = {r["checkpoint"]: r for r in json.loads(js.read_text())["rows"]}
    rows = []
    with Evaluator(a.workers) as ev:
        for c in a.checkpoints:
            if c in prev:
                rows.append(prev[c])
                continue
            ck = torch.load(c, map_location="cpu", weights_only=True)
            m = ck["meta"]
            r = ev.evaluate(ck, a.sim_episodes, a.seed, action_noise=ck["config"]["eval_action_noise"])
            row = {"checkpoint": c, "epoch": m.get("epoch"), "val_loss": m.get("val_loss"),
                   "sim_success": r.success_rate, "sim_episodes": len(r.episodes)}
            if a.emu_episodes > 0:
                row["emu_success"] = emulated_success(c, a.emu_episodes, a.emu_seed, a.seconds)
                row["emu_episodes"] = a.emu_episodes
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
            Path(a.out).mkdir(parents=True, exist_ok=True)
            js.write_text(json.dumps({"rows": rows, "spearman": None}, indent=1))
    v = np.array([r["val_loss"] for r in rows], float)
    corr = {"sim": spearmanr(v, [r["sim_success"] for r in rows]).statistic}
    if a.emu_episodes > 0:
        corr["emu"] = spearmanr(v, [r["emu_success"] for r in rows]).statistic
    md = ["| epoch | val loss | sim success | emulated-car success |", "|---|---|---|---|"]
    for r in rows:
        emu = f"{r['emu_success']:.1%} ({r['emu_episodes']})" if "emu_success" in r else "-"
        md.append(f"| {r['epoch'] + 1} | {r['val_loss']:.4f} | {r['sim_success']:.1%} "
                  f"({r['sim_episodes']}) | {emu} |")
    md += ["", f"Spearman(val loss, sim success) = {corr['sim']:.2f}"]
    if "emu" in corr:
        md.append(f"Spearman(val loss, emulated success) = {corr['emu']:.2f}")
    md.append("(a good model selector would correlate strongly negatively: lower loss, higher success)")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "valloss_vs_success.md").write_text("\n".join(md) + "\n")
    (out / "valloss_vs_success.json").write_text(json.dumps({"rows": rows, "spearman": corr}, indent=1))
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

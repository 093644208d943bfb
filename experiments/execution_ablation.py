"""Execution-strategy ablation: one trained student, five ways of executing its chunks.

    python experiments/execution_ablation.py CKPT [--episodes 50] [--out experiments/results]
        [--horizons 1,3]

Evaluates the same checkpoint in the simulator under the robust evaluation of
training (action noise, the car's distractor on/off, fresh seeds; the checkpoint's
robot's task environment and episode length) with: single step, chunk open loop,
receding horizon (n of k, and each n in --horizons), temporal ensembling m = 0.01 and
m = 0.1.
Writes execution_ablation.md / .json into --out and prints the table.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")

import torch  # noqa: E402

from student.config import StudentConfig  # noqa: E402
from student.evaluate import Evaluator, eval_env_kwargs  # noqa: E402
from student.execution import RecedingHorizon, SingleStep, TemporalEnsemble  # noqa: E402
from student.robots import robot_spec  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("checkpoint")
    p.add_argument("--episodes", type=int, default=50)
    p.add_argument("--seed", type=int, default=200_000, help="first evaluation seed")
    p.add_argument("--noise", type=float, default=None, help="action noise (default: the config's)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--out", default="experiments/results")
    p.add_argument("--horizons", default="", help="more receding-horizon n's, e.g. 1,3")
    a = p.parse_args(argv)
    ck = torch.load(a.checkpoint, map_location="cpu", weights_only=True)
    cfg = StudentConfig.from_dict(ck["config"])
    k = cfg.chunk_len
    noise = cfg.eval_action_noise if a.noise is None else a.noise
    strategies = [
        ("single step", SingleStep()),
        (f"chunk open loop (k = {k})", RecedingHorizon(k)),
        (f"receding horizon (n = {cfg.execute_n} of k = {k})", RecedingHorizon(cfg.execute_n)),
        ("temporal ensembling m = 0.01", TemporalEnsemble(0.01)),
        ("temporal ensembling m = 0.1", TemporalEnsemble(0.1)),
    ]
    strategies += [(f"receding horizon (n = {n} of k = {k})", RecedingHorizon(n))
                   for n in (int(x) for x in a.horizons.split(",") if x.strip())
                   if n != cfg.execute_n and n < k]
    spec = robot_spec(cfg.robot)
    rows = []
    with Evaluator(a.workers, spec.env_spec, eval_env_kwargs(ck)) as ev:
        for label, ex in strategies:
            t0 = time.monotonic()
            r = ev.evaluate(ck, a.episodes, a.seed, action_noise=noise, execution=ex,
                            seconds=cfg.eval_seconds)
            bd = r.by_distractor()
            rows.append({"strategy": label, "success": r.success_rate, "episodes": len(r.episodes),
                         "distractor_off": bd[False], "distractor_on": bd[True],
                         "mean_score_m": sum(e["score"] for e in r.episodes) / len(r.episodes),
                         "seconds": round(time.monotonic() - t0, 1)})
            print(f"{label}: {r.summary()}", file=sys.stderr, flush=True)
    # the columns split by distractor only where the robot's task has one (the car's)
    split = any(not math.isnan(r["distractor_on"]) for r in rows)
    md = [f"Checkpoint `{a.checkpoint}` (trained with execution={cfg.execution}), {a.episodes} episodes "
          f"per row, seeds {a.seed}..{a.seed + a.episodes - 1}, action noise {noise}"
          + (", distractor on in every other episode." if split else "."), "",
          "| execution | success |" + (" distractor off | distractor on |" if split else "")
          + " mean closest distance (m) |",
          "|---|---|" + ("---|---|" if split else "") + "---|"]
    for r in rows:
        cols = f" {r['distractor_off']:.1%} | {r['distractor_on']:.1%} |" if split else ""
        md.append(f"| {r['strategy']} | {r['success']:.1%} |{cols} {r['mean_score_m']:.3f} |")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "execution_ablation.md").write_text("\n".join(md) + "\n")
    (out / "execution_ablation.json").write_text(json.dumps(rows, indent=1))
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The orange cone's pixel footprint at the episode start, per student input; and success vs it.

    python experiments/footprint_table.py [--n 400] [--floor 8] [--widths 64 96 128 160]
        [--crop 160:32:152 ...]
    python experiments/footprint_table.py --success CKPT [--episodes 100] [--out DIR]
    python experiments/footprint_table.py --robot arm [--n 60] [--widths 48 64 80 96 128 160]

Arm mode: the red cube and the green square in the arm's front camera at the episode
start (arm at home), over `ArmTaskEnv`'s layouts and camera draws, one table each.

Table mode: over the randomized start distribution (cone 1-3 m, +-40 deg; camera pitch,
roll, FOV, lens position, distortion randomized) counts the input pixels at least half
covered by the cone after cutting the band of camera rows (``--crop W:TOP:BOTTOM``; the
plain widths show the whole 320x240 frame) and area-downsampling. Prints a Markdown table.

Success mode (where the floor comes from): evaluates CKPT in closed loop (the robust
evaluation of training: action noise, distractor on/off, fresh seeds), renders each
evaluated episode's start footprint at the checkpoint's input (its exact cone position
and camera draw), and prints success per footprint bin. The analysis reads the scene's
privileged state; it is an experiment, never the student.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")

import numpy as np  # noqa: E402

from realsim.footprint import (  # noqa: E402
    DEFAULT_FLOOR_PX,
    FootprintReport,
    cone_masks,
    count_pixels,
    footprint_table,
)


def _crop(s: str) -> tuple[int, tuple[int, int]]:
    w, top, bottom = (int(v) for v in s.split(":"))
    return w, (top, bottom)


def success_vs_footprint(ckpt: str, episodes: int, seed: int, workers: int,
                         bins: list[float]) -> tuple[list[dict], list[str]]:
    """Per-episode rows (seed, distractor, success, distance, bearing, footprint) and a
    Markdown table of success per footprint bin."""
    import torch

    from realsim.robots.rc_car.scene import CarTaskEnv
    from student.config import StudentConfig
    from student.evaluate import Evaluator

    ck = torch.load(ckpt, map_location="cpu", weights_only=True)
    cfg = StudentConfig.from_dict(ck["config"])
    with Evaluator(workers) as ev:
        res = ev.evaluate(ck, episodes, seed, action_noise=cfg.eval_action_noise,
                          seconds=cfg.eval_seconds)
    env = CarTaskEnv(render=False)
    xy, draws = [], []
    for e in res.episodes:
        env.reset(e["seed"], distractor=e["distractor"])
        p = env.privileged()
        xy.append(tuple(float(v) for v in p["cone_xy"]))
        draws.append(p["draw"])
    masks = cone_masks(len(xy), cone_xy=xy, draws=draws)
    px = count_pixels(masks, cfg.image_width, cfg.crop_rows)
    rows = []
    for e, (x, y), n in zip(res.episodes, xy, px, strict=True):
        rows.append({**e, "distance": float(np.hypot(x, y)),
                     "bearing_deg": float(np.degrees(np.arctan2(y, x))), "footprint_px": int(n)})
    edges = [-np.inf, *bins, np.inf]
    md = [f"`{ckpt}`: input {cfg.image_width}x{cfg.image_height} (camera rows "
          f"{cfg.crop_rows or (0, 240)}), {len(rows)} episodes from seed {seed}, "
          f"action noise {cfg.eval_action_noise}; overall success {res.success_rate:.1%}", "",
          "| start footprint (px) | episodes | success | mean distance (m) |", "|---|---|---|---|"]
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        sel = [r for r in rows if lo <= r["footprint_px"] < hi]
        if not sel:
            continue
        lab = f"< {hi:g}" if lo == -np.inf else (f">= {lo:g}" if hi == np.inf else f"{lo:g}-{hi - 1:g}")
        md.append(f"| {lab} | {len(sel)} | {np.mean([r['success'] for r in sel]):.1%} | "
                  f"{np.mean([r['distance'] for r in sel]):.2f} |")
    fails = [r for r in rows if not r["success"]]
    md += ["", "failures: " + (", ".join(
        f"seed {r['seed']} ({'distractor' if r['distractor'] else 'alone'}, {r['distance']:.1f} m, "
        f"{r['bearing_deg']:+.0f} deg, {r['footprint_px']} px, closest {r['score']:.2f} m)"
        for r in fails) or "none")]
    return rows, md


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=400, help="randomized starts")
    ap.add_argument("--floor", type=float, default=DEFAULT_FLOOR_PX, help="warning floor (px)")
    ap.add_argument("--widths", type=int, nargs="+", default=[64, 96, 128, 160])
    ap.add_argument("--crop", type=_crop, nargs="*", default=[(160, (32, 152))],
                    metavar="W:TOP:BOTTOM", help="inputs showing a band of camera rows")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--success", metavar="CKPT", help="success vs footprint for this checkpoint")
    ap.add_argument("--episodes", type=int, default=100)
    ap.add_argument("--eval-seed", type=int, default=400_000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--bins", type=float, nargs="+", default=[4, 8, 12, 16, 24, 32])
    ap.add_argument("--out", default="experiments/results")
    ap.add_argument("--robot", default="rc_car", choices=["rc_car", "arm"])
    a = ap.parse_args()
    if a.robot == "arm":
        widths = a.widths if a.widths != [64, 96, 128, 160] else [48, 64, 80, 96, 128, 160]
        for subject, name in (("cube", "red cube"), ("target", "green square")):
            reports = footprint_table(widths, a.floor, a.n, a.seed, robot="arm", subject=subject)
            print(f"{name} footprint in the front camera at episode start over {a.n} randomized "
                  f"starts (floor {a.floor:g} px)")
            print(FootprintReport.header())
            for r in reports:
                print(r.row())
            print()
        return
    if a.success:
        rows, md = success_vs_footprint(a.success, a.episodes, a.eval_seed, a.workers, a.bins)
        out = Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        stem = f"footprint_success_{Path(a.success).stem}"
        (out / f"{stem}.md").write_text("\n".join(md) + "\n")
        (out / f"{stem}.json").write_text(json.dumps(rows, indent=1))
        print("\n".join(md))
        return
    reports = footprint_table([*a.widths, *a.crop], a.floor, a.n, a.seed)
    print(f"cone footprint at episode start over {a.n} randomized starts (floor {a.floor:g} px)")
    print(FootprintReport.header())
    for r in reports:
        print(r.row())


if __name__ == "__main__":
    main()

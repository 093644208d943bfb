"""Must-show (issue 7, second half): the arm's learned residual on held-out emulated-arm episodes.

    python experiments/residual_heldout_arm.py --fit-dir DIR   # after fit_emulated_arm.py --out DIR
    python experiments/residual_heldout_arm.py --params P.yaml --logs fit.h5 --heldout held.h5 [--out DIR]

Takes what `experiments/fit_emulated_arm.py` leaves (the fitting log, the held-out log
recorded on other seeds from the same emulated arm, and the fitted params.yaml), trains
the residual with ``realsim train-residual arm`` on the fitting log only (no episode of
the held-out log is seen), then ``realsim replay arm`` of the held-out log with the
fitted parameters and with fitted parameters plus the residual (the user's path).

Metric: as fit_emulated_arm.py, joint-position open-loop RMSE (rad) over the five
revolute joints, every held-out episode replayed whole from rest in its first measured
pose, pooled over all its sensor samples; per joint and overall, fitted vs
fitted + residual, their ratio, and divergence (any non-finite or > 50 rad/s joint speed
in the replay).

The current figures (0.95 and 0.95 of the fit alone on two emulated arms, 18 training
episodes each; 1.04 on seed 2 without the arm's default contraction, ``--extra
"--max-radius 0"``):

    python experiments/fit_emulated_arm.py --seed S --per-driver 6 --out D_S   # S = 1, 2
    python experiments/residual_heldout_arm.py --fit-dir D_S
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fit_emulated_arm import _run, qpos_rmse  # noqa: E402

JOINTS = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll")


def diverged(pred: Path) -> list[str]:
    """Episodes of a replay whose joint readings are non-finite or impossibly fast."""
    from realsim.logs import LogReader

    bad = []
    with LogReader(pred) as r:
        for name in r.episode_names:
            s = r.episode(name).sensors
            q, v = np.asarray(s["qpos"], float), np.asarray(s["qvel"], float)
            if not (np.all(np.isfinite(q)) and np.all(np.isfinite(v))) or np.abs(v[:, :5]).max() > 50.0:
                bad.append(name)
    return bad


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fit-dir", help="fit_emulated_arm.py --out DIR (finds logs and fit/params.yaml)")
    ap.add_argument("--params", help="fitted params.yaml")
    ap.add_argument("--logs", nargs="*", help="fitting logs (the residual trains on these)")
    ap.add_argument("--heldout", nargs="*", help="held-out logs (judged only)")
    ap.add_argument("--out", help="output folder (default: FIT_DIR/residual)")
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=40)
    ap.add_argument("--history", type=int, default=5)
    ap.add_argument("--extra", default="", help="more train-residual options, space-separated")
    a = ap.parse_args()
    if a.fit_dir:
        d = Path(a.fit_dir)
        params = Path(a.params) if a.params else d / "fit" / "params.yaml"
        logs = [Path(x) for x in a.logs] if a.logs else sorted(d.glob("arm_emu_seed*_fit.h5"))
        held = [Path(x) for x in a.heldout] if a.heldout else sorted(d.glob("arm_emu_seed*_heldout.h5"))
        out = Path(a.out) if a.out else d / "residual"
    else:
        if not (a.params and a.logs and a.heldout):
            raise SystemExit("give --fit-dir, or --params, --logs and --heldout")
        params, logs, held = Path(a.params), [Path(x) for x in a.logs], [Path(x) for x in a.heldout]
        out = Path(a.out or "/tmp/residual_heldout_arm")
    out.mkdir(parents=True, exist_ok=True)
    ckpt = out / "arm_residual.pt"
    t = time.perf_counter()
    cmd = [sys.executable, "-m", "realsim", "train-residual", "arm", "--params", str(params),
           "--logs", *map(str, logs), "--out", str(ckpt), "--holdout", "0", "--passes", str(a.passes),
           "--epochs", str(a.epochs), "--history", str(a.history), *a.extra.split()]
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # 2 shared cores: one torch thread (rules)
    res = _run(cmd)
    print(f"train-residual: {res.strip().splitlines()[-1]} ({time.perf_counter() - t:.0f} s)", flush=True)
    print(f"  training-log metrics: {res.strip().splitlines()[-2]}", flush=True)
    for h in held:
        errs, div = {}, {}
        for tag, extra in (("fitted", []), ("fitted+residual", ["--residual", str(ckpt)])):
            pred = out / f"{h.stem}_pred_{tag.replace('+', '_')}.h5"
            _run([sys.executable, "-m", "realsim", "replay", "arm", "--log", str(h), "--out", str(pred),
                  "--params", str(params), *extra])
            errs[tag], div[tag] = qpos_rmse(pred, h), diverged(pred)
        print(f"held-out {h.name}: joint-position open-loop RMSE (rad), fitted -> fitted+residual")
        for i, j in enumerate(JOINTS):
            print(f"  {j:14s} {errs['fitted'][i]:.4f} -> {errs['fitted+residual'][i]:.4f}")
        fit = float(np.sqrt(np.mean(errs["fitted"][:5] ** 2)))
        hyb = float(np.sqrt(np.mean(errs["fitted+residual"][:5] ** 2)))
        print(f"held-out joint-position RMSE: fitted {fit:.4f} rad -> fitted+residual {hyb:.4f} rad, "
              f"ratio {hyb / fit:.2f} (must be < 1); diverged episodes: {div['fitted+residual'] or 'none'}")
    print(ckpt)


if __name__ == "__main__":
    main()

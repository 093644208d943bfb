"""The `fit` and `replay` verbs: argparse wiring the lead plugs into `realsim.cli`.

    add_fit_arguments(sub.add_parser("fit")); ...set_defaults(func=cmd_fit)
    add_replay_arguments(sub.add_parser("replay")); ...set_defaults(func=cmd_replay)
"""

from __future__ import annotations

import argparse
import sys

from realsim.robots import ROBOTS


def add_fit_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """`realsim fit ROBOT --logs FILE.h5 ... --out DIR [--trials N] [--storage URL] ...`."""
    p.add_argument("robot", choices=ROBOTS)
    p.add_argument("--logs", nargs="+", required=True, help="log files (HDF5) to fit on")
    p.add_argument("--out", required=True, help="output directory (params.yaml, report.md, study.db)")
    p.add_argument("--trials", type=int, default=64,
                   help="completed global-search trials in the study (resuming counts earlier ones)")
    p.add_argument("--storage", help="Optuna storage URL (default: sqlite:///OUT/study.db)")
    p.add_argument("--sampler", choices=("cmaes", "tpe"), default="cmaes")
    p.add_argument("--holdout", help="held-out fraction (default 0.25: every 4th episode) "
                                     "or comma-separated episode names")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--jobs", type=int, default=2, help="rollout threads")
    p.add_argument("--workers", type=int, default=1,
                   help="processes on this machine searching the one study (sysid.workers)")
    p.add_argument("--batch", type=int, default=16, help="candidates simulated together per batch")
    p.add_argument("--window", type=float, default=None,
                   help="split episodes into windows of this many seconds started from a state "
                        "estimate; 0: whole episodes from rest (default: rc_car 2.5, arm 0, whose "
                        "servo state a window start cannot estimate without a transient)")
    p.add_argument("--search-seconds", type=float, default=20.0,
                   help="seconds of training data each search candidate replays (0: all)")
    p.add_argument("--refine-seconds", type=float, default=60.0,
                   help="seconds of training data the least squares and the intervals use (0: all)")
    p.add_argument("--refine-iters", type=int, default=9,
                   help="Levenberg-Marquardt iterations (a finite-difference Jacobian every 3rd)")
    p.add_argument("--init", help="start from (and keep unidentifiable values of) this params.yaml")
    p.add_argument("--free", help="comma-separated subset of parameters to fit (default: all)")
    return p


def add_replay_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """`realsim replay ROBOT --log FILE.h5 --out PRED.h5 [--params PARAMS] [--residual CKPT]`."""
    p.add_argument("robot", choices=ROBOTS)
    p.add_argument("--log", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--params", help="params.yaml (default: nominal parameters)")
    p.add_argument("--residual", help="residual dynamics checkpoint (realsim train-residual; the same robot's)")
    p.add_argument("--jobs", type=int, default=2)
    return p


DEFAULT_WINDOW = {"rc_car": 2.5, "arm": 0.0}  # s


def _window(a: argparse.Namespace) -> float:
    w = getattr(a, "window", None)
    return DEFAULT_WINDOW.get(a.robot, 2.5) if w is None else float(w)


def cmd_fit(a: argparse.Namespace) -> int:
    """Run the fit; the last line printed is the path of params.yaml."""
    from sysid.fit import FitConfig, run_fit
    from sysid.workers import start_helpers

    free = [s.strip() for s in a.free.split(",") if s.strip()] if getattr(a, "free", None) else None
    helpers = start_helpers(a)  # --workers N: N-1 more processes join the study
    cfg = FitConfig(robot=a.robot, logs=list(a.logs), out=a.out, trials=a.trials, storage=a.storage,
                    sampler=getattr(a, "sampler", "cmaes"), holdout=getattr(a, "holdout", None),
                    seed=getattr(a, "seed", 0), jobs=getattr(a, "jobs", 2), batch=getattr(a, "batch", 16),
                    workers=getattr(a, "workers", None) or 1,
                    window=_window(a), search_seconds=getattr(a, "search_seconds", 20.0),
                    refine_seconds=getattr(a, "refine_seconds", 60.0),
                    refine_iters=getattr(a, "refine_iters", 9), init=getattr(a, "init", None), free=free)
    with helpers:
        res = run_fit(cfg, log=lambda s: print(s, file=sys.stderr, flush=True))
    for split, d in res.rmse.items():
        print(f"{split}: " + ", ".join(f"{s} {d['nominal'][s]:.3g} -> {d['fitted'][s]:.3g}"
                                       for s in res.adapter.headline))
    print(f"{a.out.rstrip('/')}/params.yaml")
    return 0


def cmd_replay(a: argparse.Namespace) -> int:
    """Replay a log open loop; prints the output path."""
    from sysid.replay import replay_log

    out = replay_log(a.robot, a.log, a.out, params=a.params, residual=a.residual,
                     nthread=getattr(a, "jobs", 2))
    print(out)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Standalone entry (`python -m sysid.cli fit|replay ...`) until the lead wires realsim.cli."""
    from realsim.errors import UserError

    p = argparse.ArgumentParser(prog="sysid")
    sub = p.add_subparsers(dest="verb", required=True)
    add_fit_arguments(sub.add_parser("fit")).set_defaults(func=cmd_fit)
    add_replay_arguments(sub.add_parser("replay")).set_defaults(func=cmd_replay)
    a = p.parse_args(argv)
    try:
        return a.func(a)
    except UserError as e:
        print(f"realsim: error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())

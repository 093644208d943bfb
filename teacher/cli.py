"""`realsim teach ROBOT --episodes N --out DATA.h5 [--params PARAMS] [--residual CKPT]
[--seed S]` (spec/cli.md) plus the project's options --workers and --config.

The lead wires it into `realsim.cli`: ``add_teach_arguments(subparser)`` then
``subparser.set_defaults(func=cmd_teach)``. The last line printed is
``episodes=<total complete> written=<new> success=<rate of the new ones> out=<path>``.
"""

from __future__ import annotations

import os

# headless offscreen rendering; must be set before mujoco is first imported
os.environ.setdefault("MUJOCO_GL", "egl")

import argparse
from pathlib import Path

from realsim.errors import UserError


def add_teach_arguments(p: argparse.ArgumentParser) -> None:
    """Add the teach verb's arguments to `p`."""
    p.add_argument("robot", help="rc_car (the arm's teacher is not built yet)")
    p.add_argument("--episodes", type=int, required=True, help="episodes the file should hold")
    p.add_argument("--out", required=True, help="log file to write (appended to, resumable)")
    p.add_argument("--params", help="fitted params.yaml: centre the randomization on it")
    p.add_argument("--residual", metavar="CKPT",
                   help="residual dynamics checkpoint (`realsim train-residual`): every "
                   "episode runs through the hybrid simulator, the residual inside each "
                   "physics step")
    p.add_argument("--seed", type=int, default=0, help="run seed; episode k uses (seed, k)")
    p.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    p.add_argument("--config", help="randomization.yaml overriding realsim.randomization defaults")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--backend", choices=("local", "ray"), default="local",
                   help="local process pool, or Ray (pip install 'realsim[ray]'; RAY_ADDRESS "
                        "names a cluster, else a local instance); same episodes either way")


def cmd_teach(args: argparse.Namespace) -> int:
    """Run `teacher.generate.teach` from parsed arguments; prints one summary line."""
    from realsim.randomization import Randomization
    from realsim.robots import check_robot

    check_robot(args.robot)
    if args.robot != "rc_car":
        raise UserError(f"teach {args.robot}: only rc_car has a teacher yet")
    if args.episodes < 0:
        raise UserError("--episodes must be >= 0")
    if args.workers < 1:
        raise UserError("--workers must be >= 1")
    params = None
    if args.params is not None:
        from realsim.robots.rc_car.params import CarParams

        if not Path(args.params).is_file():
            raise UserError(f"no such file: {args.params}")
        params = CarParams.from_yaml(args.params).to_dict()
    residual = None
    if args.residual is not None:
        residual = _check_residual(args.robot, args.residual)
    rand = Randomization.from_yaml(args.config) if args.config else Randomization()
    from teacher.generate import TeachConfig, teach

    cfg = TeachConfig(
        seed=int(args.seed), params=params, randomization=rand.to_dict(), residual=residual
    )
    if getattr(args, "backend", "local") == "ray":
        from teacher.ray_backend import teach_ray

        s = teach_ray(args.out, args.episodes, cfg, workers=args.workers, progress=not args.no_progress)
    else:
        s = teach(args.out, args.episodes, cfg, workers=args.workers, progress=not args.no_progress)
    rate = f"{s.success_rate:.3f}" if s.written else "nan"
    print(f"episodes={s.total} written={s.written} success={rate} out={args.out}")
    return 0


def _check_residual(robot: str, path: str) -> str:
    """Load the residual checkpoint once here, so a bad file fails before any worker starts.

    Returns its absolute path (what the workers load). UserError: missing, unreadable,
    not a residual checkpoint, or another robot's."""
    p = Path(path)
    if not p.is_file():
        raise UserError(f"no such file: {path}")
    from realsim.residual import load_residual

    load_residual(p, robot)
    return str(p.resolve())

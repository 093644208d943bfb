"""`realsim teach ROBOT --episodes N --out DATA.h5 [--params PARAMS] [--residual CKPT]
[--seed S]` (spec/cli.md) plus the project's options --workers, --config, --image-size, --backend.

The lead wires it into `realsim.cli`: ``add_teach_arguments(subparser)`` then
``subparser.set_defaults(func=cmd_teach)``. The last line printed is
``episodes=<total complete> written=<new> success=<rate of the new ones> out=<path>``.
"""

from __future__ import annotations

import os

# headless offscreen rendering; must be set before mujoco is first imported
os.environ.setdefault("MUJOCO_GL", "egl")

import argparse

from realsim.errors import UserError


def add_teach_arguments(p: argparse.ArgumentParser) -> None:
    """Add the teach verb's arguments to `p`."""
    p.add_argument("robot", help="rc_car or arm")
    p.add_argument("--episodes", type=int, required=True, help="episodes the file should hold")
    p.add_argument("--out", required=True, help="log file to write (appended to, resumable)")
    p.add_argument("--params", help="fitted params.yaml: centre the randomization on it")
    p.add_argument("--residual", metavar="CKPT",
                   help="residual dynamics checkpoint (`realsim train-residual`): every "
                   "episode runs through the hybrid simulator, the residual inside each "
                   "physics step")
    p.add_argument("--seed", type=int, default=0, help="run seed; episode k uses (seed, k)")
    p.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    p.add_argument("--config", help="randomization YAML overriding the robot's defaults "
                   "(rc_car: realsim.randomization.Randomization fields; arm: "
                   "realsim.robots.arm.scene.ArmRandomization fields)")
    p.add_argument("--teacher", action="append", default=[], metavar="KEY=VALUE",
                   help="a teacher option (arm: teacher.arm_ik.TeacherConfig fields; default "
                        "aim_error_m=0.02 aim_error_yaw=0.2, aimed hovers with clean labels, "
                        "aim_error_m=0 aim_error_yaw=0 flies straight); repeatable")
    p.add_argument("--image-size", type=int, nargs=2, metavar=("H", "W"),
                   help="recorded camera size (default 240 320: half the real 480x640)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--backend", choices=("local", "ray"), default="local",
                   help="local process pool, or Ray (pip install 'realsim[ray]'; RAY_ADDRESS "
                        "names a cluster, else a local instance); same episodes either way")


def cmd_teach(args: argparse.Namespace) -> int:
    """Run `teacher.generate.teach` from parsed arguments; prints one summary line."""
    from realsim.robots import check_robot
    from teacher.generate import TeachConfig, robot_teach, teach

    check_robot(args.robot)
    rt = robot_teach(args.robot)
    if args.episodes < 0:
        raise UserError("--episodes must be >= 0")
    if args.workers < 1:
        raise UserError("--workers must be >= 1")
    if args.image_size is not None and (len(args.image_size) != 2 or min(args.image_size) < 16):
        raise UserError("--image-size takes H W, each >= 16")
    params = rt.load_params(args.params) if args.params is not None else None
    residual = rt.check_residual(args.residual) if args.residual is not None else None
    rand = rt.load_randomization(args.config) if args.config else rt.randomization(None)
    kw = {"image_size": tuple(args.image_size)} if args.image_size is not None else {}
    options = rt.teacher_options(getattr(args, "teacher", None) or [])
    cfg = TeachConfig(seed=int(args.seed), params=params, randomization=rand,
                      residual=residual, robot=args.robot, teacher=options, **kw)
    if getattr(args, "backend", "local") == "ray":
        from teacher.ray_backend import teach_ray

        s = teach_ray(args.out, args.episodes, cfg, workers=args.workers, progress=not args.no_progress)
    else:
        s = teach(args.out, args.episodes, cfg, workers=args.workers, progress=not args.no_progress)
    rate = f"{s.success_rate:.3f}" if s.written else "nan"
    print(f"episodes={s.total} written={s.written} success={rate} out={args.out}")
    return 0

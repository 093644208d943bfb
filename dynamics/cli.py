"""`realsim train-residual ROBOT --params DIR/params.yaml --logs FILE.h5 ... --out CKPT`.

The lead wires it into `realsim.cli`::

    from dynamics.cli import add_train_residual_arguments, cmd_train_residual
    t = sub.add_parser("train-residual", help="train the learned residual dynamics model")
    add_train_residual_arguments(t).set_defaults(func=cmd_train_residual)

Exit status 2 with a one-line message (UserError) for a missing file, a log of another
robot, or a bad option value.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from dynamics import LR_SCHEDULES
from realsim.errors import UserError
from realsim.robots import ROBOTS


def add_train_residual_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Options of `realsim train-residual` (cli.md) plus training knobs with defaults."""
    p.add_argument("robot", choices=ROBOTS)
    p.add_argument("--params", required=True, help="fitted parameters (DIR/params.yaml from realsim fit)")
    p.add_argument("--logs", nargs="+", required=True, help="log files (HDF5) to train on")
    p.add_argument("--out", required=True, help="residual checkpoint to write (torch, weights_only)")
    p.add_argument("--holdout", default="0.25",
                   help="held-out fraction (every 1/f-th episode) or episode names; reported, never trained on")
    p.add_argument("--history", type=int, default=None,
                   help="feature history length, periods (1: none; default: the robot's, rc_car 10, arm 5)")
    p.add_argument("--horizon", type=int, default=0,
                   help="periods the rollout loss back-propagates through before truncating "
                        "(0: the whole open-loop episode; with --anchor 1: the one-step loss)")
    p.add_argument("--anchor", type=int, default=0,
                   help="periods between restarts from a state estimate (0: whole episodes from rest)")
    p.add_argument("--mode", choices=("force", "state"), default="force",
                   help="force: generalised force inside the step; state: ablation only (rc_car)")
    p.add_argument("--structure", choices=("mlp", "per_output"), default=None,
                   help="network: one MLP on all features, or one shared by the outputs, each on its "
                        "own feature group (default: the robot's; rc_car mlp, arm per_output)")
    p.add_argument("--passes", type=int, default=3, help="linearise-and-fit passes")
    p.add_argument("--epochs", type=int, default=40, help="Lightning epochs per pass")
    p.add_argument("--batch", type=int, default=4, help="segments (episodes) per optimiser step")
    p.add_argument("--lr", type=float, default=3e-3, help="AdamW learning rate")
    p.add_argument("--lr-schedule", choices=LR_SCHEDULES, default=None,
                   help="learning rate within each pass: constant, or cosine down to lr/100 "
                        "(default: the robot's; rc_car cosine, arm constant)")
    p.add_argument("--max-radius", type=float, default=None,
                   help="contract each period's linearised state map to this spectral radius "
                        "(default: the robot's; arm 1, rc_car none; 0: never)")
    p.add_argument("--weight-decay", type=float, default=None,
                   help="AdamW weight decay (default: TrainConfig's)")
    p.add_argument("--hidden", default="64,64", help="hidden layer widths, e.g. 32,32")
    p.add_argument("--outputs", default="",
                   help="force outputs, comma-separated (default: all of the robot's; rc_car fx,fy,mz,tau,"
                        "tau_steer (tau_steer: a torque on the steering knuckles), arm its five joints)")
    p.add_argument("--max-out", default="",
                   help="output bounds overriding the defaults, e.g. mz=0.6,fy=4 (rc_car) or "
                        "tau_wrist_roll=0.5 (arm) (N, N m, or the state increments' units)")
    p.add_argument("--chunk", type=int, default=None,
                   help="chunked training: periods per chunk (0: whole segments per optimiser step)")
    p.add_argument("--inner", type=int, default=None, help="with --chunk: optimiser steps per batch")
    p.add_argument("--clip", type=float, default=None, help="gradient-norm clip (0: none)")
    p.add_argument("--ensemble", type=int, default=None,
                   help="train this many residuals (seeds --seed ..) and average them (default 1)")
    p.add_argument("--loss-scale", choices=("std", "fit"), default=None,
                   help="scale of each observed signal's error in the loss: its spread (std) or the fit's own RMSE (fit)")
    p.add_argument("--line-search", default=None,
                   help="step lengths tried after each pass, e.g. 0.5,0.25 ('none': no line search)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--logdir", help="TensorBoard directory (default: next to --out)")
    from realsim.distributed import add_distributed_arguments

    return add_distributed_arguments(p)


def parse_max_out(spec: str, robot: str = "rc_car") -> dict[str, float] | None:
    """"mz=0.6,fy=4" -> {"mz": 0.6, "fy": 4.0}; "" -> None. UserError on a bad entry
    (a name that is not one of `robot`'s residual outputs)."""
    if not spec.strip():
        return None
    from realsim.residual import robot_io  # lazy: torch is not for argument parsing

    known = robot_io(robot).default_max
    out: dict[str, float] = {}
    for part in spec.split(","):
        k, sep, v = part.partition("=")
        k = k.strip()
        if not sep or k not in known:
            raise UserError(f"--max-out: {part!r} is not NAME=VALUE with NAME in {sorted(known)}")
        try:
            out[k] = float(v)
        except ValueError:
            raise UserError(f"--max-out: {part!r}: {v!r} is not a number") from None
        if not out[k] > 0:
            raise UserError(f"--max-out: {k} must be > 0")
    return out


def parse_outputs(spec: str, robot: str = "rc_car", mode: str = "force") -> tuple[str, ...] | None:
    """"fx,fy,mz" -> ("fx", "fy", "mz"); "" -> None (the robot's default). UserError on a
    name that is not one of `robot`'s outputs for `mode`, or on a repeated one."""
    if not spec.strip():
        return None
    from realsim.residual import robot_io  # lazy: torch is not for argument parsing

    io = robot_io(robot)
    allowed = io.force_outputs if mode == "force" else io.state_outputs
    names = tuple(x.strip() for x in spec.split(","))
    bad = [n for n in names if n not in allowed]
    if bad or len(set(names)) != len(names):
        raise UserError(f"--outputs: {spec!r}: expected distinct names from {list(allowed)}")
    return names


def cmd_train_residual(a: argparse.Namespace) -> int:
    """Run training; prints the open-loop figures and the checkpoint path last."""
    from dynamics.train import TrainConfig, train_residual
    from realsim.distributed import dist_from_args, is_global_zero
    from realsim.residual import robot_io

    if not Path(a.params).is_file():
        raise UserError(f"no such parameter file: {a.params}")
    for f in a.logs:
        if not Path(f).is_file():
            raise UserError(f"no such log file: {f}")
    if (a.history is not None and a.history < 1) or a.horizon < 0 or a.anchor < 0 or a.passes < 1 or a.epochs < 1 or a.batch < 1:
        raise UserError("train-residual: --history, --passes, --epochs, --batch must be >= 1, --horizon and --anchor >= 0")
    line = None
    if a.line_search is not None:
        try:
            line = () if a.line_search.strip().lower() in ("", "none") else tuple(
                float(x) for x in a.line_search.split(","))
        except ValueError:
            raise UserError(f"train-residual: --line-search {a.line_search!r} is not comma-separated numbers") from None
        if any(not 0 < x < 1 for x in line):
            raise UserError("train-residual: --line-search steps must lie in (0, 1)")
    if a.ensemble is not None and a.ensemble < 1:
        raise UserError("train-residual: --ensemble must be >= 1")
    if a.max_radius is not None and not a.max_radius >= 0:
        raise UserError("train-residual: --max-radius must be >= 0 (0: never contract)")
    if (a.chunk is not None and a.chunk < 0) or (a.inner is not None and a.inner < 1) or (a.clip is not None and a.clip < 0):
        raise UserError("train-residual: --chunk and --clip must be >= 0, --inner >= 1")
    try:
        hidden = tuple(int(h) for h in a.hidden.split(","))
    except ValueError:
        raise UserError(f"train-residual: --hidden {a.hidden!r} is not comma-separated integers") from None
    if not hidden or min(hidden) < 1 or not a.lr > 0 or (a.weight_decay is not None and a.weight_decay < 0):
        raise UserError("train-residual: --hidden widths and --lr must be > 0, --weight-decay >= 0")
    io = robot_io(a.robot)
    if a.mode == "state" and not io.state_outputs:
        raise UserError(f"train-residual {a.robot}: --mode state is the rc_car's ablation only")
    if a.robot != "rc_car" and a.anchor != 0:
        raise UserError(f"train-residual {a.robot}: --anchor must be 0 (whole episodes from rest)")
    cfg = TrainConfig(
        max_out=parse_max_out(a.max_out, a.robot),
        robot=a.robot, params=a.params, logs=list(a.logs), out=a.out, holdout=a.holdout,
        history=a.history, horizon=a.horizon, anchor=a.anchor, mode=a.mode,
        outputs=parse_outputs(a.outputs, a.robot, a.mode) or (io.state_outputs if a.mode == "state" else None),
        structure=a.structure, passes=a.passes, epochs=a.epochs, batch=a.batch, seed=a.seed, logdir=a.logdir,
        dist=dist_from_args(a), hidden=hidden, lr=a.lr,
        **({} if a.weight_decay is None else {"weight_decay": a.weight_decay}),
        **({} if a.lr_schedule is None else {"lr_schedule": a.lr_schedule}),
        **({} if a.max_radius is None else {"max_radius": a.max_radius}),
        **{k: v for k, v in (("chunk", a.chunk), ("inner", a.inner), ("clip", a.clip), ("line_search", line),
                                      ("loss_scale", a.loss_scale), ("ensemble", a.ensemble))
           if v is not None},
    )
    res = train_residual(cfg)
    if not is_global_zero():  # under DDP the other ranks stay quiet: one last line
        return 0
    print(json.dumps(res.metrics))
    print(f"residual={res.path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Standalone entry (`python -m dynamics.cli train-residual ...`) until the lead wires it."""
    import sys

    p = argparse.ArgumentParser(prog="realsim")
    sub = p.add_subparsers(dest="verb", required=True)
    add_train_residual_arguments(sub.add_parser("train-residual")).set_defaults(func=cmd_train_residual)
    a = p.parse_args(argv)
    try:
        return a.func(a)
    except UserError as e:
        print(f"realsim: error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())

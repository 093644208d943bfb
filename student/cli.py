"""The student's CLI verbs, for `realsim.cli` to wire (spec/cli.md rows train-student, deploy).

    realsim train-student ROBOT --data DATA.h5 [DATA.h5 ...] --out CKPT [--config FILE]
    realsim deploy ROBOT --policy CKPT --port PORT --camera SRC [--control PORT] --episodes N --out FILE.h5

Wiring::

    t = sub.add_parser("train-student", help=...); add_train_arguments(t); t.set_defaults(func=cmd_train_student)
    d = sub.add_parser("deploy", help=...); add_deploy_arguments(d); d.set_defaults(func=cmd_deploy)

`train-student` prints the closed-loop sim success of the kept checkpoint as the
last token of its last line: ``checkpoint=CKPT episodes=N success=0.960``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from realsim.errors import UserError
from student.deploy import add_deploy_arguments, cmd_deploy

__all__ = ["add_deploy_arguments", "add_train_arguments", "cmd_deploy", "cmd_train_student"]


def add_train_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("robot", help="rc_car")
    p.add_argument("--data", nargs="+", required=True, help="log files written by `realsim teach`")
    p.add_argument("--out", required=True, help="checkpoint to write (the one that wins in closed loop)")
    p.add_argument("--config", help="YAML file of student config keys (see student/config.py)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override one config key (YAML value), e.g. --set epochs=4; repeatable")
    p.add_argument("--tensorboard", help="TensorBoard log folder (default: next to --out)")


def _overrides(items: list[str]) -> dict[str, Any]:
    import yaml

    out: dict[str, Any] = {}
    for it in items:
        k, sep, v = it.partition("=")
        if not sep or not k.strip():
            raise UserError(f"--set {it!r}: expected KEY=VALUE")
        out[k.strip()] = yaml.safe_load(v)
    return out


def cmd_train_student(a: argparse.Namespace) -> int:
    if a.robot != "rc_car":
        raise UserError(f"train-student {a.robot}: the student drives rc_car only (the arm is issue 7)")
    for d in a.data:
        if not Path(d).is_file():
            raise UserError(f"no such file: {d}")
    os.environ.setdefault("MUJOCO_GL", "egl")
    from student.config import StudentConfig

    cfg = StudentConfig.load(a.config)
    ov = _overrides(getattr(a, "set", []) or [])
    if ov:
        try:
            cfg = StudentConfig.from_dict({**cfg.as_dict(), **ov})
        except TypeError as e:
            raise UserError(f"--set: {e}") from None
    from student.train import train_student

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    res = train_student(a.data, a.out, cfg, log=log, tb_dir=getattr(a, "tensorboard", None))
    print(f"checkpoint={a.out} episodes={res['episodes']} success={res['success']:.3f}")
    return 0

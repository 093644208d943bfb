"""The student's CLI verbs, for `realsim.cli` to wire (spec/cli.md rows train-student, deploy).

    realsim train-student ROBOT --data DATA.h5 [DATA.h5 ...] --out CKPT [--config FILE]
        [--set KEY=VALUE ...] [--init CKPT] [--params PARAMS.yaml] [--residual CKPT]
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
from typing import TYPE_CHECKING

from realsim.errors import UserError
from realsim.yamlfile import key_values
from student.deploy import add_deploy_arguments, cmd_deploy

if TYPE_CHECKING:
    from student.config import StudentConfig

__all__ = ["add_deploy_arguments", "add_train_arguments", "cmd_deploy", "cmd_train_student"]


def add_train_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("robot", help="rc_car or arm")
    p.add_argument("--data", nargs="+", required=True, help="log files written by `realsim teach`")
    p.add_argument("--out", required=True, help="checkpoint to write (the one that wins in closed loop)")
    p.add_argument("--config", help="YAML file of student config keys (see student/config.py; "
                   "defaults per robot, the arm's in experiments/student_arm.yaml)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override one config key (YAML value), e.g. --set epochs=4; repeatable")
    p.add_argument("--tensorboard", help="TensorBoard log folder (default: next to --out)")
    p.add_argument("--init", metavar="CKPT",
                   help="fine-tune: start from this student checkpoint's weights and config "
                   "(keys in --config/--set still override, e.g. --set epochs=4 --set lr=3e-4; "
                   "keys that change the network's shape are refused)")
    p.add_argument("--params", metavar="PARAMS.yaml",
                   help="fitted params (`realsim fit`): the closed-loop selection and final "
                   "evaluation randomize the simulator around them (default: datasheet ranges)")
    p.add_argument("--residual", metavar="CKPT",
                   help="residual dynamics checkpoint (`realsim train-residual`): the closed-loop "
                   "selection and final evaluation run the hybrid simulator")
    from realsim.distributed import add_distributed_arguments

    add_distributed_arguments(p)


def _config(path: str | None, init: str | None, robot: str = "rc_car") -> StudentConfig:
    """The run's config before --set: the robot's defaults < --init checkpoint's config <
    --config file.

    With --init only the keys the --config file names override the checkpoint's own."""
    from student.config import StudentConfig

    file_cfg = StudentConfig.load(path, robot)  # validates the file; defaults without one
    if init is None:
        return file_cfg
    from student.policy import load_checkpoint

    _, cfg, _ = load_checkpoint(init)  # UserError: missing or not a student checkpoint
    if cfg.robot != robot:
        raise UserError(f"--init {init}: a student of {cfg.robot}, not {robot}")
    if path is None:
        return cfg
    import yaml

    raw = yaml.safe_load(Path(path).read_text()) or {}
    raw = raw.get("student", raw)
    named = file_cfg.as_dict()
    return StudentConfig.from_dict({**cfg.as_dict(), **{k: named[k] for k in raw}})


def cmd_train_student(a: argparse.Namespace) -> int:
    from student.robots import robot_spec

    robot_spec(a.robot)  # UserError: a robot the student does not drive
    for d in a.data:
        if not Path(d).is_file():
            raise UserError(f"no such file: {d}")
    os.environ.setdefault("MUJOCO_GL", "egl")
    from student.config import StudentConfig

    init = getattr(a, "init", None)
    cfg = _config(a.config, init, a.robot)
    ov = key_values(getattr(a, "set", []) or [])
    if ov:
        try:
            cfg = StudentConfig.from_dict({**cfg.as_dict(), **ov})
        except TypeError as e:
            raise UserError(f"--set: {e}") from None
    from student.dataset import check_data

    check_data(a.data, cfg)  # the robot and cameras of the data, before any work
    from student.evaluate import corrected_sim_kwargs

    env_kwargs = corrected_sim_kwargs(getattr(a, "params", None), getattr(a, "residual", None),
                                      a.robot)
    from student.train import load_init_weights, train_student  # lightning: slow to import

    if init is not None:  # a shape-changing --set fails now, before the data is loaded
        from student.model import StudentPolicy

        load_init_weights(StudentPolicy(cfg), init)

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    from realsim.distributed import dist_from_args

    res = train_student(a.data, a.out, cfg, log=log, tb_dir=getattr(a, "tensorboard", None),
                        env_kwargs=env_kwargs, init=init, dist=dist_from_args(a))
    if "rank" in res:  # a DDP rank other than 0: rank 0 prints the one last line
        return 0
    print(f"checkpoint={a.out} episodes={res['episodes']} success={res['success']:.3f}")
    return 0

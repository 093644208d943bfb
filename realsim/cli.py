"""`realsim`: thin command-line entry points over the library (contract: spec/cli.md).

Every verb parses its arguments, calls one library function and prints a
result. A user's mistake (unknown option, missing file, bad log, robot that does
not answer) is one line on stderr and exit status 2, never a traceback.
Imports are lazy so `realsim --help` and bad-input paths stay fast.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

# Offscreen rendering must be chosen before mujoco is first imported: EGL works
# headless on this machine kind; a user's own MUJOCO_GL (osmesa, glfw) wins.
os.environ.setdefault("MUJOCO_GL", "egl")

from realsim import __version__  # noqa: E402
from realsim.errors import UserError  # noqa: E402
from realsim.robots import ROBOTS, check_robot  # noqa: E402


class _Parser(argparse.ArgumentParser):
    """argparse that raises UserError (one line, exit 2) instead of printing usage."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UserError(f"{self.prog}: {message}")


def _existing_file(path: str) -> Path:
    p = Path(path)
    if not p.is_file():
        raise UserError(f"no such file: {path}")
    return p


# ---------------------------------------------------------------- emulate
def cmd_emulate(a: argparse.Namespace) -> int:
    check_robot(a.robot)
    if a.reality is not None:
        _existing_file(a.reality)
    if a.robot == "rc_car":
        from hardware.emulators.rc_car import run
    else:
        from hardware.emulators.arm import run
    run(seed=a.seed, reality=a.reality, camera_port=a.camera_port)
    return 0


# ---------------------------------------------------------------- record
def _make_source(robot: str, driver: str, seconds: float, seed: int):
    """Build the action source named by --driver."""
    kind, _, arg = driver.partition(":")
    if kind == "excite":
        from hardware.sources import ExcitationSource
        from realsim.excitation import SIGNALS

        if robot != "rc_car":
            raise UserError(f"excite: not available for {robot} yet")
        if arg not in SIGNALS:
            raise UserError(f"unknown excitation signal {arg!r}: expected one of {', '.join(SIGNALS)}")
        from realsim.robots.rc_car.excite import car_excitation

        return ExcitationSource(arg, lambda s, sd: car_excitation(arg, s, sd), seconds, seed)
    if kind == "teleop":
        from hardware.sources import TeleopSource

        return TeleopSource()
    if kind == "policy":
        ckpt = _existing_file(arg)
        try:
            from student.deploy import PolicySource  # type: ignore[import-not-found]
        except ImportError:
            raise UserError(f"policy:{ckpt}: the student package cannot run policies yet") from None
        return PolicySource(ckpt)
    raise UserError(f"unknown driver {driver!r}: expected excite:<signal>, policy:<checkpoint> or teleop")


def cmd_record(a: argparse.Namespace) -> int:
    check_robot(a.robot)
    if a.episodes < 1 or a.seconds <= 0 or a.rate <= 0:
        raise UserError("record: --episodes, --seconds and --rate must be positive")
    if a.robot == "arm":
        return _record_arm(a)
    from hardware.camera import CameraReader, parse_camera_spec
    from hardware.rc_car import RcCarDriver
    from hardware.recorder import CarRecorder
    from realsim.logs import LogReader, LogWriter

    source = _make_source(a.robot, a.driver, a.seconds, a.seed)
    out = Path(a.out)
    todo = a.episodes
    if out.exists():
        with LogReader(out) as r:  # validates: a foreign or corrupt file stops here
            if r.robot != a.robot:
                raise UserError(f"{out}: a log of {r.robot}, not {a.robot}")
            eps = list(r.episodes())
        kept = [e for e in eps if e.complete and not e.attrs.get("discarded", False)]
        open_ = [e.name for e in eps if not e.complete]
        if a.resume:
            todo = max(a.episodes - len(kept), 0)
            note = f" ({', '.join(open_)} incomplete, kept as is)" if open_ else ""
            print(f"resuming {out}: {len(kept)} of {a.episodes} episodes complete{note}; "
                  f"recording {todo} more after {eps[-1].name if eps else 'none'}", file=sys.stderr)
        else:
            print(f"appending to {out} ({len(eps)} episodes already there)", file=sys.stderr)
    if todo == 0:
        print(f"nothing to record: {out} already holds {a.episodes} complete episodes")
        return 0
    cams = parse_camera_spec(a.camera)
    readers = {name: CameraReader(src, name=name) for name, src in cams.items()}
    for cam in readers.values():
        cam.open_check(timeout=3.0)
    try:
        with RcCarDriver(a.port) as car:
            for cam in readers.values():
                cam.start()
            attrs = {"firmware": str(car.info.get("firmware", "")) if isinstance(car.info, dict)
                     else str(getattr(car.info, "firmware", "")),
                     "host": os.uname().nodename, "port": a.port, "camera": a.camera}
            with LogWriter(out, robot=a.robot, source="real", attrs=attrs) as writer:
                rec = CarRecorder(car, readers, writer, rate_hz=a.rate)
                names = rec.run(source, episodes=todo, seconds=a.seconds)
    finally:
        for cam in readers.values():
            cam.stop()
        close = getattr(source, "close", None)
        if close:
            close()
    print(f"recorded {len(names)} episodes into {out}: {', '.join(names)}")
    return 0


# ---------------------------------------------------------------- cycle
def cmd_cycle(a: argparse.Namespace) -> int:
    from realsim.cycle import CycleConfig, run_cycle

    cfg = CycleConfig.from_yaml(a.config)
    out = Path(a.out) if a.out else Path("runs") / Path(a.config).stem
    student = run_cycle(cfg, out, log=lambda m: print(m, file=sys.stderr, flush=True))
    print(f"student={student}")
    return 0


def _record_arm(a: argparse.Namespace) -> int:
    from hardware.arm_recorder import record_arm

    kind, _, arg = a.driver.partition(":")
    if kind == "excite":
        driver = a.driver
    elif kind == "policy":
        driver = _make_source(a.robot, a.driver, a.seconds, a.seed)
    else:
        raise UserError(f"record arm: driver {a.driver!r} is not available for the arm "
                        "(excite:sine|steps|smooth or policy:<checkpoint>)")
    names = record_arm(a.port, a.camera, a.control, a.episodes, a.seconds, driver, a.out,
                       seed=a.seed, resume=a.resume, rate_hz=a.rate)
    print(f"recorded {len(names)} episodes into {a.out}: {', '.join(names)}")
    return 0


# ---------------------------------------------------------------- logs
def cmd_logs(a: argparse.Namespace) -> int:
    from realsim.logs import summarize

    print(summarize(_existing_file(a.file)))
    return 0


# ---------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="realsim", description="Train in simulation; let reality correct the simulator.")
    p.add_argument("--version", action="version", version=f"realsim {__version__}")
    sub = p.add_subparsers(dest="verb", required=True, parser_class=_Parser)

    e = sub.add_parser("emulate", help="start an emulated real robot (pty + MJPEG cameras on 127.0.0.1)")
    e.add_argument("robot", choices=ROBOTS)
    e.add_argument("--seed", type=int, default=0, help="draws the emulated robot's true parameters and scenes")
    e.add_argument("--reality", help="YAML file overriding the emulated robot's true parameters")
    e.add_argument("--camera-port", type=int, default=0, help="HTTP port for the cameras (0: any free port)")
    e.set_defaults(func=cmd_emulate)

    r = sub.add_parser("record", help="record episodes from a real or emulated robot")
    r.add_argument("robot", choices=ROBOTS)
    r.add_argument("--port", required=True, help="serial port of the robot, e.g. /dev/ttyUSB0")
    r.add_argument("--camera", required=True, help="OpenCV source(s): index, URL or file; name=SRC,name=SRC")
    r.add_argument("--control", help="control port for episode markers (arm)")
    r.add_argument("--episodes", type=int, required=True)
    r.add_argument("--out", required=True, help="log file (HDF5), appended to")
    r.add_argument("--driver", required=True, help="excite:<signal> | policy:<checkpoint> | teleop")
    r.add_argument("--seconds", type=float, default=10.0, help="episode length, s")
    r.add_argument("--rate", type=float, default=50.0, help="control loop rate, Hz")
    r.add_argument("--seed", type=int, default=0, help="excitation seed of the first episode")
    r.add_argument("--resume", action="store_true",
                   help="top the file up to --episodes complete episodes after an interrupted run")
    r.set_defaults(func=cmd_record)

    from sysid.cli import add_fit_arguments, add_replay_arguments, cmd_fit, cmd_replay

    add_fit_arguments(sub.add_parser("fit", help="system identification: fit the simulator's "
                                     "uncertain parameters to logs")).set_defaults(func=cmd_fit)
    add_replay_arguments(sub.add_parser("replay", help="re-run logged commands open loop in the "
                                        "simulator")).set_defaults(func=cmd_replay)

    c = sub.add_parser("cycle", help="the close-the-gap loop: record, fit, residual, teach, "
                       "train, deploy, repeat")
    c.add_argument("config", help="cycle YAML (keys robot, connection, ...; see experiments/)")
    c.add_argument("--out", help="output folder (default runs/<config name>); rerun to resume")
    c.set_defaults(func=cmd_cycle)

    from teacher.cli import add_teach_arguments, cmd_teach

    t = sub.add_parser("teach", help="run the privileged teacher in the randomised simulator "
                       "and log its episodes")
    add_teach_arguments(t)
    t.set_defaults(func=cmd_teach)

    from dynamics.cli import add_train_residual_arguments, cmd_train_residual
    from student.cli import add_deploy_arguments, add_train_arguments, cmd_deploy, cmd_train_student

    tr = sub.add_parser("train-residual", help="learn what the fitted simulator still gets wrong")
    add_train_residual_arguments(tr)
    tr.set_defaults(func=cmd_train_residual)
    ts = sub.add_parser("train-student", help="train the student on robot-legal streams; "
                        "select by closed-loop success")
    add_train_arguments(ts)
    ts.set_defaults(func=cmd_train_student)
    dp = sub.add_parser("deploy", help="run a student policy on the robot and record it")
    add_deploy_arguments(dp)
    dp.set_defaults(func=cmd_deploy)
    from realsim.dagger import add_dagger_arguments, cmd_dagger

    dg = sub.add_parser("dagger", help="DAgger round: the student drives in sim, the teacher "
                        "relabels, a recoverability gate keeps what the teacher can still solve")
    add_dagger_arguments(dg)
    dg.set_defaults(func=cmd_dagger)

    lg = sub.add_parser("logs", help="summarise a log file: episodes, rates, gaps, completeness")
    lg.add_argument("file")
    lg.set_defaults(func=cmd_logs)

    from realsim.interop import cli as interop

    interop.add_export_arguments(sub.add_parser("export", help="logs to a LeRobotDataset v3 or a "
                                 "robomimic HDF5")).set_defaults(func=interop.cmd_export)
    interop.add_import_arguments(sub.add_parser("import", help="an SO-101 LeRobotDataset into a "
                                 "realsim arm log")).set_defaults(func=interop.cmd_import)
    interop.add_view_arguments(sub.add_parser("view", help="plot an episode's signals and camera "
                               "frames (PNG/HTML)")).set_defaults(func=interop.cmd_view)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `realsim` console script. Returns the exit status."""
    try:
        args = build_parser().parse_args(argv)
        return int(args.func(args) or 0)
    except UserError as e:
        msg = " ".join(str(e).split())  # one line, whatever the message held
        print(f"realsim: error: {msg}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("realsim: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())

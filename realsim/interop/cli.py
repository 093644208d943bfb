"""argparse wiring of `realsim export`, `realsim import` and `realsim view`.

Each ``add_*_arguments(p)`` fills a subparser and returns it; each ``cmd_*``
runs the verb and prints its result as the last stdout line. Heavy imports
(pyarrow, matplotlib, cv2) happen inside the commands.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from realsim.errors import UserError

EXPORT_FORMATS = ("lerobot", "robomimic")
IMPORT_FORMATS = ("lerobot",)


def _files(paths: list[str]) -> list[Path]:
    out = []
    for s in paths:
        p = Path(s)
        if not p.is_file():
            raise UserError(f"no such file: {s}")
        out.append(p)
    return out


# ---------------------------------------------------------------- export
def add_export_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """`realsim export FILE.h5 [FILE.h5 ...] --format lerobot|robomimic --out DIR_OR_FILE`."""
    p.add_argument("files", nargs="+", metavar="FILE.h5", help="realsim logs of one robot")
    p.add_argument("--format", required=True, choices=EXPORT_FORMATS,
                   help="lerobot: LeRobotDataset v3.0 folder; robomimic: one HDF5 file")
    p.add_argument("--out", required=True, help="new folder (lerobot) or new .hdf5 file (robomimic)")
    p.add_argument("--fps", type=int, help="rows per second (default: the logs' command rate)")
    p.add_argument("--task", help="lerobot: task text (default: the robot's task)")
    p.add_argument("--no-video", action="store_true",
                   help="leave camera frames out (lerobot: no mp4; robomimic: no obs/<cam>_image)")
    return p


def cmd_export(a: argparse.Namespace) -> int:
    files = _files(a.files)
    if a.fps is not None and a.fps <= 0:
        raise UserError(f"--fps must be positive, got {a.fps}")
    if a.format == "lerobot":
        from realsim.interop.lerobot import export_lerobot

        info = export_lerobot(files, a.out, fps=a.fps, task=a.task, video=not a.no_video)
        print(f"exported {info['total_episodes']} episodes, {info['total_frames']} frames at "
              f"{info['fps']} fps to {a.out}")
    else:
        from realsim.interop.robomimic import export_robomimic

        env_args = export_robomimic(files, a.out, fps=a.fps, images=not a.no_video)
        print(f"exported {a.out} ({env_args['env_name']}, {env_args['env_kwargs']['rate_hz']} Hz)")
    return 0


# ---------------------------------------------------------------- import
def add_import_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """`realsim import lerobot DIR --out FILE.h5`."""
    p.add_argument("format", choices=IMPORT_FORMATS, help="lerobot: an SO-101 LeRobotDataset v3 folder")
    p.add_argument("dir", metavar="DIR", help="the dataset folder (holds meta/info.json)")
    p.add_argument("--out", required=True, help="new realsim log (HDF5), robot arm")
    p.add_argument("--units", default="degrees", choices=("degrees", "m100"),
                   help="how the dataset stores joint positions: degrees (SO-101 recorded with "
                        "use_degrees=True, and realsim exports) or m100 (LeRobot's default "
                        "-100..100 over the calibrated range; needs --calibration)")
    p.add_argument("--calibration", help="LeRobot calibration JSON of the follower arm (for --units m100)")
    p.add_argument("--no-video", action="store_true", help="leave camera videos out")
    return p


def cmd_import(a: argparse.Namespace) -> int:
    from realsim.interop.lerobot import import_lerobot

    names = import_lerobot(a.dir, a.out, units=a.units, calibration=a.calibration,
                           video=not a.no_video,
                           progress=lambda m: print(m, file=sys.stderr, flush=True))
    print(f"imported {len(names)} episodes into {a.out}")
    return 0


# ---------------------------------------------------------------- view
def add_view_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """`realsim view FILE.h5 [--episode N] [--out PAGE.html|PNG] [--compare PRED.h5]`."""
    p.add_argument("file", metavar="FILE.h5")
    p.add_argument("--episode", default="0", help="index (negative counts from the end) or ep_ name")
    p.add_argument("--out", help="PAGE.html (with PAGE.png beside it) or PLOT.png "
                   "(default: <log>_<episode>.html here)")
    p.add_argument("--compare", metavar="PRED.h5", help="overlay this log's same episode "
                   "(e.g. a realsim replay), dashed")
    return p


def cmd_view(a: argparse.Namespace) -> int:
    from realsim.interop.view import render_episode

    _files([a.file] + ([a.compare] if a.compare else []))
    out = render_episode(a.file, a.episode, a.out, a.compare)
    print(f"wrote {out}")
    return 0

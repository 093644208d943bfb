"""Can the student see the jaws in the wrist camera? Achromatic pixels per image band.

    python experiments/arm_jaw_pixels.py LOG.h5 [LOG.h5 ...] [--episodes 3] [--frames 20]

The arm student's input (`input_mode: task_colors`) keeps only how red and how green a
pixel is, so the gripper's jaws, which sit at the bottom of the wrist view, are not in it:
the student cannot see where the jaws are relative to the cube, only where the cube is in
an image whose mount is uncertain by +-2 cm (spec/arm.md). This measures, before any
training, whether the student's achromatic key (`input_mode: task_colors_jaws`: saturation
< 40 or value < 50 on OpenCV's 0..255 scales, `student.features.JAW_SAT_MAX`) picks out the jaws whatever colour they are drawn: its pixel fraction in the
bottom quarter of the wrist frame (the jaws) against the top three quarters (table, cube,
square), and the table's median saturation and value (the key's margin). Reads any log's
camera/wrist (teacher data from `realsim teach arm`, deployments from `realsim deploy arm`).
Prints one line per log.
"""

from __future__ import annotations

import argparse
import sys

import cv2
import numpy as np

from realsim.errors import LogFormatError
from realsim.logs import LogReader
from student.features import task_color_masks


def band_stats(frames: list[np.ndarray]) -> np.ndarray:
    """Per BGR frame: the jaws key's fraction (channel 2 of `task_color_masks(jaws=True)`,
    the student's own) in the top 3/4 and the bottom 1/4, and the median saturation and
    value of the top half. Shape: (F, 4)."""
    out = []
    for im in frames:
        im = cv2.resize(im, (320, 240), interpolation=cv2.INTER_AREA)
        key = task_color_masks(im, jaws=True)[..., 2] > 0
        hsv = cv2.cvtColor(im, cv2.COLOR_BGR2HSV)
        s, v = hsv[..., 1], hsv[..., 2]
        out.append((key[:180].mean(), key[180:].mean(), np.median(s[:120]), np.median(v[:120])))
    return np.array(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("logs", nargs="+")
    ap.add_argument("--episodes", type=int, default=3)
    ap.add_argument("--frames", type=int, default=20, help="evenly spaced frames per episode")
    a = ap.parse_args(argv)
    for path in a.logs:
        try:
            with LogReader(path) as r:
                n = min(a.episodes, len(r))
                frames = []
                for k in range(n):
                    cam = r.episode(k).cameras["wrist"]
                    for i in np.linspace(0, len(cam) - 1, a.frames).astype(int):
                        frames.append(cv2.cvtColor(cam.decode(int(i)), cv2.COLOR_RGB2BGR))
        except (LogFormatError, KeyError, ValueError) as e:
            print(f"arm_jaw_pixels: {e}", file=sys.stderr)  # names the file
            return 2
        m = band_stats(frames).mean(0)
        print(f"{path}: achromatic top 3/4 {m[0]:.3f} bottom 1/4 {m[1]:.3f}; table median "
              f"sat {m[2]:.0f} val {m[3]:.0f} ({len(frames)} frames, {n} episodes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

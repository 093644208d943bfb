"""Can the student see the jaws in the wrist camera? Achromatic pixels per image band.

    python experiments/arm_jaw_pixels.py LOG.h5 [LOG.h5 ...] [--episodes 3] [--frames 20]

The arm student's input (`input_mode: task_colors`) keeps only how red and how green a
pixel is, so the gripper's jaws, which sit at the bottom of the wrist view, are not in it:
the student cannot see where the jaws are relative to the cube, only where the cube is in
an image whose mount is uncertain by +-2 cm (spec/arm.md). This measures, before any
training, whether an "achromatic" key (saturation < 40 or value < 50 on OpenCV's 0..255
scales) picks out the jaws whatever colour they are drawn: its pixel fraction in the
bottom quarter of the wrist frame (the jaws) against the top three quarters (table, cube,
square), and the table's median saturation and value (the key's margin). Reads any log's
camera/wrist (teacher data from `realsim teach arm`, deployments from `realsim deploy arm`).
Prints one line per log.
"""

from __future__ import annotations

import argparse

import cv2
import h5py
import numpy as np

SAT_MAX = 40
VAL_MIN = 50


def band_stats(jpegs: list[bytes]) -> np.ndarray:
    """Per frame: achromatic fraction (top 3/4, bottom 1/4), median sat and value of the
    top half. Shape: (F, 4)."""
    out = []
    for b in jpegs:
        im = cv2.imdecode(np.frombuffer(b, np.uint8), cv2.IMREAD_COLOR)
        if im is None:
            raise SystemExit("arm_jaw_pixels: a wrist frame is not a decodable JPEG")
        im = cv2.resize(im, (320, 240), interpolation=cv2.INTER_AREA)
        hsv = cv2.cvtColor(im, cv2.COLOR_BGR2HSV)
        s, v = hsv[..., 1], hsv[..., 2]
        ach = (s < SAT_MAX) | (v < VAL_MIN)
        out.append((ach[:180].mean(), ach[180:].mean(), np.median(s[:120]), np.median(v[:120])))
    return np.array(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("logs", nargs="+")
    ap.add_argument("--episodes", type=int, default=3)
    ap.add_argument("--frames", type=int, default=20, help="evenly spaced frames per episode")
    a = ap.parse_args(argv)
    for path in a.logs:
        with h5py.File(path, "r") as f:
            eps = list(f["episodes"].keys())[: a.episodes]
            jpegs = []
            for k in eps:
                j = f["episodes"][k]["camera/wrist/jpeg"]
                for i in np.linspace(0, len(j) - 1, a.frames).astype(int):
                    jpegs.append(np.asarray(j[i]).tobytes())
        m = band_stats(jpegs).mean(0)
        print(f"{path}: achromatic top 3/4 {m[0]:.3f} bottom 1/4 {m[1]:.3f}; table median "
              f"sat {m[2]:.0f} val {m[3]:.0f} ({len(jpegs)} frames, {len(eps)} episodes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

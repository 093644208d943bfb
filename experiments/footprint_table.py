"""The orange cone's pixel footprint at the episode start, per student input width.

    python experiments/footprint_table.py [--n 400] [--floor 20] [--widths 64 96 128 160]

Over the randomized start distribution (cone 1-3 m, +-40 deg; camera pitch, roll, FOV,
lens position, distortion randomized); counts input pixels at least half covered by the
cone after downsampling the 320x240 camera image. Prints a Markdown table.
"""

from __future__ import annotations

import argparse

from realsim.footprint import DEFAULT_FLOOR_PX, FootprintReport, footprint_table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=400, help="randomized starts")
    ap.add_argument("--floor", type=float, default=DEFAULT_FLOOR_PX, help="warning floor (px)")
    ap.add_argument("--widths", type=int, nargs="+", default=[64, 96, 128, 160])
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    reports = footprint_table(a.widths, a.floor, a.n, a.seed)
    print(f"cone footprint at episode start over {a.n} randomized starts (floor {a.floor:g} px)")
    print(FootprintReport.header())
    for r in reports:
        print(r.row())


if __name__ == "__main__":
    main()

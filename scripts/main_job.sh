#!/usr/bin/env bash
# The main job: one close-the-gap cycle on the emulated car (experiments/rc_car_cycle.yaml).
# `realsim cycle` starts `realsim emulate rc_car` itself (a car near the edges of the
# datasheet, experiments/reality_edge.yaml), records, teaches, trains, deploys, fits,
# trains the residual, retrains in the corrected simulator and deploys again, then
# prints the summary table. Rerunning resumes at the last completed stage; OUT=dir
# chooses where it goes (default runs/main), FRESH=1 starts over.
set -euo pipefail
cd "$(dirname "$0")/.."
export MUJOCO_GL=${MUJOCO_GL:-$(cat .venv/.realsim-gl 2>/dev/null || echo egl)}
OUT=${OUT:-runs/main}
if [ "${FRESH:-0}" = 1 ]; then rm -rf "$OUT"; fi
.venv/bin/realsim cycle "${CONFIG:-experiments/rc_car_cycle.yaml}" --out "$OUT"
cat "$OUT/summary.md"

#!/usr/bin/env bash
# The main job, for now: start the emulated car, record excitation episodes from
# it through the public CLI, print the log summary. (Grows into `realsim cycle`.)
set -euo pipefail
cd "$(dirname "$0")/.."
export MUJOCO_GL=${MUJOCO_GL:-$(cat .venv/.realsim-gl 2>/dev/null || echo egl)}
OUT=${OUT:-runs/main}
mkdir -p "$OUT"
RS=.venv/bin/realsim
rm -f "$OUT/car.h5"

coproc EMU { exec "$RS" emulate rc_car --seed "${SEED:-1}" 2>"$OUT/emulator.log"; }
trap 'kill $EMU_PID 2>/dev/null || true' EXIT
read -r -t 30 READY <&"${EMU[0]}" || { echo "main_job: the emulator did not start (see $OUT/emulator.log)"; exit 1; }
PORT=$(sed -n 's/.*port=\([^ ]*\).*/\1/p' <<<"$READY")
CAM=$(sed -n 's/.*camera=\([^ ]*\).*/\1/p' <<<"$READY")
echo "emulator: $READY"

"$RS" record rc_car --port "$PORT" --camera "$CAM" --episodes "${EPISODES:-3}" --seconds 10 \
  --driver excite:chirp --out "$OUT/car.h5"
"$RS" logs "$OUT/car.h5"

#!/usr/bin/env bash
# Set up realsim in ./.venv on a fresh machine (Linux, Python >= 3.10).
# Idempotent: a second run only checks. Prints one clear line for anything missing.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv || { echo "setup: cannot create a venv with $PY (install python3-venv)"; exit 1; }
fi
VPY=.venv/bin/python

# torch first, alone: on this CPU machine kind a pinned CPU wheel is on disk; an
# unpinned torch would pull a multi-GB CUDA build. A machine that already has a
# torch (a GPU user's) keeps it: pyproject.toml only asks for a range.
if ! "$VPY" -c "import torch" >/dev/null 2>&1; then
  "$VPY" -m pip install -q --upgrade pip
  "$VPY" -m pip install -q "torch==${REALSIM_TORCH:-2.13.0}" \
    || { echo "setup: could not install torch ${REALSIM_TORCH:-2.13.0}; install a torch build for your machine first, then rerun"; exit 1; }
fi
if ! "$VPY" -c "import realsim, mujoco.sysid, optuna, lightning" >/dev/null 2>&1 \
   || [ pyproject.toml -nt .venv/.realsim-installed ]; then
  "$VPY" -m pip install -q -e '.[dev]'
  touch .venv/.realsim-installed
fi

# Offscreen rendering (simulated cameras) needs EGL or OSMesa. Check it renders;
# on a Debian/Ubuntu machine where we are root, install what is missing.
check_gl() {
  MUJOCO_GL=$1 "$VPY" - <<'PYEOF' >/dev/null 2>&1
import mujoco
m = mujoco.MjModel.from_xml_string("<mujoco><worldbody><geom size='1'/></worldbody></mujoco>")
r = mujoco.Renderer(m, 8, 8); r.update_scene(mujoco.MjData(m)); r.render()
PYEOF
}
if check_gl egl; then
  GL=egl
elif check_gl osmesa; then
  GL=osmesa
elif [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "setup: no offscreen OpenGL found; installing libegl1 libgl1 libosmesa6 with apt-get"
  (apt-get update -qq && apt-get install -y -qq libegl1 libgl1 libosmesa6) >/dev/null 2>&1 || true
  if check_gl egl; then GL=egl; elif check_gl osmesa; then GL=osmesa; else GL=none; fi
else
  GL=none
fi
if [ "$GL" = none ]; then
  echo "setup: WARNING: MuJoCo cannot render offscreen (install libegl1 or libosmesa6); camera simulation will fail"
else
  echo "$GL" > .venv/.realsim-gl
fi
echo "setup: ok (python $("$VPY" -c 'import sys; print(sys.version.split()[0])'), torch $("$VPY" -c 'import torch; print(torch.__version__)'), rendering: $GL)"

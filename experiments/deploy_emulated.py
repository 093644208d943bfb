"""A student's success on an emulated robot: start `realsim emulate`, run `realsim deploy`, stop.

    python experiments/deploy_emulated.py ROBOT CKPT --out FILE.h5 [--episodes 50]
        [--seconds 20] [--seed 1] [--reality FILE.yaml]

Both verbs run as subprocesses through the public command line, exactly as a user would
type them against a real robot (`--control` for the arm); the emulator's stderr goes to
FILE.emulator.log. Prints deploy's own output (its last line is the success rate from
the judge's verdicts) and exits with deploy's status.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("robot", choices=("rc_car", "arm"))
    p.add_argument("ckpt")
    p.add_argument("--out", required=True, help="deploy's log (appended to)")
    p.add_argument("--episodes", type=int, default=50)
    p.add_argument("--seconds", type=float, default=20.0, help="per episode (arm.md: 20 s)")
    p.add_argument("--seed", type=int, default=1, help="the emulated robot's seed")
    p.add_argument("--reality", help="reality YAML for the emulator (default: its own)")
    p.add_argument("--dither", help="deploy's --dither (a number or 'eval'; default: the checkpoint's)")
    a = p.parse_args()
    if not Path(a.ckpt).is_file():
        print(f"error: {a.ckpt}: no such checkpoint", file=sys.stderr)
        return 2

    from hardware.emulators.launch import EmulatorProcess

    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with EmulatorProcess(a.robot, seed=a.seed, reality=a.reality,
                         log=out.with_suffix(".emulator.log")) as emu:
        wire = ["--port", emu.port, "--camera", emu.camera]
        if emu.control:
            wire += ["--control", emu.control]
        cmd = [sys.executable, "-m", "realsim", "deploy", a.robot, "--policy", a.ckpt, *wire,
               "--episodes", str(a.episodes), "--seconds", str(a.seconds), "--out", str(out),
               *(["--dither", a.dither] if a.dither is not None else [])]
        return subprocess.run(cmd).returncode


if __name__ == "__main__":
    sys.exit(main())

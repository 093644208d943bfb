"""Shared by the car experiments: record excitation episodes from `realsim emulate rc_car`.

Scripts run as `python experiments/NAME.py` have this folder on sys.path, so they
`from _emulated import DRIVERS, record_emulated`.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

DRIVERS = ("steps", "chirp", "prbs", "smooth")


def record_emulated(log: Path, seed: int, per_driver: int, seconds: float,
                    reality: str | None = None, drivers: Sequence[str] = DRIVERS) -> Path:
    """`per_driver` episodes of every excitation driver from an emulated car (`seed`,
    optional `reality` YAML) into `log`, through the public `realsim record` verb. The log
    appears only when complete (written as a partial file, then renamed). Returns `log`."""
    from hardware.emulators.launch import EmulatorProcess

    log.parent.mkdir(parents=True, exist_ok=True)
    tmp = log.with_suffix(".partial.h5")
    tmp.unlink(missing_ok=True)
    with EmulatorProcess("rc_car", seed=seed, reality=reality) as emu:
        for k, drv in enumerate(drivers):
            cmd = [sys.executable, "-m", "realsim", "record", "rc_car", "--port", emu.port,
                   "--camera", emu.camera, "--episodes", str(per_driver),
                   "--seconds", str(seconds), "--driver", f"excite:{drv}",
                   "--seed", str(100 * seed + 10 * k), "--out", str(tmp)]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                raise SystemExit(f"record failed: {r.stderr.strip()[-500:]}")
    tmp.replace(log)
    return log

"""Must-show (issue 7): fit the arm simulator to emulated-arm logs, judge it on held-out episodes.

    python experiments/fit_emulated_arm.py [--seed 1] [--per-driver 2] [--heldout-per-driver 1]
                                           [--seconds 8] [--trials N] [--out DIR]
    python experiments/fit_emulated_arm.py --logs fit.h5 --heldout held.h5 [--out DIR]  # existing logs

Starts ``realsim emulate arm --seed N`` (its reality is not the MuJoCo model: per-servo
PID, DC motor, stick-slip friction, gear backlash, latency; its true parameters are never
read), records ``--per-driver`` episodes of every excitation (sine, steps, smooth) for
fitting and ``--heldout-per-driver`` more on other seeds for judging, all through
``realsim record arm`` (ports and cameras only, the user's path), runs ``realsim fit arm``
on the fitting log (no episode of it held out: the held-out log is separate), then
``realsim replay arm`` of the held-out log with nominal and with fitted parameters.

Metric: joint-position open-loop RMSE (rad) over the five revolute joints, every held-out
episode replayed whole from rest in its first measured pose, compared on all its sensor
samples (pooled); per joint and overall, nominal vs fitted, and the ratio (target <= 0.5).
The residual's half of the must-show: ``experiments/residual_heldout_arm.py --fit-dir DIR``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

DRIVERS = ("sine", "steps", "smooth")


def _run(cmd: list[str]) -> str:
    """Run a realsim verb; its stdout, or exit with its last stderr lines."""
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[2:5])} failed ({r.returncode}): {r.stderr.strip()[-800:]}")
    return r.stdout


def record(out: Path, seed: int, per_driver: int, heldout_per_driver: int, seconds: float) -> tuple[Path, Path]:
    """Record the fitting and the held-out log from one emulated arm; returns their paths."""
    from hardware.emulators.launch import EmulatorProcess

    fit_log, held_log = out / f"arm_emu_seed{seed}_fit.h5", out / f"arm_emu_seed{seed}_heldout.h5"
    for p in (fit_log, held_log):
        p.unlink(missing_ok=True)
    with EmulatorProcess("arm", seed=seed, log=out / "emulator.log") as emu:
        for log, n, base in ((fit_log, per_driver, 100), (held_log, heldout_per_driver, 900)):
            for k, drv in enumerate(DRIVERS):
                if n <= 0:
                    continue
                _run([sys.executable, "-m", "realsim", "record", "arm", "--port", emu.port,
                      "--camera", emu.camera, "--control", str(emu.control), "--episodes", str(n),
                      "--seconds", str(seconds), "--driver", f"excite:{drv}",
                      "--seed", str(base * seed + 10 * k), "--out", str(log)])
    return fit_log, held_log


def qpos_rmse(pred: Path, log: Path) -> np.ndarray:
    """Per-joint open-loop RMSE (6,) of replayed vs logged qpos, pooled over episodes."""
    from realsim.logs import LogReader

    sq = []
    with LogReader(pred) as r, LogReader(log) as s:
        for name in r.episode_names:
            a, b = r.episode(name), s.episode(name)
            if not np.array_equal(a.sensors.t, b.sensors.t):
                raise SystemExit(f"{pred}: {name} not on the log's sensor timestamps")
            sq.append((np.asarray(a.sensors["qpos"], float) - np.asarray(b.sensors["qpos"], float)) ** 2)
    return np.sqrt(np.concatenate(sq).mean(axis=0))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--logs", nargs="*", help="existing arm fitting logs (skip recording)")
    ap.add_argument("--heldout", nargs="*", help="existing held-out arm logs (with --logs)")
    ap.add_argument("--seed", type=int, default=1, help="realsim emulate arm --seed")
    ap.add_argument("--per-driver", type=int, default=2, help="fitting episodes per excitation")
    ap.add_argument("--heldout-per-driver", type=int, default=1, help="held-out episodes per excitation")
    ap.add_argument("--seconds", type=float, default=8.0, help="episode length, s")
    ap.add_argument("--trials", type=int, default=None, help="realsim fit --trials (default: its own)")
    ap.add_argument("--window", type=float, default=None,
                    help="realsim fit --window (default: its own; 0 = whole episodes from rest)")
    ap.add_argument("--out", default="/tmp/fit_emulated_arm")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    if a.logs:
        fit_logs, held_logs = [Path(x) for x in a.logs], [Path(x) for x in (a.heldout or [])]
    else:
        f, h = record(out, a.seed, a.per_driver, a.heldout_per_driver, a.seconds)
        fit_logs, held_logs = [f], [h]
    print(f"logs: fit {' '.join(map(str, fit_logs))}; held-out {' '.join(map(str, held_logs))} "
          f"({time.perf_counter() - t:.0f} s to record)", flush=True)

    t = time.perf_counter()
    cmd = [sys.executable, "-m", "realsim", "fit", "arm", "--logs", *map(str, fit_logs),
           "--out", str(out / "fit"), "--holdout", "0"]
    if a.trials is not None:
        cmd += ["--trials", str(a.trials)]
    if a.window is not None:
        cmd += ["--window", str(a.window)]
    params = _run(cmd).strip().splitlines()[-1]
    print(f"fit: {params} ({time.perf_counter() - t:.0f} s)", flush=True)

    import yaml

    doc = yaml.safe_load(Path(params).read_text())["params"]
    for n, d in doc.items():
        tag = "identifiable" if d.get("identifiable") else "not identifiable (see params.yaml)"
        print(f"  {n:24s} {d['value']:.4g}  (nominal {d['nominal']:.4g})  {tag}")

    joints = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll")
    for held in held_logs:
        errs = {}
        for tag, extra in (("nominal", []), ("fitted", ["--params", params])):
            pred = out / f"{held.stem}_pred_{tag}.h5"
            _run([sys.executable, "-m", "realsim", "replay", "arm", "--log", str(held), "--out", str(pred), *extra])
            errs[tag] = qpos_rmse(pred, held)
        print(f"held-out {held.name}: joint-position open-loop RMSE (rad), nominal -> fitted")
        for i, j in enumerate(joints):
            print(f"  {j:14s} {errs['nominal'][i]:.4f} -> {errs['fitted'][i]:.4f}")
        nom = float(np.sqrt(np.mean(errs["nominal"][:5] ** 2)))
        fit = float(np.sqrt(np.mean(errs["fitted"][:5] ** 2)))
        print(f"held-out joint-position RMSE: nominal {nom:.4f} rad -> fitted {fit:.4f} rad, "
              f"ratio {fit / nom:.2f} (target <= 0.5)")
    print(params)


if __name__ == "__main__":
    main()

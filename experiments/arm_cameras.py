"""Two cameras (front + wrist) against the front camera alone, for the arm's student.

    python experiments/arm_cameras.py --data /tmp/arm_data/teach_200.h5 [--out-dir /tmp/arm_data]
        [--config experiments/student_arm.yaml] [--set KEY=VALUE ...] [--emulated N]

Trains (or, when `<out-dir>/student_arm_<variant>.pt` already exists, reuses) one student
per camera set with the same config, data, seeds and closed-loop selection, and prints
each one's simulated success on the same fresh seeds (the final evaluation of
`realsim train-student`: `final_eval_episodes` episodes with action noise) and, with
`--emulated N`, its success over N episodes on `realsim emulate arm` (JDG verdicts).
The last lines are a Markdown table.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")

VARIANTS = {"two": ["front", "wrist"], "front": ["front"]}


def _train(data: list[str], out: Path, config: str | None, sets: list[str], cameras: list[str]) -> None:
    from realsim.yamlfile import key_values
    from student.config import StudentConfig
    from student.train import train_student

    cfg = StudentConfig.load(config, "arm")
    cfg = StudentConfig.from_dict({**cfg.as_dict(), **key_values(sets), "cameras": cameras})
    train_student(data, out, cfg, log=lambda m: print(m, file=sys.stderr, flush=True))


def _emulated(ckpt: Path, episodes: int, seconds: float | None) -> tuple[int, int]:
    from hardware.emulators.launch import EmulatorProcess
    from student.deploy import deploy

    with tempfile.TemporaryDirectory() as d, EmulatorProcess("arm", seed=5) as emu:
        _, wins, judged = deploy(ckpt, emu.port, emu.camera, episodes, Path(d) / "dep.h5",
                                 robot="arm", control=emu.control, seconds=seconds)
    return wins, judged


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", nargs="+", required=True)
    ap.add_argument("--out-dir", default="/tmp/arm_data")
    ap.add_argument("--config", default=None, help="student config YAML (default: the arm's defaults)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    ap.add_argument("--emulated", type=int, default=0, help="episodes on the emulated arm (0: none)")
    ap.add_argument("--seconds", type=float, default=None, help="emulated episode length, s")
    a = ap.parse_args()
    import torch

    rows = []
    for v in a.variants:
        ck = Path(a.out_dir) / f"student_arm_{v}.pt"
        t0 = time.monotonic()
        if not ck.exists():
            _train(a.data, ck, a.config, a.set, VARIANTS[v])
        meta = torch.load(ck, map_location="cpu", weights_only=True)["meta"]
        row = {"variant": v, "cameras": "+".join(VARIANTS[v]), "ckpt": str(ck),
               "sim": meta.get("sim_success_final", float("nan")),
               "sim_n": meta.get("final_episodes", 0), "epoch": meta.get("epoch", -1) + 1,
               "train_s": time.monotonic() - t0}
        if a.emulated:
            wins, judged = _emulated(ck, a.emulated, a.seconds)
            row["emu"] = f"{wins}/{judged} ({wins / judged:.1%})" if judged else "no verdicts"
        print(row, file=sys.stderr, flush=True)
        rows.append(row)
    print("| cameras | selected epoch | sim success | emulated success | checkpoint |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['cameras']} | {r['epoch']} | {r['sim']:.1%} over {r['sim_n']} | "
              f"{r.get('emu', '-')} | {r['ckpt']} |")


if __name__ == "__main__":
    main()

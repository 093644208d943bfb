"""`realsim train-student --strategy ddp --devices 2`: the student trains under DDP over
gloo on 2 CPU processes; rank 0 alone evaluates in closed loop, writes the checkpoint and
prints the one last line (spec/cli.md), the other rank trains and stays quiet."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import yaml

from tests.conftest import run_cli

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "student"))
from student_helpers import synthetic_log  # noqa: E402

TINY = dict(image_width=32, crop_rows=None, channels=[8, 16], feature_dim=32, hidden_dim=64,
            chunk_len=5, execute_n=2, batch_size=16, epochs=2, eval_every=1, eval_episodes=2,
            final_eval_episodes=2, eval_workers=0, eval_seconds=0.4, footprint_samples=0, threads=1)


def test_train_student_ddp_two_processes(tmp_path: Path) -> None:
    data = synthetic_log(tmp_path / "d.h5", episodes=4)
    conf = tmp_path / "tiny.yaml"
    conf.write_text(yaml.safe_dump(TINY))
    out = tmp_path / "s.pt"
    p = run_cli("train-student", "rc_car", "--data", data, "--out", out, "--config", conf,
                "--strategy", "ddp", "--devices", "2", timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    lines = [ln for ln in p.stdout.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"checkpoint={out} "), p.stdout  # rank 0 only
    assert "GLOBAL_RANK: 0, MEMBER: 1/2" in p.stderr and "GLOBAL_RANK: 1, MEMBER: 2/2" in p.stderr
    ck = torch.load(out, weights_only=True)
    assert ck["config"]["epochs"] == 2 and ck["meta"]["final_episodes"] == 2
    assert all(torch.isfinite(v).all() for v in ck["state_dict"].values() if v.is_floating_point())

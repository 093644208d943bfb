"""Residual training across 2 processes: Lightning DDP over gloo on CPU, configured by
`realsim.distributed.trainer_kwargs` (the script is tests/scale/ddp_residual.py)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from realsim.distributed import DistConfig, trainer_kwargs
from sysid.robot_adapter import get_adapter
from sysid.synth import write_synthetic

SCRIPT = Path(__file__).with_name("ddp_residual.py")
BATCH = 2  # as in the script


def test_trainer_kwargs_defaults_and_ddp() -> None:
    from lightning.pytorch.strategies import DDPStrategy

    assert trainer_kwargs() == {"accelerator": "cpu", "devices": 1, "num_nodes": 1, "strategy": "auto"}
    kw = trainer_kwargs(DistConfig(strategy="ddp", devices=2))
    assert isinstance(kw["strategy"], DDPStrategy) and kw["strategy"].process_group_backend == "gloo"
    gpu = trainer_kwargs(DistConfig(strategy="ddp", devices=4, num_nodes=2, accelerator="gpu",
                                    precision="bf16-mixed"))
    assert gpu["strategy"].process_group_backend is None  # Lightning picks nccl on CUDA
    assert (gpu["num_nodes"], gpu["precision"]) == (2, "bf16-mixed")


@pytest.mark.skipif(not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
                    reason="this torch build has no gloo process group")
def test_residual_training_ddp_gloo_two_processes(tmp_path: Path) -> None:
    log = write_synthetic(tmp_path / "log.h5", get_adapter("rc_car").nominal, episodes=2, seconds=3.0, seed=1)
    out = tmp_path / "ddp"
    env = {k: v for k, v in os.environ.items() if k not in ("LOCAL_RANK", "RANK", "WORLD_SIZE", "NODE_RANK")}
    env["OMP_NUM_THREADS"] = "1"
    r = subprocess.run([sys.executable, "-W", "ignore", str(SCRIPT), str(log), str(out), "ddp", "2"],
                       capture_output=True, text=True, timeout=180, env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    reps = sorted((json.loads(p.read_text()) for p in out.glob("rank*.json")), key=lambda d: d["rank"])
    assert [d["rank"] for d in reps] == [0, 1]
    assert all(d["world_size"] == 2 and d["backend"] == "gloo" for d in reps)
    # the DistributedSampler gave each rank half of the windows; both took the same steps
    windows = reps[0]["windows"]
    assert all(d["batches"] == math.ceil(math.ceil(windows / 2) / BATCH) for d in reps), (windows, reps)
    assert reps[0]["steps"] == reps[1]["steps"] == 2 * reps[0]["batches"]
    # gradients were all-reduced: both replicas end with identical weights, which moved
    assert reps[0]["weights"] == reps[1]["weights"]
    saved = torch.load(out / "net.pt", weights_only=True)
    assert saved["after"] == reps[0]["weights"] != saved["before"]
    assert all(math.isfinite(d["loss"]) for d in reps)


def test_rank_zero_guards(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from realsim.distributed import is_global_zero, rank_zero_writer

    for var in ("RANK", "SLURM_PROCID", "LOCAL_RANK", "NODE_RANK"):
        monkeypatch.delenv(var, raising=False)
    assert is_global_zero()
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert not is_global_zero()
    w = rank_zero_writer(tmp_path / "tb")
    w.add_scalar("x", 1.0, 0)
    w.close()
    assert not (tmp_path / "tb").exists()  # only rank 0 writes
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("NODE_RANK", "1")
    assert not is_global_zero()

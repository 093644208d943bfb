"""Residual training (dynamics.lightning) under a Lightning strategy from realsim.distributed.

    python tests/scale/ddp_residual.py LOG.h5 OUTDIR STRATEGY DEVICES

Run as a script: with ``ddp`` Lightning re-runs this command once per extra process
(LOCAL_RANK set), exactly as it re-runs ``realsim train-residual``. Each rank writes
OUTDIR/rank<R>.json (world size, backend, batches it saw, a hash of its weights after
training); rank 0 alone writes OUTDIR/net.pt.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import sys
import warnings
from pathlib import Path

import lightning as L
import torch

from dynamics.data import feature_stats, linearise, load_episodes, scales
from dynamics.lightning import ResidualDataModule, ResidualModule
from realsim.distributed import DistConfig, is_global_zero, trainer_kwargs
from realsim.residual import ResidualConfig, ResidualNet
from realsim.sim import HybridSim, load_params

BATCH = 2


def weights_hash(net: torch.nn.Module) -> str:
    h = hashlib.sha1()
    for k, v in sorted(net.state_dict().items()):
        h.update(k.encode() + v.detach().cpu().numpy().tobytes())
    return h.hexdigest()


class RankReport(L.Callback):
    """Each rank writes what it did to OUTDIR/rank<R>.json when training ends."""

    def __init__(self, out: Path) -> None:
        self.out = out

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        dist = torch.distributed.is_available() and torch.distributed.is_initialized()
        assert isinstance(pl_module, ResidualModule)
        rep = {"rank": trainer.global_rank, "world_size": trainer.world_size,
               "backend": torch.distributed.get_backend() if dist else None,
               "batches": int(trainer.num_training_batches), "steps": int(trainer.global_step),
               "windows": len(trainer.train_dataloader.dataset),  # type: ignore[union-attr]
               "loss": float(trainer.callback_metrics.get("train/loss", torch.tensor(float("nan")))),
               "weights": weights_hash(pl_module.net)}
        (self.out / f"rank{trainer.global_rank}.json").write_text(json.dumps(rep))


def main(log: str, out: str, strategy: str, devices: int) -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    outdir = Path(out)
    outdir.mkdir(parents=True, exist_ok=True)
    eps = load_episodes([log], "rc_car")
    rcfg = ResidualConfig(robot="rc_car", history=3, period=10, hidden=(16,))
    sim = HybridSim("rc_car", load_params("rc_car", None), None)
    sim.period = rcfg.period
    lin, _ = linearise(sim, eps, None, rcfg, window=5)  # restarts every 5 periods: many segments
    net = ResidualNet(rcfg)
    mean, std = feature_stats(lin)
    net.set_normalisation(torch.as_tensor(mean), torch.as_tensor(std))
    before = weights_hash(net)
    module = ResidualModule(net, scales(eps), lr=3e-3)
    if "length" in inspect.signature(ResidualDataModule.__init__).parameters:  # windows API
        dm = ResidualDataModule(8, rcfg.history, batch_size=BATCH, seed=0)
    else:  # segments API
        dm = ResidualDataModule(rcfg.history, batch_size=BATCH, seed=0)
    dm.set_pass(lin, None)
    trainer = L.Trainer(max_epochs=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, num_sanity_val_steps=0, callbacks=[RankReport(outdir)],
                        **trainer_kwargs(DistConfig(strategy=strategy, devices=devices, accelerator="cpu")))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(module, datamodule=dm)
    if is_global_zero():  # the one-line guard the trainers need around their file writes
        torch.save({"before": before, "after": weights_hash(net)}, outdir / "net.pt")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))

"""Lightning pieces: the residual LightningModule (multi-step rollout loss) and the
LightningDataModule over logs + fitted parameters.

The loss unrolls the first-order model of the simulator around its own rollout
(`dynamics.data`) over *whole segments* (a whole episode from rest, or an anchor's W
periods from its state estimate): delta_0 = 0 at the segment start, where the state is
known, and

    delta_{j+1} = A_j delta_j + G_j (f_theta(history of s + delta) - fbar_j),
    loss = mean over the segment of sum_c ((s_{j+1} + delta_{j+1})_c - y_{j+1,c})^2 / sigma_c^2

for the observed channels c (`dynamics.data.OBSERVED`: the car's yaw rate and wheel
speed, the arm's joint angles), plus a small penalty on the
output (relative to its bound) for the unidentifiable directions.

Why whole segments: a window started mid-episode at the fitted simulator's own state
(delta = 0 there) would ask the residual to undo, within the window, the error the
uncorrected simulator accumulated before it; the residual then learns a force far
larger than the one missing (a known drag law came out 3 x too strong). ``truncate``
(the CLI's ``--horizon``) only cuts the gradient every that many periods (truncated
back-propagation through time; the deltas themselves are always carried); 0 keeps the
whole open-loop gradient. The one-step ablation is anchor = 1 (one-period segments from
a state estimate).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from dynamics import LR_SCHEDULES
from dynamics.data import Linearised
from realsim.residual import ResidualNet


class SegmentSet(Dataset):
    """The segments of a `Linearised` pass, each padded to the longest (J periods).

    Item: dict of float64 tensors, Shapes: A (J, S, S), G (J, S, n), fbar (J, n),
    sbar (J + 1, S), feat (J + H - 1, F) rows -H+1 .. J-1 (clipped at the segment start:
    the first sample repeated, as the simulator fills its history), y (J, O) targets at
    periods 1 .. J, mask (J,) 1 where a target exists.
    """

    def __init__(self, lin: Linearised, history: int) -> None:
        self.lin, self.H = lin, int(history)
        self.J = int(np.max(lin.length))

    def __len__(self) -> int:
        return len(self.lin.length)

    def __getitem__(self, e: int) -> dict[str, torch.Tensor]:
        lin, Jm, H = self.lin, self.J, self.H
        n = int(lin.length[e])

        def pad(x: np.ndarray, size: int) -> np.ndarray:
            if len(x) == size:
                return x
            out = np.zeros((size, *x.shape[1:]))
            out[: len(x)] = x
            if len(x):
                out[len(x) :] = x[-1]  # hold the last row: keeps padded features in range
            return out

        rows = np.clip(np.arange(-H + 1, Jm), 0, n)
        y = pad(lin.y[e, 1 : n + 1], Jm)
        mask = np.zeros(Jm)
        mask[:n] = np.isfinite(y[:n]).all(axis=1)
        t = {
            "A": pad(lin.A[e, :n], Jm),
            "G": pad(lin.G[e, :n], Jm),
            "fbar": pad(lin.fbar[e, :n], Jm),
            "sbar": pad(lin.sbar[e, : n + 1], Jm + 1),
            "feat": lin.feat[e, rows],
            "y": np.nan_to_num(y),
            "mask": mask,
        }
        return {k: torch.as_tensor(v, dtype=torch.float64) for k, v in t.items()}


def unroll(
    net: ResidualNet, b: dict[str, torch.Tensor], history: int, truncate: int = 0,
    d0: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Predicted reduced states s + delta at periods 1 .. J and the outputs applied.

    b: a batch of `SegmentSet` items (or of `chunk_batch` chunks); truncate: detach delta
    every that many periods (0: never); d0: Shape: (B, H, S) the deltas at rows
    -H+1 .. 0 (None: zero, a segment start). The first S features are the reduced state
    (`realsim.residual.RobotIO`), so the history the network sees carries the deltas.
    Returns Shapes: (B, J, S), (B, J, n_out).
    """
    A, G, fbar, sbar, feat = b["A"], b["G"], b["fbar"], b["sbar"], b["feat"]
    B, Jm, S = A.shape[0], A.shape[1], A.shape[-1]
    H = history
    if d0 is None:
        d = torch.zeros(B, S, dtype=A.dtype)
        deltas: list[torch.Tensor] = [d] * H  # delta at rows -H+1 .. 0
    else:
        deltas = list(d0.unbind(1))
        d = deltas[-1]
    preds, outs = [], []
    for i in range(Jm):
        hist = feat[:, i : i + H].clone()
        hist[..., :S] = hist[..., :S] + torch.stack(deltas[-H:], dim=1)
        o = net(hist)
        d = (A[:, i] @ d.unsqueeze(-1)).squeeze(-1) + (G[:, i] @ (o - fbar[:, i]).unsqueeze(-1)).squeeze(-1)
        if truncate > 0 and (i + 1) % truncate == 0:
            d = d.detach()
        deltas.append(d)
        if len(deltas) > H:
            deltas.pop(0)
        preds.append(sbar[:, i + 1] + d)
        outs.append(o)
    return torch.stack(preds, dim=1), torch.stack(outs, dim=1)


def chunk_batch(b: dict[str, torch.Tensor], pred: torch.Tensor, length: int, history: int) -> dict[str, torch.Tensor]:
    """Cut a batch of whole segments into chunks of `length` periods, stacked on the batch
    axis, each starting from the deltas of a full unroll (`pred`, Shape: (B, J, S), no
    gradient) in its history (``d0``, Shape: (B C, H, S)).

    Chunked training (multiple shooting with the starts taken from the current model's
    own open-loop rollout): the loss values are the whole-segment loss's; the gradient
    is truncated at chunk starts, and the chunks run side by side (J / length
    sequential network steps instead of J).
    """
    A = b["A"]
    B, J, S = A.shape[0], A.shape[1], A.shape[-1]
    H, L = int(history), int(length)
    C = -(-J // L)
    Jp = C * L
    delta = torch.cat([torch.zeros(B, 1, S, dtype=A.dtype), pred.detach() - b["sbar"][:, 1:]], dim=1)  # rows 0..J

    def padj(x: torch.Tensor, size: int) -> torch.Tensor:  # pad the period axis by holding the last row
        if x.shape[1] >= size:
            return x
        return torch.cat([x, x[:, -1:].expand(-1, size - x.shape[1], *x.shape[2:])], dim=1)

    A_, G_, fb = padj(b["A"], Jp), padj(b["G"], Jp), padj(b["fbar"], Jp)
    sb, ft = padj(b["sbar"], Jp + 1), padj(b["feat"], Jp + H - 1)
    y = padj(b["y"], Jp)
    mask = torch.cat([b["mask"], torch.zeros(B, Jp - J, dtype=A.dtype)], dim=1)
    dl = padj(delta, Jp + 1)
    out: dict[str, list[torch.Tensor]] = {k: [] for k in ("A", "G", "fbar", "sbar", "feat", "y", "mask", "d0")}
    for c in range(C):
        k0 = c * L
        out["A"].append(A_[:, k0 : k0 + L])
        out["G"].append(G_[:, k0 : k0 + L])
        out["fbar"].append(fb[:, k0 : k0 + L])
        out["sbar"].append(sb[:, k0 : k0 + L + 1])
        out["feat"].append(ft[:, k0 : k0 + L + H - 1])
        out["y"].append(y[:, k0 : k0 + L])
        out["mask"].append(mask[:, k0 : k0 + L])
        rows = torch.clamp(torch.arange(k0 - H + 1, k0 + 1), min=0)
        out["d0"].append(dl[:, rows])
    return {k: torch.cat(v, dim=0) for k, v in out.items()}


class ResidualModule(L.LightningModule):
    """The residual network trained with the multi-step loss (module doc).

    sigma: Shape: (O,) scales of the observed signals (the car's [yaw rate, wheel speed]);
    observed: their places in the reduced state (default: the car's (2, 3));
    out_penalty: weight of the mean squared output / bound; truncate: gradient truncation
    (periods, 0: none).
    chunk: 0 (default) one optimiser step per batch through the whole segments; > 0:
    chunked training (`chunk_batch`): per batch one open-loop unroll without gradient,
    then `inner` optimiser steps on chunks of `chunk` periods started from its deltas
    (the starts are refreshed for the next batch), several times the optimiser steps for
    the same time. clip: gradient-norm clip (0: none).
    schedule: the learning rate within one fit (one linearisation pass): "constant", or
    "cosine" from lr down to lr / 100 at the pass's last step, so that the pass ends at a
    settled minimum of its linear model, not wherever Adam's last noisy step left it.
    """

    def __init__(
        self,
        net: ResidualNet,
        sigma: Sequence[float],
        lr: float = 2e-3,
        weight_decay: float = 1e-5,
        out_penalty: float = 1e-3,
        truncate: int = 0,
        observed: Sequence[int] = (2, 3),
        chunk: int = 0,
        inner: int = 1,
        clip: float = 0.0,
        schedule: str = "constant",
    ) -> None:
        super().__init__()
        self.net = net
        self.observed = [int(i) for i in observed]
        if len(self.observed) != len(sigma):
            raise ValueError(f"{len(sigma)} scales for {len(self.observed)} observed signals")
        self.register_buffer("sigma", torch.as_tensor(np.asarray(sigma), dtype=torch.float64))
        self.lr, self.weight_decay, self.out_penalty = lr, weight_decay, out_penalty
        self.truncate = int(truncate)
        self.chunk, self.inner, self.clip = int(chunk), max(1, int(inner)), float(clip)
        if schedule not in LR_SCHEDULES:
            raise ValueError(f"learning-rate schedule {schedule!r}: expected one of {LR_SCHEDULES}")
        self.schedule = schedule
        if self.chunk > 0:
            self.automatic_optimization = False

    def loss(self, b: dict[str, torch.Tensor]) -> torch.Tensor:
        pred, out = unroll(self.net, b, self.net.cfg.history, self.truncate, b.get("d0"))
        err = (pred[..., self.observed] - b["y"]) / self.sigma
        m = b["mask"]
        msum = m.sum().clamp(min=1.0)
        fit = ((err**2).sum(-1) * m).sum() / msum
        reg = (((out / self.net.bound) ** 2).mean(-1) * m).sum() / msum
        return fit + self.out_penalty * reg

    def training_step(self, batch: dict[str, torch.Tensor], _: int) -> torch.Tensor:
        if self.chunk > 0:
            return self._chunked_step(batch)
        loss = self.loss(batch)
        self.log("train/loss", loss, prog_bar=True, on_epoch=True, on_step=False, batch_size=len(batch["A"]))
        return loss

    def _chunked_step(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """`inner` optimiser steps on the chunks of one batch (class doc)."""
        opt = self.optimizers()
        H = self.net.cfg.history
        with torch.no_grad():
            pred, _ = unroll(self.net, batch, H)
        cb = chunk_batch(batch, pred, self.chunk, H)
        for _k in range(self.inner):
            loss = self.loss(cb)
            opt.zero_grad()
            self.manual_backward(loss)
            if self.clip > 0:
                self.clip_gradients(opt, gradient_clip_val=self.clip, gradient_clip_algorithm="norm")
            opt.step()
        sch = self.lr_schedulers()
        if sch is not None:  # manual optimisation: the schedule steps once per batch
            sch.step()  # type: ignore[union-attr]
        self.log("train/loss", loss.detach(), prog_bar=True, on_epoch=True, on_step=False, batch_size=len(batch["A"]))
        return loss.detach()

    def validation_step(self, batch: dict[str, torch.Tensor], _: int) -> torch.Tensor:
        loss = self.loss(batch)
        self.log("val/linearised_loss", loss, on_epoch=True, batch_size=len(batch["A"]))
        return loss

    def configure_optimizers(self) -> Any:
        opt = torch.optim.AdamW(self.net.parameters(), lr=self.lr, weight_decay=self.weight_decay)
        if self.schedule == "constant":
            return opt
        steps = max(1, int(self.trainer.estimated_stepping_batches))  # batches of this fit
        sch = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps, eta_min=self.lr / 100)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sch, "interval": "step"}}


class ResidualDataModule(L.LightningDataModule):
    """Whole segments of the current linearisation pass of the training (and held-out)
    logs, `batch_size` segments a batch.

    `set_pass(train, held)` swaps in a new pass (the trainer re-linearises around the
    current residual between fits).
    """

    def __init__(self, history: int, batch_size: int = 4, seed: int = 0) -> None:
        super().__init__()
        self.history, self.batch_size, self.seed = history, batch_size, seed
        self.train_set: SegmentSet | None = None
        self.val_set: SegmentSet | None = None

    def set_pass(self, train: Linearised, held: Linearised | None) -> None:
        self.train_set = SegmentSet(train, self.history)
        self.val_set = SegmentSet(held, self.history) if held is not None else None

    def train_dataloader(self) -> DataLoader:
        assert self.train_set is not None
        g = torch.Generator().manual_seed(self.seed)
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True, generator=g)

    def val_dataloader(self) -> DataLoader | list:
        if self.val_set is None:
            return []
        return DataLoader(self.val_set, batch_size=self.batch_size)

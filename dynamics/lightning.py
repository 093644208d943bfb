"""Lightning pieces: the residual LightningModule (multi-step rollout loss) and the
LightningDataModule over logs + fitted parameters.

The loss unrolls the first-order model of the simulator around its own rollout
(`dynamics.data`): for a window of L periods from j0, delta_0 = 0,

    delta_{i+1} = A_j delta_i + G_j (f_theta(history of s + delta) - fbar_j),
    loss = mean over the window of sum_c ((s_{j+1} + delta_{i+1})_c - y_{j+1,c})^2 / sigma_c^2

for the observed channels c = yaw rate, wheel speed, plus a small penalty on the
output (relative to its bound) for the unidentifiable directions. L = 1 is the
one-step loss of the ablation.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from dynamics.data import Linearised
from realsim.residual import ResidualNet


class WindowSet(Dataset):
    """Windows of `length` periods over a `Linearised` pass.

    Item: dict of float64 tensors, Shapes: A (L, 4, 4), G (L, 4, n), fbar (L, n),
    sbar (L + 1, 4), feat (L + H - 1, F) rows j0-H+1 .. j0+L-1 (clipped at the segment
    start), y (L, 2) targets at j0+1 .. j0+L, mask (L,).
    """

    def __init__(self, lin: Linearised, length: int, history: int, stride: int | None = None) -> None:
        self.lin, self.L, self.H = lin, int(length), int(history)
        stride = stride or max(1, self.L // 2)
        self.index: list[tuple[int, int]] = []
        for e, J in enumerate(lin.length):
            last = max(0, int(J) - self.L)
            starts = list(range(0, last + 1, stride))
            if starts[-1] != last:
                starts.append(last)
            self.index += [(e, j0) for j0 in starts]

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, k: int) -> dict[str, torch.Tensor]:
        e, j0 = self.index[k]
        lin, Ln, H = self.lin, self.L, self.H
        J = int(lin.length[e])
        n = min(Ln, J - j0)
        sl = slice(j0, j0 + n)

        def pad(x: np.ndarray, size: int) -> np.ndarray:
            if len(x) == size:
                return x
            out = np.zeros((size, *x.shape[1:]))
            out[: len(x)] = x
            return out

        rows = np.clip(np.arange(j0 - H + 1, j0 + Ln), 0, J)
        y = pad(lin.y[e, j0 + 1 : j0 + 1 + n], Ln)
        mask = np.zeros(Ln)
        mask[:n] = np.isfinite(y[:n]).all(axis=1)
        y = np.nan_to_num(y)
        t = {
            "A": pad(lin.A[e, sl], Ln),
            "G": pad(lin.G[e, sl], Ln),
            "fbar": pad(lin.fbar[e, sl], Ln),
            "sbar": pad(lin.sbar[e, j0 : j0 + n + 1], Ln + 1),
            "feat": lin.feat[e, rows],
            "y": y,
            "mask": mask,
        }
        return {k: torch.as_tensor(v, dtype=torch.float64) for k, v in t.items()}


def unroll(net: ResidualNet, b: dict[str, torch.Tensor], history: int) -> torch.Tensor:
    """Predicted reduced states s + delta at j0+1 .. j0+L. Shape: (B, L, 4)."""
    A, G, fbar, sbar, feat = b["A"], b["G"], b["fbar"], b["sbar"], b["feat"]
    B, Ln = A.shape[0], A.shape[1]
    H = history
    zeros = torch.zeros(B, 4, dtype=A.dtype)
    deltas: list[torch.Tensor] = [zeros] * (H - 1) + [zeros]  # delta at rows j0-H+1 .. j0
    preds = []
    d = zeros
    for i in range(Ln):
        hist = feat[:, i : i + H].clone()
        hist[..., :4] = hist[..., :4] + torch.stack(deltas[i : i + H], dim=1)
        o = net(hist)
        d = (A[:, i] @ d.unsqueeze(-1)).squeeze(-1) + (G[:, i] @ (o - fbar[:, i]).unsqueeze(-1)).squeeze(-1)
        deltas.append(d)
        preds.append(sbar[:, i + 1] + d)
    return torch.stack(preds, dim=1)


class ResidualModule(L.LightningModule):
    """The residual network trained with the multi-step loss (module doc).

    sigma: Shape: (2,) scales of [yaw rate, wheel speed]; out_penalty: weight of the
    mean squared output / bound.
    """

    def __init__(
        self,
        net: ResidualNet,
        sigma: Sequence[float],
        lr: float = 2e-3,
        weight_decay: float = 1e-5,
        out_penalty: float = 1e-3,
    ) -> None:
        super().__init__()
        self.net = net
        self.register_buffer("sigma", torch.as_tensor(np.asarray(sigma), dtype=torch.float64))
        self.lr, self.weight_decay, self.out_penalty = lr, weight_decay, out_penalty

    def loss(self, b: dict[str, torch.Tensor]) -> torch.Tensor:
        pred = unroll(self.net, b, self.net.cfg.history)
        err = (pred[..., 2:4] - b["y"]) / self.sigma
        m = b["mask"]
        fit = ((err**2).sum(-1) * m).sum() / m.sum().clamp(min=1.0)
        hist = b["feat"][:, -self.net.cfg.history :]
        reg = ((self.net(hist) / self.net.bound) ** 2).mean()
        return fit + self.out_penalty * reg

    def training_step(self, batch: dict[str, torch.Tensor], _: int) -> torch.Tensor:
        loss = self.loss(batch)
        self.log("train/loss", loss, prog_bar=True, on_epoch=True, on_step=False, batch_size=len(batch["A"]))
        return loss

    def validation_step(self, batch: dict[str, torch.Tensor], _: int) -> torch.Tensor:
        loss = self.loss(batch)
        self.log("val/linearised_loss", loss, on_epoch=True, batch_size=len(batch["A"]))
        return loss

    def configure_optimizers(self) -> Any:
        return torch.optim.AdamW(self.net.parameters(), lr=self.lr, weight_decay=self.weight_decay)


class ResidualDataModule(L.LightningDataModule):
    """Windows over the current linearisation pass of the training (and held-out) logs.

    `set_pass(train, held)` swaps in a new pass (the trainer re-linearises around the
    current residual between fits).
    """

    def __init__(self, length: int, history: int, batch_size: int = 32, seed: int = 0) -> None:
        super().__init__()
        self.length, self.history, self.batch_size, self.seed = length, history, batch_size, seed
        self.train_set: WindowSet | None = None
        self.val_set: WindowSet | None = None

    def set_pass(self, train: Linearised, held: Linearised | None) -> None:
        self.train_set = WindowSet(train, self.length, self.history)
        self.val_set = WindowSet(held, self.length, self.history) if held is not None else None

    def train_dataloader(self) -> DataLoader:
        assert self.train_set is not None
        g = torch.Generator().manual_seed(self.seed)
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True, generator=g)

    def val_dataloader(self) -> DataLoader | list:
        if self.val_set is None:
            return []
        return DataLoader(self.val_set, batch_size=self.batch_size)

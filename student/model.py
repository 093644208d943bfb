"""The student network: a small CNN on the camera frame + telemetry (+ optional history) -> action chunk.

Input normalisation lives in the model as buffers (telemetry mean/std), so a
checkpoint's state_dict alone reproduces training's preprocessing.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from student.config import StudentConfig


class Encoder(nn.Module):
    """Image (B, 3, h, w) in [0, 1] -> (B, feature_dim).

    Two coordinate channels are appended (CoordConv) so position in the image,
    i.e. the cone's bearing, is easy to read; stride-2 convs with GroupNorm
    (no batch statistics: train and deploy behave the same), then a linear map
    of the flattened grid, which keeps where things are.
    """

    def __init__(self, channels: tuple[int, ...], feature_dim: int, h: int, w: int) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        c_in = 5
        for i, c in enumerate(channels):
            k = 5 if i == 0 else 3
            layers += [nn.Conv2d(c_in, c, k, stride=2, padding=k // 2),
                       nn.GroupNorm(min(8, c), c), nn.ReLU(inplace=True)]
            c_in = c
        self.conv = nn.Sequential(*layers)
        ys, xs = torch.meshgrid(torch.linspace(-1, 1, h), torch.linspace(-1, 1, w), indexing="ij")
        self.register_buffer("coords", torch.stack([xs, ys])[None], persistent=False)
        with torch.no_grad():
            n = self.conv(torch.zeros(1, 5, h, w)).numel()
        self.fc = nn.Sequential(nn.Flatten(), nn.Linear(n, feature_dim), nn.ReLU(inplace=True))

    def forward(self, img: torch.Tensor) -> torch.Tensor:
        x = (img - 0.5) / 0.25
        x = torch.cat([x, self.coords.expand(x.shape[0], -1, -1, -1)], dim=1)
        return self.fc(self.conv(x))


class StudentPolicy(nn.Module):
    """(img (B,3,h,w) in [0,1], tel (B,H+1,F) raw features, past (B,H,2)) -> chunk (B,k,2) in [-1,1]."""

    def __init__(self, cfg: StudentConfig) -> None:
        super().__init__()
        self.cfg = cfg
        f = len(cfg.telemetry_fields)
        self.encoder = Encoder(cfg.channels, cfg.feature_dim, cfg.image_height, cfg.image_width)
        self.register_buffer("tel_mean", torch.zeros(f))
        self.register_buffer("tel_std", torch.ones(f))
        n_in = cfg.feature_dim + f * (cfg.history + 1) + 2 * cfg.history
        self.head = nn.Sequential(
            nn.Linear(n_in, cfg.hidden_dim), nn.ReLU(inplace=True),
            nn.Linear(cfg.hidden_dim, cfg.hidden_dim), nn.ReLU(inplace=True),
            nn.Linear(cfg.hidden_dim, cfg.chunk_len * 2),
        )

    def set_stats(self, mean: np.ndarray, std: np.ndarray) -> None:
        self.tel_mean.copy_(torch.as_tensor(mean, dtype=torch.float32))
        self.tel_std.copy_(torch.as_tensor(std, dtype=torch.float32))

    def forward(self, img: torch.Tensor, tel: torch.Tensor, past: torch.Tensor) -> torch.Tensor:
        z = self.encoder(img)
        t = ((tel - self.tel_mean) / self.tel_std).clamp(-10, 10).flatten(1)
        parts = [z, t]
        if self.cfg.history:
            parts.append(past.flatten(1))
        out = self.head(torch.cat(parts, dim=1))
        return torch.tanh(out).view(-1, self.cfg.chunk_len, 2)


def frames_to_tensor(frames: np.ndarray) -> torch.Tensor:
    """uint8 RGB (B, h, w, 3) -> float (B, 3, h, w) in [0, 1], channels_last memory."""
    x = torch.from_numpy(np.ascontiguousarray(frames)).permute(0, 3, 1, 2).float().div_(255.0)
    return x.contiguous(memory_format=torch.channels_last)

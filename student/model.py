"""The student network: a small CNN per camera + telemetry (+ optional history) -> action chunk.

Input normalisation lives in the model as buffers (telemetry mean/std), so a
checkpoint's state_dict alone reproduces training's preprocessing.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from student.config import StudentConfig
from student.robots import robot_spec


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


class KeypointEncoder(nn.Module):
    """Image (B, 3, h, w) in [0, 1] -> (B, feature_dim), through K learned keypoints.

    A 5x5 stride-2 conv (with the two CoordConv channels), then 3x3 convs that keep that
    half resolution, a 1x1 conv to K maps, and a spatial soft-argmax per map (learned
    temperature): the expected (x, y) in [-1, 1] of each map's activation, plus the map's
    peak (is the thing there at all: the cube leaves the wrist camera's view). Positions
    come out sub-pixel, which the grid encoder's strided flattening does not give.
    Shape: the (B, 3K) keypoint vector -> linear -> (B, feature_dim).
    """

    def __init__(self, channels: tuple[int, ...], keypoints: int, feature_dim: int, h: int, w: int) -> None:
        super().__init__()
        widths = (tuple(channels) + (channels[-1],) * 3)[:3]  # the first three, the last repeated
        layers: list[nn.Module] = []
        c_in = 5
        for i, c in enumerate(widths):
            k, stride = (5, 2) if i == 0 else (3, 1)
            layers += [nn.Conv2d(c_in, c, k, stride=stride, padding=k // 2),
                       nn.GroupNorm(min(8, c), c), nn.ReLU(inplace=True)]
            c_in = c
        layers.append(nn.Conv2d(c_in, keypoints, 1))
        self.conv = nn.Sequential(*layers)
        ys, xs = torch.meshgrid(torch.linspace(-1, 1, h), torch.linspace(-1, 1, w), indexing="ij")
        self.register_buffer("coords", torch.stack([xs, ys])[None], persistent=False)
        with torch.no_grad():
            _, _, gh, gw = self.conv(torch.zeros(1, 5, h, w)).shape
        gy, gx = torch.meshgrid(torch.linspace(-1, 1, gh), torch.linspace(-1, 1, gw), indexing="ij")
        self.register_buffer("grid_xy", torch.stack([gx.flatten(), gy.flatten()], 1), persistent=False)
        self.log_temp = nn.Parameter(torch.zeros(()))
        self.fc = nn.Sequential(nn.Linear(3 * keypoints, feature_dim), nn.ReLU(inplace=True))

    def keypoints(self, img: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(positions (B, K, 2) as (x, y) in [-1, 1], peaks (B, K)) of `img` (B, 3, h, w)."""
        x = (img - 0.5) / 0.25
        x = torch.cat([x, self.coords.expand(x.shape[0], -1, -1, -1)], dim=1)
        m = self.conv(x).flatten(2)  # (B, K, gh*gw)
        p = torch.softmax(m / self.log_temp.exp(), dim=-1)
        return p @ self.grid_xy, m.amax(dim=-1)

    def forward(self, img: torch.Tensor) -> torch.Tensor:
        pos, peak = self.keypoints(img)
        return self.fc(torch.cat([pos.flatten(1), peak], dim=1))


class BlobMoments(nn.Module):
    """Task-colour masks (B, 3, h, w) in [0, 1] -> (B, 9 M) fixed blob statistics, no weights.

    For each of the M = 2 mask channels (`student.features.task_color_masks`: red cube,
    green square; M = 3 with the jaws' achromatic mask), from the pixel weights
    p = clamp((mask - 0.1) / 0.9, 0, 1) (training's pixel noise stays out): size
    sqrt(mass / (h w)); presence min(mass / 2 px, 1); then,
    times presence (all 0 where the colour is absent), the centroid (x, y), the standard
    deviations along x and y and their correlation, and the 4-fold orientation (Re, Im
    of E[z^4] / E[|z|^4], z the offset from the centroid as a complex number: a square's
    turn about the view axis, which second moments cannot see). x spans [-1, 1] across
    the width, y the same scale (so a square stays square): the area-averaged masks keep
    sub-pixel positions that a stack of stride-2 convolutions blurs, and a cube 5 px wide
    in the front camera then reads to a fraction of a pixel.

    The output is standardised by `mean` and `std` (buffers, saved in the checkpoint; set
    from the training frames by `set_stats`): the raw statistics span a few hundredths
    (a cube's size, its spread) to 1 and the MLP head learned next to nothing from them
    unscaled (0 % in closed loop after 8 epochs, experiments note in student/config.py).
    """

    def __init__(self, h: int, w: int, channels: int = 2) -> None:
        super().__init__()
        # 3 with input_mode "task_colors_jaws": the achromatic (jaws) mask's blob as well
        self.channels = channels
        self.width = 9 * channels
        self.register_buffer("mean", torch.zeros(self.width))
        self.register_buffer("std", torch.ones(self.width))
        xs = (torch.arange(w, dtype=torch.float32) + 0.5) * (2.0 / w) - 1.0
        ys = ((torch.arange(h, dtype=torch.float32) + 0.5) * (2.0 / w)) - h / w
        yy, xx = torch.meshgrid(ys, xs, indexing="ij")
        self.register_buffer("xx", xx.flatten(), persistent=False)
        self.register_buffer("yy", yy.flatten(), persistent=False)
        self.pixels = float(h * w)

    def set_stats(self, raw: torch.Tensor) -> None:
        """Standardise by the mean and std of `raw` (N, width): `raw_moments` of training
        frames; a statistic that never varies (a colour never seen) keeps std 1."""
        sd = raw.std(0)
        self.mean.copy_(raw.mean(0))
        self.std.copy_(torch.where(sd > 1e-4, sd, torch.ones_like(sd)))

    def forward(self, img: torch.Tensor) -> torch.Tensor:
        return (self.raw_moments(img) - self.mean) / self.std

    def raw_moments(self, img: torch.Tensor) -> torch.Tensor:
        """Unscaled statistics. Shape: (B, 3 C, h, w) -> (B, width)."""
        p = ((img[:, :self.channels].flatten(2) - 0.1) / 0.9).clamp(0, 1)  # (B, M, hw)
        m = p.sum(-1)  # (B, M) pixel mass
        present = (m / 2.0).clamp(max=1.0)
        w = p / m.clamp_min(1e-6).unsqueeze(-1)
        cx, cy = w @ self.xx, w @ self.yy
        dx, dy = self.xx - cx.unsqueeze(-1), self.yy - cy.unsqueeze(-1)  # (B, M, hw)
        vx, vy, cxy = (w * dx * dx).sum(-1), (w * dy * dy).sum(-1), (w * dx * dy).sum(-1)
        sx, sy = vx.clamp_min(1e-8).sqrt(), vy.clamp_min(1e-8).sqrt()
        corr = cxy / (sx * sy).clamp_min(1e-6)
        r2 = dx * dx + dy * dy
        re4 = (w * (r2 * r2 - 8 * dx * dx * dy * dy)).sum(-1)  # Re (dx + i dy)^4
        im4 = (w * 4 * dx * dy * (dx * dx - dy * dy)).sum(-1)  # Im (dx + i dy)^4
        norm4 = (w * r2 * r2).sum(-1).clamp_min(1e-12)
        shape = torch.stack([cx, cy, 3 * sx, 3 * sy, corr, re4 / norm4, im4 / norm4], -1)
        size = (m / self.pixels).sqrt()
        out = torch.cat([size.unsqueeze(-1), present.unsqueeze(-1), shape * present.unsqueeze(-1)], -1)
        return out.flatten(1)


class CameraEncoder(nn.Module):
    """One camera's image (B, 3, h, w) -> (B, width): the learned encoder's features
    (`cfg.encoder`; "none": no network), then the fixed `BlobMoments` (`cfg.blob_moments`)."""

    def __init__(self, cfg: StudentConfig) -> None:
        super().__init__()
        self.net = None if cfg.encoder == "none" else _learned_encoder(cfg)
        mask_channels = 3 if cfg.input_mode == "task_colors_jaws" else 2
        self.moments = (BlobMoments(cfg.image_height, cfg.image_width, mask_channels)
                        if cfg.blob_moments else None)
        self.width = (0 if self.net is None else cfg.feature_dim) + \
            (0 if self.moments is None else self.moments.width)

    def forward(self, img: torch.Tensor) -> torch.Tensor:
        parts = [] if self.net is None else [self.net(img)]
        if self.moments is not None:
            parts.append(self.moments(img))
        return torch.cat(parts, dim=1)


def _learned_encoder(cfg: StudentConfig) -> nn.Module:
    """The camera encoder `cfg.encoder` names ("grid" or "keypoints")."""
    if cfg.encoder == "keypoints":
        return KeypointEncoder(cfg.channels, cfg.keypoints, cfg.feature_dim, cfg.image_height, cfg.image_width)
    return Encoder(cfg.channels, cfg.feature_dim, cfg.image_height, cfg.image_width)


class StudentPolicy(nn.Module):
    """(img (B,3C,h,w) in [0,1], tel (B,H+1,F) raw features, past (B,H,A)) -> chunk (B,k,A) in [-1,1].

    C cameras (`cfg.cameras`, channels 3c..3c+2 are camera c), each with its own encoder
    (a front view and a wrist view share no statistics); A = the robot's action size.
    With `cfg.relative_actions` the relative dims are the measured position (tel's qpos,
    normalised like the actions) plus `relative_scale` x the head's tanh output.
    """

    def __init__(self, cfg: StudentConfig) -> None:
        super().__init__()
        from student.features import feature_width

        self.cfg = cfg
        f = feature_width(cfg.telemetry_fields)
        a = cfg.action_dim
        self.encoders = nn.ModuleList(CameraEncoder(cfg) for _ in cfg.cameras)
        self.register_buffer("tel_mean", torch.zeros(f))
        self.register_buffer("tel_std", torch.ones(f))
        n_in = sum(e.width for e in self.encoders) + f * (cfg.history + 1) + a * cfg.history
        self.q_col = -1  # relative actions: first column of qpos in the telemetry features
        if cfg.relative_actions:
            spec = robot_spec(cfg.robot)
            self.q_col = feature_width(cfg.telemetry_fields[:cfg.telemetry_fields.index("qpos")])
            rel = torch.zeros(a)
            rel[list(spec.relative_dims)] = 1.0
            self.register_buffer("q_lo", torch.tensor(spec.joint_lo, dtype=torch.float32), persistent=False)
            self.register_buffer("q_hi", torch.tensor(spec.joint_hi, dtype=torch.float32), persistent=False)
            self.register_buffer("rel", rel, persistent=False)
        self.head = nn.Sequential(
            nn.Linear(n_in, cfg.hidden_dim), nn.ReLU(inplace=True),
            nn.Linear(cfg.hidden_dim, cfg.hidden_dim), nn.ReLU(inplace=True),
            nn.Linear(cfg.hidden_dim, cfg.chunk_len * a),
        )

    def set_stats(self, mean: np.ndarray, std: np.ndarray) -> None:
        self.tel_mean.copy_(torch.as_tensor(mean, dtype=torch.float32))
        self.tel_std.copy_(torch.as_tensor(std, dtype=torch.float32))

    def forward(self, img: torch.Tensor, tel: torch.Tensor, past: torch.Tensor) -> torch.Tensor:
        z = [enc(img[:, 3 * c:3 * c + 3]) for c, enc in enumerate(self.encoders)]
        t = ((tel - self.tel_mean) / self.tel_std).clamp(-10, 10).flatten(1)
        parts = [*z, t]
        if self.cfg.history:
            parts.append(past.flatten(1))
        out = torch.tanh(self.head(torch.cat(parts, dim=1))).view(-1, self.cfg.chunk_len, self.cfg.action_dim)
        if self.q_col < 0:
            return out
        a = self.cfg.action_dim
        q = tel[:, 0, self.q_col:self.q_col + a]
        ref = ((2 * (q - self.q_lo) / (self.q_hi - self.q_lo) - 1) * self.rel).unsqueeze(1)  # (B, 1, A)
        scale = self.rel * self.cfg.relative_scale + (1 - self.rel)
        return (ref + scale * out).clamp(-1, 1)


def upgrade_state_dict(sd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A state_dict of an older layout -> today's: from before several cameras (one
    `encoder.`) -> `encoders.0.`; from before `CameraEncoder` (`encoders.<c>.conv...`)
    -> `encoders.<c>.net.conv...`."""
    out = {}
    for k, v in sd.items():
        if k.startswith("encoder."):
            k = "encoders.0." + k[len("encoder."):]
        parts = k.split(".")
        if parts[0] == "encoders" and len(parts) > 2 and parts[2] not in ("net", "moments"):
            k = ".".join([*parts[:2], "net", *parts[2:]])
        out[k] = v
    return out


def frames_to_tensor(frames: np.ndarray) -> torch.Tensor:
    """uint8 RGB (B, h, w, 3), or (B, C, h, w, 3) for C cameras -> float (B, 3C, h, w) in
    [0, 1], channels_last memory."""
    x = torch.from_numpy(np.ascontiguousarray(frames))
    if x.ndim == 5:  # (B, C, h, w, 3) -> (B, C, 3, h, w) -> (B, 3C, h, w)
        x = x.permute(0, 1, 4, 2, 3).flatten(1, 2)
    else:
        x = x.permute(0, 3, 1, 2)
    x = x.float().div_(255.0)
    return x.contiguous(memory_format=torch.channels_last)

"""The keypoint (spatial soft-argmax) camera encoder: geometry, config, and that it learns
where a small object is to sub-pixel accuracy."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from realsim.errors import UserError
from student.config import StudentConfig
from student.model import KeypointEncoder, StudentPolicy


class _FixedMaps(nn.Module):
    """Stands in for the conv stack: returns the given (K, gh, gw) maps for every image."""

    def __init__(self, maps: torch.Tensor) -> None:
        super().__init__()
        self.maps = maps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.maps.expand(x.shape[0], -1, -1, -1)


def test_soft_argmax_reads_the_peak_position() -> None:
    enc = KeypointEncoder((8, 8, 8), 2, 16, 24, 32)  # grid 12 x 16 after the stride-2 conv
    maps = torch.full((1, 2, 12, 16), -50.0)
    maps[0, 0, 0, 15] = 50.0   # top-right corner
    maps[0, 1, 11, 0] = 50.0   # bottom-left corner
    enc.conv = _FixedMaps(maps)
    pos, peak = enc.keypoints(torch.zeros(3, 3, 24, 32))
    assert pos.shape == (3, 2, 2) and peak.shape == (3, 2)
    torch.testing.assert_close(pos[0, 0], torch.tensor([1.0, -1.0]), atol=1e-4, rtol=0)
    torch.testing.assert_close(pos[0, 1], torch.tensor([-1.0, 1.0]), atol=1e-4, rtol=0)
    torch.testing.assert_close(peak[0], torch.tensor([50.0, 50.0]))


def _blobs(n: int, g: torch.Generator, h: int = 32, w: int = 40) -> tuple[torch.Tensor, torch.Tensor]:
    """Images (n, 3, h, w) with one 3x3 red square at a random place; its centre in [-1, 1]."""
    img = torch.zeros(n, 3, h, w)
    cx = torch.randint(2, w - 2, (n,), generator=g)
    cy = torch.randint(2, h - 2, (n,), generator=g)
    for i in range(n):
        img[i, 0, cy[i] - 1:cy[i] + 2, cx[i] - 1:cx[i] + 2] = 1.0
    xy = torch.stack([2 * cx / (w - 1) - 1, 2 * cy / (h - 1) - 1], 1).float()
    return img, xy


def test_keypoint_encoder_learns_a_small_objects_position() -> None:
    """A 3x3 px square in a 40x32 image, read from the keypoint positions alone (not the
    peaks, which the CoordConv channels could also make carry position): within 2 px. A
    broken soft-argmax (or one blind to position) stays near the spread of the positions."""
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    enc = KeypointEncoder((8, 8, 8), 4, 16, 32, 40)
    head = nn.Linear(2 * 4, 2)
    opt = torch.optim.Adam([*enc.parameters(), *head.parameters()], lr=3e-3)
    for _ in range(250):
        img, xy = _blobs(32, g)
        loss = nn.functional.mse_loss(head(enc.keypoints(img)[0].flatten(1)), xy)
        opt.zero_grad()
        loss.backward()
        opt.step()
    img, xy = _blobs(256, g)
    with torch.no_grad():
        err_px = ((head(enc.keypoints(img)[0].flatten(1)) - xy) * torch.tensor([39 / 2, 31 / 2])).norm(dim=1)
    assert err_px.mean() < 2.0, f"mean position error {err_px.mean():.2f} px"


def test_policy_with_keypoints_has_declared_shapes() -> None:
    cfg = StudentConfig.for_robot("arm", encoder="keypoints", keypoints=8)
    m = StudentPolicy(cfg)
    img = torch.rand(4, 3 * len(cfg.cameras), cfg.image_height, cfg.image_width)
    tel = torch.rand(4, 1, 12)
    out = m(img, tel, torch.zeros(4, 0, 6))
    assert out.shape == (4, cfg.chunk_len, 6)
    assert torch.isfinite(out).all() and out.abs().max() <= 1.0


@pytest.mark.parametrize("bad", [{"encoder": "resnet"}, {"keypoints": 0}])
def test_bad_encoder_settings_are_user_errors(bad: dict) -> None:
    with pytest.raises(UserError):
        StudentConfig.for_robot("arm", **bad)

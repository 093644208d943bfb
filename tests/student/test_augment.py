"""Training augmentation's geometry: shift, roll and zoom move the image as a camera's
mount would (in pixels, on a non-square image), and nothing when they are off."""

from __future__ import annotations

import math

import pytest
import torch

from student.config import StudentConfig
from student.train import augment

H, W = 60, 80  # the arm's input: not square, so a rotation must be done in pixels


def _dot_image(b: int, r: int, c: int) -> torch.Tensor:
    """(B, 3, H, W): black, a 3x3 white square centred at row r, column c."""
    img = torch.zeros(b, 3, H, W)
    img[:, :, r - 1:r + 2, c - 1:c + 2] = 1.0
    return img


def _centroid(img: torch.Tensor) -> torch.Tensor:
    """(B, 2) intensity-weighted (x, y) of channel 0, relative to the image centre, px."""
    m = img[:, 0]
    ys = torch.arange(H, dtype=torch.float32).view(1, H, 1) + 0.5 - H / 2
    xs = torch.arange(W, dtype=torch.float32).view(1, 1, W) + 0.5 - W / 2
    tot = m.sum((1, 2))
    return torch.stack([(m * xs).sum((1, 2)) / tot, (m * ys).sum((1, 2)) / tot], 1)


def _geometry_only(**kw) -> StudentConfig:
    base = dict(brightness=0.0, noise_std=0.0, blur_prob=0.0, shift_px=0, rotate_deg=0.0, zoom=0.0)
    base.update(kw)
    return StudentConfig.for_robot("arm", **base)


def test_geometry_off_leaves_the_image_alone():
    img = _dot_image(4, 20, 60)
    out = augment(img, _geometry_only(), torch.Generator().manual_seed(0))
    assert torch.allclose(out, img, atol=1e-6)


def test_roll_turns_about_the_centre_in_pixels():
    img = _dot_image(256, 30, 70)  # 30 px right of the centre, on the centre row
    p0 = _centroid(img)[0]
    out = augment(img, _geometry_only(rotate_deg=45.0), torch.Generator().manual_seed(1))
    p = _centroid(out)
    radius = p.norm(dim=1)
    # a rotation keeps the distance in pixels (a [-1, 1]-space rotation on 80x60 would not)
    assert torch.all((radius - p0.norm()).abs() < 1.0), radius
    ang = torch.rad2deg(torch.atan2(p[:, 1], p[:, 0]) - torch.atan2(p0[1], p0[0]))
    assert ang.abs().max() <= 45.5
    assert ang.abs().max() > 35.0 and ang.std() > 10.0  # drawn per sample, across the range


def test_zoom_scales_about_the_centre():
    img = _dot_image(256, 30, 70)
    p0 = _centroid(img)[0]
    out = augment(img, _geometry_only(zoom=0.2), torch.Generator().manual_seed(2))
    ratio = _centroid(out).norm(dim=1) / p0.norm()
    assert ratio.min() >= 0.8 - 0.03 and ratio.max() <= 1.2 + 0.03
    assert ratio.max() - ratio.min() > 0.3  # both ways, per sample
    # direction kept: a zoom does not turn
    p = _centroid(out)
    turn = torch.atan2(p[:, 1], p[:, 0]) - torch.atan2(p0[1], p0[0])
    assert torch.rad2deg(turn).abs().max() < 1.0


def test_two_cameras_get_their_own_geometry():
    img = torch.cat([_dot_image(64, 30, 70), _dot_image(64, 30, 70)], 1)  # (B, 6, H, W)
    out = augment(img, _geometry_only(rotate_deg=20.0), torch.Generator().manual_seed(3))
    a, b = _centroid(out[:, :3]), _centroid(out[:, 3:])
    assert (a - b).norm(dim=1).max() > 2.0  # independent mounts, not one shared draw


@pytest.mark.parametrize("kw", [dict(rotate_deg=-1.0), dict(zoom=0.5), dict(shift_px=-1)])
def test_bad_geometry_is_a_config_error(kw):
    from realsim.errors import UserError
    with pytest.raises(UserError):
        StudentConfig.for_robot("arm", **kw).validate()


def test_rotation_matrix_sign_is_a_turn_not_a_shear():
    # turns of up to 45 deg must move a dot right of the centre well above or below its row
    img = _dot_image(64, 30, 60)
    out = augment(img, _geometry_only(rotate_deg=45.0), torch.Generator().manual_seed(4))
    p = _centroid(out)
    big = torch.rad2deg(torch.atan2(p[:, 1], p[:, 0])).abs() > 30
    assert big.any() and math.isfinite(float(p.sum()))

"""The fixed blob statistics of the task-colour masks (`student.model.BlobMoments`):
sub-pixel centroids from area-averaged masks, the 4-fold orientation of a square, nothing
where a colour is absent, pixel noise ignored; the config's rules; old checkpoints load."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from realsim.errors import UserError
from student.config import StudentConfig
from student.model import BlobMoments, StudentPolicy, upgrade_state_dict

H, W = 60, 80
# feature index within one colour's 9: size, present, cx, cy, 3 sx, 3 sy, corr, re4, im4
SIZE, PRESENT, CX, CY, RE4, IM4 = 0, 1, 2, 3, 7, 8


def _square(cx: float, cy: float, side: float, angle: float, sub: int = 40) -> np.ndarray:
    """A filled square (centre (cx, cy) in input px, `side` px, turned by `angle` rad),
    each input pixel the covered fraction of its sub x sub sample points (area-averaged,
    as `preprocess_jpeg` gives); input pixel j spans [j, j + 1). Shape: (H, W)."""
    t = (np.arange(sub) + 0.5) / sub
    ys = (np.arange(H)[:, None] + t[None, :]).reshape(-1)
    xs = (np.arange(W)[:, None] + t[None, :]).reshape(-1)
    yy, xx = np.meshgrid(ys - cy, xs - cx, indexing="ij")
    c, s = math.cos(angle), math.sin(angle)
    u, v = c * xx + s * yy, -s * xx + c * yy
    inside = (np.abs(u) <= side / 2) & (np.abs(v) <= side / 2)
    return inside.reshape(H, sub, W, sub).mean(axis=(1, 3)).astype(np.float32)


def _moments(red: np.ndarray, green: np.ndarray | None = None) -> torch.Tensor:
    img = torch.zeros(1, 3, H, W)
    img[0, 0] = torch.from_numpy(red)
    if green is not None:
        img[0, 1] = torch.from_numpy(green)
    return BlobMoments(H, W)(img).view(2, 9)


def test_centroid_is_sub_pixel() -> None:
    """A 5 px square moved by a tenth of a pixel moves the centroid by a tenth of a pixel
    (0.1 px = 0.0025 on the [-1, 1] width scale), within 0.03 px, and sits within 0.05 px
    of the true centre (the noise threshold bends the partial edge pixels a little)."""
    px = 2.0 / W  # one input pixel on the feature's scale
    for x0, y0 in ((20.0, 12.0), (51.3, 40.7)):
        a = _moments(_square(x0, y0, 5, 0.0))[0]
        b = _moments(_square(x0 + 0.1, y0 - 0.1, 5, 0.0))[0]
        assert abs(float(a[CX]) - ((x0) * px - 1)) < 0.05 * px
        assert abs(float(a[CY]) - ((y0) * px - H / W)) < 0.05 * px
        assert abs(float(b[CX] - a[CX]) - 0.1 * px) < 0.03 * px
        assert abs(float(b[CY] - a[CY]) + 0.1 * px) < 0.03 * px
        assert float(a[PRESENT]) == 1.0
        assert abs(float(a[SIZE]) - math.sqrt(25 / (H * W))) < 0.01


def test_orientation_of_a_square_turns_four_times_as_fast() -> None:
    """(re4, im4) of a square turned by theta points at 4 theta (up to the sign of a
    square's 4th moment), so 0 and 90 degrees agree and 45 degrees is the opposite."""
    def angle(deg: float) -> float:
        f = _moments(_square(40, 30, 16, math.radians(deg)))[0]
        return math.atan2(float(f[IM4]), float(f[RE4]))

    base = angle(0.0)
    for deg in (10.0, 20.0, -15.0):
        d = (angle(deg) - base + math.pi) % (2 * math.pi) - math.pi
        assert abs(d - math.radians(4 * deg)) < math.radians(2.0), deg
    assert abs((angle(90.0) - base + math.pi) % (2 * math.pi) - math.pi) < math.radians(2.0)
    assert abs(abs((angle(45.0) - base + math.pi) % (2 * math.pi) - math.pi) - math.pi) < math.radians(2.0)


def test_absent_colour_is_all_zero_and_noise_is_ignored() -> None:
    """No green: the green features are exactly 0. Training's pixel noise (std up to
    0.03 on every pixel, clamped at 0) leaves the red centroid where it was and the
    green channel, noise alone, all but absent."""
    red = _square(30, 20, 5, 0.3)
    clean = _moments(red)
    assert torch.equal(clean[1], torch.zeros(9))
    g = np.random.default_rng(0)
    noisy = np.clip(red + 0.03 * g.standard_normal(red.shape), 0, 1).astype(np.float32)
    f = _moments(noisy, np.clip(0.03 * g.standard_normal(red.shape), 0, 1).astype(np.float32))
    assert abs(float(f[0, CX] - clean[0, CX])) < 0.05 * 2 / W
    assert abs(float(f[0, CY] - clean[0, CY])) < 0.05 * 2 / W
    assert float(f[1, PRESENT]) < 0.01 and float(f[1, 2:].abs().max()) < 0.01


def test_policy_with_moments_only_has_declared_shapes_and_reads_position() -> None:
    """encoder none + blob_moments: no conv weights at all; the chunk depends on where the
    cube is (a network blind to the moments would give the same output)."""
    cfg = StudentConfig.for_robot("arm", encoder="none", blob_moments=True)
    m = StudentPolicy(cfg)
    assert not any("conv" in k for k in m.state_dict())
    img = torch.zeros(2, 6, cfg.image_height, cfg.image_width)
    img[0, 0, 10:15, 10:15] = 1.0
    img[1, 0, 40:45, 60:65] = 1.0
    out = m(img, torch.zeros(2, 1, 12), torch.zeros(2, 0, 6))
    assert out.shape == (2, cfg.chunk_len, 6) and torch.isfinite(out).all()
    assert (out[0] - out[1]).abs().max() > 1e-4


@pytest.mark.parametrize("bad", [{"blob_moments": True, "input_mode": "rgb"},
                                 {"encoder": "none", "blob_moments": False}])
def test_bad_moment_settings_are_user_errors(bad: dict) -> None:
    with pytest.raises(UserError):
        StudentConfig.for_robot("arm", **bad)


def test_a_state_dict_from_before_camera_encoder_loads() -> None:
    """Checkpoints written before `CameraEncoder` name the convs `encoders.0.conv...`."""
    cfg = StudentConfig.for_robot("arm")
    m = StudentPolicy(cfg)
    old = {k.replace(".net.", ".", 1): v for k, v in m.state_dict().items()}
    assert any(k.startswith("encoders.0.conv") for k in old)
    fresh = StudentPolicy(cfg)
    fresh.load_state_dict(upgrade_state_dict(old))
    for k, v in m.state_dict().items():
        assert torch.equal(fresh.state_dict()[k], v)


def test_moments_are_standardised_by_the_training_frames_statistics() -> None:
    """set_stats: over the frames it was given every statistic that varies comes out with
    mean 0 and std 1 (raw, a cube's size is a few hundredths and barely moves the head);
    one that never varies (the absent green) keeps its scale."""
    rng = np.random.default_rng(0)
    imgs = torch.zeros(64, 3, H, W)
    for b in range(64):
        imgs[b, 0] = torch.from_numpy(_square(rng.uniform(10, 70), rng.uniform(10, 50),
                                              rng.uniform(3, 8), rng.uniform(0, 1.5)))
    bm = BlobMoments(H, W)
    raw = bm.raw_moments(imgs)
    assert float(raw[:, SIZE].std()) < 0.05  # the scale the head could not use
    bm.set_stats(raw)
    z = bm(imgs)
    varying = raw.std(0) > 1e-4
    assert torch.allclose(z[:, varying].mean(0), torch.zeros(int(varying.sum())), atol=1e-4)
    assert torch.allclose(z[:, varying].std(0), torch.ones(int(varying.sum())), atol=1e-3)
    assert torch.equal(bm.std[~varying], torch.ones(int((~varying).sum())))


def test_a_moments_checkpoint_from_before_their_scaling_loads_unscaled() -> None:
    from student.policy import checkpoint_dict, model_from_checkpoint

    cfg = StudentConfig.for_robot("arm", blob_moments=True)
    ck = checkpoint_dict(StudentPolicy(cfg), cfg, {})
    ck["state_dict"] = {k: v for k, v in ck["state_dict"].items() if ".moments." not in k}
    m = model_from_checkpoint(ck)
    assert torch.equal(m.encoders[0].moments.std, torch.ones(m.encoders[0].moments.width))


def test_training_sets_each_cameras_moment_statistics_from_its_own_frames() -> None:
    """train_student calls set_moment_stats: camera c's stats come from the frames that
    samples show on camera c (the wrist's differ from the front's)."""
    from types import SimpleNamespace

    from student.train import set_moment_stats

    cfg = StudentConfig.for_robot("arm", blob_moments=True)
    h, w = cfg.image_height, cfg.image_width
    frames = np.zeros((8, h, w, 3), np.uint8)
    frames[:4, 5:10, 5:10, 0] = 255  # front: a small cube, top left
    frames[4:, 20:50, 30:70, 0] = 255  # wrist: a big one, centre
    for k in range(8):  # it moves a little from frame to frame
        frames[k] = np.roll(frames[k], k, axis=1)
    data = SimpleNamespace(frames=frames, frame=np.array([[i, 4 + i] for i in range(4)]))
    m = StudentPolicy(cfg)
    set_moment_stats(m, data)
    front, wrist = m.encoders[0].moments, m.encoders[1].moments
    assert float(wrist.mean[SIZE]) > 2 * float(front.mean[SIZE]) > 0
    assert not torch.equal(front.std, torch.ones(front.width))

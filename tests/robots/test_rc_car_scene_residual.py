"""CarTaskEnv through the hybrid simulator: a learned residual inside every physics step."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from realsim.errors import UserError
from realsim.residual import Residual, ResidualConfig, ResidualNet, save_residual, zero_residual
from realsim.robots.rc_car import constants as C
from realsim.robots.rc_car.scene import CarTaskEnv, Obs
from realsim.sim import HybridCarSim

N_STEPS = 60  # 1.2 s at 50 Hz


def _run(env: CarTaskEnv, seed: int, n: int = N_STEPS) -> tuple[list[Obs], np.ndarray]:
    """Telemetry of an episode with a fixed action sequence, and the final pose (3,)."""
    obs = [env.reset(seed, distractor=False)]
    for k in range(n):
        obs.append(env.step([0.4 * math.sin(0.15 * k), 0.5]))
    assert env.sim is not None
    return obs, env.sim.pose.copy()


def _braking_residual() -> Residual:
    """A residual whose fx output saturates at -bound (a constant brake, ~2 N)."""
    net = ResidualNet(ResidualConfig(outputs=("fx",), history=2))
    with torch.no_grad():
        net.head.bias.fill_(-50.0)
    return Residual(net.eval(), {})


def _state_dependent_residual() -> Residual:
    """A random residual whose output depends on the state history (not saturated)."""
    torch.manual_seed(0)
    cfg = ResidualConfig(history=3, period=7)
    net = ResidualNet(cfg)
    with torch.no_grad():
        net.head.weight.mul_(30.0)
    return Residual(net.eval(), {})


def _assert_same(a: list[Obs], b: list[Obs]) -> None:
    for oa, ob in zip(a, b, strict=True):
        assert oa.t == ob.t
        for k in C.SENSOR_FIELDS:
            np.testing.assert_array_equal(oa.telemetry[k], ob.telemetry[k], err_msg=k)


def test_zero_residual_gives_the_identical_episode(tmp_path: Path) -> None:
    plain = CarTaskEnv(render=False)
    ref, pose_ref = _run(plain, 7)
    assert type(plain.sim) is not HybridCarSim
    ck = save_residual(tmp_path / "zero.pt", zero_residual().net)
    hybrid = CarTaskEnv(render=False, residual=ck)  # a checkpoint path
    out, pose = _run(hybrid, 7)
    assert isinstance(hybrid.sim, HybridCarSim)
    _assert_same(ref, out)
    np.testing.assert_array_equal(pose_ref, pose)
    assert np.linalg.norm(pose[:2]) > 0.1  # it drove


def test_nonzero_residual_changes_the_episode_and_stays_finite() -> None:
    plain, _ = _run(CarTaskEnv(render=False), 7)
    env = CarTaskEnv(render=False, residual=_braking_residual())
    out, pose = _run(env, 7)
    enc_plain = float(plain[-1].telemetry["enc_rad"])
    enc = float(out[-1].telemetry["enc_rad"])
    assert enc < enc_plain - 0.5, (enc, enc_plain)  # the brake slowed the car
    assert np.all(np.isfinite(pose))
    for o in out:
        assert all(np.all(np.isfinite(o.telemetry[k])) for k in ("enc_rad", "yaw_rate", "accel"))
    # same seed, same residual: the same episode
    again, _ = _run(env, 7)
    _assert_same(out, again)


def test_residual_draws_the_same_world_as_without() -> None:
    a, b = CarTaskEnv(render=False), CarTaskEnv(render=False, residual=_braking_residual())
    a.reset(3)
    b.reset(3)
    assert a.draw == b.draw and a.scene == b.scene


def test_get_set_state_resumes_exactly_with_a_residual() -> None:
    res = _state_dependent_residual()
    env = CarTaskEnv(render=False, residual=res)
    _run(env, 21, 13)  # 13 control steps = 260 physics steps: mid-period of the hold
    snap = env.get_state()
    rest = [env.step([0.5, 0.6]) for _ in range(15)]
    other = CarTaskEnv(render=False, residual=res)
    other.set_state(snap)
    again = [other.step([0.5, 0.6]) for _ in range(15)]
    _assert_same(rest, again)


def test_bad_residual_checkpoints_are_user_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(UserError, match="residual"):
        CarTaskEnv(render=False, residual=bad)
    with pytest.raises(UserError, match="no such residual"):
        CarTaskEnv(render=False, residual=tmp_path / "missing.pt")
    arm = save_residual(tmp_path / "arm.pt", ResidualNet(ResidualConfig(robot="arm")))
    with pytest.raises(UserError, match="arm"):
        CarTaskEnv(render=False, residual=arm)

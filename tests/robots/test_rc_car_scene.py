"""The reach-the-cone environment: shapes, determinism, the privileged wall, state restore."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from realsim.errors import UserError
from realsim.randomization import Randomization
from realsim.robots.rc_car import constants as C
from realsim.robots.rc_car.scene import CarTaskEnv, Obs, decode_jpeg


@pytest.fixture(scope="module")
def env() -> CarTaskEnv:
    e = CarTaskEnv()
    yield e
    e.close()


def _run(env: CarTaskEnv, seed: int, n: int = 30) -> list[Obs]:
    obs = [env.reset(seed, distractor=True)]
    for k in range(n):
        obs.append(env.step([0.3 * math.sin(0.2 * k), 0.4]))
    return obs


def test_reset_step_shapes_no_nan(env: CarTaskEnv) -> None:
    obs = _run(env, 3, 40)
    assert {f.name for f in dataclasses.fields(Obs)} == {
        "t",
        "telemetry",
        "frame_jpeg",
        "frame",
        "frame_t",
    }
    frames = [o for o in obs if o.frame is not None]
    # 0.8 s at 20 frames/s, minus the camera latency
    assert 12 <= len(frames) <= 17
    for o in obs:
        assert set(o.telemetry) == set(C.SENSOR_FIELDS)
        assert np.shape(o.telemetry["accel"]) == (2,)
        for k in ("enc_rad", "yaw_rate", "vbat"):
            assert np.isfinite(o.telemetry[k])
        assert np.all(np.isfinite(o.telemetry["accel"]))
    for o in frames:
        assert o.frame.shape == (C.CAMERA_HEIGHT, C.CAMERA_WIDTH, 3) and o.frame.dtype == np.uint8
        assert o.frame_jpeg[:2] == b"\xff\xd8"
        np.testing.assert_array_equal(decode_jpeg(o.frame_jpeg), o.frame)
    assert obs[-1].t == pytest.approx(40 / 50.0)
    assert env.sim.velocity[0] > 0.2  # it drove
    priv = env.privileged()
    assert priv["distractor_xy"] is not None and priv["pose"].shape == (3,)


def test_same_seed_same_episode(env: CarTaskEnv) -> None:
    a = _run(env, 11)
    b = _run(CarTaskEnv(), 11)
    c = _run(env, 12)
    assert [o.frame_jpeg for o in a] == [o.frame_jpeg for o in b]
    for oa, ob in zip(a, b, strict=True):
        for k in C.SENSOR_FIELDS:
            np.testing.assert_array_equal(oa.telemetry[k], ob.telemetry[k])
    assert [o.frame_jpeg for o in a] != [o.frame_jpeg for o in c]


def test_obs_has_no_privileged_state(env: CarTaskEnv) -> None:
    o = env.reset(5)
    o = env.step([0.0, 0.0])
    banned = {"pose", "qpos", "qvel", "cone_xy", "distractor_xy", "params", "draw", "velocity"}
    assert not banned & set(o.telemetry)
    assert not banned & {f.name for f in dataclasses.fields(o)}


def test_get_set_state_resumes_exactly(env: CarTaskEnv) -> None:
    _run(env, 21, 20)
    snap = env.get_state()
    rest = [env.step([0.5, 0.6]) for _ in range(20)]
    other = CarTaskEnv()
    other.set_state(snap)
    again = [other.step([0.5, 0.6]) for _ in range(20)]
    for a, b in zip(rest, again, strict=True):
        assert a.t == b.t and a.frame_jpeg == b.frame_jpeg
        for k in C.SENSOR_FIELDS:
            np.testing.assert_array_equal(a.telemetry[k], b.telemetry[k])
    np.testing.assert_array_equal(env.sim.pose, other.sim.pose)
    other.close()


def test_fixed_world_and_time_limit() -> None:
    env = CarTaskEnv(randomization=Randomization.none(), render=False)
    env.reset(0, distractor=False)
    assert env.draw.action_noise == 0 and env.draw.params == env.params
    while not env.done:
        env.step([0.0, -1.0])
    assert env.t == pytest.approx(10.0)
    success, score = env.verdict()
    assert success == 0 and score == pytest.approx(math.hypot(*env.scene.cone_xy), abs=0.01)


def test_randomization_yaml_roundtrip(tmp_path) -> None:
    r = Randomization(action_noise=(0.0, 0.05), floor_kinds=("checker",))
    p = tmp_path / "r.yaml"
    r.to_yaml(p)
    assert Randomization.from_yaml(p) == r
    p.write_text("bogus: 1\n")
    with pytest.raises(UserError, match="bogus"):
        Randomization.from_yaml(p)
    d1 = r.sample(np.random.default_rng(4))
    d2 = r.sample(np.random.default_rng(4))
    assert d1 == d2 and d1.floor_kind == "checker" and 0 <= d1.action_noise <= 0.05
    assert all(np.isfinite(v) for v in d1.flat().values())


def test_physics_centred_on_given_params() -> None:
    from realsim.robots.rc_car.params import CarParams

    fit = CarParams(tyre_mu=0.5, latency=0.03)
    env = CarTaskEnv(params=fit, render=False)
    mus = []
    for s in range(6):
        env.reset(s)
        mus.append(env.draw.params["tyre_mu"])
        assert abs(env.draw.params["latency"] - 0.03) <= 0.15 * 0.07 / 2 + 1e-9
    assert max(abs(m - 0.5) for m in mus) <= 0.15 * 0.8 / 2 + 1e-9
    nominal = CarTaskEnv(render=False)
    spread = []
    for s in range(6):
        nominal.reset(s)
        spread.append(nominal.draw.params["tyre_mu"])
    assert max(spread) - min(spread) > 0.2  # datasheet range 0.4..1.2 before a fit

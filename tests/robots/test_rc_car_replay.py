"""Open-loop replay of the RC car: batched `mujoco.rollout` == Python step loop, log fields."""

from __future__ import annotations

import numpy as np
import pytest

from realsim.robots.rc_car import constants as C
from realsim.robots.rc_car.model import cached_model
from realsim.robots.rc_car.params import CarParams
from realsim.robots.rc_car.sim import (
    ReplayInput,
    replay,
    replay_batch,
    replay_reference,
    rest_state,
)


def episode(duration: float, seed: int, enc0: float = 0.0) -> ReplayInput:
    """Commands ~33 Hz (steering sweep, drive/brake phases), telemetry ~50 Hz."""
    rng = np.random.default_rng(seed)
    ct = np.cumsum(rng.uniform(0.025, 0.035, int(duration / 0.025) + 2))
    ct = ct[ct < duration]
    steer = np.sin(2 * np.pi * 0.5 * ct)
    thr = np.where((ct % 2.0) < 1.4, 0.7, -0.6)
    st = 0.004 + np.cumsum(rng.uniform(0.019, 0.021, int(duration / 0.019) + 2))
    st = st[st < duration]
    return ReplayInput(
        ct,
        np.stack([steer, thr], 1),
        st,
        8.3 - 0.3 * st / duration,
        enc0=enc0,
        command_seq=np.arange(len(ct)) + 100,
    )


EPISODES = [episode(3.0, 0, enc0=5.0), episode(2.2, 1), episode(3.1, 2, enc0=-1.0)]
PARAMS = [
    CarParams(),
    CarParams(
        latency=0.02,
        tyre_mu=0.6,
        com_x=0.08,
        motor_gain=0.08,
        steer_trim=0.03,
        gyro_bias=0.01,
        accel_bias_y=-0.2,
    ),
]


@pytest.fixture(scope="module")
def batch() -> list[list[dict[str, np.ndarray]]]:
    return replay_batch(PARAMS, EPISODES, nthread=2)


def test_fields_are_exactly_the_logs(batch) -> None:
    assert len(batch) == len(PARAMS) and all(len(row) == len(EPISODES) for row in batch)
    for row in batch:
        for ep, out in zip(EPISODES, row, strict=True):
            M = len(ep.sensor_t)
            assert tuple(out) == C.SENSOR_FIELDS
            assert out["enc_rad"].shape == (M,) and out["enc_rad"].dtype == np.float64
            assert out["yaw_rate"].shape == (M,)
            assert out["accel"].shape == (M, 2)
            assert out["vbat"].shape == (M,) and np.array_equal(out["vbat"], ep.vbat)
            assert out["ack"].dtype == np.int64 and out["flags"].dtype == np.int64
            for v in out.values():
                assert np.all(np.isfinite(v))
            assert out["enc_rad"][0] == pytest.approx(ep.enc0)  # continues from the log
            assert out["enc_rad"][-1] > ep.enc0 + 10  # the car drove forwards
            assert out["ack"][0] == -1 and out["ack"][-1] == 100 + len(ep.command_t) - 1
            assert np.all(out["flags"] & C.FLAG_EPISODE)
            assert out["flags"][0] & C.FLAG_WATCHDOG and not out["flags"][-1] & C.FLAG_WATCHDOG


def test_batched_rollout_equals_python_step_loop(batch) -> None:
    for p in range(len(PARAMS)):
        for e in (0, 1):
            ref = replay_reference(PARAMS[p], EPISODES[e])
            for k in C.SENSOR_FIELDS:
                np.testing.assert_allclose(batch[p][e][k], ref[k], rtol=0, atol=1e-7, err_msg=k)


def test_batch_members_are_independent(batch) -> None:
    alone = replay(PARAMS[1], [EPISODES[2]], nthread=1)[0]
    for k in C.SENSOR_FIELDS:
        np.testing.assert_allclose(batch[1][2][k], alone[k], atol=1e-9, err_msg=k)
    assert not np.allclose(batch[0][2]["yaw_rate"], batch[1][2]["yaw_rate"])


def test_sensor_biases_and_latency() -> None:
    ep = episode(1.5, 3)
    base = CarParams(latency=0.02)
    outs = replay_batch(
        [base, base.replace(gyro_bias=0.05, accel_bias_x=0.3), base.replace(latency=0.07)], [ep]
    )
    a, b, late = (o[0] for o in outs)
    np.testing.assert_allclose(b["yaw_rate"] - a["yaw_rate"], 0.05, atol=1e-12)
    np.testing.assert_allclose(b["accel"][:, 0] - a["accel"][:, 0], 0.3, atol=1e-12)
    np.testing.assert_allclose(b["accel"][:, 1], a["accel"][:, 1], atol=1e-12)

    def onset(out: dict[str, np.ndarray]) -> float:
        return float(ep.sensor_t[np.argmax(out["enc_rad"] - ep.enc0 > 0.05)])

    assert onset(late) - onset(a) == pytest.approx(0.05, abs=0.025)


def test_start_from_a_given_state() -> None:
    """A window started mid-episode from a state estimate: the car already rolling."""
    p = CarParams()
    model = cached_model(p)
    q, v = rest_state(model)
    v[0] = 2.0  # forward
    v[6:8] = 2.0 / C.WHEEL_RADIUS  # rear wheels rolling
    v[9] = v[11] = 2.0 / C.WHEEL_RADIUS
    ep = episode(1.0, 4)
    rolling = ReplayInput(
        ep.command_t - 10, ep.action, ep.sensor_t, ep.vbat, initial_qpos=q, initial_qvel=v
    )
    out = replay(p, [rolling])[0]
    # coasting under full brake (watchdog): encoder advances at first, then stops
    rate = np.diff(out["enc_rad"]) / np.diff(ep.sensor_t)
    assert rate[0] > 0.5 * 2.0 / C.WHEEL_RADIUS
    assert abs(rate[-1]) < 0.1 * rate[0]


def test_bad_inputs() -> None:
    with pytest.raises(ValueError):
        ReplayInput(np.zeros(3), np.zeros((2, 2)), np.zeros(2), np.zeros(2))
    with pytest.raises(ValueError):
        ReplayInput(np.zeros(1), np.zeros((1, 2)), np.array([0.0, 1.0]), np.zeros(3))
    # no commands at all: braked, standing still
    out = replay(
        CarParams(),
        [ReplayInput(np.zeros(0), np.zeros((0, 2)), np.linspace(0, 0.5, 26), np.full(26, 8.0))],
    )[0]
    assert np.allclose(out["enc_rad"], 0.0, atol=1e-6) and np.all(out["ack"] == -1)


def test_batched_settle_equals_step_loop_settle() -> None:
    from realsim.robots.rc_car import sim

    ps = [CarParams(com_x=0.071), CarParams(com_x=0.119, yaw_inertia=0.005)]
    models = [cached_model(p) for p in ps]
    for p in ps:
        sim._REST_CACHE.pop(p.spec_key(), None)
    sim.settle_batch(models, [p.spec_key() for p in ps])
    batched = [sim._REST_CACHE.pop(p.spec_key())[0] for p in ps]
    looped = [rest_state(m)[0] for m in models]  # no key: not cached, step loop
    for a, b in zip(batched, looped, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-12)
        assert -1e-3 < a[2] < 0.0  # resting on its tyres, a fraction of a mm deep

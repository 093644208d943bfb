"""The emulated car's reality model and camera: physics the datasheet promises, sensors, render."""

from __future__ import annotations

import dataclasses
import math
import time

import numpy as np
import pytest

from hardware.emulators.rc_car.reality import (
    DT,
    ENCODER_COUNTS_PER_REV,
    SERVO_THROW,
    CarReality,
    RealityParams,
)
from realsim.errors import UserError


@pytest.fixture
def params() -> RealityParams:
    """Seed 0's reality with zero trim and a full battery (straight lines stay straight)."""
    p = RealityParams.sample(np.random.default_rng([0, 0]))
    return dataclasses.replace(p, steer_trim=0.0, battery_soc=1.0)


def _run(car: CarReality, seconds: float, every: int = 1) -> list[dict[str, float]]:
    out = []
    for i in range(int(round(seconds / DT))):
        car.step(DT)
        if i % every == 0:
            out.append(car.state())
    return out


def test_deterministic_for_a_seed() -> None:
    def session(seed: int) -> list[tuple]:
        p = RealityParams.from_yaml(None, seed)
        car = CarReality(p, seed)
        tel = []
        for k in range(100):
            car.command(k * 0.02, math.sin(k / 9), 0.6 if k < 60 else -0.5)
            car.advance_to((k + 1) * 0.02)
            tel.append(tuple(car.telemetry()))
        return tel

    assert session(5) == session(5)
    assert session(5) != session(6)


def test_sampled_parameters_in_datasheet_ranges() -> None:
    for seed in range(20):
        p = RealityParams.sample(np.random.default_rng([seed, 0]))
        assert 1.03 <= p.mass <= 1.07
        assert 0.07 <= p.com_ahead_rear <= 0.12
        assert 0.004 <= p.yaw_inertia <= 0.012
        assert 0.04 <= p.esc_deadband <= 0.10
        assert 0.35 <= p.steer_max <= 0.45 and abs(p.steer_trim) <= 0.05
        assert 0.08 <= p.servo_time_60 <= 0.15
        assert 0.010 <= p.latency <= 0.080
        assert 17 <= p.cam_pitch_deg <= 23 and 95 <= p.cam_hfov_deg <= 105
        assert 3.0 < p.top_speed() < 4.0


def test_top_speed_on_full_battery(params: RealityParams) -> None:
    car = CarReality(params)
    car.command(0.0, 0.0, 1.0)
    s = _run(car, 5.0)[-1]
    assert 3.0 < s["vx"] < 4.0
    assert s["vx"] == pytest.approx(params.top_speed(), rel=0.03)
    assert abs(s["y"]) < 1e-9 and abs(s["yaw"]) < 1e-9


def test_hard_launch_spins_the_rear_wheels(params: RealityParams) -> None:
    car = CarReality(params)
    car.command(0.0, 0.0, 1.0)
    early = _run(car, 0.4)
    slip = max(s["wheel_speed"] - s["vx"] for s in early)
    assert slip > 0.3, slip  # the wheels run ahead of the car
    assert early[-1]["vx"] > 0.5  # and it still goes


def test_braking_decelerates_and_never_reverses(params: RealityParams) -> None:
    car = CarReality(params)
    car.command(0.0, 0.0, 1.0)
    _run(car, 2.0)
    v0, enc0 = car.vx, car.encoder
    car.command(car.t, 0.0, -1.0)
    states = _run(car, 3.0)
    vs = [s["vx"] for s in states]
    assert min(vs) > -1e-6
    assert vs[-1] < 0.01 and vs[100] < v0
    assert min(s["omega"] for s in states) >= 0.0
    assert car.encoder >= enc0
    # partial throttle afterwards: still forward only, brake command never reverses
    car.command(car.t, 0.0, -0.3)
    assert min(s["vx"] for s in _run(car, 1.0)) > -1e-6


def test_deadband_small_throttle_does_nothing(params: RealityParams) -> None:
    car = CarReality(params)
    enc0 = car.encoder
    car.command(0.0, 0.0, 0.5 * params.esc_deadband)
    _run(car, 1.0)
    assert car.vx == 0.0 and car.encoder == enc0
    car.command(car.t, 0.0, params.esc_deadband + 0.1)
    _run(car, 1.0)
    assert car.vx > 0.05 and car.encoder > enc0


def test_steering_latency_and_slew(params: RealityParams) -> None:
    car = CarReality(params)
    car.command(0.0, 1.0, 0.0)
    states = _run(car, 0.4)
    ts = np.array([s["t"] for s in states])
    delta = np.array([s["delta"] for s in states])
    moved = ts[np.argmax(delta > params.steer_trim + 1e-9)]
    assert abs(moved - params.latency) <= params.latency_jitter + 2 * DT
    rate = np.diff([s["servo"] for s in states]) / DT
    servo_rate = math.radians(60) / params.servo_time_60
    assert rate.max() <= servo_rate * 1.0001
    assert delta[-1] == pytest.approx(params.steer_trim + params.steer_max)
    # full lock takes the slew time
    full = ts[np.argmax(delta >= params.steer_trim + params.steer_max - 1e-9)]
    assert full - moved == pytest.approx(SERVO_THROW / servo_rate, abs=3 * DT)


def _steady_turn(params: RealityParams, steer: float, throttle: float) -> tuple[float, float]:
    car = CarReality(params)
    car.command(0.0, steer, throttle)
    s = _run(car, 4.0)[-1]
    kin = s["vx"] * math.tan(s["delta"]) / params.wheelbase
    return s["r"], kin


def test_yaw_rate_kinematic_slow_understeer_fast(params: RealityParams) -> None:
    r, kin = _steady_turn(params, 0.5, 0.2)
    assert r == pytest.approx(kin, rel=0.05)
    r, kin = _steady_turn(params, 0.3, 0.7)
    assert 0.3 * kin < r < 0.92 * kin


def test_battery_sags_under_load(params: RealityParams) -> None:
    car = CarReality(params)
    _run(car, 0.1)
    rest = car.v_term
    car.command(car.t, 0.0, 1.0)
    loaded = min(s["v_term"] for s in _run(car, 0.3))
    assert rest - loaded > 0.2
    assert car.telemetry().vbat < round(rest * 1000)
    soc0 = car.soc
    _run(car, 1.0)
    assert car.soc < soc0  # the pack drains over a session


def test_encoder_counts_are_quantised_integers(params: RealityParams) -> None:
    car = CarReality(params)
    car.command(0.0, 0.0, 0.4)
    for _ in range(30):
        _run(car, 0.05)
        enc = car.telemetry().enc
        assert isinstance(enc, int)
        assert enc == math.floor(car.theta * ENCODER_COUNTS_PER_REV / (2 * math.pi))
    assert enc > 100


def test_imu_sees_centripetal_acceleration(params: RealityParams) -> None:
    p = dataclasses.replace(
        params,
        accel_noise=0.0,
        accel_vibration=0.0,
        gyro_noise=0.0,
        gyro_bias=0.0,
        accel_bias_x=0.0,
        accel_bias_y=0.0,
    )
    car = CarReality(p)
    car.command(0.0, 0.6, 0.3)
    _run(car, 4.0)
    tel = car.telemetry()
    v = math.hypot(car.vx, car.vy)
    assert tel.ay / 1000 * 9.80665 == pytest.approx(v * car.r, rel=0.1)
    assert tel.gz / 1000 == pytest.approx(math.degrees(car.r), rel=0.02)


def test_from_yaml_overrides_and_rejects_unknown_keys(tmp_path) -> None:
    f = tmp_path / "real.yaml"
    f.write_text("latency: 0.05\nmu: 0.6\ntop_speed: 3.5\n")
    p = RealityParams.from_yaml(f, seed=3)
    assert p.latency == 0.05 and p.mu == 0.6
    assert p.top_speed() == pytest.approx(3.5, rel=1e-3)
    assert p.mass == RealityParams.from_yaml(None, seed=3).mass
    f.write_text("latency: 0.05\nlatnecy: 0.02\n")
    with pytest.raises(UserError) as e:
        RealityParams.from_yaml(f)
    assert "latnecy" in str(e.value) and str(f) in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(UserError):
        RealityParams.from_yaml(tmp_path / "missing.yaml")


def test_camera_renders_cones_fast() -> None:
    from hardware.emulators.rc_car.render import CarCamera
    from realsim.robots.rc_car.task import Scene

    p = RealityParams.from_yaml(None, 0)
    cam = CarCamera(p, 0)
    scene = Scene(cone_xy=(1.5, 0.0))
    img = cam.render_rgb((0.0, 0.0, 0.0), scene).astype(int)
    assert img.shape == (240, 320, 3)
    empty = cam.render_rgb((0.0, 0.0, 0.0), None).astype(int)
    changed = np.abs(img - empty).sum(axis=2) > 60  # noise is a few levels
    ys, xs = np.nonzero(changed)
    assert changed.sum() > 100 and abs(xs.mean() - 160) < 40  # a cone, ahead, centred
    mean = img[changed].mean(axis=0)
    assert mean[0] > mean[1] > mean[2] and mean[0] - mean[2] > 60  # orange
    t = time.perf_counter()
    for k in range(10):
        cam.jpeg((0.1 * k, 0.0, 0.05 * k), scene)
    assert (time.perf_counter() - t) / 10 < 0.05  # ~5 ms here; generous for loaded CI

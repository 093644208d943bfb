"""The RC car model: parameters applied, and the datasheet behaviours it must express."""

from __future__ import annotations

import math

import mujoco
import numpy as np
import pytest

from realsim.errors import UserError
from realsim.robots.rc_car import constants as C
from realsim.robots.rc_car.actuation import ackermann, command_events, esc, step_average
from realsim.robots.rc_car.model import attach_car, build_model
from realsim.robots.rc_car.params import PARAM_NAMES, PARAMS, SPEC_PARAMS, CarParams
from realsim.robots.rc_car.sim import CarSim


def _id(m: mujoco.MjModel, kind: mujoco.mjtObj, name: str) -> int:
    i = mujoco.mj_name2id(m, kind, name)
    assert i >= 0, name
    return i


def _drive(
    sim: CarSim, action: tuple[float, float], seconds: float, dt: float = 0.02
) -> list[np.ndarray]:
    """Step the sim; returns per-step [t, v_forward, yaw_rate, rear wheel surface speed]."""
    rows = []
    for _ in range(int(round(seconds / dt))):
        sim.step(action, dt)
        v = sim.velocity
        rows.append(
            np.array([sim.time, v[0], v[2], sim.wheel_speeds()[:2].mean() * C.WHEEL_RADIUS])
        )
    return rows


# --- parameters ------------------------------------------------------------------------
def test_param_table_is_complete_and_consistent() -> None:
    names = {p.name for p in PARAMS}
    assert len(names) == len(PARAMS)
    for required in (
        "com_x",
        "yaw_inertia",
        "tyre_mu",
        "motor_gain",
        "back_emf",
        "rolling_resistance",
        "drag",
        "deadband",
        "steer_max",
        "steer_trim",
        "servo_time_60",
        "latency",
        "gyro_bias",
        "accel_bias_x",
        "accel_bias_y",
    ):
        assert required in names
    for p in PARAMS:
        assert p.low <= p.nominal <= p.high, p.name
        assert p.applies in ("spec", "actuation", "sensor")
    by = {p.name: p for p in PARAMS}
    assert (by["com_x"].low, by["com_x"].high) == (0.07, 0.12)
    assert (by["deadband"].low, by["deadband"].high) == (0.04, 0.10)
    assert (by["latency"].low, by["latency"].high) == (0.01, 0.08)


def test_unknown_and_bad_values_raise_user_error() -> None:
    with pytest.raises(UserError, match=r"unknown parameter 'x' \(known: com_x, "):
        CarParams(x=1.0)
    with pytest.raises(UserError, match="outside its range"):
        CarParams(latency=0.5)
    with pytest.raises(UserError, match="not finite"):
        CarParams(latency=float("nan"))
    assert CarParams({"latency": 0.5}, strict=False)["latency"] == 0.5
    with pytest.raises(UserError):
        CarParams()["nope"]


def test_yaml_round_trip_keeps_annotations(tmp_path) -> None:
    p = CarParams(
        tyre_mu=0.6,
        ci95={"tyre_mu": (0.55, 0.65)},
        identifiable={"drag": False},
        extra={"objective": 1.25},
    )
    path = tmp_path / "p.yaml"
    p.to_yaml(path)
    q = CarParams.from_yaml(path)
    assert q == p and q.ci95 == {"tyre_mu": (0.55, 0.65)} and q.identifiable == {"drag": False}
    assert q.extra["objective"] == 1.25
    flat = CarParams.from_yaml("latency: 0.03\ntyre_mu: {value: 0.7, ci95: [0.6, 0.8]}\n")
    assert flat["latency"] == 0.03 and flat["tyre_mu"] == 0.7 and flat.ci95["tyre_mu"] == (0.6, 0.8)
    with pytest.raises(UserError, match="p.yaml"):
        path.write_text("params: {bogus: 1}\n")
        CarParams.from_yaml(path)
    v = p.to_vector()
    assert CarParams.from_vector(v) == p and v.shape == (len(PARAM_NAMES),)


def _car_com_and_yaw_inertia(m: mujoco.MjModel) -> tuple[np.ndarray, float]:
    d = mujoco.MjData(m)
    mujoco.mj_forward(m, d)
    ch = _id(m, mujoco.mjtObj.mjOBJ_BODY, C.CHASSIS_BODY)
    com = d.subtree_com[ch].copy()
    izz = 0.0
    for b in range(ch, m.nbody):
        r = d.xipos[b] - com
        rot = d.ximat[b].reshape(3, 3)
        inertia = rot @ np.diag(m.body_inertia[b]) @ rot.T
        izz += inertia[2, 2] + m.body_mass[b] * (r[0] ** 2 + r[1] ** 2)
    return com, izz


def test_every_spec_param_changes_the_model_as_intended() -> None:
    nominal = CarParams()
    m0 = build_model(nominal)
    assert set(SPEC_PARAMS) == {
        "com_x",
        "yaw_inertia",
        "tyre_mu",
        "motor_gain",
        "back_emf",
        "rolling_resistance",
        "drag",
        "servo_time_60",
        "tyre_slip_damping",  # checked in tests/sysid/test_data.py
        "brake_gain",
    }
    com, izz = _car_com_and_yaw_inertia(m0)
    assert com[0] == pytest.approx(C.REAR_AXLE_X + nominal["com_x"], abs=1e-9)
    assert izz == pytest.approx(nominal["yaw_inertia"], rel=1e-3)
    assert m0.body_subtreemass[1] == pytest.approx(C.TOTAL_MASS)

    m = build_model(nominal.replace(com_x=0.11, yaw_inertia=0.011))
    com, izz = _car_com_and_yaw_inertia(m)
    assert com[0] == pytest.approx(C.REAR_AXLE_X + 0.11, abs=1e-9)
    assert izz == pytest.approx(0.011, rel=1e-3)

    m = build_model(nominal.replace(tyre_mu=0.5))
    rear = [_id(m, mujoco.mjtObj.mjOBJ_PAIR, f"{n}_floor") for n in C.REAR_TYRES]
    front = [_id(m, mujoco.mjtObj.mjOBJ_PAIR, f"{n}_floor") for n in C.FRONT_TYRES]
    assert np.allclose(m.pair_friction[rear, :2], 0.5)
    assert np.allclose(m.pair_friction[front, :2], 0.5 * C.FRONT_GRIP_RATIO)

    m = build_model(nominal.replace(motor_gain=0.08, back_emf=0.09))
    a = _id(m, mujoco.mjtObj.mjOBJ_ACTUATOR, C.ACT_DRIVE)
    b = _id(m, mujoco.mjtObj.mjOBJ_ACTUATOR, C.ACT_BRAKE)
    assert m.actuator_gainprm[a, 0] == pytest.approx(0.08)
    assert m.actuator_biasprm[a, 2] == pytest.approx(-0.08 * 0.09)
    assert m.actuator_gainprm[b, 2] == pytest.approx(-0.08 * 0.09 * C.BRAKE_FACTOR)

    m = build_model(nominal.replace(rolling_resistance=0.06))
    for j in C.WHEEL_JOINTS:
        dof = m.jnt_dofadr[_id(m, mujoco.mjtObj.mjOBJ_JOINT, j)]
        assert m.dof_frictionloss[dof] == pytest.approx(
            0.06 * C.TOTAL_MASS * C.GRAVITY * C.WHEEL_RADIUS / 4
        )

    m = build_model(nominal.replace(servo_time_60=0.1))
    s = _id(m, mujoco.mjtObj.mjOBJ_ACTUATOR, C.ACT_STEER_LEFT)
    assert m.actuator_forcerange[s, 1] == pytest.approx(C.STEER_DAMPING * (math.pi / 3) / 0.1)

    # drag: the fluid force on the car moving at 3 m/s is drag * v^2
    for k in (0.0, 0.01, 0.02):
        m = build_model(nominal.replace(drag=k))
        d = mujoco.MjData(m)
        d.qpos[2] = 0.01
        d.qvel[0] = 3.0
        mujoco.mj_forward(m, d)
        assert -d.qfrc_fluid[0] == pytest.approx(k * 9.0, rel=1e-3, abs=1e-9)

    # actuation/sensor params leave the compiled model alone
    for name in set(PARAM_NAMES) - set(SPEC_PARAMS):
        spec = next(p for p in PARAMS if p.name == name)
        assert nominal.replace(**{name: spec.high}).spec_key() == nominal.spec_key()


def test_model_compiles_steps_and_has_declared_names() -> None:
    m = build_model()
    assert m.nu == C.NU and m.nsensordata == 7
    for i, name in enumerate(C.ACTUATORS):
        assert _id(m, mujoco.mjtObj.mjOBJ_ACTUATOR, name) == i
    assert m.sensor_adr[_id(m, mujoco.mjtObj.mjOBJ_SENSOR, C.SENSOR_ENCODER)] == C.ENCODER_INDEX
    site = _id(m, mujoco.mjtObj.mjOBJ_SITE, C.IMU_SITE)
    assert np.allclose(m.site_pos[site], [0, 0, C.IMU_HEIGHT])
    cam = _id(m, mujoco.mjtObj.mjOBJ_CAMERA, C.FRONT_CAMERA)
    assert np.allclose(m.cam_pos[cam], [0.08, 0, 0.14])
    assert m.cam_fovy[cam] == pytest.approx(C.CAMERA_FOVY_DEG, abs=0.1)
    # optical axis (-z of the camera) points forward, 20 degrees down
    d = mujoco.MjData(m)
    mujoco.mj_forward(m, d)
    fwd = -d.cam_xmat[cam].reshape(3, 3)[:, 2]
    assert math.degrees(math.atan2(-fwd[2], fwd[0])) == pytest.approx(20.0, abs=0.01)
    d.ctrl[:] = [0.2, 0.2, 8.0, 0.0]
    for _ in range(500):
        mujoco.mj_step(m, d)
    assert np.all(np.isfinite(d.qpos)) and np.all(np.isfinite(d.sensordata))
    assert d.qpos[0] > 0.1


def test_attach_car_into_a_scene() -> None:
    scene = mujoco.MjSpec()
    scene.worldbody.add_geom(
        name="ground", type=mujoco.mjtGeom.mjGEOM_PLANE, size=[0, 0, 1], conaffinity=3
    )
    attach_car(scene, CarParams(), prefix="car/", floor="ground")
    m = scene.compile()
    assert _id(m, mujoco.mjtObj.mjOBJ_ACTUATOR, "car/drive") >= 0
    assert m.npair == 4


def test_actuation_pieces() -> None:
    duty, brake = esc(np.array([-1.0, -0.05, 0.0, 0.05, 0.1, 1.0]), 0.08)
    assert np.allclose(duty, [0, 0, 0, 0, 0.02 / 0.92, 1])
    assert np.allclose(brake, [1, 0, 0, 0, 0, 0])
    dl, dr = ackermann(np.array([0.4, -0.4, 0.0]))
    assert dl[0] > 0.4 > dr[0] and np.allclose(0.5 * (dl + dr), [0.4, -0.4, 0.0], atol=1e-6)
    # inner and outer wheel normals meet on the rear-axle line
    R = C.WHEELBASE / np.tan(dl[0]) + C.TRACK / 2
    assert R == pytest.approx(C.WHEELBASE / np.tan(dr[0]) - C.TRACK / 2, rel=1e-3)
    # exact step averages across a latency-shifted command
    p = CarParams(latency=0.0101, deadband=0.04)
    ev_t, ev_v, before = command_events(np.array([0.0]), np.array([[0.0, 1.0]]), p)
    u = step_average(ev_t, ev_v, before, np.array([0.0, 0.01, 0.012, 0.014]))
    assert np.allclose(u[:, 2], [0.0, 0.95, 1.0]) and np.allclose(u[:, 3], [1.0, 0.05, 0.0])


# --- behaviour -------------------------------------------------------------------------
def test_same_seed_same_rollout() -> None:
    def run(seed: int) -> np.ndarray:
        sim = CarSim()
        sim.reset(seed=seed, pose=(1.0, -0.5, 0.3))
        out = []
        for k in range(40):
            tl = sim.step([math.sin(k / 5), 0.5], 0.05)
            out.append([tl["yaw_rate"], *tl["accel"], tl["enc_rad"], *sim.pose])
        return np.array(out)

    a, b, c = run(3), run(3), run(4)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)
    assert np.all(np.isfinite(a))


def test_top_speed_on_full_battery() -> None:
    sim = CarSim(noise=False)
    rows = _drive(sim, (0.0, 1.0), 4.0)
    v = rows[-1][1]
    assert 3.0 <= v <= 4.0, v
    assert abs(rows[-1][1] - rows[-10][1]) < 0.05  # settled
    # the ranges can express the whole datasheet range of top speeds
    fast = _drive(CarSim(CarParams(back_emf=0.06), noise=False), (0.0, 1.0), 4.0)[-1][1]
    slow = _drive(CarSim(CarParams(back_emf=0.095), noise=False), (0.0, 1.0), 4.0)[-1][1]
    assert slow < 3.0 and fast > 4.0


def test_launch_wheelspin_and_braking_slide_without_reversing() -> None:
    sim = CarSim(noise=False)
    launch = np.array(_drive(sim, (0.0, 1.0), 2.5))
    early = launch[(launch[:, 0] > 0.15) & (launch[:, 0] < 0.5)]
    assert np.all(early[:, 3] > early[:, 1] + 0.2)  # rear tyre surface faster than the car
    v0 = launch[-1, 1]
    brake = np.array(_drive(sim, (0.0, -1.0), 2.0))
    hard = brake[(brake[:, 0] > launch[-1, 0] + 0.1) & (brake[:, 1] > 1.0)]
    assert len(hard) > 2 and np.all(hard[:, 3] < hard[:, 1] - 0.2)  # wheels slide
    assert brake[-1, 1] < 0.05 * v0
    assert brake[:, 1].min() > -0.01 and brake[:, 3].min() > -0.05  # never reverses


def test_deadband() -> None:
    p = CarParams(deadband=0.08)
    sim = CarSim(p, noise=False)
    _drive(sim, (0.0, 0.075), 1.0)
    assert np.hypot(*sim.pose[:2]) < 1e-3
    sim.reset()
    _drive(sim, (0.0, 0.2), 1.0)
    assert sim.pose[0] > 0.05


def test_steering_delayed_by_latency_and_rate_limited() -> None:
    p = CarParams(latency=0.06, servo_time_60=0.12, steer_max=0.4, steer_trim=0.0)
    sim = CarSim(p, noise=False)
    dt = 0.002
    sim.step([0.0, 0.0], 0.1)
    t_cmd = sim.time
    angles = []
    for _ in range(100):
        sim.step([1.0, 0.0], dt)
        angles.append([sim.time - t_cmd, sim.steer_angles().mean()])
    a = np.array(angles)
    moving = a[a[:, 1] > 0.01]
    assert moving[0, 0] == pytest.approx(0.06, abs=0.006)
    rate = np.diff(a[:, 1]) / dt
    assert rate.max() == pytest.approx((math.pi / 3) / 0.12, rel=0.1)
    assert a[-1, 1] == pytest.approx(0.4, abs=0.01)  # saturates at full command


def test_yaw_rate_kinematic_at_low_speed_understeer_at_high_speed() -> None:
    p = CarParams(steer_max=0.4)

    def ratio(throttle: float, steer: float) -> tuple[float, float]:
        sim = CarSim(p, noise=False)
        _drive(sim, (0.0, throttle), 1.5)
        rows = np.array(_drive(sim, (steer, throttle), 2.0))[-25:]
        v, r = rows[:, 1].mean(), rows[:, 2].mean()
        return v, r / (v * math.tan(0.4 * steer) / C.WHEELBASE)

    v_lo, k_lo = ratio(0.2, 0.5)
    v_hi, k_hi = ratio(1.0, 1.0)
    assert v_lo < 0.6 and k_lo == pytest.approx(1.0, abs=0.1)
    assert v_hi > 2.0 and k_hi < 0.7

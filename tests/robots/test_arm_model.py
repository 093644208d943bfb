"""The arm's MJCF, parameters and replay against the datasheet (spec/arm.md)."""

from __future__ import annotations

import itertools
import math

import mujoco
import numpy as np
import pytest

from realsim.errors import UserError
from realsim.robots.arm import constants as C
from realsim.robots.arm.excite import BOX_HI, BOX_LO, arm_excitation
from realsim.robots.arm.model import ArmLayout, build_model, rest_qpos
from realsim.robots.arm.params import PARAMS, ArmParams
from realsim.robots.arm.sim import (
    ArmSim,
    ReplayInput,
    goal_to_action,
    replay_batch,
    replay_reference,
)


@pytest.fixture(scope="module")
def model() -> mujoco.MjModel:
    return build_model()


def _pose(model: mujoco.MjModel, joints: list[float]) -> mujoco.MjData:
    """Kinematics at servo readings `joints` (6,) with zero play."""
    lay = ArmLayout(model)
    d = mujoco.MjData(model)
    d.qpos[lay.motor_q] = joints[:5]
    d.qpos[lay.finger_q] = 0.5 * joints[5]
    mujoco.mj_forward(model, d)
    return d


def _site(model: mujoco.MjModel, d: mujoco.MjData, name: str) -> np.ndarray:
    return d.site(name).xpos.copy()


def test_zero_pose_is_straight_up_and_closed(model: mujoco.MjModel) -> None:
    d = _pose(model, [0, 0, 0, 0, 0, 0])
    top = C.SHOULDER_HEIGHT + C.UPPER_ARM + C.FOREARM + C.WRIST + C.FINGER_REACH - C.GRASP_OFFSET
    np.testing.assert_allclose(_site(model, d, C.GRASP_SITE), [0, 0, top], atol=1e-9)
    np.testing.assert_allclose(d.body(C.UPPER_ARM_BODY).xpos, [0, 0, C.SHOULDER_HEIGHT])
    np.testing.assert_allclose(d.body(C.FOREARM_BODY).xpos[2], C.SHOULDER_HEIGHT + C.UPPER_ARM)
    np.testing.assert_allclose(
        d.body(C.GRIPPER_BODY).xpos[2], C.SHOULDER_HEIGHT + C.UPPER_ARM + C.FOREARM + C.WRIST
    )
    # closed: the pads' inner faces meet on the jaw plane
    yl = d.geom(C.FINGER_PADS[0]).xpos[1] - C.PAD_THICKNESS / 2
    yr = d.geom(C.FINGER_PADS[1]).xpos[1] + C.PAD_THICKNESS / 2
    assert abs(yl) < 1e-9 and abs(yr) < 1e-9
    np.testing.assert_allclose(model.geom(C.FINGER_PADS[0]).size[0] * 2, C.PAD_WIDTH)


@pytest.mark.parametrize("joint", [1, 2, 3])
def test_positive_flex_tilts_forward(model: mujoco.MjModel, joint: int) -> None:
    q = [0.0] * 6
    q[joint] = 0.3
    p = _site(model, _pose(model, q), C.GRASP_SITE)
    assert p[0] > 0.01 and abs(p[1]) < 1e-9


def test_pan_roll_and_gripper_directions(model: mujoco.MjModel) -> None:
    p = _site(model, _pose(model, [0.5, 0.8, 0.8, 0, 0, 0]), C.GRASP_SITE)
    assert p[1] > 0.05  # positive pan swings towards +y
    d = _pose(model, [0, 0, 0, 0, 0, 0.07])
    gap = d.geom(C.FINGER_PADS[0]).xpos - d.geom(C.FINGER_PADS[1]).xpos
    np.testing.assert_allclose(gap, [0, 0.07 + C.PAD_THICKNESS, 0], atol=1e-9)  # across the plane
    d = _pose(model, [0, 0, 0, 0, math.pi / 2, 0.07])
    gap = d.geom(C.FINGER_PADS[0]).xpos - d.geom(C.FINGER_PADS[1]).xpos
    assert gap[0] < -0.07  # roll turns the jaw axis about the link (+z): y -> -x


def test_limits_home_and_actuators(model: mujoco.MjModel) -> None:
    lay = ArmLayout(model)
    np.testing.assert_allclose(model.jnt_range[lay.motor_j], np.c_[C.LIMITS_LO, C.LIMITS_HI][:5])
    np.testing.assert_allclose(model.actuator_ctrlrange, np.c_[C.LIMITS_LO, C.LIMITS_HI])
    assert tuple(C.HOME) == (0.0, 0.0, 1.2, 1.4, 0.0, 0.0)
    d = _pose(model, list(C.HOME))
    assert _site(model, d, C.GRASP_SITE)[2] > 0.1  # home rests above the table
    assert model.opt.timestep == pytest.approx(0.002)


def test_cameras_at_datasheet_poses(model: mujoco.MjModel) -> None:
    d = _pose(model, [0, 0, 0, 0, 0, 0])
    front = d.camera(C.FRONT_CAMERA)
    np.testing.assert_allclose(front.xpos, C.FRONT_CAMERA_POS, atol=1e-9)
    view = -front.xmat.reshape(3, 3)[:, 2]  # a camera looks along its -z
    assert view[0] < 0 and abs(view[1]) < 1e-9
    assert math.degrees(math.asin(-view[2])) == pytest.approx(35.0, abs=1e-6)
    assert model.cam_fovy[model.camera(C.FRONT_CAMERA).id] == pytest.approx(66.0)
    wrist = d.camera(C.WRIST_CAMERA)
    grip = d.body(C.GRIPPER_BODY)
    off = grip.xmat.reshape(3, 3).T @ (wrist.xpos - grip.xpos)
    assert off[0] == pytest.approx(C.WRIST_CAMERA_OFFSET) and off[1] == pytest.approx(0.0)
    view = -wrist.xmat.reshape(3, 3)[:, 2]
    np.testing.assert_allclose(view, grip.xmat.reshape(3, 3)[:, 2], atol=1e-9)  # along fingers
    assert model.cam_fovy[model.camera(C.WRIST_CAMERA).id] == pytest.approx(72.0)


def _model_arrays(m: mujoco.MjModel) -> dict[str, np.ndarray]:
    out = {}
    for name in dir(m):
        if name.startswith("_"):
            continue
        try:
            v = getattr(m, name)
        except Exception:  # noqa: BLE001
            continue
        if isinstance(v, np.ndarray) and v.dtype.kind == "f":
            out[name] = v.copy()
    return out


def test_every_parameter_is_applied() -> None:
    base = ArmParams()
    ref = _model_arrays(build_model(base))
    ep = ReplayInput(
        command_t=[0.0, 0.1],
        action=np.zeros((2, 6)),
        sensor_t=np.arange(0, 0.3, 0.02),
        qpos0=list(C.HOME),
    )
    out0 = replay_batch([base], [ep])[0][0]
    for p in PARAMS:
        changed = base.replace(**{p.name: p.high if p.nominal != p.high else p.low})
        if p.applies == "spec":
            arrs = _model_arrays(build_model(changed))
            diff = [k for k in ref if not np.array_equal(ref[k], arrs[k])]
            assert diff, f"{p.name} changes nothing in the compiled model"
        else:
            out = replay_batch([changed], [ep])[0][0]
            assert not np.allclose(out["qpos"], out0["qpos"]), p.name


def test_params_yaml_roundtrip_and_validation(tmp_path) -> None:
    p = ArmParams(servo_kp=20.0, ci95={"servo_kp": (18.0, 22.0)})
    path = tmp_path / "params.yaml"
    p.to_yaml(path)
    q = ArmParams.from_yaml(path)
    assert q == p and q.ci95 == {"servo_kp": (18.0, 22.0)}
    assert q.to_dict()["robot"] == "arm"
    with pytest.raises(UserError):
        ArmParams(stall_torque=3.0)
    with pytest.raises(UserError):
        ArmParams.from_dict({"robot": "rc_car", "params": {}})
    assert len(ArmParams()) == len(PARAMS)


def test_rest_pose_holds_still() -> None:
    params = ArmParams()
    sim = ArmSim(params, noise=False)
    tel0 = sim.reset(joints=C.HOME)
    for _ in range(10):
        tel = sim.step(goal_to_action(sim.goal_now()), 0.05)
    np.testing.assert_allclose(tel["qpos"], tel0["qpos"], atol=3e-3)
    np.testing.assert_allclose(tel0["qpos"], C.HOME, atol=1e-9)


def test_sim_shapes_determinism_and_no_nan() -> None:
    f = arm_excitation("steps", 2.0, seed=3)

    def run(seed: int) -> list[dict]:
        sim = ArmSim(ArmParams())
        out = [sim.reset(seed)]
        for k in range(40):
            out.append(sim.step(f(0.05 * k), 0.05))
        return out

    a, b = run(1), run(1)
    for x, y in zip(a, b, strict=True):
        for k in C.SENSOR_FIELDS:
            np.testing.assert_array_equal(x[k], y[k])
    last = a[-1]
    assert last["qpos"].shape == last["qvel"].shape == last["load"].shape == (6,)
    assert last["temperature"].shape == (6,) and np.ndim(last["voltage"]) == 0
    assert all(np.all(np.isfinite(np.asarray(x[k]))) for x in a for k in C.SENSOR_FIELDS)
    assert np.all(np.abs(last["load"]) <= 1.0)


def _episode(seconds: float, seed: int) -> ReplayInput:
    f = arm_excitation("smooth", seconds, seed)
    ct = np.arange(0.0, seconds, 1 / 30) + 0.003
    return ReplayInput(
        command_t=ct,
        action=np.stack([f(t) for t in ct]),
        sensor_t=np.arange(0.0, seconds, 0.02) + 0.001,
        qpos0=np.array(C.HOME) + 0.01,
        temperature0=np.full(6, 35.0),
    )


def test_replay_rollout_matches_step_loop() -> None:
    eps = [_episode(1.2, 0), _episode(1.0, 1)]
    params = [ArmParams(), ArmParams(servo_kp=25.0, latency=0.04, backlash_elbow_flex=0.03)]
    out = replay_batch(params, eps)
    for p, prm in enumerate(params):
        for e, ep in enumerate(eps):
            ref = replay_reference(prm, ep)
            for k in C.SENSOR_FIELDS:
                np.testing.assert_allclose(out[p][e][k], ref[k], atol=1e-6, err_msg=k)
            assert out[p][e]["qpos"].shape == (len(ep.sensor_t), 6)
    # the replay starts in the measured pose, at rest
    np.testing.assert_allclose(out[0][0]["qpos"][0], eps[0].qpos0, atol=2e-3)


def test_replay_from_log_fields() -> None:
    ep = _episode(0.5, 2)
    sensors = {
        "t": ep.sensor_t,
        "qpos": np.tile(ep.qpos0, (len(ep.sensor_t), 1)),
        "voltage": np.full(len(ep.sensor_t), 7.2),
        "temperature": np.full((len(ep.sensor_t), 6), 40.0),
    }
    e2 = ReplayInput.from_log({"t": ep.command_t, "action": ep.action}, sensors)
    out = replay_batch([ArmParams()], [e2])[0][0]
    np.testing.assert_allclose(out["voltage"], 7.2)
    assert np.all(out["temperature"] >= 40.0)


def test_excitation_box_inside_limits_and_clear_of_table(model: mujoco.MjModel) -> None:
    assert np.all(BOX_LO >= np.array(C.LIMITS_LO)) and np.all(BOX_HI <= np.array(C.LIMITS_HI))
    d = mujoco.MjData(model)
    lay = ArmLayout(model)
    for c in itertools.product(
        *[np.linspace(a, b, 3) for a, b in zip(BOX_LO[:5], BOX_HI[:5], strict=True)]
    ):
        d.qpos[lay.motor_q] = c
        d.qpos[lay.finger_q] = 0.03
        mujoco.mj_kinematics(model, d)
        for g in C.FINGER_PADS:
            gid = model.geom(g).id
            R = d.geom_xmat[gid].reshape(3, 3)
            half = model.geom_size[gid]
            corners = [
                d.geom_xpos[gid] + R @ (half * s) for s in itertools.product((-1, 1), repeat=3)
            ]
            assert min(p[2] for p in corners) > 0.03, c
    f = arm_excitation("sine", 5.0, 0)
    a = np.stack([f(t) for t in np.linspace(0, 5, 200)])
    assert np.all(np.abs(a) <= 1.0)


def test_rest_qpos_gravity_side(model: mujoco.MjModel) -> None:
    q, hold = rest_qpos(model, ArmParams(), np.array(C.HOME))
    lay = ArmLayout(model)
    np.testing.assert_allclose(lay.joint_qpos(q), C.HOME, atol=1e-12)
    assert hold.shape == (6,)


def test_per_servo_speed_and_legacy_shared_values(tmp_path) -> None:
    """Each servo slews at its own no-load speed; an old file's one shared value goes to
    every servo."""
    from realsim.robots.arm.model import servo_damping

    p = ArmParams(no_load_speed_wrist_roll=6.0, stall_torque_shoulder_pan=1.3)
    d = servo_damping(p)
    assert d[4] == pytest.approx(p["stall_torque_wrist_roll"] / 6.0)
    assert d[0] == pytest.approx(1.3 / 5.0) and d[1] == pytest.approx(C_STALL / 5.0)
    m = build_model(p)
    assert m.dof_damping[m.joint("wrist_roll").dofadr[0]] == pytest.approx(d[4])
    assert m.dof_damping[m.joint("shoulder_lift").dofadr[0]] != pytest.approx(d[4])
    path = tmp_path / "old.yaml"
    path.write_text("robot: arm\nparams:\n  stall_torque: {value: 1.4, ci95: [1.3, 1.5]}\n"
                    "  no_load_speed: 4.5\n")
    q = ArmParams.from_yaml(path)
    assert all(q[f"stall_torque_{j}"] == 1.4 and q[f"no_load_speed_{j}"] == 4.5 for j in C.JOINTS)


C_STALL = 1.55  # STALL_REF, the nominal stall torque

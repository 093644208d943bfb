"""The arm's task environment: shapes, determinism, cameras, the judge (spec/arm.md task)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from realsim.robots.arm import constants as C
from realsim.robots.arm import task
from realsim.robots.arm.scene import ArmRandomization, ArmTaskEnv

SIZE = (48, 64)


@pytest.fixture(scope="module")
def env() -> ArmTaskEnv:
    e = ArmTaskEnv(image_size=SIZE)
    yield e
    e.close()


def _run(env: ArmTaskEnv, seed: int, n: int) -> list:
    obs = [env.reset(seed)]
    rng = np.random.default_rng(seed)
    home = 2 * (np.array(C.HOME) - C.LIMITS_LO) / (np.array(C.LIMITS_HI) - C.LIMITS_LO) - 1
    for _ in range(n):
        obs.append(env.step(home + 0.05 * rng.standard_normal(6)))
    return obs


def test_reset_step_shapes_and_frames(env: ArmTaskEnv) -> None:
    obs = _run(env, 3, 5)
    o = obs[-1]
    tel = o.telemetry
    assert set(tel) == set(C.SENSOR_FIELDS)
    assert tel["qpos"].shape == tel["qvel"].shape == tel["load"].shape == (6,)
    assert tel["temperature"].shape == (6,)
    assert all(np.all(np.isfinite(np.asarray(v))) for v in tel.values())
    assert set(obs[0].frames) == {"front", "wrist"}
    for f in obs[0].frames.values():
        assert f.image.shape == (*SIZE, 3) and f.image.dtype == np.uint8
        assert f.jpeg[:2] == b"\xff\xd8"
    assert o.t == pytest.approx(5 / env.control_hz)
    priv = env.privileged()
    for k in ("joints", "cube_pose", "target_xy", "gripper_pos", "gripper_rot", "qpos"):
        assert np.all(np.isfinite(priv[k]))
    assert not env.done


def test_same_seed_same_rollout(env: ArmTaskEnv) -> None:
    a, b = _run(env, 7, 8), _run(env, 7, 8)
    for x, y in zip(a, b, strict=True):
        for k in C.SENSOR_FIELDS:
            np.testing.assert_array_equal(x.telemetry[k], y.telemetry[k])
        assert x.frames.keys() == y.frames.keys()
        for n in x.frames:
            assert x.frames[n].jpeg == y.frames[n].jpeg
    c = _run(env, 8, 2)
    assert not np.array_equal(c[-1].telemetry["qpos"], a[2].telemetry["qpos"])


def test_front_camera_sees_the_cube_and_square() -> None:
    e = ArmTaskEnv(image_size=(120, 160), randomization=ArmRandomization.none())
    scene = task.Scene(cube_xy=(0.22, -0.05), cube_yaw=0.3, target_xy=(0.22, 0.08))
    o = e.reset(0, scene=scene)
    img = o.frames["front"].image.astype(int)
    red = (img[..., 0] > 150) & (img[..., 1] < 80) & (img[..., 2] < 80)
    green = (img[..., 1] > 120) & (img[..., 0] < 100) & (img[..., 2] < 120)
    assert red.sum() > 10 and green.sum() > 50
    # looking back towards -x, the image's right is +y: the cube at -y is left of the square
    assert np.nonzero(red)[1].mean() < np.nonzero(green)[1].mean()
    e.close()


def test_wrist_camera_sees_the_cube_from_hover_to_grasp() -> None:
    """The datasheet's wrist camera looks along the fingers: from the hover pose down to
    the closed grasp the cube must fill a good part of its image. The palm (a collision
    box in geom group 3) once was drawn and hid the cube from the hover down, so no
    student could align by the wrist camera; drawing group 3 again must fail this check."""
    import mujoco

    from realsim.robots.arm.scene import episode_seed
    from teacher.arm_ik import ArmTeacher

    e = ArmTaskEnv(render=False)  # the teacher data's randomization
    counts: dict[bool, list[int]] = {False: [], True: []}
    for k in (1, 5, 10):  # scenes where the drawn palm hid the cube (5 of the first 16)
        e.reset(episode_seed(0, k))
        t = ArmTeacher(1.0 / e.control_hz)
        m, d = e.sim.model, e.sim.data
        cube = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, C.CUBE_GEOM)
        with mujoco.Renderer(m, 60, 80) as r:
            r.enable_segmentation_rendering()
            while not e.done and t.phase != "lift":
                e.step(t.act(e.privileged()))
                if t.phase not in ("descend", "grasp"):
                    continue
                for palm in (False, True):
                    opt = mujoco.MjvOption()
                    opt.geomgroup[3] = int(palm)
                    r.update_scene(d, camera=C.WRIST_CAMERA, scene_option=opt)
                    seg = r.render()
                    hit = (seg[..., 0] == cube) & (seg[..., 1] == int(mujoco.mjtObj.mjOBJ_GEOM))
                    counts[palm].append(int(hit.sum()))
    seen, hidden = np.array(counts[False]), np.array(counts[True])
    assert seen.min() >= 60  # >= 1.2 % of the image at every step from hover to grasp
    assert np.median(seen) >= 150
    assert np.median(hidden) < 0.5 * np.median(seen)  # the drawn palm hides it: caught
    e.close()


def test_get_set_state_resumes_exactly() -> None:
    e = ArmTaskEnv(render=False)
    _run(e, 5, 3)
    st = e.get_state()
    acts = np.random.default_rng(0).uniform(-0.2, 0.2, (4, 6))
    first = [e.step(a).telemetry["qpos"] for a in acts]
    e.set_state(st)
    second = [e.step(a).telemetry["qpos"] for a in acts]
    for x, y in zip(first, second, strict=True):
        np.testing.assert_array_equal(x, y)


def test_sample_scene_rules() -> None:
    rng = np.random.default_rng(0)
    for _ in range(500):
        s = task.sample_scene(rng)
        for xy in (s.cube_xy, s.target_xy):
            assert task.AREA_X[0] <= xy[0] <= task.AREA_X[1]
            assert task.AREA_Y[0] <= xy[1] <= task.AREA_Y[1]
        assert math.dist(s.cube_xy, s.target_xy) >= task.MIN_SEPARATION
        assert not task.inside(s.cube_xy, s.target_xy)
        assert -math.pi <= s.cube_yaw <= math.pi


def test_sample_scene_reach_weight() -> None:
    """reach_weight reweights cube starts by distance from the base as `reach_density` says;
    1 (the task's and every evaluation's) draws nothing extra, so a seed's layout is the
    uniform sampler's."""
    rng, ref = np.random.default_rng(5), np.random.default_rng(5)
    s = task.sample_scene(rng, 1.0)
    assert s.cube_xy == (float(ref.uniform(*task.AREA_X)), float(ref.uniform(*task.AREA_Y)))

    def radii(w: float) -> np.ndarray:
        g = np.random.default_rng(11)
        out = []
        for _ in range(3000):
            sc = task.sample_scene(g, w)
            for xy in (sc.cube_xy, sc.target_xy):
                assert task.AREA_X[0] <= xy[0] <= task.AREA_X[1]
                assert task.AREA_Y[0] <= xy[1] <= task.AREA_Y[1]
            assert math.dist(sc.cube_xy, sc.target_xy) >= task.MIN_SEPARATION
            out.append(math.hypot(*sc.cube_xy))
        return np.array(out)

    uni, far = radii(1.0), radii(3.0)
    lo, hi = task.REACH_RAMP

    def ratio(r: np.ndarray) -> float:  # density beyond the ramp over density inside it
        return float(np.mean(r >= hi) / np.mean(r <= lo))

    # the weighted sampler's ratio is the uniform one's times reach_density's (3 / 1)
    assert ratio(far) / ratio(uni) == pytest.approx(3.0, rel=0.3)
    assert np.mean(far >= 0.25) > np.mean(uni >= 0.25) + 0.1
    with pytest.raises(ValueError, match="reach_weight"):
        task.sample_scene(rng, 0.0)
    with pytest.raises(ValueError, match="reach_weight"):
        ArmRandomization(reach_weight=-1.0)


def test_env_reset_uses_the_randomizations_reach_weight() -> None:
    def mean_reach(rand: ArmRandomization) -> float:
        env = ArmTaskEnv(render=False, randomization=rand)
        r = []
        for k in range(40):
            env.reset(k)
            assert env.scene is not None
            r.append(math.hypot(*env.scene.cube_xy))
        env.close()
        return float(np.mean(r))

    base = ArmRandomization(physics=False, camera_pos_m=0.0, camera_rot_deg=0.0, camera_fov_deg=0.0)
    assert mean_reach(dataclasses.replace(base, reach_weight=4.0)) > mean_reach(base) + 0.01


def test_judge_success_rule() -> None:
    s = task.Scene(cube_xy=(0.2, 0.0), cube_yaw=0.0, target_xy=(0.25, 0.1))
    on = (0.26, 0.09, task.CUBE_SIZE / 2)
    j = task.TaskJudge(s)
    for k in range(10):  # at rest on the square, but held by both fingers: no
        j.update(0.1 * k, on, 0.0, 0.0, True, True)
    assert not j.success
    j = task.TaskJudge(s)
    for k in range(3):  # 0.2 s is not enough
        j.update(1.0 + 0.1 * k, on, 0.0, 0.0, True, False)
    assert not j.success
    j.update(1.3, on, 0.0, 0.0, False, False)
    assert j.success and j.verdict()[0] == 1
    assert j.verdict()[1] == pytest.approx(math.dist(on[:2], s.target_xy))
    j = task.TaskJudge(s)  # lifted above the square, or outside it, or moving: no
    for k in range(10):
        j.update(0.1 * k, (0.26, 0.09, 0.05), 0.0, 0.0, False, False)
        j.update(0.1 * k + 0.05, (0.30, 0.09, 0.015), 0.0, 0.0, False, False)
        j.update(0.1 * k + 0.07, on, 0.05, 0.0, False, False)
    assert not j.success
    j = task.TaskJudge(s)  # too late
    for k in range(10):
        j.update(19.9 + 0.1 * k, on, 0.0, 0.0, False, False)
    assert not j.success

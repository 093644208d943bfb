"""The arm's student: the shared student package with two cameras, joint states and 6-D actions."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from student_helpers import arm_log, synthetic_log

from realsim.errors import UserError
from student.config import StudentConfig
from student.dataset import check_keys, load_dataset, required_keys
from student.model import StudentPolicy, frames_to_tensor
from tests.conftest import assert_one_line_error, run_cli


def tiny(**kw) -> StudentConfig:  # noqa: ANN003
    base = dict(image_width=32, channels=(8, 16), feature_dim=32, hidden_dim=64, chunk_len=5,
                epochs=1, eval_every=1, eval_episodes=2, final_eval_episodes=2, eval_workers=0,
                eval_seconds=1.0, footprint_samples=0, threads=1)
    return StudentConfig.for_robot("arm", **{**base, **kw})


@pytest.fixture(scope="module")
def arm_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return arm_log(tmp_path_factory.mktemp("arm") / "arm.h5", episodes=2, steps=30)


def test_arm_defaults_are_two_cameras_joint_states_and_six_actions() -> None:
    cfg = StudentConfig.for_robot("arm")
    assert cfg.robot == "arm" and cfg.cameras == ("front", "wrist") and cfg.action_dim == 6
    assert (cfg.image_width, cfg.image_height) == (80, 60)
    assert required_keys(cfg) == ["command/action", "sensors/qpos", "sensors/qvel",
                                  "camera/front", "camera/wrist"]
    yaml_cfg = StudentConfig.load(Path(__file__).parents[2] / "experiments" / "student_arm.yaml", "arm")
    assert yaml_cfg == cfg  # the YAML file spells out the defaults
    assert StudentConfig().robot == "rc_car" and StudentConfig().action_dim == 2
    with pytest.raises(UserError, match="no camera 'rear'"):
        StudentConfig.for_robot("arm", cameras=["rear"])
    with pytest.raises(UserError, match="telemetry field"):
        StudentConfig.for_robot("arm", telemetry_fields=["yaw_rate"])


def test_loader_refuses_privileged_keys_for_arm_data(arm_data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tiny()
    with pytest.raises(UserError, match="privileged"):
        load_dataset([arm_data], cfg, keys=[*required_keys(cfg), "privileged/qpos"])
    with pytest.raises(UserError, match="privileged"):
        check_keys(["sensors/qpos", "episodes/ep_000000/privileged/cube_pose"])
    from realsim.logs import LogReader

    seen: list[bool] = []
    orig = LogReader.episode

    def spy(self, key, privileged=False):  # noqa: ANN001, ANN202
        seen.append(privileged)
        ep = orig(self, key, privileged=privileged)
        assert ep.privileged is None
        return ep

    monkeypatch.setattr(LogReader, "episode", spy)
    data = load_dataset([arm_data], cfg)
    assert seen and not any(seen)
    assert data.frame.shape == (len(data), 2) and data.chunk.shape[1:] == (5, 6)
    assert data.tel.shape[1:] == (1, 12) and data.frame_size == (160, 120)
    # the front and wrist indices point into their own camera's frames
    assert (data.frame[:, 0] < data.frame_lo[:, 1]).all() or (data.frame[:, 1] < data.frame_lo[:, 0]).all()


def test_two_camera_forward_pass_has_the_declared_shapes_and_no_nan(arm_data: Path) -> None:
    cfg = tiny(history=2)
    data = load_dataset([arm_data], cfg)
    model = StudentPolicy(cfg)
    model.set_stats(*data.telemetry_stats())
    i = np.arange(7)
    img = frames_to_tensor(data.frames[data.frame[i]])
    assert img.shape == (7, 6, cfg.image_height, cfg.image_width)
    out = model(img, torch.from_numpy(data.tel[i]), torch.from_numpy(data.past_actions[i]))
    assert out.shape == (7, 5, 6) and torch.isfinite(out).all() and out.abs().max() <= 1
    assert len(model.encoders) == 2
    # the wrist camera matters: changing its pixels changes the prediction
    img2 = img.clone()
    img2[:, 3:] = 1.0 - img2[:, 3:]
    out2 = model(img2, torch.from_numpy(data.tel[i]), torch.from_numpy(data.past_actions[i]))
    assert not torch.allclose(out, out2)


def test_front_only_is_a_config_choice(arm_data: Path, tmp_path: Path) -> None:
    cfg = tiny(cameras=["front"])
    data = load_dataset([arm_data], cfg)
    assert data.frame.shape == (len(data), 1) and required_keys(cfg)[-1] == "camera/front"
    model = StudentPolicy(cfg)
    assert len(model.encoders) == 1
    out = model(frames_to_tensor(data.frames[data.frame[:3]]), torch.from_numpy(data.tel[:3]),
                torch.zeros(3, 0, 6))
    assert out.shape == (3, 5, 6) and torch.isfinite(out).all()
    front = arm_log(tmp_path / "front.h5", episodes=1, steps=12, cameras=("front",))
    assert len(load_dataset([front], cfg)) > 0
    with pytest.raises(UserError, match="no camera 'wrist'"):
        load_dataset([front], tiny())


@pytest.mark.parametrize("mode", ["task_colors", "task_colors_jaws", "rgb"])
def test_arm_runner_preprocesses_exactly_like_training(arm_data: Path, mode: str) -> None:
    """Replay a logged episode tick by tick through PolicyRunner: the same images, telemetry
    features and chunks as the loader's samples (offline == online)."""
    from realsim.logs import LogReader
    from student.policy import PolicyRunner

    cfg = tiny(history=2, execution="single_step", input_mode=mode, blob_moments=mode != "rgb")
    data = load_dataset([arm_data], cfg)
    model = StudentPolicy(cfg).eval()
    if mode == "task_colors_jaws":  # the jaws' mask has its own blob statistics
        assert model.encoders[0].moments.width == 27
    model.set_stats(*data.telemetry_stats())
    runner = PolicyRunner(model, cfg)
    with LogReader(arm_data) as r:
        ep = r.episode(r.episode_names[0])
        cmd, sens = ep.command, ep.sensors
        cams = {c: ep.cameras[c] for c in cfg.cameras}
        sel = np.flatnonzero(data.episode == 0)
        runner.reset()
        j = 0
        checked = 0
        for i, t in enumerate(cmd.t):
            si = np.searchsorted(sens.t, t, side="right") - 1
            tel = {k: sens[k][si] for k in ("qpos", "qvel", "load", "voltage", "temperature")}
            frames = {}
            for c, cam in cams.items():
                fi = np.searchsorted(cam.t, t, side="right") - 1
                frames[c] = cam.jpeg[fi] if fi >= 0 else None
            a = runner.act(tel, frames, t_host=float(sens.t[si]))
            assert a.shape == (6,)
            if j < len(sel) and runner._imgs and len(runner._imgs) == 2:
                k = sel[j]
                want = frames_to_tensor(data.frames[data.frame[k]][None])
                got = torch.cat([runner._imgs[c] for c in cfg.cameras], dim=1)
                assert torch.equal(want, got), i
                np.testing.assert_array_equal(np.stack(runner._tel), data.tel[k])
                with torch.inference_mode():
                    offline = model(want, torch.from_numpy(data.tel[k][None]),
                                    torch.from_numpy(data.past_actions[k][None]))[0, 0].numpy()
                if i >= cfg.history:  # past actions: the runner's own, the loader's the logged
                    runner_past = np.stack(runner._past)
                    assert runner_past.shape == data.past_actions[k].shape
                else:
                    np.testing.assert_allclose(a, offline, atol=1e-6)
                j += 1
                checked += 1
            runner._past = type(runner._past)(  # feed the logged actions as history, as in training
                [np.asarray(cmd["action"][q], np.float32) for q in range(i, i - cfg.history, -1) if q >= 0]
                + [np.zeros(6, np.float32)] * max(0, cfg.history - i - 1), maxlen=max(cfg.history, 1))
        assert checked == len(sel) > 10


def test_arm_idle_action_holds_the_arm_until_both_cameras_have_a_frame(arm_data: Path) -> None:
    from realsim.logs import LogReader
    from student.policy import PolicyRunner

    cfg = tiny()
    runner = PolicyRunner(StudentPolicy(cfg), cfg)
    q = np.array([0.1, -0.2, 1.2, 1.4, 0.0, 0.035])
    a = runner.act({"qpos": q, "qvel": np.zeros(6)}, {"front": None, "wrist": None})
    lo, hi = np.array([-1.9, -1.7, -1.6, -1.7, -2.7, 0.0]), np.array([1.9, 1.7, 1.6, 1.7, 2.7, 0.07])
    np.testing.assert_allclose(a, 2 * (q - lo) / (hi - lo) - 1)
    with LogReader(arm_data) as r:
        jpeg = r.episode(r.episode_names[0]).cameras["front"].jpeg[0]
    a = runner.act({"qpos": q, "qvel": np.zeros(6)}, {"front": (0.0, jpeg)})
    np.testing.assert_allclose(a, 2 * (q - lo) / (hi - lo) - 1)  # the wrist is still missing
    assert runner.queries == 0
    runner.act({"qpos": q, "qvel": np.zeros(6)}, {"wrist": jpeg})
    assert runner.queries == 1


def test_closed_loop_evaluation_runs_the_arm_env(arm_data: Path) -> None:
    from student.evaluate import Evaluator
    from student.policy import checkpoint_dict

    cfg = tiny()
    ck = checkpoint_dict(StudentPolicy(cfg), cfg, {"frame_size": [160, 120]})
    with Evaluator(0, "realsim.robots.arm.scene:ArmTaskEnv", {"image_size": (120, 160)}) as ev:
        res = ev.evaluate(ck, 2, 500, action_noise=0.03, seconds=0.4)
    assert [e["seed"] for e in res.episodes] == [500, 501]
    assert all(e["steps"] >= 10 and not e["distractor"] for e in res.episodes)
    assert res.success_rate == 0.0 and "distractor" not in res.summary()


def test_train_student_arm_end_to_end_writes_an_arm_checkpoint(arm_data: Path, tmp_path: Path, capsys) -> None:  # noqa: ANN001
    import argparse

    from student.cli import add_train_arguments, cmd_train_student
    from student.policy import load_checkpoint

    p = argparse.ArgumentParser()
    add_train_arguments(p)
    out = tmp_path / "s.pt"
    sets = [f"{k}={v}" for k, v in dict(image_width=32, channels="[8,16]", feature_dim=32, hidden_dim=64,
                                        chunk_len=5, epochs=1, eval_episodes=1, final_eval_episodes=1,
                                        eval_workers=0, eval_seconds=0.3, footprint_samples=0,
                                        threads=1).items()]
    a = p.parse_args(["arm", "--data", str(arm_data), "--out", str(out),
                      *[x for s in sets for x in ("--set", s)]])
    assert cmd_train_student(a) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith(f"checkpoint={out} episodes=1 success=")
    _, cfg, meta = load_checkpoint(out)
    assert cfg.robot == "arm" and cfg.cameras == ("front", "wrist") and meta["frame_size"] == [160, 120]
    assert math.isfinite(meta["val_loss"])


def test_bad_input_to_train_student_arm_exits_2(arm_data: Path, tmp_path: Path) -> None:
    car = synthetic_log(tmp_path / "car.h5", episodes=1, seconds=0.4)
    out = tmp_path / "o.pt"
    p = run_cli("train-student", "arm", "--data", car, "--out", out)
    assert_one_line_error(p, "rc_car", "not arm")
    front = arm_log(tmp_path / "front.h5", episodes=1, steps=6, cameras=("front",))
    p = run_cli("train-student", "arm", "--data", front, "--out", out, "--set", "footprint_samples=0",
                "--set", "threads=1", timeout=300)
    assert_one_line_error(p, "no camera 'wrist'")
    p = run_cli("train-student", "arm", "--data", arm_data, "--out", out, "--set", "bogus=1")
    assert_one_line_error(p, "bogus")
    p = run_cli("train-student", "arm", "--data", arm_data, "--out", out, "--bogus")
    assert p.returncode == 2 and "Traceback" not in p.stderr
    cfg = tmp_path / "car.yaml"
    cfg.write_text("robot: rc_car\n")
    p = run_cli("train-student", "arm", "--data", arm_data, "--out", out, "--config", cfg)
    assert_one_line_error(p, "rc_car")
    assert not out.exists()


def test_task_colors_key_the_red_cube_and_green_square_in_any_room() -> None:
    """The simulator's and the emulator's reds and greens are keyed; table, wall, arm are not."""
    import cv2

    from student.features import preprocess_jpeg, task_color_masks

    img = np.zeros((480, 640, 3), np.uint8)
    img[:, :] = (150, 170, 185)  # the emulator's table (BGR)
    img[::40, :] = (120, 160, 200)  # a chequered stripe, like the simulator's table
    img[:100] = (85, 90, 95)  # wall
    img[200:260, 100:160] = (20, 20, 216)  # the simulator's red cube (BGR of RGB 216, 20, 20)
    img[300:340, 100:140] = (10, 10, 110)  # its shaded side
    img[200:260, 400:460] = (40, 40, 205)  # the emulator's red
    img[380:460, 200:280] = (50, 190, 25)  # the simulator's green
    img[380:460, 400:480] = (40, 170, 60)  # the emulator's green
    img[150:250, 300:320] = (235, 235, 235)  # the white arm
    m = task_color_masks(img)
    red, green = m[..., 0] > 0, m[..., 1] > 0
    assert red[200:260, 100:160].all() and red[300:340, 100:140].all() and red[200:260, 400:460].all()
    assert green[380:460, 200:280].all() and green[380:460, 400:480].all()
    assert red.sum() == 60 * 60 * 2 + 40 * 40 and green.sum() == 2 * 80 * 80 and not m[..., 2].any()
    ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 75])
    x = preprocess_jpeg(buf.tobytes(), 80, None, (640, 480), "task_colors")
    assert x.shape == (60, 80, 3) and x[..., 0].max() == 255 and x[..., 1].max() == 255
    assert x[:12, :, :2].max() == 0  # the wall row band: nothing keyed
    with pytest.raises(UserError, match="input_mode"):
        StudentConfig.for_robot("arm", input_mode="hsv")


def test_jaws_mode_keys_black_and_grey_jaws_not_the_table_or_task_colours() -> None:
    """task_colors_jaws: channel 2 holds the achromatic pixels, the simulator's black jaws
    and the emulated arm's grey ones; the tables (chequered or plain), the red cube and the
    green square stay out of it, and channels 0 and 1 are task_colors' own."""
    import cv2

    from student.features import preprocess_jpeg, task_color_masks

    img = np.zeros((480, 640, 3), np.uint8)
    img[:, :] = (150, 170, 185)  # the emulator's table (BGR)
    img[::40, :] = (120, 160, 200)  # a chequered stripe, like the simulator's table
    img[200:260, 100:160] = (20, 20, 216)  # red cube
    img[380:460, 200:280] = (50, 190, 25)  # green square
    img[400:480, 20:80] = (25, 25, 25)  # the simulator's black jaw
    img[400:480, 560:620] = (200, 200, 200)  # the emulated arm's grey jaw
    m = task_color_masks(img, jaws=True)
    jaws = m[..., 2] > 0
    assert jaws[400:480, 20:80].all() and jaws[400:480, 560:620].all()
    assert jaws.sum() == 2 * 80 * 60  # nothing else: not the tables, the cube, the square
    np.testing.assert_array_equal(m[..., :2], task_color_masks(img)[..., :2])
    ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 75])
    x = preprocess_jpeg(buf.tobytes(), 80, None, (640, 480), "task_colors_jaws")
    # JPEG's halved chroma leaves a thin desaturated rim around the cube: under half an input
    # pixel (64 of 255 measured), where a jaw fills whole ones
    assert x.shape == (60, 80, 3) and x[55:, 3:9, 2].min() > 200 and x[:45, :, 2].max() < 100
    assert preprocess_jpeg(buf.tobytes(), 80, None, (640, 480), "task_colors")[..., 2].max() == 0
    StudentConfig.for_robot("arm", input_mode="task_colors_jaws").validate()


def test_relative_actions_start_from_the_measured_joints() -> None:
    """With a silent head the revolute goals are the measured joints (normalised), the
    gripper's goal the absolute 0; offsets are bounded by relative_scale."""
    cfg = tiny(relative_actions=True, relative_scale=0.5)
    model = StudentPolicy(cfg).eval()
    last = model.head[-1]
    torch.nn.init.zeros_(last.weight)
    torch.nn.init.zeros_(last.bias)
    q = torch.tensor([[0.95, -0.85, 0.0, 1.7, -2.7, 0.05]])
    tel = torch.cat([q, torch.zeros(1, 6)], dim=1)[:, None]  # (1, 1, 12): qpos, qvel
    img = torch.zeros(1, 6, cfg.image_height, cfg.image_width)
    out = model(img, tel, torch.zeros(1, 0, 6))
    want = torch.tensor([0.5, -0.5, 0.0, 1.0, -1.0, 0.0])
    torch.testing.assert_close(out[0], want.expand(5, 6))
    torch.nn.init.constant_(last.bias, 10.0)  # saturated head: +relative_scale, gripper +1
    out = model(img, tel, torch.zeros(1, 0, 6))
    torch.testing.assert_close(out[0, 0], torch.tensor([1.0, 0.0, 0.5, 1.0, -0.5, 1.0]))
    with pytest.raises(UserError, match="relative_actions"):
        tiny(relative_actions=True, telemetry_fields=["qvel"])
    with pytest.raises(UserError, match="relative_actions"):
        StudentConfig(relative_actions=True)  # the car has no joints


def test_hold_keeps_the_last_action_past_the_end_and_weights_scale_the_loss(arm_data: Path) -> None:
    from student.train import chunk_loss

    held = load_dataset([arm_data], tiny(tail="hold"))
    masked = load_dataset([arm_data], tiny(tail="mask"))
    assert held.mask.all() and not masked.mask.all()
    np.testing.assert_array_equal(held.chunk, masked.chunk)  # the same targets, more of them kept
    last = held.chunk[held.episode == 0][-1]
    np.testing.assert_array_equal(last, np.repeat(last[:1], len(last), axis=0))
    pred = torch.zeros(2, 5, 6)
    target = torch.zeros(2, 5, 6)
    target[..., 5] = 1.0
    ones = torch.ones(2, 5, dtype=torch.bool)
    assert chunk_loss(pred, target, ones).item() == pytest.approx(1 / 6)
    w = torch.tensor([1.0, 1, 1, 1, 1, 2])
    assert chunk_loss(pred, target, ones, w).item() == pytest.approx(2 / 7)
    with pytest.raises(UserError, match="action_weights"):
        tiny(action_weights=[1, 2])


def test_eval_student_script_repeats_the_final_evaluation_longer(tmp_path: Path) -> None:
    """experiments/eval_student.py: the final evaluation's seeds first, one verdict per
    episode; a missing or foreign checkpoint is a one-line error with status 2."""
    import subprocess
    import sys

    from student.policy import save_checkpoint

    root = Path(__file__).parents[2]
    script = [sys.executable, str(root / "experiments" / "eval_student.py")]
    cfg = tiny(eval_seconds=0.3)
    ck = tmp_path / "s.pt"
    save_checkpoint(ck, StudentPolicy(cfg), cfg, {"frame_size": [160, 120]})
    p = subprocess.run([*script, str(ck), "--episodes", "2", "--workers", "0"], cwd=root,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    head, verdicts = p.stdout.strip().splitlines()[-2:]
    assert head.startswith("success=0.000 episodes=2 first50=0.000 rest=nan") and verdicts == "00"
    junk = tmp_path / "junk.pt"
    junk.write_text("not a checkpoint\n")
    for bad in ([str(tmp_path / "missing.pt")], [str(junk)], [str(ck), "--episodes", "0"]):
        p = subprocess.run([*script, *bad], cwd=root, capture_output=True, text=True, timeout=120)
        assert_one_line_error(p, "error:")


def test_deploy_failure_classes_from_robot_legal_streams(tmp_path: Path) -> None:
    """experiments/arm_deploy_failures.py tells a cube carried to the square and never let
    go (jaws shut at the cube's width) from a missed grasp (jaws shut on nothing) and from a
    release in the wrong place (jaws open), from sensors and commands only; a success, an
    unjudged episode and an incomplete one are not failures; bad input is a one-line error."""
    import subprocess
    import sys

    from realsim.logs import LogWriter

    def episode(w: LogWriter, opening: float, goal: float, success: int, score: float,
                complete: bool = True) -> None:
        n = 250  # 10 s at 25 Hz; the arm moves for 4 s, then stays put
        t = np.arange(n) / 25.0
        q = np.tile([0.0, 0.9, 0.35, 1.4, 0.0, 0.07], (n, 1))
        q[:100, 1] += np.linspace(-0.5, 0.0, 100)
        q[100:, 5] = opening
        ep = w.begin_episode(driver="policy:s.pt")
        ep.add_sensor_block(t, t, qpos=q, qvel=np.zeros((n, 6)), load=np.zeros((n, 6)),
                            voltage=np.full(n, 7.4), temperature=np.full((n, 6), 30.0))
        a = np.zeros((n, 6), np.float32)
        a[:, 5] = 2.0 * goal / 0.07 - 1.0
        ep.add_commands(t, np.arange(n), a)
        if complete:
            ep.set_judge(success, score)
            ep.close(success, score)

    log = tmp_path / "deploy.h5"
    with LogWriter(log, robot="arm", source="real") as w:
        episode(w, 0.07, 0.07, 1, 0.01)    # success
        episode(w, 0.03, 0.0, 0, 0.012)    # carried to the square, never released
        episode(w, 0.03, 0.0, 0, 0.09)     # held, but away from the square
        episode(w, 0.0, 0.0, 0, 0.10)      # closed on nothing
        episode(w, 0.07, 0.07, 0, 0.12)    # let go in the wrong place
        episode(w, 0.03, 0.0, -1, float("nan"))  # no verdict
        episode(w, 0.03, 0.0, 0, 0.01, complete=False)  # cut off: not counted
    root = Path(__file__).parents[2]
    script = [sys.executable, str(root / "experiments" / "arm_deploy_failures.py")]
    p = subprocess.run([*script, str(log)], cwd=root, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.strip().splitlines()
    assert lines[-1] == (f"log={log} episodes=6 success=0.167 held=2 (over the square 1) empty=1 "
                         "open=1 unjudged=1")
    assert lines[0].startswith("ep_000001 held over the square score=0.012 opening=3.0 cm still=6.")
    assert lines[1].startswith("ep_000002 held score=0.090")
    assert lines[2].startswith("ep_000003 empty") and lines[3].startswith("ep_000004 open")
    z = float(lines[0].rsplit("z=", 1)[1].split()[0])  # cm, the same joints in every episode
    assert 0.0 < z < 40.0 and all(ln.endswith(f"z={z:.1f} cm") for ln in lines[:4])

    car = tmp_path / "car.h5"
    with LogWriter(car, robot="rc_car", source="real") as w:
        w.begin_episode(driver="teleop").close()
    junk = tmp_path / "junk.h5"
    junk.write_bytes(b"\x89HDF\r\n garbage")
    for bad in ([str(tmp_path / "missing.h5")], [str(car)], [str(junk)], [str(log), "--tail", "0"]):
        p = subprocess.run([*script, *bad], cwd=root, capture_output=True, text=True, timeout=120)
        assert_one_line_error(p, "error:")


def test_student_failures_by_reach_counts_each_bin() -> None:
    """experiments/arm_student_failures.py's per-reach summary puts each episode in its
    cube-x bin (the far edge included in the last), and counts never-closed episodes."""
    import importlib.util

    root = Path(__file__).parents[2]
    spec = importlib.util.spec_from_file_location("asf", root / "experiments" / "arm_student_failures.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)

    def r(x: float, success: int, lifted: bool, closes: int) -> dict:
        return {"cube_xy": [x, 0.0], "success": success, "lifted": lifted, "closes": closes}

    res = [r(0.16, 1, True, 1), r(0.17, 0, False, 2), r(0.29, 0, False, 0), r(0.30, 1, True, 1)]
    lines = mod.by_reach(res)
    assert len(lines) == 4
    assert lines[0] == "cube x 0.150-0.188 m: n=2 success=0.50 lifted=0.50 never_closed=0"
    assert lines[1] == "cube x 0.188-0.225 m: n=0" and lines[2] == "cube x 0.225-0.263 m: n=0"
    assert lines[3] == "cube x 0.263-0.300 m: n=2 success=0.50 lifted=0.50 never_closed=1"
    # by distance from the base: (0.29, 0.08) lies at 0.301 m, with (0.30, 0) past 0.30 m
    res.append(r(0.29, 1, True, 1))
    res[-1]["cube_xy"][1] = 0.08
    lines = mod.by_reach(res, mod.RADIUS_BINS, key="radius")
    assert lines[0] == "cube r 0.150-0.200 m: n=2 success=0.50 lifted=0.50 never_closed=0"
    assert lines[2] == "cube r 0.250-0.300 m: n=1 success=0.00 lifted=0.00 never_closed=1"
    assert lines[3] == "cube r 0.300-0.330 m: n=2 success=1.00 lifted=1.00 never_closed=0"

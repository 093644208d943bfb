"""`realsim teach arm`: the arm's log, determinism across workers, resuming, the CLI's errors."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pytest
import yaml

from realsim.errors import UserError
from realsim.logs import LogReader, LogWriter
from realsim.residual import ResidualConfig, ResidualNet, save_residual
from realsim.robots.arm.params import ArmParams
from teacher.arm_generate import ArmTeach
from teacher.cli import add_teach_arguments, cmd_teach
from teacher.generate import TeachConfig, generate_episode, teach
from tests.conftest import assert_one_line_error, run_cli

# small frames at a low rate keep each episode well under a second
SMALL = dict(seed=3, image_size=(48, 64), camera_fps=5.0, robot="arm")
CFG = TeachConfig(**SMALL)


def _args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_teach_arguments(p)
    return p.parse_args(list(argv))


def test_arm_episode_contents() -> None:
    rec = generate_episode(CFG, 0)
    n = len(rec.command_t)
    assert rec.action.shape == (n, 6) and n > 25  # seconds of control at 25 Hz
    assert np.all(np.abs(rec.action) <= 1.0)
    assert np.allclose(np.diff(rec.command_t), 1 / 25)
    assert rec.sensors["qpos"].shape == (n + 1, 6) and rec.sensors["voltage"].shape == (n + 1,)
    assert set(rec.frames) == {"front", "wrist"}
    for frames in rec.frames.values():
        t = np.array([ft for ft, _ in frames])
        assert len(t) >= 5 and np.all(np.diff(t) >= 1 / 5 - 1e-9)  # camera_fps respected
        assert all(j[:2] == b"\xff\xd8" for _, j in frames)  # JPEG
    assert rec.privileged_series["cube_pose"].shape == (n + 1, 7)
    assert rec.privileged_static["target_xy"].shape == (2,)
    names = [x.decode() for x in rec.privileged_static["randomization_names"]]
    assert "param.latency" in names and "action_noise" in names
    assert "camera.wrist.fovy" in names and len(names) == len(rec.privileged_static["randomization"])
    assert rec.success == 1 and rec.score < 0.04


def test_arm_same_seed_same_episodes_any_worker_count(tmp_path: Path) -> None:
    teach(tmp_path / "a.h5", 2, CFG, workers=1, progress=False)
    teach(tmp_path / "b.h5", 2, CFG, workers=2, progress=False)
    ref = generate_episode(TeachConfig(**SMALL), 1)
    with LogReader(tmp_path / "a.h5") as a, LogReader(tmp_path / "b.h5") as b:
        assert a.robot == "arm" and a.attrs["source"] == "sim"
        ea_all, eb_all = list(a.episodes()), list(b.episodes())
        assert len(ea_all) == len(eb_all) == 2
        assert ea_all[0].seed != ea_all[1].seed
        for ea, eb in zip(ea_all, eb_all, strict=True):
            assert ea.seed == eb.seed
            np.testing.assert_array_equal(ea.command["action"], eb.command["action"])
            for k in ("qpos", "qvel", "load", "voltage", "temperature"):
                np.testing.assert_array_equal(ea.sensors[k], eb.sensors[k])
            for cam in ("front", "wrist"):
                assert ea.cameras[cam].jpeg == eb.cameras[cam].jpeg
        np.testing.assert_array_equal(ea_all[1].command["action"], ref.action)
        assert ea_all[1].cameras["wrist"].jpeg == [j for _, j in ref.frames["wrist"]]


def test_arm_resume_and_privileged(tmp_path: Path) -> None:
    out = tmp_path / "t.h5"
    assert teach(out, 1, CFG, workers=1, progress=False).written == 1

    def boom(rec) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        teach(out, 3, CFG, workers=1, progress=False, on_episode=boom)
    s = teach(out, 3, CFG, workers=1, progress=False)
    assert (s.written, s.total) == (1, 3)
    assert teach(out, 3, CFG, workers=1, progress=False).written == 0
    with LogReader(out) as r:
        eps = list(r.episodes(privileged=True))
        assert r.episode(0).privileged is None  # refused unless asked for
    assert [int(e.attrs["teach_index"]) for e in eps] == [0, 1, 2]
    for e in eps:
        n = len(e.command)
        assert e.complete and e.driver == "teacher" and e.success in (0, 1)
        assert e.command["action"].shape == (n, 6) and len(e.sensors) == n + 1
        assert e.privileged["qpos"].shape[0] == n + 1
        assert e.privileged["cube_pose"].shape == (n + 1, 7)
    # another configuration (here: another image size) is refused, not mixed in
    with pytest.raises(UserError, match="another --seed or configuration"):
        teach(out, 4, TeachConfig(**{**SMALL, "image_size": (60, 80)}), progress=False)


def test_arm_params_centre_the_draw(tmp_path: Path) -> None:
    fitted = ArmParams.nominal().replace(servo_kp=30.0, cube_mass=0.045)
    pyaml = tmp_path / "params.yaml"
    fitted.to_yaml(pyaml)
    cfg = TeachConfig(**SMALL, params=ArmParams.from_yaml(pyaml).to_dict())
    assert cfg.digest() != CFG.digest()
    rec = generate_episode(cfg, 0)
    d = dict(zip([x.decode() for x in rec.privileged_static["randomization_names"]],
                 rec.privileged_static["randomization"], strict=True))
    spec = ArmParams.spec_of("servo_kp")
    half = 0.5 * (spec.high - spec.low) * 0.15  # ArmRandomization.fitted_spread
    assert abs(d["param.servo_kp"] - 30.0) <= half + 1e-9


def test_arm_log_holds_the_teachers_label_not_its_aimed_action() -> None:
    """With aimed hovers the same seed executes the same motion whatever is logged; the
    log's actions are the straight plan's ("clean") or the executed goals ("aimed"), and
    the options change the config digest (a resumed file cannot mix them)."""
    aim = (("aim_error_m", 0.025), ("aim_error_yaw", 0.25))
    clean = generate_episode(TeachConfig(**SMALL, teacher=aim), 0)
    aimed = generate_episode(TeachConfig(**SMALL, teacher=(*aim, ("aim_labels", "aimed"))), 0)
    np.testing.assert_array_equal(clean.sensors["qpos"], aimed.sensors["qpos"])
    assert np.abs(clean.action - aimed.action).max() > 1e-3
    assert clean.success == 1
    digests = {c.digest() for c in (CFG, TeachConfig(**SMALL, teacher=aim))}
    assert len(digests) == 2 and CFG.digest() == TeachConfig(**SMALL, teacher=()).digest()


def test_arm_reach_weight_in_the_digest_only_when_set(tmp_path: Path) -> None:
    """--config reach_weight reweights the teacher's layouts and marks the run's digest (a
    resumed file cannot mix layouts); the default 1 leaves the digest of logs written before
    the field existed; 0 is a one-line config error."""
    same = TeachConfig(**SMALL, randomization=ArmTeach().randomization({"reach_weight": 1.0}))
    far = TeachConfig(**SMALL, randomization=ArmTeach().randomization({"reach_weight": 3.0}))
    assert same.digest() == CFG.digest() and far.digest() != CFG.digest()
    bad = tmp_path / "rand.yaml"
    bad.write_text(yaml.safe_dump({"reach_weight": 0.0}))
    with pytest.raises(UserError, match="reach_weight must be > 0"):
        cmd_teach(_args("arm", "--episodes", "1", "--out", str(tmp_path / "x.h5"),
                        "--config", str(bad)))


def test_arm_cli_user_errors(tmp_path: Path, capsys) -> None:
    out = str(tmp_path / "x.h5")
    car_yaml = tmp_path / "car.yaml"
    car_yaml.write_text(yaml.safe_dump({"robot": "rc_car", "params": {}}))
    with pytest.raises(UserError, match="rc_car"):
        cmd_teach(_args("arm", "--episodes", "1", "--out", out, "--params", str(car_yaml)))
    with pytest.raises(UserError, match="no such file"):
        cmd_teach(_args("arm", "--episodes", "1", "--out", out, "--params", "nope.yaml"))
    bad = tmp_path / "rand.yaml"
    bad.write_text(yaml.safe_dump({"soc": [0.1, 0.2]}))  # a car field
    with pytest.raises(UserError, match="unknown field"):
        cmd_teach(_args("arm", "--episodes", "1", "--out", out, "--config", str(bad)))
    car_res = save_residual(tmp_path / "car.pt", ResidualNet(ResidualConfig(robot="rc_car")))
    with pytest.raises(UserError, match="not arm"):
        cmd_teach(_args("arm", "--episodes", "1", "--out", out, "--residual", str(car_res)))
    with pytest.raises(UserError, match="KEY=VALUE"):
        cmd_teach(_args("arm", "--episodes", "1", "--out", out, "--teacher", "aim_error"))
    with pytest.raises(UserError, match="takes no --teacher"):
        cmd_teach(_args("rc_car", "--episodes", "1", "--out", out, "--teacher", "aim_error_m=1"))
    good = tmp_path / "ok.yaml"
    good.write_text(yaml.safe_dump({"action_noise": 0.0, "jpeg_quality": [80, 80]}))
    assert cmd_teach(_args("arm", "--episodes", "0", "--out", out, "--config", str(good))) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("episodes=0 ")
    with LogReader(out) as r:  # an empty arm log: the run wrote its header only
        assert r.robot == "arm" and len(r) == 0


def test_arm_residual_plumbed(tmp_path: Path) -> None:
    """The residual reaches ArmTaskEnv: supported -> the same world is drawn, the physics
    differ, and its bytes are hashed; not (yet) supported -> one clean UserError before
    any episode."""
    import torch

    from realsim.robots.arm.scene import ArmTaskEnv

    torch.manual_seed(0)
    ck = save_residual(tmp_path / "arm.pt", ResidualNet(ResidualConfig(robot="arm")))
    out = str(tmp_path / "r.h5")
    argv = ("arm", "--episodes", "1", "--out", out, "--residual", str(ck), "--workers", "1",
            "--image-size", "48", "64", "--no-progress")
    try:
        ArmTaskEnv(render=False, residual=str(ck)).close()
    except NotImplementedError:
        with pytest.raises(UserError, match="residual"):
            cmd_teach(_args(*argv))
        assert not Path(out).exists()
        return
    cfg = TeachConfig(**SMALL, residual=str(ck))
    assert cfg.digest() != CFG.digest()
    a, plain = generate_episode(cfg, 0), generate_episode(CFG, 0)
    np.testing.assert_array_equal(a.privileged_static["randomization"],
                                  plain.privileged_static["randomization"])
    n = min(len(a.sensors["qpos"]), len(plain.sensors["qpos"]))
    assert not np.array_equal(a.sensors["qpos"][:n], plain.sensors["qpos"][:n])
    assert cmd_teach(_args(*argv)) == 0
    with LogReader(out) as r:
        assert r.episode(0).complete


def test_arm_cli_exit_2_on_non_arm_log(tmp_path: Path) -> None:
    car_log = tmp_path / "car.h5"
    with LogWriter(car_log, robot="rc_car", source="sim"):
        pass
    p = run_cli("teach", "arm", "--episodes", "1", "--out", car_log, "--workers", "1")
    assert_one_line_error(p, "rc_car")
    p = run_cli("teach", "arm", "--episodes", "1", "--out", tmp_path / "y.h5", "--bogus")
    assert p.returncode == 2 and "Traceback" not in p.stderr

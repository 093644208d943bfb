"""`deploy` and `record --driver policy:CKPT` on the emulated car (slow: real time)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from student_helpers import synthetic_log

from realsim.errors import UserError


def _ckpt(tmp_path: Path) -> Path:
    from student.config import StudentConfig
    from student.dataset import load_dataset
    from student.policy import save_checkpoint
    from student.train import StudentModule

    cfg = StudentConfig(image_width=32, channels=(8, 16), feature_dim=32, hidden_dim=64, chunk_len=5)
    data = load_dataset([synthetic_log(tmp_path / "d.h5", episodes=2)], cfg)
    p = tmp_path / "c.pt"
    save_checkpoint(p, StudentModule(cfg, *data.telemetry_stats()).policy, cfg)
    return p


def test_deploy_rejects_bad_input(tmp_path: Path) -> None:
    from student.cli import add_deploy_arguments, cmd_deploy

    p = argparse.ArgumentParser()
    add_deploy_arguments(p)
    a = p.parse_args(["rc_car", "--policy", str(tmp_path / "nope.pt"), "--port", "/dev/null",
                      "--camera", "x", "--episodes", "1", "--out", str(tmp_path / "o.h5")])
    with pytest.raises(UserError, match="no such file"):
        cmd_deploy(a)
    a.robot = "tank"
    with pytest.raises(UserError, match="rc_car, arm"):
        cmd_deploy(a)
    a.robot, a.policy = "arm", str(_ckpt(tmp_path))  # a car's checkpoint on the arm
    with pytest.raises(UserError, match="policy for rc_car, not arm"):
        cmd_deploy(a)
    a.robot = "rc_car"
    for bad in ("chunky", "receding_horizon", "receding_horizon:9", "temporal_ensemble:x"):
        a.execution = bad  # chunk_len 5: n = 9 does not fit
        with pytest.raises(UserError, match="--execution"):
            cmd_deploy(a)
    a.execution = None
    for bad in ("loud", "-0.1", "nan"):
        a.dither = bad
        with pytest.raises(UserError, match="--dither"):
            cmd_deploy(a)


def test_deploy_dither_adds_seeded_noise_to_what_is_sent_only(tmp_path: Path) -> None:
    """`--dither SIGMA`: Gaussian noise of that size on every action sent, clipped to
    [-1, 1], the same draws for the same episode; the runner's own (clean) action is left
    alone, as the closed-loop evaluation does; 0 sends the policy's action unchanged;
    'eval' reads the checkpoint's eval_action_noise."""
    import numpy as np

    from student.deploy import PolicySource, _dither

    ck = _ckpt(tmp_path)
    clean = np.array([0.2, 0.99])

    def actions(sigma: float, episode: int, n: int = 400) -> np.ndarray:
        src = PolicySource(ck, dither=sigma)
        src.runner.act = lambda *_, **__: clean.copy()  # the policy's action, fixed
        src.begin(episode)
        return np.array([src.act(argparse.Namespace(telemetry=None, frame=None)) for _ in range(n)])

    assert np.array_equal(actions(0.0, 0), np.tile(clean, (400, 1)))
    a = actions(0.05, 3)
    assert np.array_equal(a, actions(0.05, 3)) and not np.array_equal(a, actions(0.05, 4))
    assert abs(float(np.std(a[:, 0] - clean[0])) - 0.05) < 0.01 and abs(float(np.mean(a[:, 0]) - 0.2)) < 0.01
    assert a[:, 1].max() == 1.0 and (a[:, 1] < 0.99).any()  # clipped at the limit, both ways
    with pytest.raises(UserError, match="dither"):
        PolicySource(ck, dither=-1.0)
    from student.policy import load_checkpoint

    assert _dither("eval", ck) == load_checkpoint(ck)[1].eval_action_noise > 0
    assert _dither("0.02", ck) == 0.02 and _dither(None, ck) is None
    assert PolicySource(ck).dither == load_checkpoint(ck)[1].deploy_dither == 0.0  # the car's
    from student.config import StudentConfig

    assert StudentConfig.for_robot("arm").deploy_dither > 0
    with pytest.raises(UserError, match="deploy_dither"):
        StudentConfig(deploy_dither=-0.01).validate()


def test_deploy_execution_replaces_the_checkpoints_strategy(tmp_path: Path) -> None:
    """`--execution` on deploy: the runner executes chunks the named way, not as the
    checkpoint was trained (temporal ensembling); without it, the checkpoint's own."""
    from student.deploy import PolicySource
    from student.execution import RecedingHorizon, TemporalEnsemble

    ck = _ckpt(tmp_path)
    assert isinstance(PolicySource(ck).runner.execution, TemporalEnsemble)
    ex = PolicySource(ck, execution="chunk_open_loop").runner.execution
    assert isinstance(ex, RecedingHorizon) and ex.n == 5
    assert PolicySource(ck, execution="receding_horizon:2").runner.execution.n == 2
    assert PolicySource(ck, execution="temporal_ensemble:0.1").runner.execution.m == 0.1


@pytest.mark.slow
def test_deploy_on_the_emulator_prints_the_jdg_success_rate(tmp_path: Path, emulated_car, capsys) -> None:  # noqa: ANN001
    from realsim.logs import LogReader
    from student.cli import add_deploy_arguments, cmd_deploy

    ck = _ckpt(tmp_path)
    p = argparse.ArgumentParser()
    add_deploy_arguments(p)
    out = tmp_path / "dep.h5"
    a = p.parse_args(["rc_car", "--policy", str(ck), "--port", emulated_car.port, "--camera",
                      emulated_car.camera, "--episodes", "2", "--out", str(out), "--seconds", "2"])
    assert cmd_deploy(a) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("episodes=2 judged=2 success=")
    with LogReader(out) as r:
        eps = list(r.episodes())
    assert len(eps) == 2 and all(e.driver == f"policy:{ck}" for e in eps)
    assert all(len(e.command) > 50 and len(e.cameras["front"]) > 10 for e in eps)


def _arm_ckpt(tmp_path: Path) -> Path:
    """An untrained two-camera arm student (what matters here is the plumbing)."""
    from student_helpers import arm_log

    from student.config import StudentConfig
    from student.dataset import load_dataset
    from student.policy import save_checkpoint
    from student.train import StudentModule

    cfg = StudentConfig.for_robot("arm", image_width=32, channels=(8, 16), feature_dim=32,
                                  hidden_dim=64, chunk_len=5)
    data = load_dataset([arm_log(tmp_path / "arm.h5", episodes=1, steps=12)], cfg)
    p = tmp_path / "arm.pt"
    save_checkpoint(p, StudentModule(cfg, *data.telemetry_stats()).policy, cfg)
    return p


@pytest.mark.slow
def test_deploy_arm_on_the_emulator_records_episodes_and_prints_the_jdg_success_rate(
        tmp_path: Path, capsys) -> None:  # noqa: ANN001
    """`realsim deploy arm` against `realsim emulate arm`, then `record arm --driver policy:CKPT`."""
    from hardware.emulators.launch import EmulatorProcess
    from realsim.logs import LogReader
    from student.cli import add_deploy_arguments, cmd_deploy
    from tests.conftest import run_cli

    ck = _arm_ckpt(tmp_path)
    out = tmp_path / "dep.h5"
    with EmulatorProcess("arm", seed=2) as emu:
        p = argparse.ArgumentParser()
        add_deploy_arguments(p)
        a = p.parse_args(["arm", "--policy", str(ck), "--port", emu.port, "--camera", emu.camera,
                          "--control", str(emu.control), "--episodes", "2", "--out", str(out),
                          "--seconds", "1.5"])
        assert cmd_deploy(a) == 0
        last = capsys.readouterr().out.strip().splitlines()[-1]
        assert last.startswith("episodes=2 judged=2 success=")
        rec = run_cli("record", "arm", "--port", emu.port, "--camera", emu.camera, "--control",
                      emu.control, "--episodes", "1", "--out", out, "--seconds", "1",
                      "--rate", "25", "--driver", f"policy:{ck}", timeout=180)
        assert rec.returncode == 0, rec.stderr
    with LogReader(out) as r:
        assert r.robot == "arm"
        eps = list(r.episodes())
    assert len(eps) == 3 and all(e.driver == f"policy:{ck}" for e in eps)
    assert all(e.judge is not None and "success" in e.judge for e in eps)
    for e in eps[:2]:  # 25 Hz (the policy's rate) for 1.5 s, both cameras
        assert 25 <= len(e.command) <= 40 and e.command["action"].shape[1] == 6
        assert len(e.cameras["front"]) > 10 and len(e.cameras["wrist"]) > 10

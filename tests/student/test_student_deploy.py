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

"""`realsim train-student --init/--params/--residual`: fine-tuning, and selection in the
corrected simulator."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pytest
import torch
from student_helpers import synthetic_log

import student.evaluate as evaluate
from realsim.errors import UserError
from realsim.residual import ResidualConfig, ResidualNet, save_residual, zero_residual
from realsim.robots.rc_car.params import CarParams
from realsim.sim import HybridCarSim
from student.cli import add_train_arguments, cmd_train_student
from student.config import StudentConfig
from student.evaluate import DEFAULT_ENV, corrected_sim_kwargs, make_env
from student.model import StudentPolicy
from student.policy import save_checkpoint
from tests.conftest import assert_one_line_error, run_cli

TINY = dict(image_width=32, channels=(8, 16), feature_dim=32, hidden_dim=64, chunk_len=5,
            execute_n=2, batch_size=32, epochs=3, eval_every=1, eval_episodes=4,
            final_eval_episodes=4, eval_workers=0, footprint_samples=0, lr=3e-3, threads=1)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A tiny synthetic dataset, a tiny student checkpoint (random weights, distinctive
    telemetry stats), a fitted params.yaml and a zero residual checkpoint."""
    d = tmp_path_factory.mktemp("init")
    cfg = StudentConfig(**TINY)
    torch.manual_seed(123)
    pol = StudentPolicy(cfg)
    nf = len(cfg.telemetry_fields)
    pol.set_stats(np.linspace(0.1, 0.9, nf), np.linspace(1.5, 2.5, nf))
    save_checkpoint(d / "init.pt", pol, cfg, {"epoch": 7})
    fit = d / "params.yaml"
    CarParams(tyre_mu=0.55, latency=0.04).to_yaml(fit)
    return {"data": synthetic_log(d / "d.h5", episodes=4), "init": d / "init.pt",
            "params": fit, "residual": save_residual(d / "zero.pt", zero_residual().net)}


def _args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_train_arguments(p)
    return p.parse_args(list(argv))


def test_init_starts_from_the_checkpoint_and_selects_in_the_corrected_sim(
        files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # lr 0 from a --config file: the kept weights must be the --init weights, bit for bit;
    # the network shape (image_width 32, channels 8/16) comes from the --init checkpoint
    conf = tmp_path / "ft.yaml"
    conf.write_text("lr: 0.0\neval_seconds: 0.4\n")
    out = tmp_path / "ft.pt"
    evaluate._ENV = None
    rc = cmd_train_student(_args(
        "rc_car", "--data", str(files["data"]), "--out", str(out), "--config", str(conf),
        "--init", str(files["init"]), "--params", str(files["params"]),
        "--residual", str(files["residual"]), "--set", "epochs=1", "--set", "eval_episodes=2",
        "--set", "final_eval_episodes=0", "--set", "eval_workers=0", "--set", "threads=1",
        "--tensorboard", str(tmp_path / "tb")))
    assert rc == 0
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith(f"checkpoint={out} ")
    init = torch.load(files["init"], weights_only=True)
    ck = torch.load(out, weights_only=True)
    assert ck["config"]["image_width"] == 32 and ck["config"]["epochs"] == 1
    assert ck["config"]["lr"] == 0.0 and ck["config"]["eval_seconds"] == 0.4
    assert ck["meta"]["init"] == str(files["init"])
    assert set(ck["state_dict"]) == set(init["state_dict"])
    for k, v in init["state_dict"].items():
        torch.testing.assert_close(ck["state_dict"][k], v, rtol=0, atol=0, msg=k)
    # the selection's environment (run in-process: eval_workers=0) was the corrected one
    env = evaluate._ENV
    assert env is not None and env.residual is not None and isinstance(env.sim, HybridCarSim)
    assert env.fitted and env.params["tyre_mu"] == pytest.approx(0.55)


def test_without_init_the_weights_are_fresh(files: dict[str, Path], tmp_path: Path) -> None:
    """The control for the test above: same run without --init does not keep them."""
    conf = tmp_path / "tiny.yaml"
    conf.write_text("".join(f"{k}: {list(v) if isinstance(v, tuple) else v}\n"
                            for k, v in {**TINY, "lr": 0.0, "epochs": 1, "eval_episodes": 1,
                                         "final_eval_episodes": 0, "eval_seconds": 0.2}.items()))
    out = tmp_path / "fresh.pt"
    assert cmd_train_student(_args("rc_car", "--data", str(files["data"]), "--out", str(out),
                                   "--config", str(conf))) == 0
    init = torch.load(files["init"], weights_only=True)["state_dict"]
    fresh = torch.load(out, weights_only=True)["state_dict"]
    assert any(not torch.equal(fresh[k], v) for k, v in init.items())


def test_corrected_sim_kwargs_build_the_corrected_env(files: dict[str, Path]) -> None:
    assert corrected_sim_kwargs() == {}
    kw = corrected_sim_kwargs(files["params"], files["residual"])
    assert isinstance(kw["params"], CarParams) and Path(kw["residual"]).is_absolute()
    env = make_env(DEFAULT_ENV, {**kw, "render": False})
    env.reset(0)
    assert isinstance(env.sim, HybridCarSim) and env.fitted


def test_bad_files_are_user_errors(files: dict[str, Path], tmp_path: Path) -> None:
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"not a checkpoint")
    base = ("rc_car", "--data", str(files["data"]), "--out", str(tmp_path / "o.pt"))
    p = run_cli("train-student", *base, "--residual", str(junk))
    assert_one_line_error(p, "residual")
    yml = tmp_path / "bad.yaml"
    yml.write_text("params: [1, 2\n")
    arm = save_residual(tmp_path / "arm.pt", ResidualNet(ResidualConfig(robot="arm")))
    cases = [
        (("--params", str(yml)), "YAML"),
        (("--params", str(tmp_path / "missing.yaml")), "no such parameter file"),
        (("--residual", str(arm)), "for arm, not rc_car"),
        (("--init", str(junk)), "not a student checkpoint"),
        (("--init", str(files["init"]), "--set", "image_width=64"), "--init"),
    ]
    for extra, needle in cases:
        with pytest.raises(UserError, match=needle):
            cmd_train_student(_args(*base, *extra))
    assert not (tmp_path / "o.pt").exists()

"""`realsim teach --residual`: teacher episodes through the hybrid simulator."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pytest
import torch

from realsim.errors import UserError
from realsim.logs import LogReader
from realsim.residual import ResidualConfig, ResidualNet, save_residual, zero_residual
from teacher.cli import add_teach_arguments, cmd_teach
from teacher.generate import TeachConfig, generate_episode, teach
from tests.conftest import assert_one_line_error, run_cli

SMALL = dict(seed=5, image_size=(60, 80), camera_fps=10.0)  # fewer, smaller frames: fast


def _brake(path: Path, newton: float = 1.5) -> Path:
    """A residual checkpoint whose fx output is a constant brake of about `newton` N."""
    net = ResidualNet(ResidualConfig(outputs=("fx",), history=2, max_out={"fx": newton}))
    with torch.no_grad():
        net.head.bias.fill_(-50.0)  # tanh saturates: fx = -newton
    return save_residual(path, net)


def _args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_teach_arguments(p)
    return p.parse_args(list(argv))


def test_residual_episodes_are_deterministic_and_differ_from_plain(tmp_path: Path) -> None:
    ck = str(_brake(tmp_path / "brake.pt"))
    cfg = TeachConfig(**SMALL, residual=ck)
    a = generate_episode(cfg, 1)
    b = generate_episode(TeachConfig(**SMALL, residual=ck), 1)
    np.testing.assert_array_equal(a.action, b.action)
    for k in a.sensors:
        np.testing.assert_array_equal(a.sensors[k], b.sensors[k])
    assert a.frames == b.frames
    plain = generate_episode(TeachConfig(**SMALL), 1)
    np.testing.assert_array_equal(plain.privileged_static["randomization"],
                                  a.privileged_static["randomization"])  # same world drawn
    n = min(len(plain.sensors["enc_rad"]), len(a.sensors["enc_rad"]))
    assert not np.array_equal(plain.sensors["enc_rad"][:n], a.sensors["enc_rad"][:n])
    assert np.all(np.isfinite(a.privileged_series["qvel"]))


def test_zero_residual_episode_equals_plain(tmp_path: Path) -> None:
    ck = str(save_residual(tmp_path / "zero.pt", zero_residual().net))
    a = generate_episode(TeachConfig(**SMALL, residual=ck), 2)
    b = generate_episode(TeachConfig(**SMALL), 2)
    np.testing.assert_array_equal(a.action, b.action)
    for k in a.sensors:
        np.testing.assert_array_equal(a.sensors[k], b.sensors[k])


def test_cli_teach_with_residual_writes_and_resumes(tmp_path: Path, capsys) -> None:
    ck = _brake(tmp_path / "brake.pt")
    out = tmp_path / "t.h5"
    # 60x80 frames through the in-process API, then the CLI tops the file up and resumes
    cfg = TeachConfig(**SMALL, residual=str(ck.resolve()))
    teach(out, 1, cfg, workers=1, progress=False)
    ref = generate_episode(cfg, 0)
    with LogReader(out) as r:
        eps = list(r.episodes())
    assert len(eps) == 1 and eps[0].complete
    np.testing.assert_array_equal(eps[0].command["action"], ref.action)
    # the same model under another name is the same configuration: nothing to redo
    copy = tmp_path / "copy.pt"
    copy.write_bytes(ck.read_bytes())
    s = teach(out, 1, TeachConfig(**SMALL, residual=str(copy)), workers=1, progress=False)
    assert (s.written, s.total) == (0, 1)
    # another residual (or none) into the same file is refused
    other = _brake(tmp_path / "other.pt", newton=0.5)
    with pytest.raises(UserError, match="another --seed or configuration"):
        teach(out, 2, TeachConfig(**SMALL, residual=str(other)), progress=False)
    with pytest.raises(UserError, match="another --seed or configuration"):
        teach(out, 2, TeachConfig(**SMALL), progress=False)
    # the CLI path (full-size frames) loads the checkpoint and writes a fresh file
    out2 = tmp_path / "cli.h5"
    assert cmd_teach(_args("rc_car", "--out", str(out2), "--residual", str(ck), "--seed", "5",
                           "--workers", "1", "--no-progress", "--episodes", "1")) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("episodes=1 written=1 ")
    with LogReader(out2) as r:
        assert r.episode(0).complete


def test_bad_residual_is_one_line_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.ckpt"
    bad.write_bytes(b"not a checkpoint")
    out = str(tmp_path / "x.h5")
    p = run_cli("teach", "rc_car", "--episodes", "1", "--out", out, "--residual", str(bad))
    assert_one_line_error(p, "residual")
    arm = save_residual(tmp_path / "arm.pt", ResidualNet(ResidualConfig(robot="arm")))
    with pytest.raises(UserError, match="for arm, not rc_car"):
        cmd_teach(_args("rc_car", "--episodes", "1", "--out", out, "--residual", str(arm)))
    with pytest.raises(UserError, match="no such file"):
        cmd_teach(_args("rc_car", "--episodes", "1", "--out", out,
                        "--residual", str(tmp_path / "missing.pt")))
    assert not Path(out).exists()


def test_worker_processes_run_the_residual(tmp_path: Path) -> None:
    ck = str(_brake(tmp_path / "brake.pt"))
    cfg = TeachConfig(**SMALL, residual=ck)
    teach(tmp_path / "w.h5", 2, cfg, workers=2, progress=False)
    with LogReader(tmp_path / "w.h5") as r:
        eps = list(r.episodes())
    for k, ep in enumerate(eps):
        np.testing.assert_array_equal(ep.command["action"], generate_episode(cfg, k).action)

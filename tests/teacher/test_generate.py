"""`realsim teach`: the log it writes, determinism, resuming, the CLI's errors."""

from __future__ import annotations

import argparse

import numpy as np
import pytest

from realsim.errors import UserError
from realsim.logs import LogReader
from realsim.randomization import Randomization
from teacher.cli import add_teach_arguments, cmd_teach
from teacher.generate import TeachConfig, generate_episode, teach

# a short camera-free config keeps the tests fast: fewer, smaller frames
CFG = TeachConfig(seed=5, image_size=(60, 80), camera_fps=10.0)


def test_same_seed_same_episode() -> None:
    a = generate_episode(CFG, 3)
    b = generate_episode(TeachConfig(seed=5, image_size=(60, 80), camera_fps=10.0), 3)
    c = generate_episode(CFG, 4)
    np.testing.assert_array_equal(a.action, b.action)
    for k in a.sensors:
        np.testing.assert_array_equal(a.sensors[k], b.sensors[k])
    assert a.frames == b.frames and len(a.frames["front"]) > 5
    assert a.seed == b.seed != c.seed


def test_teach_writes_log_and_resumes(tmp_path) -> None:
    out = tmp_path / "teach.h5"
    s = teach(out, 2, CFG, workers=1, progress=False)
    assert (s.written, s.total) == (2, 2)

    # interrupted after one more episode: the rerun continues, nothing is duplicated
    def boom(rec) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        teach(out, 4, CFG, workers=1, progress=False, on_episode=boom)
    s = teach(out, 4, CFG, workers=1, progress=False)
    assert (s.written, s.total) == (1, 4)
    ref = generate_episode(CFG, 2)
    with LogReader(out) as r:
        eps = list(r.episodes(privileged=True))
        assert eps[2].cameras["front"].jpeg == [f for _, f in ref.frames["front"]]
    assert [int(e.attrs["teach_index"]) for e in eps] == [0, 1, 2, 3]
    for e in eps:
        assert e.complete and e.driver == "teacher" and e.success == 1
        assert e.score <= 0.35
        n = len(e.command)
        assert e.command["action"].shape == (n, 2) and len(e.sensors) == n + 1
        assert e.sensors["accel"].shape == (n + 1, 2)
        assert np.all(np.diff(e.cameras["front"].t) > 0)
        p = e.privileged
        assert p["pose"].shape == (n + 1, 3) and p["cone_xy"].shape == (2,)
        names = [x.decode() for x in p["randomization_names"]]
        assert "param.latency" in names and len(names) == len(p["randomization"])
    np.testing.assert_array_equal(eps[2].command["action"], ref.action)
    with LogReader(out) as r:
        assert r.episode(0).privileged is None  # refused unless asked for
    # another seed into the same file is refused
    with pytest.raises(UserError, match="another --seed"):
        teach(out, 5, TeachConfig(seed=6, image_size=(60, 80), camera_fps=10.0), progress=False)


def _args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_teach_arguments(p)
    return p.parse_args(list(argv))


def test_cli_user_errors(tmp_path, capsys) -> None:
    out = str(tmp_path / "x.h5")
    with pytest.raises(UserError, match="no such file"):
        cmd_teach(_args("rc_car", "--episodes", "1", "--out", out, "--params", "nope.yaml"))
    ckpt = tmp_path / "r.ckpt"
    ckpt.write_bytes(b"x")
    with pytest.raises(UserError, match="residual"):
        cmd_teach(_args("rc_car", "--episodes", "1", "--out", out, "--residual", str(ckpt)))
    with pytest.raises(UserError, match="robot"):
        cmd_teach(_args("boat", "--episodes", "1", "--out", out))
    cfg = tmp_path / "r.yaml"
    Randomization(jpeg_quality=(50, 50)).to_yaml(cfg)
    assert cmd_teach(_args("rc_car", "--episodes", "0", "--out", out, "--config", str(cfg))) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("episodes=0 ")


def test_worker_count_does_not_change_episodes(tmp_path) -> None:
    teach(tmp_path / "a.h5", 3, CFG, workers=1, progress=False)
    teach(tmp_path / "b.h5", 3, CFG, workers=2, progress=False)
    with LogReader(tmp_path / "a.h5") as a, LogReader(tmp_path / "b.h5") as b:
        for ea, eb in zip(a.episodes(), b.episodes(), strict=True):
            assert ea.seed == eb.seed
            np.testing.assert_array_equal(ea.command["action"], eb.command["action"])
            assert ea.cameras["front"].jpeg == eb.cameras["front"].jpeg

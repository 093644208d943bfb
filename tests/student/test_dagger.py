"""DAgger (`realsim.dagger`, `realsim dagger`) and its recoverability gate
(`teacher.recoverability`): what the gate accepts and rejects, the file a round writes
(the student's loader reads it and still refuses privileged/), the relabels, determinism,
resuming, and the CLI's one-line errors."""

from __future__ import annotations

import os

os.environ.setdefault("MUJOCO_GL", "egl")

from dataclasses import replace  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from realsim.dagger import (  # noqa: E402
    DaggerConfig,
    dagger_round,
    gate_cut,
    make_env,
    rollout_episode,
)
from realsim.errors import UserError  # noqa: E402
from realsim.logs import LogReader  # noqa: E402
from realsim.randomization import Randomization  # noqa: E402
from realsim.robots.rc_car.scene import CarTaskEnv  # noqa: E402
from teacher.pure_pursuit import PurePursuitTeacher  # noqa: E402
from teacher.recoverability import gate_env, teacher_recovers  # noqa: E402

# small, slow-framed camera: the tests' cost is the simulator, not the renderer
SMALL = DaggerConfig(seed=11, gate_every=25, image_size=(60, 80), camera_fps=10.0)


class IdleRunner:
    """A 'student' that never moves: recoverable at first, hopeless once time runs out."""

    def reset(self) -> None:
        pass

    def act(self, telemetry, jpeg=None, t_host=float("nan")) -> np.ndarray:  # noqa: ANN001
        return np.zeros(2)


class CheatingRunner:
    """A 'student' that drives like the teacher (it peeks at the env): short, successful
    episodes keep the file tests fast; only `realsim.dagger`'s plumbing is under test."""

    def __init__(self) -> None:
        self.env: CarTaskEnv | None = None
        self.teacher = PurePursuitTeacher()

    def reset(self) -> None:
        self.teacher.reset()

    def act(self, telemetry, jpeg=None, t_host=float("nan")) -> np.ndarray:  # noqa: ANN001
        assert self.env is not None
        return self.teacher.act(self.env.privileged()) * np.array([1.0, 0.8])


def _round(policy: Path, out: Path, n: int, cfg: DaggerConfig = SMALL):  # noqa: ANN202
    """dagger_round driven by CheatingRunner (it finds the env through make_env)."""
    import realsim.dagger as d

    runner = CheatingRunner()
    real = d.make_env

    def spy(c: DaggerConfig):  # noqa: ANN202
        runner.env = real(c)
        return runner.env

    d.make_env = spy
    try:
        return dagger_round(policy, out, n, cfg, runner=runner)
    finally:
        d.make_env = real


# ---------------------------------------------------------------- the gate
def test_gate_accepts_teacher_states_and_rejects_hopeless_ones() -> None:
    env = CarTaskEnv(randomization=Randomization(), render=False)
    env.reset(21, distractor=False)
    teacher = PurePursuitTeacher()
    on_path = []
    for i in range(60):  # 1.2 s of the teacher's own trajectory, snapshots along it
        if i % 20 == 10:
            on_path.append(env.get_state())
        env.step(teacher.act(env.privileged()))
    assert len(on_path) == 3 and all(teacher_recovers(s) for s in on_path)
    # turned away at speed (full lock away from the cone, full throttle), 0.3 s left
    env.reset(21, distractor=False)
    away = -np.sign(env.scene.cone_xy[1]) or 1.0
    while env.t < 9.7 - 1e-9:
        env.step([away, 1.0 if env.t < 2.0 else 0.3])
    hopeless = env.get_state()
    assert env.privileged()["velocity"][0] > 0.5 and not env.done
    assert not teacher_recovers(hopeless)
    # the verdict is the same in a reused gate environment
    ge = gate_env()
    try:
        assert [teacher_recovers(s, env=ge) for s in (*on_path, hopeless)] == [True] * 3 + [False]
    finally:
        ge.close()
    env.close()


def test_gate_cut_finds_the_first_rejected_tick() -> None:
    seen: list[int] = []

    def ok_before_13(i: int) -> bool:
        seen.append(i)
        return i < 13

    cut, checks = gate_cut(40, ok_before_13, every=5)
    assert cut == 13 and seen == [0, 5, 10, 15, 11, 12, 13]
    assert checks[-1] == (13, False) and all(ok for _, ok in checks[:-1])
    assert gate_cut(40, lambda i: True, every=5) == (40, [(i, True) for i in (0, 5, 10, 15, 20, 25, 30, 35, 39)])
    # the last tick is always checked; audit (cut=False) checks everything and cuts nothing
    assert gate_cut(12, lambda i: i != 11, every=5)[0] == 11
    cut, checks = gate_cut(40, ok_before_13, every=10, cut=False)
    assert cut == 40 and [c[0] for c in checks] == [0, 10, 20, 30, 39]
    assert gate_cut(0, ok_before_13, every=5) == (0, [])


# ---------------------------------------------------------------- a round, in process
@pytest.fixture(scope="module")
def idle_episode():  # noqa: ANN201
    env = make_env(SMALL)
    ge = gate_env()
    try:
        yield rollout_episode(IdleRunner(), env, SMALL, 0, ge), SMALL
    finally:
        env.close()
        ge.close()


def test_gate_cuts_the_episode_at_the_first_hopeless_state(idle_episode) -> None:  # noqa: ANN001
    rec, cfg = idle_episode
    assert rec.visited == 500 and rec.student_success == 0  # it idled the whole window
    assert 50 < rec.kept < rec.visited  # cut: kept a prefix, dropped the hopeless tail
    assert rec.gate_ok[-1] == 0 and rec.gate_tick[-1] == rec.kept and rec.gate_ok[:-1].all()
    assert len(rec.sensors["t"]) == rec.kept + 1 and rec.command_t[-1] < rec.sensors["t"][-1]
    # the cut is exact: the teacher recovers from the last kept state, not from the first dropped
    env = make_env(cfg)
    states = []
    env.reset(rec.seed)
    for _ in range(rec.kept + 1):
        states.append(env.get_state())
        env.step(np.zeros(2))
    assert teacher_recovers(states[rec.kept - 1]) and not teacher_recovers(states[rec.kept])
    env.close()


def test_relabels_are_the_teachers_action_at_each_visited_state(idle_episode) -> None:  # noqa: ANN001
    rec, cfg = idle_episode
    env = make_env(cfg)  # the same world, the same noise streams: replay the student's actions
    env.reset(rec.seed)
    for i in range(rec.kept):
        want = PurePursuitTeacher().act(env.privileged())
        np.testing.assert_allclose(rec.label[i], want.astype(np.float32), atol=1e-6)
        env.step(rec.student_action[i])
    assert np.abs(rec.label).max() > 0.1 and not np.any(rec.student_action)  # labels != student
    env.close()


# ---------------------------------------------------------------- a round, to a file
@pytest.fixture(scope="module")
def tiny_policy(tmp_path_factory) -> Path:  # noqa: ANN001
    """An untrained tiny student checkpoint (random weights: it drives somewhere)."""
    import torch

    from student.config import StudentConfig
    from student.model import StudentPolicy
    from student.policy import save_checkpoint

    torch.manual_seed(0)
    cfg = StudentConfig(image_width=32, channels=(8, 16), feature_dim=32, hidden_dim=64, chunk_len=5,
                        footprint_samples=0)
    p = tmp_path_factory.mktemp("pol") / "tiny.pt"
    save_checkpoint(p, StudentPolicy(cfg), cfg)
    return p


def _contents(path: Path) -> list[tuple]:
    with LogReader(path) as r:
        out = []
        for e in r.episodes(privileged=True):
            out.append((e.seed, e.attrs["visited"], e.command["action"].tobytes(),
                        e.sensors["enc_rad"].tobytes(), tuple(e.cameras["front"].jpeg),
                        e.privileged["gate_ok"].tobytes(), e.privileged["student_action"].tobytes()))
        return out


def test_round_writes_what_the_student_loader_reads_and_is_deterministic(tiny_policy, tmp_path) -> None:  # noqa: ANN001
    from student.config import StudentConfig
    from student.dataset import load_dataset

    a, b = tmp_path / "a.h5", tmp_path / "b.h5"
    s = _round(tiny_policy, a, 2)
    assert s.episodes == 2 and s.written == 2 and s.visited >= s.relabelled > 0
    assert s.visited == s.relabelled + s.rejected and s.checks > 0
    with LogReader(a) as r:
        assert r.source == "sim"
        eps = list(r.episodes(privileged=True))
    for e in eps:
        assert e.driver == "dagger" and e.complete and e.success == -1
        n = len(e.command)
        assert n == e.attrs["relabelled"] and len(e.sensors) == n + 1
        assert e.privileged["student_action"].shape == (n, 2) and "gate_ok" in e.privileged
    cfg = StudentConfig(image_width=32, channels=(8, 16), chunk_len=5)
    data = load_dataset([a], cfg)
    assert data.n_episodes == len(eps) and len(data) > 0
    with pytest.raises(UserError, match="privileged"):
        load_dataset([a], cfg, keys=["command/action", "privileged/gate_ok"])
    # same seed -> same episodes (actions, sensors, JPEG bytes, verdicts)
    _round(tiny_policy, b, 2)
    assert _contents(a) == _contents(b)
    # resuming: a rerun with more episodes only adds the missing ones; another seed is refused
    s3 = _round(tiny_policy, b, 3)
    assert s3.episodes == 1 and len(_contents(b)) == 3
    with pytest.raises(UserError, match="another --seed"):
        _round(tiny_policy, b, 3, replace(SMALL, seed=12))


def test_no_gate_keeps_every_state_and_audit_counts_the_hopeless_ones(tmp_path) -> None:
    cfg = replace(SMALL, gate=False, audit=True)
    env, ge = make_env(cfg), gate_env()
    try:
        rec = rollout_episode(IdleRunner(), env, cfg, 0, ge)
    finally:
        env.close()
        ge.close()
    assert rec.kept == rec.visited == 500  # nothing cut
    assert rec.gate_ok[0] and not rec.gate_ok[-1] and rec.gate_tick[-1] == 499


# ---------------------------------------------------------------- CLI
@pytest.mark.parametrize("args, msg", [
    (["arm", "--policy", "P", "--episodes", "1", "--out", "O.h5"], "only rc_car"),
    (["rc_car", "--policy", "nope.pt", "--episodes", "1", "--out", "O.h5"], "no such file"),
    (["rc_car", "--policy", "P", "--episodes", "0", "--out", "O.h5"], "--episodes"),
    (["rc_car", "--policy", "P", "--episodes", "1", "--out", "O.h5", "--gate-every", "0"], "--gate-every"),
    (["rc_car", "--policy", "P", "--episodes", "1", "--out", "no/dir/O.h5"], "no such directory"),
    (["rc_car", "--policy", "P", "--episodes", "1", "--out", "O.h5", "--params", "x.yaml"], "no such file"),
    (["rc_car", "--policy", "P", "--episodes", "1", "--out", "O.h5", "--bogus"], "unrecognized"),
    (["rc_car", "--policy", "NOTCKPT", "--episodes", "1", "--out", "O.h5"], "not a student checkpoint"),
])
def test_cli_bad_input_is_one_line_exit_2(args, msg, tiny_policy, tmp_path, capsys, monkeypatch) -> None:  # noqa: ANN001
    from realsim.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "NOTCKPT").write_bytes(b"not a checkpoint")
    args = [str(tiny_policy) if x == "P" else x for x in args]
    assert main(["dagger", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and msg in err, err


def test_cli_prints_the_counts_last(tiny_policy, tmp_path, capsys, monkeypatch) -> None:  # noqa: ANN001
    import realsim.dagger as d
    from realsim.cli import main

    seen: list[DaggerConfig] = []

    def fast(policy, out, n, cfg, log=None):  # noqa: ANN001, ANN202 - a cheap world, same CLI
        seen.append(cfg)
        return _round(Path(policy), Path(out), n, replace(cfg, image_size=(60, 80),
                                                           camera_fps=10.0, gate_every=25))

    monkeypatch.setattr(d, "dagger_round", fast)
    out = tmp_path / "d.h5"
    assert main(["dagger", "rc_car", "--policy", str(tiny_policy), "--episodes", "1",
                 "--out", str(out), "--seed", "4", "--no-gate"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("episodes=1 written=1 ") and "relabelled=" in last
    assert "rejected=0 checks=0 " in last and last.endswith(f"out={out}")
    assert seen[0].seed == 4 and seen[0].gate is False and seen[0].gate_every == 5

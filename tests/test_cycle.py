"""`realsim cycle`: config contract, a small cycle end to end, and kill/resume equality.

The small cycle (TINY) runs every stage of cli.md's loop against `realsim emulate
rc_car` with everything shrunk: it checks the plumbing (every stage done, a report
row per iteration, the last line `student=<path>`), not learning figures.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import h5py
import numpy as np
import pytest
import yaml

from realsim.cycle import CycleConfig, dynamics_error, last_rate
from realsim.errors import UserError
from tests.conftest import ROOT, assert_one_line_error, run_cli

TINY = {
    "robot": "rc_car",
    "emulator_seed": 2,
    "iterations": 1,
    "target_success": 1.01,  # never reached: both iterations always run
    "seed": 0,
    "record": {"episodes": 3, "heldout_episodes": 1, "seconds": 3},
    "fit_args": ["--trials", "6"],
    "residual_args": ["--epochs", "1"],
    "teach_episodes": 6,
    "teach_args": ["--workers", "1", "--no-progress"],
    "student_args": ["--set", "epochs=1", "--set", "eval_episodes=2", "--set", "final_eval_episodes=2",
                     "--set", "eval_workers=1", "--set", "batch_size=32"],
    "finetune_args": ["--set", "epochs=1"],
    "deploy_episodes": 2,
}
# stages whose outputs must not depend on an interruption (deploy and record are real)
DETERMINISTIC = ("fit", "residual", "gap", "teach", "student")


def write_config(tmp: Path, **over: object) -> Path:
    p = tmp / "cycle.yaml"
    p.write_text(yaml.safe_dump({**TINY, **over}))
    return p


# ----------------------------------------------------------------------------- contract


def test_config_unknown_key_is_one_line_exit_2(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, iteratons=3)
    with pytest.raises(UserError, match="unknown key.*iteratons"):
        CycleConfig.from_yaml(cfg)
    assert_one_line_error(run_cli("cycle", cfg, "--out", tmp_path / "o"), "iteratons")


def test_config_wrong_robot_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="robot must be"):
        CycleConfig.from_yaml(write_config(tmp_path, robot="drone"))
    assert_one_line_error(run_cli("cycle", tmp_path / "nope.yaml"), "nope.yaml")


def test_experiment_configs_load() -> None:
    for p in (ROOT / "experiments").glob("*_cycle*.yaml"):
        cfg = CycleConfig.from_yaml(p)
        assert cfg.robot in ("rc_car", "arm"), p


def test_last_rate_reads_each_verbs_line() -> None:
    assert last_rate("checkpoint=x episodes=50 success=0.960") == pytest.approx(0.96)
    assert last_rate("episodes=20 judged=20 success=0.850") == pytest.approx(0.85)
    assert last_rate("success=93%") == pytest.approx(0.93)
    with pytest.raises(UserError):
        last_rate("episodes=20 judged=0")


def test_dynamics_error_counts_only_the_named_episodes(tmp_path: Path, car_logs: Path) -> None:
    """The fit decision scores the fit's validation episodes only: an error in another
    episode of the same log must not count, and must count when that one is named."""
    bad = tmp_path / "bad.h5"
    shutil.copy(car_logs, bad)
    with h5py.File(bad, "a") as f:
        d = f["episodes"]["ep_000001"]["sensors"]["yaw_rate"]
        d[...] = d[...] + 0.5
    assert dynamics_error(car_logs, bad, episodes=["ep_000000"])["yaw_rate"] == 0.0
    assert dynamics_error(car_logs, bad, episodes=["ep_000001"])["yaw_rate"] > 0.3


def test_dynamics_error_is_zero_for_itself_and_sees_a_corrupted_replay(
        tmp_path: Path, car_logs: Path) -> None:
    """The gap metric: 0 for a log against itself; a corrupted copy shows up (checker test)."""
    assert all(v == 0.0 for v in dynamics_error(car_logs, car_logs).values())
    bad = tmp_path / "bad.h5"
    shutil.copy(car_logs, bad)
    with h5py.File(bad, "a") as f:
        for name in f["episodes"]:
            d = f["episodes"][name]["sensors"]["yaw_rate"]
            d[...] = d[...] + 0.5
    err = dynamics_error(car_logs, bad)
    assert err["yaw_rate"] > 0.3 and err["wheel_speed"] == 0.0


@pytest.fixture(scope="module")
def car_logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small synthetic car log (the sysid tests' own generator)."""
    from sysid.robot_adapter import get_adapter
    from sysid.synth import write_synthetic

    out = tmp_path_factory.mktemp("cyc") / "synth.h5"
    return Path(write_synthetic(out, get_adapter("rc_car").nominal, episodes=2, seconds=3.0, seed=0))


# ----------------------------------------------------------------------------- end to end


def _run(cfg: Path, out: Path, timeout: float = 1500) -> subprocess.CompletedProcess[str]:
    return run_cli("cycle", cfg, "--out", out, timeout=timeout)


def _check_done(out: Path, iterations: int) -> None:
    for i in range(iterations + 1):
        stages = ["record", "gap", "teach", "student", "deploy"] + (["fit", "residual"] if i else [])
        for s in stages:
            assert (out / f"iter_{i:02d}" / s / "stage.json").is_file(), (i, s)
    rows = json.loads((out / "summary.json").read_text())
    assert [r["iteration"] for r in rows] == list(range(iterations + 1))
    assert set(rows[-1]["heldout_rmse"]) >= {"nominal", "fitted", "fitted+residual"}
    for r in rows:
        assert 0.0 <= r["sim_success"] <= 1.0 and 0.0 <= r["real_success"] <= 1.0
    md = (out / "summary.md").read_text()
    assert md.count("\n| 0 |") == 1 and "| 1 |" in md and "Parameters after iteration 1" in md
    assert len(rows[-1]["params"]) >= 8, "the fitted parameters did not reach the report"


@pytest.mark.slow
def test_tiny_cycle_end_to_end_then_resume_is_a_no_op(tmp_path: Path) -> None:
    cfg = write_config(tmp_path)
    out = tmp_path / "run"
    p = _run(cfg, out)
    assert p.returncode == 0, p.stderr[-3000:]
    last = p.stdout.strip().splitlines()[-1]
    assert last == f"student={out / 'iter_01' / 'student' / 'student.ckpt'}"
    _check_done(out, 1)
    before = {f: f.stat().st_mtime_ns for f in out.rglob("stage.json")}
    p2 = _run(cfg, out)
    assert p2.returncode == 0 and p2.stdout.strip().splitlines()[-1] == last
    assert "..." not in p2.stderr.replace("done earlier", "")  # no stage ran again
    assert {f: f.stat().st_mtime_ns for f in out.rglob("stage.json")} == before


def _digest(path: Path) -> str:
    """What a stage produced, independent of timing: params values, tensors, episodes."""
    h = hashlib.sha256()
    n = 0
    for f in sorted(path.rglob("*")):
        n += f.suffix in (".yaml", ".ckpt", ".pt", ".h5")
        if f.suffix == ".yaml" and f.name == "params.yaml":
            raw = yaml.safe_load(f.read_text())
            ps = raw.get("params", raw)
            vals = {k: round(float(v["value"]), 9) for k, v in ps.items()
                    if isinstance(v, dict) and "value" in v}
            h.update(json.dumps(vals, sort_keys=True).encode())
        elif f.suffix in (".ckpt", ".pt"):
            import torch

            sd = torch.load(f, map_location="cpu", weights_only=True)
            flat = sd.get("state_dict", sd) if isinstance(sd, dict) else sd
            for k in sorted(flat) if isinstance(flat, dict) else []:
                v = flat[k]
                if hasattr(v, "numpy"):
                    h.update(k.encode() + np.ascontiguousarray(v.detach().numpy()).tobytes())
        elif f.suffix == ".h5" and f.parent.name == "teach":
            from realsim.logs import LogReader

            with LogReader(f) as r:
                for name in r.episode_names:
                    h.update(np.asarray(r.episode(name).command["action"]).tobytes())
    assert n, f"nothing to compare in {path}"
    return h.hexdigest()


def _run_until(cfg: Path, out: Path, marker: Path, timeout: float = 1200) -> None:
    """Start the cycle and SIGKILL its whole process group once `marker` exists."""
    p = subprocess.Popen([sys.executable, "-m", "realsim", "cycle", str(cfg), "--out", str(out)],
                         cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
    t0 = time.monotonic()
    try:
        while not marker.exists():
            assert p.poll() is None, f"cycle ended before {marker} appeared"
            assert time.monotonic() - t0 < timeout
            time.sleep(0.2)
        time.sleep(1.0)  # let the stage get going
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()


@pytest.mark.slow
def test_cycle_killed_in_fit_and_in_training_resumes_to_the_same_outputs(tmp_path: Path) -> None:
    """Issue 6: a kill during fitting and one during training, then resume: the same
    fitted params, residual, teacher data and student as an uninterrupted run. The real
    recordings are shared (reality is not repeatable; the cycle never re-records)."""
    cfg = write_config(tmp_path)
    ref = tmp_path / "ref"
    p = _run(cfg, ref)
    assert p.returncode == 0, p.stderr[-3000:]

    run = tmp_path / "killed"
    run.mkdir()
    shutil.copytree(ref / "heldout", run / "heldout")
    shutil.copytree(ref / "iter_00", run / "iter_00")
    shutil.copytree(ref / "iter_01" / "record", run / "iter_01" / "record")
    _run_until(cfg, run, run / "iter_01" / "fit" / "log.txt")
    assert not (run / "iter_01" / "fit" / "stage.json").exists(), "killed too late to test"
    _run_until(cfg, run, run / "iter_01" / "student" / "log.txt")
    assert not (run / "iter_01" / "student" / "stage.json").exists(), "killed too late to test"
    p = _run(cfg, run)
    assert p.returncode == 0, p.stderr[-3000:]
    _check_done(run, 1)
    for s in DETERMINISTIC:
        assert _digest(run / "iter_01" / s) == _digest(ref / "iter_01" / s), s
    a = json.loads((ref / "iter_01" / "gap" / "stage.json").read_text())
    b = json.loads((run / "iter_01" / "gap" / "stage.json").read_text())
    a.pop("seconds"), b.pop("seconds")
    assert a == b


# ----------------------------------------------------------------------------- the arm


def _fake_verbs(calls: list[list[str]], write_params: Callable[[Path, str], None] | None = None):
    """A stand-in for `realsim.cycle.realsim`: records each verb's argv, writes what the
    next stage reads (params.yaml, by `write_params(path, first log)`; default the arm's,
    whose validation split holds out ep_000000 of the first log the fit was given),
    prints each verb's last line."""
    write = write_params or _arm_params

    def fake(*args: object, log_to: Path) -> str:
        argv = [str(a) for a in args]
        calls.append(argv)
        log_to.parent.mkdir(parents=True, exist_ok=True)
        if argv[0] == "fit":
            p = Path(argv[argv.index("--out") + 1]) / "params.yaml"
            write(p, argv[argv.index("--logs") + 1])
            return str(p)
        if argv[0] == "train-student":
            return f"checkpoint={argv[argv.index('--out') + 1]} episodes=8 success=0.750"
        if argv[0] == "deploy":
            return "episodes=4 judged=4 success=0.500"
        return ""

    return fake


def _arm_params(p: Path, first: str) -> None:
    """The arm's nominal params.yaml; the fit trained on ep_000001 of `first` and held out ep_000000."""
    from realsim.robots.arm.params import ArmParams

    ArmParams.nominal().to_yaml(p)
    doc = yaml.safe_load(p.read_text())
    doc["fit"] = {"logs": {first: {"train": ["ep_000001"], "heldout": ["ep_000000"]}}}
    p.write_text(yaml.safe_dump(doc))


@pytest.mark.parametrize("helps", [True, False])
def test_arm_cycle_stage_plan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, helps: bool) -> None:
    """experiments/arm_cycle.yaml loads; the cycle runs every verb for the arm in order,
    with the arm's wire (--control), its excitation signals, and the residual in teach and
    train only when fitted+residual beats fitted on the fit's validation episodes. The
    held-out episodes say the opposite every time: if they decided, this would fail."""
    import realsim.cycle as cyc

    cfg = CycleConfig.from_yaml(ROOT / "experiments" / "arm_cycle.yaml")
    assert cfg.robot == "arm" and cfg.iterations == 1
    calls: list[list[str]] = []
    monkeypatch.setattr(cyc, "realsim", _fake_verbs(calls))
    heldout = tmp_path / "heldout" / "heldout.h5"
    fit_log = str(tmp_path / "iter_00" / "record" / "sine.h5")  # the fit's validation log
    base = {"joint_pos": 0.02, "gripper": 0.002}
    better, worse = {"joint_pos": 0.015, "gripper": 0.002}, {"joint_pos": 0.03, "gripper": 0.002}
    gap = {"nominal": {"joint_pos": 0.05, "gripper": 0.004}, "fitted": base,
           "fitted_residual": worse if helps else better}  # held-out: the opposite verdict
    val = {"fitted": base, "fitted_residual": better if helps else worse}
    decided: list[tuple[str, object]] = []

    def error(real: Path, pred: Path, episodes: object = None) -> dict[str, float]:
        p = Path(pred)
        if p.parent.name == "gap":
            assert Path(real) == heldout and episodes is None
            return dict(gap[p.stem])
        assert Path(real) != heldout, "a decision read the held-out episodes"
        if p.parent.parent.name == "residual":  # the residual decision
            decided.append((str(real), episodes))
            return dict(val[p.stem.rsplit("_", 1)[0]])
        return dict(base)  # the fit decision: candidate no worse than nominal

    monkeypatch.setattr(cyc, "dynamics_error", error)
    wire = ["--port", "/dev/pts/7", "--camera", "front=http://a,wrist=http://b",
            "--control", "/dev/pts/8"]
    student = cyc._iterate(cfg, tmp_path, wire, log=lambda m: None)
    assert student == tmp_path / "iter_01" / "student" / "student.ckpt"

    verbs = [c[0] for c in calls]
    it0 = ["record", "record", "replay", "teach", "train-student", "deploy"]
    # fit, its decision (candidate, nominal), residual, its decision (fitted, +residual), gap
    it1 = ["record", "record", "fit", "replay", "replay", "train-residual", "replay", "replay",
           "replay", "replay", "replay", "teach", "train-student", "deploy"]
    assert verbs == ["record", *it0, *it1]
    assert all(c[1] == "arm" for c in calls)
    for c in calls:
        if c[0] in ("record", "deploy"):
            assert c[c.index("--control") + 1] == "/dev/pts/8"
    drivers = [c[c.index("--driver") + 1] for c in calls if c[0] == "record"]
    assert drivers == ["excite:smooth"] + ["excite:sine", "excite:steps"] * 2
    teach1, train1 = calls[verbs.index("teach", 8)], calls[verbs.index("train-student", 8)]
    for c in (teach1, train1):
        assert "--params" in c and ("--residual" in c) == helps
    assert "--init" in train1
    fit = calls[verbs.index("fit")]
    assert sum(a.endswith(".h5") for a in fit) == 4  # the 4 excitation logs, no deploy log

    # the residual is trained without the fit's validation episodes, then judged on them
    tr = calls[verbs.index("train-residual")]
    held = tr[tr.index("--holdout") + 1]  # this iteration's sine.h5 only, named by its full path
    assert held == f"{Path(fit_log).resolve()}:ep_000000" and str(heldout) not in tr
    k = verbs.index("train-residual")
    for c in calls[k + 1:k + 3]:
        assert c[c.index("--log") + 1] == fit_log
        assert Path(c[c.index("--out") + 1]).parent == tmp_path / "iter_01" / "residual" / "decision"
    assert ("--residual" in calls[k + 2]) and "--residual" not in calls[k + 1]
    assert decided == [(fit_log, ["ep_000000"])] * 2

    rows = json.loads((tmp_path / "summary.json").read_text())
    assert [r["residual_used"] for r in rows] == [False, helps]
    res = json.loads((tmp_path / "iter_01" / "residual" / "stage.json").read_text())
    assert res["use"] == helps and res["validation"]["fitted+residual"] == val["fitted_residual"]
    assert rows[1]["heldout_rmse"]["fitted+residual"] == gap["fitted_residual"]  # still reported
    md = (tmp_path / "summary.md").read_text()
    assert "joint-position RMSE" in md and "Spearman" in md
    assert "fit's own validation episodes" in md and "reported only" in md
    why = rows[1]["residual_why"]
    assert ("fitted+residual beats fitted" in why) == helps and ("fitted only" in why) != helps
    assert "1 validation episode(s) of the fit" in why and "held-out" not in why
    assert f"- iteration 1: {why}" in md


def test_residual_decision_pools_the_validation_episodes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The decision replays fitted and fitted+residual on each validation log (into its
    own folder) and pools the RMSEs by episode count; no validation episodes: not used."""
    import realsim.cycle as cyc
    from realsim.cycle import residual_decision, residual_holdout

    calls: list[list[str]] = []
    monkeypatch.setattr(cyc, "realsim", lambda *a, log_to: calls.append([str(x) for x in a]) or "")
    # per (log, variant): {metric: RMSE}; log a.h5 has 1 validation episode, b.h5 has 3
    table = {("a.h5", "fitted"): {"m": 1.0, "n": 2.0}, ("a.h5", "fitted_residual"): {"m": 3.0, "n": 1.0},
             ("b.h5", "fitted"): {"m": 1.0, "n": 2.0}, ("b.h5", "fitted_residual"): {"m": 0.0, "n": 1.0}}
    monkeypatch.setattr(cyc, "dynamics_error", lambda real, pred, episodes=None: dict(
        table[(Path(real).name, Path(pred).stem.rsplit("_", 1)[0])]))
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"robot": "rc_car", "params": {}, "fit": {"logs": {
        "x/a.h5": {"train": ["ep_000000"], "heldout": ["ep_000003"]},
        "y/b.h5": {"train": [], "heldout": ["ep_000000", "ep_000001", "ep_000002"]},
        "z/a.h5": {"train": ["ep_000000"], "heldout": []}}}}))
    d = residual_decision("rc_car", params, tmp_path / "r.ckpt", tmp_path / "dec", tmp_path / "log")
    # pooled: m = sqrt((1*9 + 3*0) / 4) = 1.5 vs 1.0; n = 1.0 vs 2.0 -> mean ratio (1.5 + 0.5) / 2
    assert d["validation"]["fitted+residual"] == pytest.approx({"m": 1.5, "n": 1.0})
    assert d["ratio"] == pytest.approx(1.0) and not d["use"] and "fitted only" in d["why"]
    assert [c[c.index("--log") + 1] for c in calls] == ["x/a.h5", "x/a.h5", "y/b.h5", "y/b.h5"]
    assert all(Path(c[c.index("--out") + 1]).parent == tmp_path / "dec" for c in calls)
    # a tie is not a win; now n = sqrt((1 + 3 * 0.25) / 4) = 0.66 vs 2.0: mean ratio 0.92
    table[("b.h5", "fitted_residual")]["n"] = 0.5
    assert residual_decision("rc_car", params, tmp_path / "r.ckpt", tmp_path / "dec",
                             tmp_path / "log")["use"]
    assert residual_holdout(params) == sorted(
        [f"{Path('x/a.h5').resolve()}:ep_000003"]
        + [f"{Path('y/b.h5').resolve()}:ep_00000{i}" for i in range(3)])

    calls.clear()
    params.write_text(yaml.safe_dump({"robot": "rc_car", "params": {}}))
    d = residual_decision("rc_car", params, tmp_path / "r.ckpt", tmp_path / "dec2", tmp_path / "log")
    assert not d["use"] and d["ratio"] is None and not calls and residual_holdout(params) == []


def test_arm_gap_metric_is_joint_rmse(tmp_path: Path) -> None:
    """The arm's gap: 0 for a log against itself; an offset of 0.1 rad on one of the five
    joints gives sqrt(0.1^2 / 5) RMSE and leaves the gripper's alone."""
    from realsim.logs import LogWriter

    def write(path: Path, offset: float) -> Path:
        t = np.arange(50) / 50.0
        q = np.tile([0.0, 0.1, 1.2, 1.4, 0.0, 0.01], (50, 1))
        q[:, 1] += offset
        with LogWriter(path, robot="arm", source="sim") as w:
            ep = w.begin_episode(driver="excite:smooth")
            ep.add_sensor_block(t, t, qpos=q, qvel=np.zeros((50, 6)), load=np.zeros((50, 6)),
                                voltage=np.full(50, 7.4), temperature=np.full((50, 6), 30.0))
            ep.close()
        return path

    a, b = write(tmp_path / "a.h5", 0.0), write(tmp_path / "b.h5", 0.1)
    assert dynamics_error(a, a) == {"joint_pos": 0.0, "gripper": 0.0}
    e = dynamics_error(a, b)
    assert e["joint_pos"] == pytest.approx(np.sqrt(0.01 / 5)) and e["gripper"] == 0.0


def test_arm_connection_needs_control(tmp_path: Path) -> None:
    p = write_config(tmp_path, robot="arm", connection={"port": "/dev/x", "camera": "front=0"})
    with pytest.raises(UserError, match="control"):
        CycleConfig.from_yaml(p)


TINY_ARM = {
    "robot": "arm",
    "emulator_seed": 2,
    "iterations": 1,
    "target_success": 1.01,
    "seed": 0,
    "record": {"episodes": 2, "heldout_episodes": 1, "seconds": 4},
    "fit_args": ["--trials", "6"],
    "residual_args": ["--epochs", "1", "--passes", "1"],
    "teach_episodes": 4,
    "teach_args": ["--workers", "1", "--no-progress"],
    "student_args": ["--set", "epochs=1", "--set", "eval_episodes=2", "--set", "final_eval_episodes=2",
                     "--set", "eval_workers=0", "--set", "batch_size=32", "--set", "footprint_samples=0"],
    "finetune_args": ["--set", "epochs=1"],
    "deploy_args": ["--seconds", "6"],
    "deploy_episodes": 2,
    "candidate_episodes": 1,
}


@pytest.mark.slow
def test_tiny_arm_cycle_end_to_end(tmp_path: Path) -> None:
    """Every arm verb for real against `realsim emulate arm` (about 8 min on 2 busy cores):
    each stage done, the candidates deployed, the report's rows and decisions."""
    cfg = tmp_path / "arm.yaml"
    cfg.write_text(yaml.safe_dump(TINY_ARM))
    out = tmp_path / "run"
    p = _run(cfg, out)
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.strip().splitlines()[-1] == f"student={out / 'iter_01' / 'student' / 'student.ckpt'}"
    for i in (0, 1):
        for s in ["record", "gap", "teach", "student", "deploy", "candidates"] + (
                ["fit", "residual"] if i else []):
            assert (out / f"iter_{i:02d}" / s / "stage.json").is_file(), (i, s)
    rows = json.loads((out / "summary.json").read_text())
    assert set(rows[1]["heldout_rmse"]) >= {"nominal", "fitted", "fitted+residual"}
    assert rows[1]["heldout_rmse"]["fitted"]["joint_pos"] > 0
    assert len(rows[1]["candidates"]) == 1 and "residual_why" in rows[1]
    teach_cmd = (out / "iter_01" / "teach" / "log.txt").read_text().splitlines()[0]
    assert "--params" in teach_cmd and ("--residual" in teach_cmd) == rows[1]["residual_used"]


# ----------------------------------------------------------------------------- the fit's data


def _fake_car_verbs(calls: list[list[str]]):
    """`realsim.cycle.realsim` for the car: `fit` writes a params.yaml whose validation
    split (fit.logs) holds out ep_000000 of the first log it was given."""

    def car_params(p: Path, first: str) -> None:
        doc = {"robot": "rc_car", "params": {"com_x": {"value": 0.09, "identifiable": True}},
               "fit": {"logs": {first: {"train": [], "heldout": ["ep_000000"]}}}}
        p.write_text(yaml.safe_dump(doc))

    return _fake_verbs(calls, car_params)


@pytest.mark.parametrize("worse", [False, True])
def test_car_fit_uses_every_excitation_log_and_keeps_the_better_params(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, worse: bool) -> None:
    """Issue 6 (held-out error falls from iteration to iteration): iteration k's fit gets
    the excitation recordings of iterations 0..k and no deploy log (a student's spin-out
    had dominated iteration 2's fit), warm-started from the params in use; so does the
    residual by default. A new fit that is worse than the params in use on the
    fit's validation episodes is not adopted: teach and train keep the old params."""
    import realsim.cycle as cyc

    cfg = CycleConfig.from_yaml(write_config(tmp_path, iterations=2))
    assert cfg.fit_deploy_logs is False
    calls: list[list[str]] = []
    monkeypatch.setattr(cyc, "realsim", _fake_car_verbs(calls))

    def error(real: Path, pred: Path, episodes: object = None) -> dict[str, float]:
        p = Path(pred)
        if p.parent.name == "decision":  # the fit decision: candidate vs the params in use
            assert episodes == ["ep_000000"]
            it = int(p.parent.parent.parent.name[-2:])
            bad = p.stem.startswith("candidate") and worse and it == 2
            return {"yaw_rate": 0.05 if bad else 0.02, "wheel_speed": 1.0}
        return {"yaw_rate": 0.03, "wheel_speed": 1.0}  # the gap stage

    monkeypatch.setattr(cyc, "dynamics_error", error)
    out = tmp_path / "run"
    cyc._iterate(cfg, out, ["--port", "/dev/pts/7", "--camera", "http://a"], log=lambda m: None)

    fits = [c for c in calls if c[0] == "fit"]
    assert len(fits) == 2
    logs2 = [a for a in fits[1] if a.endswith(".h5")]
    expect = [str(out / f"iter_{i:02d}" / "record" / f"{d}.h5")
              for i in range(3) for d in ("steps", "chirp", "prbs")]
    assert logs2 == expect, "iteration 2 must fit every excitation log so far, and no deploy log"
    p1 = str(out / "iter_01" / "fit" / "params.yaml")
    assert fits[1][fits[1].index("--init") + 1] == p1
    res2 = [c for c in calls if c[0] == "train-residual"][1]
    assert [a for a in res2 if a.endswith(".h5")] == expect  # the residual: the same logs

    p2 = str(out / "iter_02" / "fit" / "params.yaml")
    verbs = [c[0] for c in calls]
    teach2 = calls[len(verbs) - 1 - verbs[::-1].index("teach")]
    assert teach2[teach2.index("--params") + 1] == (p1 if worse else p2)
    rows = json.loads((out / "summary.json").read_text())
    assert ("rejected" in rows[2]["fit_why"]) == worse and "adopted" in rows[1]["fit_why"]
    assert rows[2]["fit_why"] in (out / "summary.md").read_text()


def test_fit_decision_without_validation_adopts(tmp_path: Path) -> None:
    """No validation episode to judge by (a fit on few episodes): the new fit is adopted."""
    from realsim.cycle import fit_decision

    p = tmp_path / "params.yaml"
    p.write_text(yaml.safe_dump({"robot": "rc_car", "params": {}, "fit": {"logs": {
        "a.h5": {"train": ["ep_000000"], "heldout": []}}}}))
    d = fit_decision("rc_car", p, None, tmp_path / "dec", tmp_path / "log.txt")
    assert d["adopt"] and not (tmp_path / "dec").exists()


@pytest.mark.parametrize("deploy", [False, True])
def test_car_residual_logs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, deploy: bool) -> None:
    """The residual trains on the excitation recordings so far (those the fit gets), less
    the fit's validation episodes; the deploy logs only with `residual_deploy_logs: true`
    (closed-loop cruising and wheel spin outweighed the excitation and made the residual
    worse on the fit's validation episodes: cycle.py's module note)."""
    import realsim.cycle as cyc

    cfg = CycleConfig.from_yaml(write_config(tmp_path, iterations=2, residual_deploy_logs=deploy))
    assert CycleConfig().residual_deploy_logs is False
    calls: list[list[str]] = []
    monkeypatch.setattr(cyc, "realsim", _fake_car_verbs(calls))
    monkeypatch.setattr(cyc, "dynamics_error", lambda real, pred, episodes=None: {
        "yaw_rate": 0.02, "wheel_speed": 1.0})
    out = tmp_path / "run"
    cyc._iterate(cfg, out, ["--port", "/dev/pts/7", "--camera", "http://a"], log=lambda m: None)

    res = [c for c in calls if c[0] == "train-residual"]
    assert len(res) == 2
    for i, c in enumerate(res, start=1):
        logs = c[c.index("--logs") + 1:c.index("--out")]
        exc = [str(out / f"iter_{k:02d}" / "record" / f"{d}.h5")
               for k in range(i + 1) for d in ("steps", "chirp", "prbs")]
        dep = [str(out / f"iter_{k:02d}" / "deploy" / "deploy.h5") for k in range(i)]
        assert sorted(logs) == sorted(exc + (dep if deploy else [])), i
        # less the fit's validation episode (the fake fit holds out its first log's ep_000000)
        assert c[c.index("--holdout") + 1] == f"{Path(exc[0]).resolve()}:ep_000000"


def test_residual_verbs_run_with_one_torch_thread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """train-residual and replay (the residual's tiny ops, step by step) get one intra-op
    thread whatever the caller's environment; other verbs inherit it."""
    import realsim.cycle as cyc

    seen: dict[str, object] = {}

    def run(cmd: list[str], **kw: object) -> subprocess.CompletedProcess:
        seen[cmd[3]] = kw.get("env")
        return subprocess.CompletedProcess(cmd, 0, stdout="ok\n")

    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    monkeypatch.setattr(cyc.subprocess, "run", run)
    for verb in ("train-residual", "replay", "teach"):
        assert cyc.realsim(verb, "rc_car", log_to=tmp_path / "log.txt") == "ok"
    for verb in ("train-residual", "replay"):
        env = seen[verb]
        assert isinstance(env, dict) and env["OMP_NUM_THREADS"] == "1" and env["MKL_NUM_THREADS"] == "1"
    assert seen["teach"] is None


def test_car_residual_judged_on_a_driver_it_never_trained_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`residual_judge: driver`: iteration i holds every episode of the (i-1)-th excitation
    driver so far out of the residual's training (full paths, each iteration's file) and
    judges fitted+residual against fitted alone on exactly those; the fit's validation
    episode is trained on. The verdict (here: helps at iteration 1, not at 2) picks what
    teach and train get."""
    import realsim.cycle as cyc

    cfg = CycleConfig.from_yaml(write_config(tmp_path, iterations=2, residual_judge="driver"))
    calls: list[list[str]] = []
    monkeypatch.setattr(cyc, "realsim", _fake_car_verbs(calls))
    judged: list[tuple[str, object]] = []

    def error(real: Path, pred: Path, episodes: object = None) -> dict[str, float]:
        p = Path(pred)
        if p.parent.parent.name == "residual":
            judged.append((str(real), episodes))
            it = int(p.parent.parent.parent.name[-2:])
            better = p.stem.startswith("fitted_residual") and it == 1
            return {"yaw_rate": 0.01 if better else 0.02, "wheel_speed": 1.0}
        return {"yaw_rate": 0.02, "wheel_speed": 1.0}

    monkeypatch.setattr(cyc, "dynamics_error", error)
    out = tmp_path / "run"
    cyc._iterate(cfg, out, ["--port", "/dev/pts/7", "--camera", "http://a"], log=lambda m: None)

    res = [c for c in calls if c[0] == "train-residual"]
    for i, drv in ((1, "steps"), (2, "chirp")):
        files = [out / f"iter_{k:02d}" / "record" / f"{drv}.h5" for k in range(i + 1)]
        hold = res[i - 1][res[i - 1].index("--holdout") + 1].split(",")
        assert hold == sorted(f"{f.resolve()}:ep_000000" for f in files)
    # iteration 1: 2 steps logs, each replayed twice (fitted, +residual); iteration 2: 3 chirp
    assert [Path(r).name for r, _ in judged] == ["steps.h5"] * 4 + ["chirp.h5"] * 6
    assert all(e == ["ep_000000"] for _, e in judged)
    rows = json.loads((out / "summary.json").read_text())
    assert [r["residual_used"] for r in rows] == [False, True, False]
    assert "2 episode(s) of excite:steps, a driver it did not train on" in rows[1]["residual_why"]
    assert "3 episode(s) of excite:chirp" in rows[2]["residual_why"]
    teach = [c for c in calls if c[0] == "teach"]
    assert ["--residual" in c for c in teach] == [False, True, False]


@pytest.mark.parametrize("helps_everywhere", [True, False])
def test_car_residual_judged_on_every_driver_left_out(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, helps_everywhere: bool) -> None:
    """`residual_judge: drivers`: one residual per excitation driver, trained without every
    episode of it and judged on exactly those; then one on every episode (no --holdout),
    which teach and train get only if each left-out driver was won. A residual that loses
    on one driver (prbs) is not used, however well it does on the others."""
    import realsim.cycle as cyc

    cfg = CycleConfig.from_yaml(write_config(tmp_path, iterations=1, residual_judge="drivers"))
    calls: list[list[str]] = []
    monkeypatch.setattr(cyc, "realsim", _fake_car_verbs(calls))
    judged: list[tuple[str, str]] = []

    def error(real: Path, pred: Path, episodes: object = None) -> dict[str, float]:
        p = Path(pred)
        fold = p.parent.parent.name
        if fold.startswith("without_"):
            judged.append((fold, Path(real).name))
            assert episodes == ["ep_000000"]
            wins = helps_everywhere or fold != "without_prbs"
            if p.stem.startswith("fitted_residual"):
                return {"yaw_rate": 0.01 if wins else 0.03, "wheel_speed": 1.0}
        return {"yaw_rate": 0.02, "wheel_speed": 1.0}

    monkeypatch.setattr(cyc, "dynamics_error", error)
    out = tmp_path / "run"
    cyc._iterate(cfg, out, ["--port", "/dev/pts/7", "--camera", "http://a"], log=lambda m: None)

    res = [c for c in calls if c[0] == "train-residual"]
    assert len(res) == 4
    for c, drv in zip(res, ("steps", "chirp", "prbs"), strict=False):
        hold = c[c.index("--holdout") + 1].split(",")
        files = [out / f"iter_{k:02d}" / "record" / f"{drv}.h5" for k in range(2)]
        assert hold == sorted(f"{f.resolve()}:ep_000000" for f in files)
        assert Path(c[c.index("--out") + 1]).parent.name == f"without_{drv}"
    assert "--holdout" not in res[3] and Path(res[3][res[3].index("--out") + 1]).parent.name == "residual"
    assert {f for f, _ in judged} == {"without_steps", "without_chirp", "without_prbs"}
    assert all(f == f"without_{Path(n).stem}" for f, n in judged)
    rows = json.loads((out / "summary.json").read_text())
    assert rows[1]["residual_used"] is helps_everywhere
    assert "without excite:prbs: " + ("0.750" if helps_everywhere else "1.250") in rows[1]["residual_why"]
    teach = [c for c in calls if c[0] == "teach"]
    assert ["--residual" in c for c in teach] == [False, helps_everywhere]
    assert "--residual" in teach[1] or not helps_everywhere
    summary = (out / "summary.md").read_text()
    assert "simulator in use" in summary


def test_in_use_error_follows_the_residual_decision() -> None:
    """The report's 'simulator in use' column: fitted+residual only when it was used."""
    from realsim.cycle import in_use_error

    g = {"nominal": {"y": 3.0}, "fitted": {"y": 2.0}, "fitted+residual": {"y": 1.0}, "seconds": 4.0}
    assert in_use_error({"heldout_rmse": g, "residual_used": True}) == {"y": 1.0}
    assert in_use_error({"heldout_rmse": g, "residual_used": False}) == {"y": 2.0}
    assert in_use_error({"heldout_rmse": {"nominal": {"y": 3.0}}}) == {"y": 3.0}


def test_residual_judge_driver_needs_two_drivers(tmp_path: Path) -> None:
    p = write_config(tmp_path, residual_judge="driver", record={**TINY["record"], "drivers": ["excite:steps"]})
    with pytest.raises(UserError, match="2 or more"):
        CycleConfig.from_yaml(p)
    with pytest.raises(UserError, match="residual_judge"):
        CycleConfig.from_yaml(write_config(tmp_path, residual_judge="heldout"))


@pytest.mark.parametrize("name", sorted(p.name for p in (ROOT / "experiments").glob("*cycle*.yaml")))
def test_experiment_cycle_configs_load(name: str) -> None:
    """Every cycle config in experiments/ (the README's main job, the full run, issue 6's
    two-iteration run, the arm's) loads into a CycleConfig whose student config exists;
    an unknown key would exit 2 when a user runs it."""
    cfg = CycleConfig.from_yaml(ROOT / "experiments" / name)
    assert cfg.iterations >= 1 and cfg.record.drivers
    assert cfg.student_config is None or (ROOT / cfg.student_config).is_file() or Path(cfg.student_config).is_file()


@pytest.mark.parametrize("target", [0.5, None])
def test_target_success_stops_the_cycle_and_null_runs_every_iteration(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, target: float | None) -> None:
    """The fake robot succeeds 50 % at every deploy: a target of 0.5 stops after iteration
    0; `target_success: null` runs every iteration (to measure the gap at each turn)."""
    import realsim.cycle as cyc

    cfg = CycleConfig.from_yaml(write_config(tmp_path, iterations=2, target_success=target))
    calls: list[list[str]] = []
    monkeypatch.setattr(cyc, "realsim", _fake_car_verbs(calls))
    monkeypatch.setattr(cyc, "dynamics_error", lambda real, pred, episodes=None: {
        "yaw_rate": 0.02, "wheel_speed": 1.0})
    cyc._iterate(cfg, tmp_path / "run", ["--port", "/dev/pts/7", "--camera", "http://a"],
                 log=lambda m: None)
    deploys = [c for c in calls if c[0] == "deploy"]
    assert len(deploys) == (1 if target is not None else 3)


def test_target_success_must_be_a_rate_or_null(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, target_success="high")
    with pytest.raises(UserError, match="target_success"):
        CycleConfig.from_yaml(cfg)


def _fake_car_verbs_every_log(calls: list[list[str]]):
    """As `_fake_car_verbs`, but the fit holds out ep_000000 of EVERY log it was given, so
    each iteration's new recordings hold fresh validation episodes."""

    def car_params(p: Path, first: str) -> None:
        logs = calls[-1][calls[-1].index("--logs") + 1:calls[-1].index("--out")]
        doc = {"robot": "rc_car", "params": {"com_x": {"value": 0.09, "identifiable": True}},
               "fit": {"logs": {f: {"train": [], "heldout": ["ep_000000"]} for f in logs}}}
        p.write_text(yaml.safe_dump(doc))

    return _fake_verbs(calls, car_params)


@pytest.mark.parametrize("new_is_worse", [False, True])
def test_simulator_in_use_is_replaced_only_by_one_no_worse_on_fresh_episodes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, new_is_worse: bool) -> None:
    """Iteration 1 uses fitted+residual; at iteration 2 the new fit is adopted (it beats the
    old params alone) but its residual is not. The new simulator (fit 2 alone) replaces
    iteration 1's fitted+residual only if it is no worse on iteration 2's fresh validation
    episodes (ep_000000 of each of its new logs, held out of the fit and of the residual);
    else teach and train stay in iteration 1's simulator and the report says so, with the
    in-use error ratio 1 (the same simulator)."""
    import realsim.cycle as cyc

    cfg = CycleConfig.from_yaml(write_config(tmp_path, iterations=2, residual_judge="fit"))
    calls: list[list[str]] = []
    monkeypatch.setattr(cyc, "realsim", _fake_car_verbs_every_log(calls))
    judged: list[tuple[str, list[str]]] = []

    def error(real: Path, pred: Path, episodes: object = None) -> dict[str, float]:
        p = Path(pred)
        it = next((int(q.name[-2:]) for q in p.parents if q.name.startswith("iter_")), 0)
        stage = p.parents[1].name if p.parent.name == "decision" else p.parent.name
        if stage == "residual":  # residual helps at iteration 1, not at 2
            better = p.stem.startswith("fitted_residual") and it == 1
            return {"yaw_rate": 0.01 if better else 0.02, "wheel_speed": 1.0}
        if stage == "simulator":
            judged.append((str(real), list(episodes or [])))
            worse = p.stem.startswith("candidate") and new_is_worse and it == 2
            return {"yaw_rate": 0.04 if worse else 0.02, "wheel_speed": 1.0}
        if stage == "gap":
            return {"yaw_rate": {"nominal": 0.2, "fitted": 0.03,
                                 "fitted_residual": 0.01}[p.stem], "wheel_speed": 1.0}
        return {"yaw_rate": 0.02, "wheel_speed": 1.0}  # the fit decision: adopt

    monkeypatch.setattr(cyc, "dynamics_error", error)
    out = tmp_path / "run"
    cyc._iterate(cfg, out, ["--port", "/dev/pts/7", "--camera", "http://a"], log=lambda m: None)

    # judged on iteration i's own new logs only, the episodes the fit held out of them
    for real, eps in judged:
        assert "/iter_0" in real and eps == ["ep_000000"]
    assert {Path(r).parent.parent.name for r, _ in judged} <= {"iter_01", "iter_02"}
    assert any("iter_02" in r for r, _ in judged)
    # ... and held out of that iteration's residual training
    res2 = [c for c in calls if c[0] == "train-residual"][1]
    hold = res2[res2.index("--holdout") + 1].split(",")
    for d in ("steps", "chirp", "prbs"):
        assert f"{(out / 'iter_02' / 'record' / f'{d}.h5').resolve()}:ep_000000" in hold
    teach = [c for c in calls if c[0] == "teach"]
    p1, r1 = str(out / "iter_01" / "fit" / "params.yaml"), str(out / "iter_01" / "residual" / "residual.ckpt")
    assert teach[1][teach[1].index("--params") + 1] == p1 and teach[1][teach[1].index("--residual") + 1] == r1
    if new_is_worse:  # iteration 1's simulator, residual and all, stays in use
        assert teach[2][teach[2].index("--params") + 1] == p1
        assert teach[2][teach[2].index("--residual") + 1] == r1
    else:
        assert teach[2][teach[2].index("--params") + 1] == str(out / "iter_02" / "fit" / "params.yaml")
        assert "--residual" not in teach[2]
    rows = json.loads((out / "summary.json").read_text())
    assert rows[2]["sim_kept"] is new_is_worse
    assert ("rejected" in rows[2]["sim_why"]) is new_is_worse
    row2 = next(ln for ln in (out / "summary.md").read_text().splitlines() if ln.startswith("| 2 |"))
    # in use: 0.01 (fitted+residual) at 1; at 2 the same (kept: ratio 1) or fit alone (0.03)
    assert ("| 1.000 |" in row2) is new_is_worse and ("kept" in row2) is new_is_worse


def test_in_use_error_of_a_kept_simulator_is_the_previous_one() -> None:
    from realsim.cycle import in_use_error

    g = {"nominal": {"y": 3.0}, "fitted": {"y": 2.0}}
    assert in_use_error({"heldout_rmse": g, "sim_kept": True}, {"y": 0.5}) == {"y": 0.5}
    assert in_use_error({"heldout_rmse": g, "sim_kept": False}, {"y": 0.5}) == {"y": 2.0}

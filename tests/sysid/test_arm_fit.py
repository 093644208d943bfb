"""`realsim fit arm` and `realsim replay arm` on synthetic arm logs.

Fast: a synthetic arm log (MuJoCo arm, known off-nominal parameters, servo-count
quantisation) replayed with its true parameters reproduces its joint readings to the
quantisation; nominal parameters do not; a log of the wrong robot is refused with exit
status 2 and one line. Slow (``pytest -m slow tests/sysid/test_arm_fit.py``): every
parameter the fit calls identifiable is recovered within 5 % (masses, servo gain, each
servo's stall torque and no-load speed, latency free; the per-joint friction, armature and
backlash at their true = nominal values), and a canary (one true parameter corrupted by 20 %) is
followed by the fit.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from realsim.logs import LogReader
from sysid.cli import main
from sysid.fit import FitConfig, run_fit
from sysid.robot_adapter import get_adapter
from sysid.synth import write_synthetic

# Off-nominal "true" arm, inside every range (the others at nominal).
# Each servo its own stall torque and no-load speed (the gripper's at nominal).
_STALL = {"shoulder_pan": 1.4, "shoulder_lift": 1.7, "elbow_flex": 1.45, "wrist_flex": 1.6,
          "wrist_roll": 1.35, "gripper": 1.55}
_SPEED = {"shoulder_pan": 4.4, "shoulder_lift": 5.5, "elbow_flex": 4.8, "wrist_flex": 5.3,
          "wrist_roll": 5.8, "gripper": 5.0}
TRUE_ARM = {"mass_upper_arm": 0.125, "mass_forearm": 0.095, "servo_kp": 11.0, "latency": 0.03,
            **{f"stall_torque_{j}": v for j, v in _STALL.items()},
            **{f"no_load_speed_{j}": v for j, v in _SPEED.items()}}
QUANTUM = 2 * np.pi / 4096  # rad per servo count


@pytest.fixture(scope="module")
def arm_adapter():
    return get_adapter("arm")


@pytest.fixture(scope="module")
def arm_truth(arm_adapter) -> dict[str, float]:
    return {**arm_adapter.nominal, **TRUE_ARM}


@pytest.fixture(scope="module")
def arm_log(tmp_path_factory, arm_truth) -> Path:
    p = tmp_path_factory.mktemp("arm") / "arm_synth.h5"
    return write_synthetic(p, arm_truth, episodes=3, seconds=5.0, seed=4, robot="arm")


def _params_file(path: Path, values: dict[str, float]) -> Path:
    path.write_text(yaml.safe_dump({"robot": "arm", "params": {k: {"value": float(v)} for k, v in values.items()}}))
    return path


def _qpos_rmse(pred: Path, log: Path) -> np.ndarray:
    """Per-joint RMSE (6,) of replayed vs logged qpos, pooled over episodes."""
    sq = []
    with LogReader(pred) as r, LogReader(log) as s:
        assert r.episode_names == s.episode_names
        for n in r.episode_names:
            a, b = r.episode(n), s.episode(n)
            np.testing.assert_array_equal(a.sensors.t, b.sensors.t)
            sq.append((np.asarray(a.sensors["qpos"]) - np.asarray(b.sensors["qpos"])) ** 2)
    return np.sqrt(np.concatenate(sq).mean(axis=0))


def test_replay_with_true_params_reproduces_log(tmp_path: Path, arm_log: Path, arm_truth) -> None:
    prm = _params_file(tmp_path / "true.yaml", arm_truth)
    out = tmp_path / "pred.h5"
    assert main(["replay", "arm", "--log", str(arm_log), "--out", str(out), "--params", str(prm)]) == 0
    with LogReader(out) as r:
        assert r.robot == "arm" and r.source == "sim"
        ep = r.episode(r.episode_names[0])
        assert ep.complete
        for f in ("qpos", "qvel", "load", "temperature"):
            assert np.asarray(ep.sensors[f]).shape == (len(ep.sensors), 6)
        assert np.asarray(ep.sensors["voltage"]).shape == (len(ep.sensors),)
    err = _qpos_rmse(out, arm_log)
    assert np.all(err[:5] < 0.5 * QUANTUM), err  # the readings' quantisation, nothing more
    assert err[5] < 1e-4, err
    nominal = tmp_path / "nominal.h5"
    assert main(["replay", "arm", "--log", str(arm_log), "--out", str(nominal)]) == 0
    assert _qpos_rmse(nominal, arm_log)[:5].max() > 10 * QUANTUM  # the check can fail


def test_fit_wrong_robot_log_exits_2(tmp_path: Path, synth_log: Path, arm_log: Path,
                                     capfd: pytest.CaptureFixture[str]) -> None:
    for robot, log in (("arm", synth_log), ("rc_car", arm_log)):
        rc = main(["fit", robot, "--logs", str(log), "--out", str(tmp_path / robot), "--trials", "1"])
        err = capfd.readouterr().err.strip()
        assert rc == 2
        assert len(err.splitlines()) == 1 and "Traceback" not in err, err
        assert str(log) in err and f"not {robot}" in err


def _fit(tmp: Path, logs: list[Path], free: list[str] | None, trials: int = 64, **kw):
    """Whole episodes from rest (window 0): every arm episode starts at rest in a measured
    pose, so no window-start estimate is needed (2.5 s windows raise the error at the true
    parameters about 13x on these logs: the start estimate's transients)."""
    kw = {"search_seconds": 16, "refine_seconds": 48, "refine_iters": 30, "window": 0.0, **kw}
    cfg = FitConfig("arm", [str(x) for x in logs], str(tmp), trials=trials, free=free, holdout="0", **kw)
    return run_fit(cfg, log=lambda s: None)


def _bad(adapter, res, true: dict[str, float]) -> list[str]:
    """Identifiable parameters off by more than 5 % (of the half-range if zero-centred)."""
    bad = []
    for n in res.names:
        p = adapter.spec(n)
        tol = 0.05 * ((p.high - p.low) / 2 if p.low < 0 < p.high else abs(true[n]))
        if res.identifiable[n] and abs(res.fitted[n] - true[n]) > tol:
            bad.append(f"{n}: fitted {res.fitted[n]:.5g}, true {true[n]:.5g}")
    return bad


@pytest.mark.slow
def test_arm_recovers_identifiable(tmp_path: Path, arm_adapter, arm_truth) -> None:
    log = write_synthetic(tmp_path / "arm.h5", arm_truth, episodes=6, seconds=8.0, seed=2, robot="arm")
    res = _fit(tmp_path / "fit", [log], list(TRUE_ARM))
    assert sum(res.identifiable.values()) >= 4, res.identifiable
    assert not _bad(arm_adapter, res, arm_truth), _bad(arm_adapter, res, arm_truth)
    doc = yaml.safe_load((tmp_path / "fit" / "params.yaml").read_text())
    assert doc["robot"] == "arm" and (tmp_path / "fit" / "report.md").is_file()


@pytest.mark.slow
def test_arm_canary_follows_corruption(tmp_path: Path, arm_adapter, arm_truth) -> None:
    true = {**arm_truth, "servo_kp": arm_truth["servo_kp"] * 1.2}
    log = write_synthetic(tmp_path / "canary.h5", true, episodes=4, seconds=8.0, seed=7, robot="arm")
    res = _fit(tmp_path / "fit", [log], list(TRUE_ARM))
    assert res.identifiable["servo_kp"]
    assert abs(res.fitted["servo_kp"] - true["servo_kp"]) <= 0.05 * true["servo_kp"]
    assert abs(res.fitted["servo_kp"] - arm_truth["servo_kp"]) > 0.1 * arm_truth["servo_kp"]

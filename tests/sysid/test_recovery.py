"""Synthetic recovery, the canary, and a standing-still log.

Logs are simulated with known off-nominal parameters plus sensor noise. The
recovery and canary tests fit the drivetrain, steering map, latency and gyro
bias (the others are at their true = nominal values) and take a minute or two
each on 2 cores, so they are marked slow (``pytest -m slow tests/sysid``); the
standstill test is fast.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sysid.fit import FitConfig, run_fit
from sysid.synth import write_synthetic


def _tol(adapter, name: str, true: float) -> float:
    """5 % of the true value; 5 % of the half-range for zero-centred parameters."""
    p = adapter.spec(name)
    zero_centred = p.low < 0 < p.high
    return 0.05 * ((p.high - p.low) / 2 if zero_centred else abs(true))


def _fit(tmp: Path, logs: list[Path], free: list[str] | None, trials: int = 32, **kw):
    kw = {"search_seconds": 12, "refine_seconds": 30, "refine_iters": 20, **kw}
    cfg = FitConfig("rc_car", [str(x) for x in logs], str(tmp), trials=trials, free=free,
                    holdout="0", **kw)
    res = run_fit(cfg, log=lambda s: None)
    return res, yaml.safe_load((tmp / "params.yaml").read_text())


def _check(adapter, res, true: dict[str, float]) -> list[str]:
    bad = []
    for n in res.names:
        if res.identifiable[n] and abs(res.fitted[n] - true[n]) > _tol(adapter, n, true[n]):
            bad.append(f"{n}: fitted {res.fitted[n]:.5g}, true {true[n]:.5g}")
    return bad


@pytest.mark.slow
def test_recovers_identifiable(tmp_path: Path, synth_log: Path, adapter, truth) -> None:
    true = {**adapter.nominal, **truth}
    res, doc = _fit(tmp_path, [synth_log], list(truth))
    assert sum(res.identifiable.values()) >= 5, res.identifiable
    assert not _check(adapter, res, true)
    assert doc["params"]["latency"]["identifiable"] in (True, False)
    assert (tmp_path / "report.md").is_file()


@pytest.mark.slow
def test_canary_follows_corruption(tmp_path: Path, adapter, truth) -> None:
    true = {**adapter.nominal, **truth, "motor_gain": truth["motor_gain"] * 1.2}
    log = write_synthetic(tmp_path / "canary.h5", true, episodes=3, seconds=6.0, seed=11)
    res, _ = _fit(tmp_path / "fit", [log], list(truth))
    assert res.identifiable["motor_gain"]
    assert abs(res.fitted["motor_gain"] - true["motor_gain"]) <= 0.05 * true["motor_gain"]
    assert abs(res.fitted["motor_gain"] - truth["motor_gain"]) > 0.1 * truth["motor_gain"]


def test_standstill_is_unidentifiable(tmp_path: Path, adapter, truth) -> None:
    log = write_synthetic(tmp_path / "still.h5", {**adapter.nominal, **truth}, episodes=2,
                          seconds=4.0, seed=5, signals=("still",))
    res, doc = _fit(tmp_path / "fit", [log], None, trials=16, refine_iters=2)
    dynamic = [p.name for p in adapter.parameters if "bias" not in p.name]
    flagged = [n for n in dynamic if doc["params"][n]["identifiable"]]
    assert not flagged, flagged
    for n in dynamic:  # no invented values: the prior is kept
        assert doc["params"][n]["value"] == pytest.approx(adapter.nominal[n])


@pytest.mark.slow
def test_recovers_all_parameters(tmp_path: Path, adapter, truth) -> None:
    true = {**adapter.nominal, **truth, "com_x": 0.105, "yaw_inertia": 0.0095, "tyre_mu": 0.7}
    log = write_synthetic(tmp_path / "all.h5", true, episodes=12, seconds=10.0, seed=2)
    # the refinement on the fit's default share of the data (60 s: about half the windows);
    # on _fit's 30 s (9 of 48 windows) tyre_mu and yaw_inertia hardly change the error (a
    # yaw_inertia 13 % off costs 4 % more) and the least squares stopped short of the truth
    res, _ = _fit(tmp_path / "fit", [log], None, trials=256, window=2.5, refine_seconds=60, refine_iters=9)
    assert not _check(adapter, res, true)

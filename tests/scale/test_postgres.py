"""`realsim fit --storage postgresql://...`: two worker processes search one study on a real
PostgreSQL server on loopback; both contribute trials and the result is as good as a
single-process sqlite fit of the same size.

Skipped, with the reason, when the PostgreSQL server binaries or psycopg2 are missing
(`.ci/run` installs both).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import optuna
import yaml

from tests.conftest import ROOT

TRIALS, BATCH = 24, 8
FIT = ["--trials", str(TRIALS), "--batch", str(BATCH), "--search-seconds", "6", "--refine-seconds", "6",
       "--refine-iters", "1", "--free", "motor_gain,back_emf,latency", "--jobs", "1"]


def _fit(log: Path, out: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-W", "ignore", "-m", "realsim", "fit", "rc_car", "--logs",
                             str(log), "--out", str(out), *FIT, *extra], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _fitted(out: Path) -> dict[str, float]:
    """Training RMSE of the fitted parameters per signal (params.yaml)."""
    doc = yaml.safe_load((out / "params.yaml").read_text())
    return doc["fit"]["rmse"]["train"]["fitted"]


def test_two_workers_share_one_postgres_study(tmp_path: Path, scale_log: Path, postgres_url: str) -> None:
    # the sqlite reference and the two PostgreSQL workers run at once (wall time)
    ref = _fit(scale_log, tmp_path / "sqlite")
    workers = [_fit(scale_log, tmp_path / f"pg{k}", "--storage", postgres_url, "--seed", str(k))
               for k in range(2)]
    outs = [p.communicate(timeout=240) for p in (ref, *workers)]
    for p, (so, se) in zip((ref, *workers), outs, strict=True):
        assert p.returncode == 0, se[-3000:]
        assert so.strip().splitlines()[-1].endswith("params.yaml")

    # one study in the database, at least TRIALS complete, at most one extra batch each
    names = [s.study_name for s in optuna.get_all_study_summaries(storage=postgres_url)]
    assert len(names) == 1, names
    study = optuna.load_study(study_name=names[0], storage=postgres_url)
    complete = study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    assert TRIALS <= len(complete) <= TRIALS + 2 * BATCH
    # every "trials N/TRIALS: ... (K told here)" line is one batch of K trials told by that
    # worker (K < BATCH for a last batch that only tops the study up to TRIALS)
    told = [sum(int(k) for k in re.findall(rf"^trials \d+/{TRIALS}:.*\((\d+) told here\)$", se, re.M))
            for _, se in outs[1:]]
    assert all(n > 0 for n in told), f"a worker contributed no trials: {told}"
    assert sum(told) == len(complete), (told, len(complete))
    for k in range(2):
        doc = yaml.safe_load((tmp_path / f"pg{k}" / "params.yaml").read_text())
        assert doc["fit"]["storage"] == postgres_url

    # quality: the shared study's answer (its better worker's refined fit) is as good as the
    # sqlite run's (training RMSE); each worker refines from the best trial it saw when the
    # study filled up, so the one that stopped first may lag a little, never by much
    ref_rmse = _fitted(tmp_path / "sqlite")
    fits = [_fitted(tmp_path / f"pg{k}") for k in range(2)]
    for sig in ("yaw_rate", "wheel_speed"):
        best = min(f[sig] for f in fits)
        assert best <= 1.15 * ref_rmse[sig] + 1e-3, (sig, best, ref_rmse[sig])
        for k, f in enumerate(fits):
            assert f[sig] <= 1.5 * ref_rmse[sig] + 1e-3, (k, sig, f[sig], ref_rmse[sig])

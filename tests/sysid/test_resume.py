"""A fit killed mid-search resumes the same study and stops at --trials."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna


def test_resume_after_kill(tmp_path: Path, synth_log: Path) -> None:
    out = tmp_path / "fit"
    args = [sys.executable, "-W", "ignore", "-m", "sysid.cli", "fit", "rc_car", "--logs", str(synth_log),
            "--out", str(out), "--trials", "40", "--batch", "8", "--search-seconds", "6",
            "--refine-seconds", "6", "--refine-iters", "1", "--free", "motor_gain,back_emf,latency"]
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    storage = f"sqlite:///{(out / 'study.db').resolve()}"
    done = 0
    deadline = time.time() + 90
    while time.time() < deadline and p.poll() is None:
        time.sleep(0.3)
        if (out / "study.db").exists():
            try:
                s = optuna.load_study(study_name=None, storage=storage)
            except Exception:  # noqa: BLE001 - not created yet
                continue
            done = len(s.get_trials(states=(optuna.trial.TrialState.COMPLETE,)))
            if done >= 16:
                os.kill(p.pid, signal.SIGKILL)
                break
    p.wait()
    assert 16 <= done < 40, f"kill came too late or never ({done} trials)"
    r = subprocess.run(args, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1].endswith("params.yaml")
    s = optuna.load_study(study_name=None, storage=storage)
    complete = s.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    assert 40 <= len(complete) < 40 + 8
    assert len(s.trials) <= 40 + 2 * 8  # the first run's trials were kept, not redone

"""A fit killed mid-search resumes the same study and stops at --trials."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import optuna


def test_resume_after_kill(tmp_path: Path, synth_log: Path) -> None:
    out = tmp_path / "fit"
    args = [sys.executable, "-W", "ignore", "-m", "sysid.cli", "fit", "rc_car", "--logs", str(synth_log),
            "--out", str(out), "--trials", "40", "--batch", "8", "--search-seconds", "6",
            "--refine-seconds", "6", "--refine-iters", "1", "--free", "motor_gain,back_emf,latency"]
    # Follow the fit's own progress lines ("trials N/40: ...", one per told batch) rather
    # than opening its database while it is being created: a reader that makes Optuna's
    # tables races the fit's schema creation (the CI failure this test once had).
    p = subprocess.Popen([sys.executable, "-u", *args[1:]], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    killer = threading.Timer(120, p.kill)  # never hang the suite on a stuck fit
    killer.start()
    told = 0
    assert p.stderr is not None
    for line in p.stderr:
        m = re.match(r"trials (\d+)/40:", line)
        if m and (told := int(m.group(1))) >= 16:
            os.kill(p.pid, signal.SIGKILL)
            break
    p.wait()
    killer.cancel()
    assert 16 <= told < 40, f"kill came too late or never ({told} trials told)"
    storage = f"sqlite:///{(out / 'study.db').resolve()}"
    done = len(optuna.load_study(study_name=None, storage=storage).get_trials(
        states=(optuna.trial.TrialState.COMPLETE,)))
    assert 16 <= done < 40, f"the killed fit's trials were not kept ({done})"
    r = subprocess.run(args, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1].endswith("params.yaml")
    s = optuna.load_study(study_name=None, storage=storage)
    complete = s.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    assert 40 <= len(complete) < 40 + 8
    assert len(s.trials) <= 40 + 2 * 8  # the first run's trials were kept, not redone

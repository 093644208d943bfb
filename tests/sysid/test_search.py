"""One CMA-ES generation is batch x workers trials, filled by all processes of one study."""

from __future__ import annotations

import argparse

import optuna
import pytest

from sysid import search as sr
from sysid import workers as wk

NAMES = ("a", "b", "c")
DISTS = {n: optuna.distributions.FloatDistribution(0.0, 1.0) for n in NAMES}
GEN = "cma:generation"  # Optuna's CmaEsSampler stores each trial's generation here


def _studies(batch: int, workers: int) -> list[optuna.Study]:
    """``workers`` processes' views of one study: one storage, a sampler each (own seed)."""
    pytest.importorskip("cmaes")
    storage = optuna.storages.InMemoryStorage()
    x0 = dict.fromkeys(NAMES, 0.5)
    studies = [optuna.create_study(storage=storage, study_name="s", load_if_exists=True,
                                   sampler=sr.make_sampler("cmaes", k, x0, batch, workers))
               for k in range(workers)]
    # the fit's first trial (x0, enqueued): until a trial completed, Optuna knows no
    # search space for CMA-ES and samples independently, outside any generation
    studies[0].enqueue_trial(x0)
    studies[0].tell(studies[0].ask(DISTS), 1.0)
    return studies


def _gen(study: optuna.Study, trial: optuna.Trial) -> int:
    return study.get_trials(deepcopy=False)[trial.number].system_attrs[GEN]


def _generation_after(studies: list[optuna.Study], batch: int, told: int) -> int:
    """Each process asks a batch; ``told`` of those trials are told; then one more ask.

    Returns the generation of that last trial: 1 once the first generation closed."""
    asked = [(s, s.ask(DISTS)) for s in studies for _ in range(batch)]
    assert {_gen(s, t) for s, t in asked} == {0}
    for i, (s, t) in enumerate(asked[:told]):
        s.tell(t, float(i))
    return _gen(studies[0], studies[0].ask(DISTS))


@pytest.mark.parametrize("batch", [3, 4])
def test_two_workers_fill_one_generation_of_batch_x_workers(batch: int) -> None:
    assert sr.popsize(batch, 2) == 2 * batch
    # one trial short of 2 x batch: the generation is still open for the other worker
    assert _generation_after(_studies(batch, 2), batch, 2 * batch - 1) == 0
    # both workers' batches told: the distribution moves on, from all 2 x batch trials
    assert _generation_after(_studies(batch, 2), batch, 2 * batch) == 1


def test_one_worker_generation_is_one_batch() -> None:
    assert sr.popsize(4) == 4
    assert _generation_after(_studies(4, 1), 4, 3) == 0
    assert _generation_after(_studies(4, 1), 4, 4) == 1


def test_helpers_keep_the_worker_count_and_start_no_helpers(tmp_path) -> None:
    a = argparse.Namespace(robot="rc_car", out=str(tmp_path), workers=2, batch=4, seed=5,
                           storage=None, func=print)
    url = f"sqlite:///{tmp_path / 'study.db'}"
    opts = wk.helper_options(a, 1, url)
    assert (opts["workers"], opts["worker"], opts["seed"], opts["batch"]) == (2, 1, 1005, 4)
    assert "func" not in opts
    helper = argparse.Namespace(**opts)
    with wk.start_helpers(helper) as h:  # a helper starts nothing and keeps its storage
        assert h.procs == []
    assert helper.storage == url


def test_fit_config_gets_the_worker_count(monkeypatch, tmp_path) -> None:
    from sysid import cli
    from sysid import fit as ft

    seen = {}

    class Stop(Exception):
        pass

    def fake_run_fit(cfg, log=print):
        seen["cfg"] = cfg
        raise Stop

    monkeypatch.setattr(ft, "run_fit", fake_run_fit)
    a = cli.add_fit_arguments(argparse.ArgumentParser()).parse_args(
        ["rc_car", "--logs", "x.h5", "--out", str(tmp_path), "--workers", "2", "--batch", "5"])
    a.worker = 1  # as a helper: no processes start
    with pytest.raises(Stop):
        cli.cmd_fit(a)
    assert (seen["cfg"].workers, seen["cfg"].batch) == (2, 5)


_OPEN = """
import sys, optuna
from sysid import search as sr
sys.stdin.readline()  # start together
st = sr.open_study(sys.argv[1], "fit-race", sr.make_sampler("tpe", 0, {"a": 0.5}, 4))
print(st.study_name)
"""


def test_processes_opening_one_fresh_sqlite_study_together_all_succeed(tmp_path) -> None:
    # Fit workers, fits on other machines and a monitor reading the study all open it
    # while its tables may not exist yet; Optuna's schema creation races (the loser got
    # "table already exists" or "database is locked" and the fit exited 2).
    import subprocess
    import sys

    url = f"sqlite:///{(tmp_path / 'study.db').resolve()}"
    procs = [subprocess.Popen([sys.executable, "-c", _OPEN, url], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(6)]
    outs = []
    for p in procs:  # release them all at once
        p.stdin.write("go\n")
        p.stdin.flush()
    for p in procs:
        outs.append(p.communicate(timeout=120))
    for p, (so, se) in zip(procs, outs, strict=True):
        assert p.returncode == 0, se[-2000:]
        assert so.strip() == "fit-race"
    assert len(optuna.get_all_study_summaries(storage=url)) == 1

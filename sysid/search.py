"""Global search: an Optuna study over the normalised parameter box.

Candidates are asked in groups of ``batch`` and evaluated together in one
batched rollout, then told. The study lives in any Optuna storage (sqlite in
the fit directory by default), so a killed fit resumes where it stopped and
several processes or machines can work on one study: each counts every
completed trial of the study towards ``n_trials``. Trials a killed process left
RUNNING stay so; they never count and the samplers ignore them.

CMA-ES keeps its state in the study, not in a process: every trial carries the
generation it was asked in, and the first ask after ``popsize`` trials of the
current generation completed updates the distribution (and stores it in that
trial) for all processes. With ``workers`` processes each asking ``batch`` at a
time, a generation is therefore ``batch x workers`` trials: the processes fill
it together. A popsize of ``batch`` would close a generation on the first
batch told and drop the other processes' trials of it from the update.
"""

from __future__ import annotations

import importlib.util
import random
import sys
import time
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import optuna

from realsim.errors import UserError

SAMPLERS = ("cmaes", "tpe")
optuna.logging.set_verbosity(optuna.logging.WARNING)


def popsize(batch: int, workers: int = 1) -> int:
    """One CMA-ES generation: the ``batch`` candidates of each of ``workers`` processes."""
    return max(1, int(batch)) * max(1, int(workers))


def make_sampler(name: str, seed: int, x0: Mapping[str, float], batch: int,
                 workers: int = 1) -> optuna.samplers.BaseSampler:
    """CMA-ES started at ``x0`` (normalised), one generation per ``batch x workers`` trials
    (see the module note), or TPE (also CMA-ES's stand-in without ``cmaes``)."""
    n = popsize(batch, workers)
    if name == "cmaes" and importlib.util.find_spec("cmaes") is None:
        print("sysid: the 'cmaes' package is not installed; searching with TPE", file=sys.stderr)
        name = "tpe"
    if name == "cmaes":
        return optuna.samplers.CmaEsSampler(x0=dict(x0), sigma0=0.2, seed=seed, n_startup_trials=0,
                                            popsize=n, warn_independent_sampling=False)
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=min(16, batch * 2),
                                          multivariate=True)
    raise UserError(f"--sampler {name!r}: expected one of {', '.join(SAMPLERS)}")


def _sqlite_fast(dbapi_conn: object, _record: object) -> None:
    """WAL + synchronous=NORMAL: a killed process loses nothing committed, and a commit
    costs no fsync (only an OS crash could lose the last trials)."""
    if type(dbapi_conn).__module__.startswith("sqlite3"):
        cur = dbapi_conn.cursor()  # type: ignore[attr-defined]
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.close()


def prepare_storage(url: str, tries: int = 6) -> None:
    """Create Optuna's tables in ``url`` now, tolerating other processes doing the same.

    Processes that open a fresh database together (fit workers, fits on several machines,
    a monitor reading the study while the fit starts) race in Optuna's schema creation:
    the loser fails with a duplicate key on ``alembic_version`` (PostgreSQL) or "table
    already exists" / "database is locked" (sqlite). A retry after a short random pause
    finds the tables made. After the last try the error is left to `open_study`, which
    reports it in one line.
    """
    from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError

    for i in range(tries):
        try:
            optuna.storages.RDBStorage(url).engine.dispose()
            return
        except (IntegrityError, ProgrammingError, OperationalError):  # the race (or no server)
            if i + 1 < tries:
                time.sleep(0.2 + 0.6 * random.random())
        except Exception:  # noqa: BLE001 - a bad URL: open_study says so in one line
            return


def open_study(storage: str, name: str, sampler: optuna.samplers.BaseSampler) -> optuna.Study:
    """Create or resume the study; one-line UserError for an unusable storage URL."""
    try:
        if storage.startswith("sqlite:"):
            import sqlalchemy

            if not sqlalchemy.event.contains(sqlalchemy.engine.Engine, "connect", _sqlite_fast):
                sqlalchemy.event.listen(sqlalchemy.engine.Engine, "connect", _sqlite_fast)
        prepare_storage(storage)
        return optuna.create_study(storage=storage, study_name=name, sampler=sampler,
                                   direction="minimize", load_if_exists=True)
    except Exception as e:  # noqa: BLE001 - Optuna/SQLAlchemy raise many kinds
        msg = " ".join(str(e).split())[:200]
        raise UserError(f"--storage {storage}: cannot open the study ({msg})") from None


def completed(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    return study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))


def run_search(study: optuna.Study, names: Sequence[str], evaluate: Callable[[np.ndarray], np.ndarray],
               n_trials: int, batch: int, log: Callable[[str], None] = lambda s: None) -> None:
    """Ask/evaluate/tell in groups until the study holds ``n_trials`` completed trials.

    ``evaluate``: U (k, n) in [0, 1] -> losses (k,).
    """
    dists = {n: optuna.distributions.FloatDistribution(0.0, 1.0) for n in names}
    while (done := len(completed(study))) < n_trials:
        k = min(batch, n_trials - done)
        trials = [study.ask(dists) for _ in range(k)]
        U = np.array([[t.params[n] for n in names] for t in trials])
        losses = evaluate(U)
        for t, v in zip(trials, losses, strict=True):
            study.tell(t, float(v))
        log(f"trials {done + k}/{n_trials}: best {study.best_value:.4g} ({k} told here)")


def best_u(study: optuna.Study, names: Sequence[str]) -> tuple[np.ndarray, float] | None:
    """Normalised vector and loss of the best completed trial with exactly these names."""
    best = None
    for t in completed(study):
        if set(t.params) == set(names) and t.value is not None and (best is None or t.value < best.value):
            best = t
    if best is None:
        return None
    return np.array([best.params[n] for n in names]), float(best.value)

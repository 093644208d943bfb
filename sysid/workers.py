"""`realsim fit --workers N`: N processes on this machine search one Optuna study together.

The study lives in one storage (``--storage URL``; sqlite in OUT by default, or a
PostgreSQL URL that many machines share). Every process asks, evaluates and tells
batches of candidates and counts *all* completed trials of the study towards
``--trials``, so N processes stop together at about ``--trials`` (each may overshoot by
one batch). This module only starts the extra processes: the search itself is
`sysid.search.run_search`, unchanged. Every process, helpers included, keeps
``--workers N``, so that each one's CMA-ES takes a generation of ``--batch`` x N trials
that the N processes fill together (`sysid.search.make_sampler`); a helper is marked
by its ``worker`` index (1..N-1) and starts no processes of its own.

Workers on other machines need nothing from here: run the same ``realsim fit`` with the
same ``--storage`` and the same logs on each (a different ``--seed`` per machine keeps
the samplers from proposing the same candidates). Each of those sizes CMA-ES's first
generation from its own ``--batch`` x ``--workers``; the first to close it stores the
state, popsize included, in the study, and every process continues from that.

The process the user started stays the one that writes OUT/params.yaml: it refines
the best trial of the whole study. Each helper k writes its own (equal or worse,
since it refines the best it saw when it stopped) result to OUT/workers/k/ and its
messages to OUT/workers/k/fit.log.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from types import TracebackType
from typing import Any

from realsim.errors import UserError

# Namespace entries that are not options (argparse's set_defaults(func=...), the verb).
_NOT_OPTIONS = ("func", "verb", "command")


def default_storage(out: str | os.PathLike[str]) -> str:
    """The storage `sysid.fit` uses without ``--storage``: sqlite:///OUT/study.db (absolute)."""
    return f"sqlite:///{(Path(out) / 'study.db').resolve()}"


def helper_options(a: argparse.Namespace, k: int, storage: str) -> dict[str, Any]:
    """Options of helper ``k`` (1..N-1): the user's options (--workers N included: the
    study's generation size) with its own --out and --seed, the shared --storage, and
    ``worker=k``, which keeps it from starting helpers of its own."""
    opts = {key: v for key, v in vars(a).items() if key not in _NOT_OPTIONS and not callable(v)}
    opts.update(out=str(Path(a.out) / "workers" / str(k)), storage=storage,
                seed=int(getattr(a, "seed", 0) or 0) + 1000 * k, worker=k)
    return opts


class Helpers:
    """The helper processes of one `fit` (a context manager: waits for them on a clean
    exit, terminates them when the fit itself failed)."""

    def __init__(self, procs: list[subprocess.Popen[bytes]], logs: list[Path]) -> None:
        self.procs, self.logs = procs, logs

    def __enter__(self) -> Helpers:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        if et is not None:
            self.terminate()
            return
        for p, log in zip(self.procs, self.logs, strict=True):
            if p.wait() != 0:
                print(f"sysid: helper worker exited with status {p.returncode}; see {log}",
                      file=sys.stderr, flush=True)

    def terminate(self) -> None:
        """Stop every helper still running (SIGTERM, then SIGKILL after 5 s)."""
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def start_helpers(a: argparse.Namespace) -> Helpers:
    """Start ``a.workers - 1`` helper processes on ``a``'s study; pin ``a.storage``.

    With ``--workers 1`` (the default), or in a helper itself, nothing starts and ``a``
    is unchanged. Otherwise ``a.storage`` is set to the shared URL (the sqlite default
    made explicit) so that this process and its helpers open the same study.
    """
    n = getattr(a, "workers", None)
    n = 1 if n is None else int(n)
    if n < 1:
        raise UserError("fit: --workers must be >= 1")
    if n == 1 or getattr(a, "worker", 0):
        return Helpers([], [])  # sysid.search.open_study makes the tables, race-safe
    storage = a.storage or default_storage(a.out)
    a.storage = storage
    Path(a.out).mkdir(parents=True, exist_ok=True)
    from sysid.search import prepare_storage

    prepare_storage(storage)  # once here, before N processes race to make the tables
    procs: list[subprocess.Popen[bytes]] = []
    logs: list[Path] = []
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    for k in range(1, n):
        opts = helper_options(a, k, storage)
        Path(opts["out"]).mkdir(parents=True, exist_ok=True)
        log = Path(opts["out"]) / "fit.log"
        with open(log, "wb") as fh:
            procs.append(subprocess.Popen([sys.executable, "-m", "sysid.workers"], env=env,
                                          stdin=subprocess.PIPE, stdout=fh, stderr=fh))
        assert procs[-1].stdin is not None
        procs[-1].stdin.write(json.dumps(opts).encode())
        procs[-1].stdin.close()
        logs.append(log)
    return Helpers(procs, logs)


def main() -> int:
    """Helper entry: read the options (JSON) on stdin and run `sysid.cli.cmd_fit` with them."""
    from sysid.cli import cmd_fit

    a = argparse.Namespace(**json.loads(sys.stdin.read()))
    try:
        return cmd_fit(a)
    except UserError as e:
        print(f"realsim: error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())

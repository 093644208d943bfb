"""kill -9 tests: every closed episode intact, the open one readable, resume appends."""

from __future__ import annotations

import random
import shutil
import subprocess
from pathlib import Path

import pytest
from crash_harness import kill_cycle, sweep


def _run_kills(tmp_path: Path, n: int, seed: int) -> None:
    path = tmp_path / "crash.h5"
    rng = random.Random(seed)
    known: dict[str, str] = {}
    for i in range(n):
        kill_cycle(path, i, known, rng, max_wait=2.5, live_read=(i % 2 == 1))
    assert len(known) >= 2 * n  # each cycle adds >= 1 writer episode + 1 appended


def test_kill9_three_times(tmp_path: Path) -> None:
    _run_kills(tmp_path, 3, seed=11)


@pytest.mark.slow
def test_kill9_twenty_times(tmp_path: Path) -> None:
    _run_kills(tmp_path, 20, seed=12)


def _strace_works() -> bool:
    if shutil.which("strace") is None:
        return False
    r = subprocess.run(["strace", "-qq", "-o", "/dev/null", "true"], capture_output=True)
    return r.returncode == 0


@pytest.mark.slow
@pytest.mark.skipif(not _strace_works(), reason="needs a working strace (ptrace)")
def test_kill_at_every_write(tmp_path: Path) -> None:
    """Kill at each of the first 120 write syscalls: every crash state a SIGKILL can leave."""
    base = tmp_path / "base.h5"
    rng = random.Random(5)
    kill_cycle(base, 0, {}, rng, max_wait=1.5)  # a file with history and a killed episode
    fails = sweep(base, tmp_path / "work.h5", list(range(1, 121)), flush=0.5, verbose=False)
    assert not fails, fails[:5]

"""Shared fixtures: run the CLI as a user would, start emulators."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

os.environ.setdefault("MUJOCO_GL", "egl")


def run_cli(*args: str, timeout: float = 120.0, **kw) -> subprocess.CompletedProcess[str]:
    """`python -m realsim ARGS` in a subprocess; returns the completed process."""
    return subprocess.run([sys.executable, "-m", "realsim", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT, **kw)


def assert_one_line_error(p: subprocess.CompletedProcess[str], *needles: str) -> None:
    """Exit 2, exactly one line on stderr, no traceback, mentioning each needle."""
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert len(lines) == 1, p.stderr
    assert "Traceback" not in p.stderr
    for n in needles:
        assert n in lines[0], (n, lines[0])


@pytest.fixture
def emulated_car() -> Iterator[object]:
    """A running `realsim emulate rc_car --seed 3` (killed afterwards)."""
    from hardware.emulators.launch import EmulatorProcess

    with EmulatorProcess("rc_car", seed=3) as emu:
        yield emu

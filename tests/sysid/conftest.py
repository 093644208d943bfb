"""Shared synthetic logs for the sysid tests (made once per session, small)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sysid.robot_adapter import get_adapter
from sysid.synth import write_synthetic

# Off-nominal "true" car for the recovery tests: inside every range.
TRUE = {"motor_gain": 0.06, "back_emf": 0.082, "rolling_resistance": 0.04, "steer_max": 0.42,
        "steer_trim": 0.02, "latency": 0.03, "gyro_bias": 0.01}


@pytest.fixture(scope="session")
def truth() -> dict[str, float]:
    return dict(TRUE)


@pytest.fixture(scope="session")
def adapter():
    return get_adapter("rc_car")


@pytest.fixture(scope="session")
def synth_log(tmp_path_factory, adapter) -> Path:
    p = tmp_path_factory.mktemp("sysid") / "synth.h5"
    return write_synthetic(p, {**adapter.nominal, **TRUE}, episodes=5, seconds=6.0, seed=3)

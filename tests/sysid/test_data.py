"""sysid's loading: sensor samples go on the device clock's timeline; new car parameters."""

from __future__ import annotations

from pathlib import Path

import mujoco
import numpy as np
import pytest

from realsim.logs import LogWriter
from realsim.robots.rc_car import constants as C
from realsim.robots.rc_car.model import build_model
from realsim.robots.rc_car.params import CarParams
from sysid.data import load_logs


def test_bunched_host_stamps_use_device_clock(tmp_path: Path, adapter) -> None:
    """A late reader stamps bursts of samples with one host time; the compared wheel speed
    must come from the device clock's spacing (no spikes from a burst)."""
    n, speed = 300, 30.0  # samples, rad/s constant wheel speed
    t_true = 0.01 + 0.02 * np.arange(n)
    t_host = t_true + 0.003
    for i in range(0, n - 5, 15):  # bursts of 5 samples read at once
        t_host[i:i + 5] = t_host[i + 4] + 1e-5 * np.arange(5)
    t_dev = 3000.0 + t_true * (1 - 25e-6)
    enc = speed * t_true
    ct = np.arange(0.0, 6.0, 0.02)
    p = tmp_path / "bunched.h5"
    with LogWriter(p, robot="rc_car", source="real") as w:
        ep = w.begin_episode(driver="excite:steps", seed=0)
        ep.add_commands(ct, np.arange(len(ct)), np.zeros((len(ct), 2)))
        ep.add_sensor_block(t_host, t_dev, enc_rad=enc, yaw_rate=np.zeros(n), accel=np.zeros((n, 2)),
                            vbat=np.full(n, 8.0), ack=np.zeros(n, int), flags=np.full(n, 4))
        ep.close()
    (e,) = load_logs([p], adapter)
    assert np.abs(np.diff(e.sensor_t) - 0.02).max() < 1e-5
    assert np.abs(e.sensor_t - t_true).max() < 0.004
    ws = e.signals["wheel_speed"][3:-3]
    assert np.abs(ws - speed).max() < 0.01 * speed


@pytest.mark.parametrize("gain", [1.0, 4.0])
def test_brake_gain_and_tyre_slip_damping_reach_the_model(gain: float) -> None:
    p = CarParams(brake_gain=gain, tyre_slip_damping=20.0)
    m = build_model(p)
    b = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_ACTUATOR, C.ACT_BRAKE)
    expect = -C.BRAKE_FACTOR * gain * p["motor_gain"] * p["back_emf"]
    assert m.actuator_gainprm[b, 2] == pytest.approx(expect)
    assert np.allclose(m.pair_solreffriction[:, 1], -20.0) and m.npair == 4

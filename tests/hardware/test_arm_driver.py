"""`ArmDriver` and `ArmControl` over real ptys; the arm's excitation signals."""

from __future__ import annotations

import math
import os
import select
import time

import numpy as np
import pytest

from hardware import feetech, nmea
from hardware.arm import HOME, LOWER, UPPER, ArmDriver, denormalise, normalise
from hardware.emulators.arm.bus import BusFaults, PtyServoBus, ServoBus, open_pty
from realsim.errors import DeviceError
from realsim.robots.arm.excite import SIGNALS, arm_excitation


def _set_present(bus: ServoBus, sid: int, pos: int, speed: int, load: int, volt: int, temp: int) -> None:
    r = bus.regs[sid]
    r[56:58] = feetech.u16(feetech.to_sign_magnitude(pos, 15))
    r[58:60] = feetech.u16(feetech.to_sign_magnitude(speed, 15))
    r[60:62] = feetech.u16(feetech.to_sign_magnitude(load, 10))
    r[62], r[63] = volt, temp


def test_connect_reads_si_and_disconnect_releases_torque() -> None:
    bus = ServoBus()
    _set_present(bus, 1, 2048 + 1024, -409, -250, 74, 31)
    _set_present(bus, 2, 2048 - 512, 100, 1000, 72, 35)
    _set_present(bus, 6, 3000, 0, 0, 73, 40)
    with PtyServoBus(bus) as path:
        arm = ArmDriver(path)
        with arm:
            assert all(bus.regs[i][40] == 1 for i in range(1, 7))  # torque on
            # goals were set to the present pose before torque came on
            assert bus.regs[1][42:44] == feetech.u16(2048 + 1024)
            s = arm.read_state()
            assert s.qpos[0] == pytest.approx(math.pi / 2)
            assert s.qpos[1] == pytest.approx(-math.pi / 4)
            assert s.qpos[5] == pytest.approx(0.07)
            assert s.qvel[0] == pytest.approx(-409 * 2 * math.pi / 4096)
            assert s.load[0] == pytest.approx(-0.25) and s.load[1] == pytest.approx(1.0)
            assert s.temperature[1] == 35.0
            assert 7.0 < s.voltage < 7.5
            sent = arm.write_goals([5.0, -5.0, 0.1, 0.2, 0.3, 0.5])  # out of range: clamped
            assert sent[0] == pytest.approx(1.9, abs=2e-3) and sent[1] == pytest.approx(-1.7, abs=2e-3)
            assert sent[5] == pytest.approx(0.07, abs=1e-4)
            arm.read_state()  # SYNC_WRITE has no reply: a round trip orders it before the checks
            assert bus.regs[6][42:44] == feetech.u16(3000)
            assert bus.regs[3][42] | bus.regs[3][43] << 8 == round(2048 + 0.1 / (2 * math.pi / 4096))
        assert all(bus.regs[i][40] == 0 for i in range(1, 7))  # torque off
        assert not arm.is_connected and not arm.bus.is_open


def test_missing_servo_at_connect_names_it() -> None:
    with PtyServoBus(ServoBus(faults=BusFaults(drop_servo=3))) as path:
        arm = ArmDriver(path)
        t = time.perf_counter()
        with pytest.raises(DeviceError) as e:
            arm.connect()
        assert str(e.value) == f"servo 3 (elbow_flex) does not answer PING on {path} after 3 retries"
        assert time.perf_counter() - t < 1.0
        assert not arm.bus.is_open


def test_reads_survive_checksum_errors_and_report_counts() -> None:
    bus = ServoBus(faults=BusFaults(checksum_every=10))
    with PtyServoBus(bus) as path, ArmDriver(path) as arm:
        for _ in range(50):
            arm.write_goals(HOME)
            arm.read_state()
        assert arm.counts["checksum"] == bus.stats["checksum_injected"] > 20
        assert arm.dropped >= arm.counts["checksum"]


def test_control_port_sends_markers_and_receives_judge() -> None:
    master, slave, path = open_pty()
    bus = ServoBus()
    try:
        with PtyServoBus(bus) as bus_path, ArmDriver(bus_path, control=path) as arm:
            arm.episode_start(4)
            arm.episode_end(4)
            got = b""
            deadline = time.monotonic() + 2.0
            while got.count(b"\n") < 2 and time.monotonic() < deadline:
                if select.select([master], [], [], 0.1)[0]:
                    got += os.read(master, 1024)
            msgs = nmea.LineReader(nmea.HOST_TO_CAR).feed(got)
            assert [(m.type, m.int(0)) for m in msgs] == [("EPS", 4), ("EPE", 4)]
            os.write(master, b"$JDG,4,1*XX\r\n" + nmea.encode("JDG", 4, 1, 0.012))  # bad line first
            assert arm.wait_judge(4, 2.0) == (1, pytest.approx(0.012))
            assert arm.control is not None and arm.control.dropped == 1
    finally:
        os.close(master)
        os.close(slave)


def test_normalisation_round_trip() -> None:
    q = np.array([0.3, -0.2, 1.0, 1.4, -2.0, 0.035])
    assert np.allclose(denormalise(normalise(q)), q)
    assert np.allclose(normalise(LOWER), -1) and np.allclose(normalise(UPPER), 1)


@pytest.mark.parametrize("signal", SIGNALS)
def test_excitation_stays_in_limits_clear_of_the_table_and_starts_home(signal: str) -> None:
    for seed in range(3):
        # clearance of the table is checked on the model in tests/robots/test_arm_model.py
        act = arm_excitation(signal, 10.0, seed)
        qs = np.array([denormalise(act(t)) for t in np.arange(0.0, 10.0, 0.02)])
        assert np.all(qs >= LOWER - 1e-9) and np.all(qs <= UPPER + 1e-9)
        assert np.ptp(qs[:, :5], axis=0).min() > 0.02  # every joint moves
        a = np.array([act(t) for t in np.arange(0.0, 10.0, 0.1)])
        assert np.all(np.abs(a) <= 1.0)

"""`RcCarDriver` against a fake car on a real pseudo-terminal."""

from __future__ import annotations

import math
import statistics
import threading
import time
from collections.abc import Iterator

import pytest

from hardware import nmea
from hardware.rc_car import ClockUnwrapper, G, RcCarDriver, Telemetry
from realsim.errors import DeviceError, UserError
from tests.hardware._fake_car import FakeCar
from tests.hardware._garbage import make_stream


@pytest.fixture
def car() -> Iterator[FakeCar]:
    fake = FakeCar()
    yield fake
    fake.close()


def test_handshake(car: FakeCar) -> None:
    with RcCarDriver(car.port) as drv:
        assert drv.is_connected
        assert drv.info is not None
        assert (drv.info.protocol, drv.info.firmware, drv.info.name) == (1, "fake-1.0", "fakecar")
        assert drv.info.telemetry_hz == 50
        assert drv.wait_telemetry(1.0) is not None
    assert not drv.is_connected
    assert car.lines()[0] == nmea.Message("HLO")


def test_drive_encodes_clamps_and_counts_seq(car: FakeCar) -> None:
    with RcCarDriver(car.port) as drv:
        assert drv.drive(0.5, -0.25) == 0
        assert drv.drive(2.0, -3.0) == 1
        assert drv.drive(-0.0004, 0.0006) == 2
        assert drv.drive(float("nan"), 1) == 3
        assert drv.last_command is not None and drv.last_command[0] == 3
        drv.stop()
        drv.episode_start(7)
        drv.episode_end(7)
        assert car.wait_for(lambda: len(car.lines("EPE")) == 1)
    # the disconnect's STP reaches the car (the fake's reader may still be on its way to it)
    assert car.wait_for(lambda: len(car.lines("STP")) == 2)
    drvs = [m.fields for m in car.lines("DRV")]
    assert drvs == [
        ("0", "500", "-250"),
        ("1", "1000", "-1000"),
        ("2", "0", "1"),
        ("3", "0", "1000"),
    ]
    # HLO may be retried on a loaded machine before INF comes back; the rest is exact
    kinds = [m.type for m in car.lines() if m.type not in ("DRV", "HLO")]
    assert car.lines()[0].type == "HLO"
    assert kinds == ["STP", "EPS", "EPE", "STP"]  # the last STP: disconnect
    assert car.lines("EPS")[0].fields == ("7",)


def test_telemetry_in_si_units() -> None:
    fake = FakeCar(fields=lambda k: (1_000_000 + k * 20_000, 1164, 90_000, 1000, -500, 7400, 5))
    got: list[Telemetry] = []
    try:
        with RcCarDriver(fake.port, on_telemetry=got.append) as drv:
            tlm = drv.wait_telemetry(1.0)
            assert tlm is not None and drv.latest is not None
    finally:
        fake.close()
    assert tlm.enc_rad == pytest.approx(20 * math.pi)  # 1164 counts = 10 wheel turns
    assert tlm.yaw_rate == pytest.approx(math.pi / 2)  # 90 deg/s
    assert tlm.accel == pytest.approx((G, -0.5 * G))
    assert tlm.vbat == pytest.approx(7.4)
    assert tlm.ack == -1 and tlm.flags == 5
    assert tlm.watchdog and tlm.in_episode and not tlm.battery_low
    assert tlm.t_device == pytest.approx(1.0 + 0.02 * (fake.k - 1), abs=0.2)
    assert abs(tlm.t_host - time.monotonic()) < 5
    assert got and got[-1] == drv.latest


def test_device_clock_wraps_and_stays_monotonic() -> None:
    start = 2**32 - 10 * 20_000 - 7  # wraps after ten lines
    fake = FakeCar(fields=lambda k: (start + k * 20_000, 0, 0, 0, 0, 8000, 0), hz=200)
    got: list[Telemetry] = []
    try:
        with RcCarDriver(fake.port, on_telemetry=got.append) as drv:
            assert fake.wait_for(lambda: len(got) >= 30)
            assert drv.telemetry_period() == pytest.approx(0.02)
    finally:
        fake.close()
    t = [g.t_device for g in got]
    steps = [b - a for a, b in zip(t, t[1:], strict=False)]
    assert all(s == pytest.approx(0.02, abs=1e-9) for s in steps), steps
    assert t[-1] > (2**32) * 1e-6
    assert drv.clock_resets == 0


def test_clock_unwrapper_absorbs_resets() -> None:
    c = ClockUnwrapper()
    assert c(4_000_000_000) == pytest.approx(4000.0)
    assert c(5) == pytest.approx((2**32 + 5) * 1e-6)  # wrap
    assert c(3) == pytest.approx((2**32 + 5) * 1e-6)  # small step back: a reset, held
    assert c(1003) == pytest.approx((2**32 + 1005) * 1e-6)
    assert c.resets == 1


def test_bad_lines_are_counted_never_fatal(car: FakeCar) -> None:
    with RcCarDriver(car.port) as drv:
        drv.wait_telemetry(1.0)
        good = nmea.encode("JDG", 2, 1, 0.5)
        bad_cs = good[:-4] + (b"00" if good[-4:-2] != b"00" else b"11") + b"\r\n"
        for _ in range(5):
            car.send_raw(bad_cs)
        car.send_raw(b"$TLM,1,2,3*00\r\n\xff\xfe\r\n")
        judged: list[tuple[int, int, float]] = []
        drv.on_judge = lambda *a: judged.append(a)
        car.send_raw(good)
        assert car.wait_for(lambda: bool(judged))
        assert judged == [(2, 1, 0.5)] and drv.last_judge == (2, 1, 0.5)
        assert drv.counts[nmea.BAD_CHECKSUM] == 6
        assert drv.counts[nmea.BAD_FRAMING] == 1
        assert drv.dropped == 7
        assert drv.wait_telemetry(1.0) is not None  # still reading


def test_err_lines_and_raising_callbacks(car: FakeCar) -> None:
    errors: list[tuple[str, str]] = []

    def boom(tlm: Telemetry) -> None:
        raise RuntimeError("callback bug")

    with RcCarDriver(
        car.port, on_error=lambda c, t: errors.append((c, t)), on_telemetry=boom
    ) as drv:
        car.send("ERR", "E3", "servo stalled")
        assert car.wait_for(lambda: bool(errors))
        assert errors == [("E3", "servo stalled")] and drv.err_count == 1
        assert car.wait_for(lambda: drv.callback_errors >= 3)
        assert drv.is_connected and drv.wait_telemetry(1.0) is not None


def test_ack_latency_phase_locked(car: FakeCar) -> None:
    """Sent right after a TLM, each DRV is acked by the next one, a period later."""
    with RcCarDriver(car.port) as drv:
        for _ in range(25):
            assert drv.wait_telemetry(1.0) is not None
            drv.drive(0.1, 0.2)
        assert drv.wait_telemetry(1.0) is not None
        stats = drv.ack_latency()
        period = drv.telemetry_period()
        tlm_delay = _delivery_delays(car, drv)
    assert stats is not None and stats.n >= 24
    assert period == pytest.approx(0.02, rel=1e-6)  # from the device clock
    assert 0.010 < stats.median < 0.030, stats
    assert statistics.median(tlm_delay) < 0.003, tlm_delay
    print(
        f"\nack latency {stats}; TLM write->delivery median {statistics.median(tlm_delay) * 1e3:.2f} ms"
        f" max {max(tlm_delay) * 1e3:.2f} ms"
    )


def _delivery_delays(car: FakeCar, drv: RcCarDriver) -> list[float]:
    """Fake's write time -> driver's t_host, per TLM (same monotonic clock, same machine)."""
    got: dict[int, float] = {}
    done = threading.Event()

    def on_tlm(t: Telemetry) -> None:
        got[round(t.t_device * 1e6) % 2**32] = t.t_host
        if len(got) >= 20:
            done.set()

    drv.on_telemetry = on_tlm
    done.wait(2.0)
    drv.on_telemetry = None
    sent = dict(car.tlm_sent)
    return [t_host - sent[t_us] for t_us, t_host in got.items() if t_us in sent]


def test_stop_sent_when_the_body_raises(car: FakeCar) -> None:
    with pytest.raises(RuntimeError, match="policy crashed"):
        with RcCarDriver(car.port) as drv:
            drv.drive(1.0, 1.0)
            raise RuntimeError("policy crashed")
    assert car.wait_for(lambda: bool(car.lines("STP")))
    assert [m.type for m in car.lines()][-2:] == ["DRV", "STP"]
    drv.disconnect()  # idempotent


def test_port_vanishing_never_hangs() -> None:
    fake = FakeCar()
    lost = threading.Event()
    codes: list[str] = []

    def on_error(code: str, text: str) -> None:
        codes.append(code)
        lost.set()

    drv = RcCarDriver(fake.port, on_error=on_error)
    drv.connect()
    drv.wait_telemetry(1.0)
    fake.vanish()
    assert lost.wait(1.0)
    assert drv.lost and codes == ["LOST"] and not drv.is_connected
    with pytest.raises(DeviceError, match="lost connection to"):
        drv.drive(0.0, 0.0)
    with pytest.raises(DeviceError):
        drv.wait_telemetry(0.5)
    t0 = time.monotonic()
    drv.disconnect()
    assert time.monotonic() - t0 < 1.0
    fake.close()


def test_missing_port_is_one_line() -> None:
    with pytest.raises(DeviceError) as e:
        RcCarDriver("/dev/does-not-exist-42").connect()
    msg = str(e.value)
    assert isinstance(e.value, UserError)
    assert "\n" not in msg and "cannot open port /dev/does-not-exist-42" in msg


def test_silent_device_times_out_with_one_line() -> None:
    fake = FakeCar(answer_hlo=False, streaming=False)
    try:
        t0 = time.monotonic()
        with pytest.raises(DeviceError, match=r"no answer to HLO on /dev/pts/\d+ after 0.6 s"):
            RcCarDriver(fake.port, connect_timeout=0.6).connect()
        assert time.monotonic() - t0 < 1.5
        assert len(fake.lines("HLO")) == 3  # retried
    finally:
        fake.close()


def test_wrong_protocol_is_refused() -> None:
    fake = FakeCar(protocol=2)
    try:
        with pytest.raises(DeviceError, match="protocol 2"):
            RcCarDriver(fake.port).connect()
    finally:
        fake.close()


def test_garbage_through_the_pty() -> None:
    """Garbled lines of every kind, interleaved with valid ones: all valid ones arrive, the
    rest are counted exactly."""
    fake = FakeCar(streaming=False)
    stream = make_stream(20_000, seed=11)
    tlms: list[Telemetry] = []
    judges: list[tuple[int, int, float]] = []
    errs: list[tuple[str, str]] = []
    try:
        drv = RcCarDriver(
            fake.port,
            on_telemetry=tlms.append,
            on_judge=lambda *a: judges.append(a),
            on_error=lambda c, t: errs.append((c, t)),
        )
        drv.connect()
        base = drv.dropped
        t0 = time.perf_counter()
        for i in range(0, len(stream.data), 4096):
            fake.send_raw(stream.data[i : i + 4096])
        n_tlm = sum(m.type == "TLM" for m in stream.valid)
        n_err = sum(m.type == "ERR" for m in stream.valid)
        assert fake.wait_for(lambda: len(tlms) + len(judges) + len(errs) >= len(stream.valid), 10)
        dt = time.perf_counter() - t0
        assert drv.is_connected
        drv.disconnect()
    finally:
        fake.close()
    assert [round(t.t_device * 1e6) for t in tlms] == [
        int(m.fields[1]) for m in stream.valid if m.type == "TLM"
    ]
    assert len(tlms) == n_tlm and len(errs) == n_err
    assert [j[0] for j in judges] == [int(m.fields[0]) for m in stream.valid if m.type == "JDG"]
    assert drv.dropped - base == stream.n_bad
    for reason, n in stream.bad.items():
        assert drv.counts[reason] == n, reason
    print(
        f"\npty garbage: {len(stream.data) / 1e6:.2f} MB, {len(stream.valid)} valid +"
        f" {stream.n_bad} bad lines through the pty in {dt:.2f} s"
    )


def test_a_port_in_use_is_refused(car: FakeCar) -> None:
    with RcCarDriver(car.port):
        with pytest.raises(DeviceError, match="busy"):
            RcCarDriver(car.port).connect()

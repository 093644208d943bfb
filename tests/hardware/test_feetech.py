"""The Feetech packet codec and `FeetechBus` over real ptys, against the emulated servos' bus."""

from __future__ import annotations

import math
import os
import threading
import time

import pytest

from hardware import feetech
from hardware.emulators.arm.bus import BusFaults, PtyServoBus, ServoBus, open_pty
from hardware.feetech import Bad, FeetechBus, Packet, StatusParser
from realsim.errors import DeviceError

IDS = [1, 2, 3, 4, 5, 6]
NAMES = {1: "shoulder_pan", 2: "shoulder_lift", 3: "elbow_flex", 4: "wrist_flex", 5: "wrist_roll",
         6: "gripper"}


# ---------------------------------------------------------------- codec


def test_packets_match_the_protocol() -> None:
    assert feetech.ping_packet(1) == bytes.fromhex("ffff010201fb")
    assert feetech.read_packet(1, 56, 2) == bytes.fromhex("ffff0104023802be")
    p = feetech.sync_read_packet(56, 8, [1, 2, 3])
    assert p[:7] == bytes.fromhex("fffffe07823808") and p[-1] == feetech.checksum(p[2:-1])
    w = feetech.sync_write_packet(42, 2, {1: feetech.u16(2048), 2: feetech.u16(3000)})
    assert w[4] == feetech.SYNC_WRITE and w[3] == len(w) - 4
    assert feetech.sign_magnitude(0x8000 | 100, 15) == -100
    assert feetech.sign_magnitude(0x400 | 500, 10) == -500
    assert feetech.to_sign_magnitude(-500, 10) == 0x400 | 500


def test_calibration_counts_and_si() -> None:
    pan = feetech.revolute("shoulder_pan", -1.9, 1.9)
    assert pan.to_si(2048) == 0.0
    assert pan.to_si(2048 + 1024) == pytest.approx(math.pi / 2)
    assert pan.to_counts(0.0) == 2048
    assert pan.to_counts(5.0) == pan.to_counts(1.9)  # clamped to the limit
    assert pan.to_counts(float("nan")) == pan.to_counts(-1.9)
    grip = feetech.linear("gripper", 2048, 3000, 0.0, 0.07)
    assert grip.to_si(3000) == pytest.approx(0.07) and grip.to_si(2048) == pytest.approx(0.0)
    assert grip.to_counts(0.035) == 2524 and grip.to_counts(1.0) == 3000


def test_parser_resynchronises_on_ff_ff() -> None:
    good = [feetech.encode_packet(i, 0, bytes(range(i, i + 8))) for i in (1, 2, 3)]
    bad_sum = bytearray(good[1])
    bad_sum[-1] ^= 0xFF
    bad_len = bytearray(good[2])
    bad_len[3] = 120  # a corrupted length must not swallow what follows
    stream = (b"\x13\x37\xff" + good[0] + b"\xff\xff\xff" + bytes(bad_sum) + bytes(bad_len)
              + b"\x00garbage" + good[1] + good[2])
    expect = {i: 10 for i in (1, 2, 3)}
    for chunking in (len(stream), 1, 7):  # whole, byte by byte, odd chunks
        parser = StatusParser()
        items: list[Packet | Bad] = []
        for k in range(0, len(stream), chunking):
            items += parser.feed(stream[k:k + chunking], expect)
        packets = [i for i in items if isinstance(i, Packet)]
        bads = [i.kind for i in items if isinstance(i, Bad)]
        assert [p.id for p in packets] == [1, 2, 3], chunking
        assert packets[2].params == bytes(range(3, 11))
        assert feetech.CHECKSUM in bads and feetech.CORRUPT in bads
        assert parser.garbage > 0


# ---------------------------------------------------------------- the bus over a pty


def _bus(faults: BusFaults | None = None) -> tuple[ServoBus, PtyServoBus]:
    bus = ServoBus(IDS, faults=faults)
    return bus, PtyServoBus(bus)


def test_clean_bus_ping_read_write_sync() -> None:
    bus, srv = _bus()
    with srv as path, FeetechBus(path, names=NAMES) as fb:
        assert all(fb.ping(i) for i in IDS)
        assert not fb.ping(7)  # nobody there: False, after the bounded retries
        fb.write(2, 42, feetech.u16(2100))
        assert bus.regs[2][42:44] == feetech.u16(2100)
        assert fb.read(2, 42, 2) == feetech.u16(2100)
        fb.sync_write(42, 2, {i: feetech.u16(2000 + i) for i in IDS})
        replies = fb.sync_read(40, 4, IDS)
        assert {i: replies[i].u16(2) for i in IDS} == {i: 2000 + i for i in IDS}
        t = time.perf_counter()
        for _ in range(100):
            fb.sync_read(*feetech.STATE_BLOCK, IDS)
        per = (time.perf_counter() - t) / 100
        assert fb.counts[feetech.CHECKSUM] == fb.counts[feetech.CORRUPT] == 0
    print(f"SYNC_READ of 6 servos over a pty: {per * 1e3:.2f} ms")


def test_checksum_error_on_every_tenth_reply_is_counted_and_retried() -> None:
    bus, srv = _bus(BusFaults(checksum_every=10))
    with srv as path, FeetechBus(path, names=NAMES) as fb:
        for _ in range(200):
            r = fb.sync_read(*feetech.STATE_BLOCK, IDS)
            assert sorted(r) == IDS
        injected = bus.stats["checksum_injected"]
        assert injected >= 120  # 1200+ replies
        assert fb.counts[feetech.CHECKSUM] == injected
        assert fb.counts[feetech.RETRIES] >= injected


def test_corrupted_replies_and_noise_are_counted_and_retried() -> None:
    bus, srv = _bus(BusFaults(corrupt_every=7, garbage_every=5))
    with srv as path, FeetechBus(path, names=NAMES) as fb:
        for _ in range(150):
            assert sorted(fb.sync_read(*feetech.STATE_BLOCK, IDS)) == IDS
        c = fb.counts
        assert bus.stats["corrupt_injected"] > 50 and bus.stats["garbage_injected"] > 50
        assert c[feetech.CHECKSUM] + c[feetech.CORRUPT] + c[feetech.SHORT] >= \
            0.9 * bus.stats["corrupt_injected"]
        assert c[feetech.GARBAGE] > 0 and c[feetech.RETRIES] > 0


def test_a_servo_that_stops_answering_is_a_clear_error_never_a_hang() -> None:
    bus, srv = _bus(BusFaults(drop_servo=3, drop_after_s=0.3))
    with srv as path, FeetechBus(path, names=NAMES, timeout=0.02, retries=3) as fb:
        fb.sync_read(*feetech.STATE_BLOCK, IDS)
        time.sleep(0.35)
        t = time.perf_counter()
        with pytest.raises(DeviceError) as e:
            fb.sync_read(*feetech.STATE_BLOCK, IDS)
        took = time.perf_counter() - t
        assert str(e.value) == f"servo 3 (elbow_flex) does not answer SYNC_READ on {path} after 3 retries"
        assert took < 0.5  # 4 tries of ~20-30 ms each
        assert fb.failures_by_id[3] == 4 and fb.counts[feetech.TIMEOUT] >= 4
        # the others still answer
        assert sorted(fb.sync_read(*feetech.STATE_BLOCK, [1, 2, 4, 5, 6])) == [1, 2, 4, 5, 6]


def test_a_whole_bus_stall_shorter_than_the_patience_is_waited_out() -> None:
    srv = PtyServoBus(ServoBus(IDS))  # not serving yet: every servo silent, as on a starved host
    timer = threading.Timer(0.2, srv.start)
    timer.start()
    try:
        with FeetechBus(srv.path, names=NAMES, timeout=0.02, retries=1, patience=1.0) as fb:
            assert sorted(fb.sync_read(*feetech.STATE_BLOCK, IDS)) == IDS
            assert fb.counts[feetech.STALLS] >= 1  # counted, not hidden
    finally:
        timer.join()
        srv.close()


def test_a_silent_bus_fails_once_its_patience_is_spent() -> None:
    master, slave, path = open_pty()  # nobody answers on it
    try:
        with FeetechBus(path, names=NAMES, timeout=0.015, retries=1, patience=0.3) as fb:
            t = time.perf_counter()
            with pytest.raises(DeviceError, match=r"servo 1 \(shoulder_pan\) does not answer SYNC_READ"):
                fb.sync_read(*feetech.STATE_BLOCK, IDS)
            assert 0.3 <= time.perf_counter() - t < 0.7
            assert fb.counts[feetech.STALLS] >= 1
    finally:
        os.close(master)
        os.close(slave)


def test_a_dead_port_is_bounded() -> None:
    master, slave, path = open_pty()  # nobody answers on it
    try:
        with FeetechBus(path, names=NAMES, timeout=0.015, retries=2) as fb:
            t = time.perf_counter()
            with pytest.raises(DeviceError, match=r"servo 1 \(shoulder_pan\) does not answer READ"):
                fb.read(1, 56, 2)
            assert time.perf_counter() - t < 0.3
    finally:
        os.close(master)
        os.close(slave)
    with pytest.raises(DeviceError, match="cannot open servo bus /dev/nonexistent: no such device"):
        FeetechBus("/dev/nonexistent").open()

"""The protocol-v1 line codec: checksums, encoding, every reason to drop, the framer."""

from __future__ import annotations

import os
import random
import time

import pytest

from hardware import nmea
from tests.hardware._garbage import make_stream


def test_checksum_of_a_textbook_nmea_sentence() -> None:
    body = b"GPGGA,123519,4807.038,N,01131.000,E,1,08,0.9,545.4,M,46.9,M,,"
    assert nmea.checksum(body) == 0x47
    assert nmea.decode(b"$" + body + b"*47\r\n", schema=None) == nmea.Message(
        "GPGGA", tuple(body.decode().split(",")[1:])
    )


def test_encode_writes_the_full_line() -> None:
    assert nmea.encode("HLO") == b"$HLO*%02X\r\n" % nmea.checksum(b"HLO")
    line = nmea.encode("DRV", 7, -1000, 250)
    assert line.startswith(b"$DRV,7,-1000,250*") and line.endswith(b"\r\n")
    assert nmea.parse(line) == nmea.Message("DRV", ("7", "-1000", "250"))
    assert nmea.encode("JDG", 3, True, 0.25).startswith(b"$JDG,3,1,0.25*")
    assert nmea.parse(nmea.encode("JDG", 3, 1, 1e-5)).float(2) == pytest.approx(1e-5)
    assert nmea.parse(nmea.encode("JDG", 3, 1, 2.0)).float(2) == 2.0


@pytest.mark.parametrize("bad", ["a,b", "x*", "$", "tab\t", "é", float("nan")])
def test_encode_refuses_what_a_line_cannot_carry(bad: object) -> None:
    with pytest.raises(ValueError):
        nmea.encode("ERR", 1, bad)


def test_roundtrip_every_v1_type() -> None:
    lines = [
        ("HLO",),
        ("DRV", 0, 1000, -1000),
        ("STP",),
        ("EPS", 4),
        ("EPE", 4),
        ("INF", 1, "fw-2.3", "car", 50),
        ("TLM", -1, 2**32 - 1, -(2**31), 1, -2, 3, 8400, 7),
        ("JDG", 1, 0, 0.3125),
        ("ERR", "E7", "motor hot"),
    ]
    for t, *fields in lines:
        m = nmea.decode(nmea.encode(t, *fields))
        assert isinstance(m, nmea.Message), (t, m)
        assert m.type == t and len(m.fields) == len(fields)
        assert m.encode() == nmea.encode(t, *fields)


@pytest.mark.parametrize(
    "line, reason",
    [
        (b"HLO*00", nmea.BAD_FRAMING),  # no '$'
        (b"$HLO", nmea.BAD_FRAMING),  # no checksum
        (b"$HLO*4", nmea.BAD_FRAMING),
        (b"$HLO*ZZ", nmea.BAD_FRAMING),
        (b"$HL\x00O*00", nmea.BAD_FRAMING),
        (b"$HLO*00", nmea.BAD_CHECKSUM),
        (b"", nmea.BAD_FRAMING),
        (b"\xff\xfe\xfd", nmea.BAD_FRAMING),
    ],
)
def test_decode_rejects_with_a_reason(line: bytes, reason: str) -> None:
    r = nmea.decode(line)
    assert isinstance(r, nmea.Reject) and r.reason == reason
    assert nmea.parse(line) is None


def _signed(body: str) -> bytes:
    return b"$%s*%02X" % (body.encode(), nmea.checksum(body.encode()))


@pytest.mark.parametrize(
    "body, reason",
    [
        ("FOO,1", nmea.UNKNOWN_TYPE),
        ("DRV,1,2", nmea.FIELD_COUNT),
        ("HLO,1", nmea.FIELD_COUNT),
        ("DRV,-1,0,0", nmea.BAD_NUMBER),  # seq is uint32
        ("DRV,4294967296,0,0", nmea.BAD_NUMBER),
        ("DRV,1,1.5,0", nmea.BAD_NUMBER),
        ("DRV,1, 5,0", nmea.BAD_NUMBER),
        ("DRV,1,,0", nmea.BAD_NUMBER),
        ("TLM,-2,0,0,0,0,0,0,0", nmea.BAD_NUMBER),  # ack >= -1
        ("JDG,1,2,0.5", nmea.BAD_NUMBER),  # success is 0 or 1
        ("JDG,1,1,nan", nmea.BAD_NUMBER),
        ("JDG,1,1,1e999", nmea.BAD_NUMBER),
        ("INF,1,fw,car,fast", nmea.BAD_NUMBER),
    ],
)
def test_schema_rejections(body: str, reason: str) -> None:
    r = nmea.decode(_signed(body))
    assert isinstance(r, nmea.Reject) and r.reason == reason, r


def test_directional_schemas() -> None:
    drv = nmea.encode("DRV", 1, 2, 3)
    tlm = nmea.encode("TLM", 1, 2, 3, 4, 5, 6, 7, 0)
    assert nmea.parse(drv, nmea.HOST_TO_CAR) and not nmea.parse(drv, nmea.CAR_TO_HOST)
    assert nmea.parse(tlm, nmea.CAR_TO_HOST) and not nmea.parse(tlm, nmea.HOST_TO_CAR)
    assert nmea.parse(_signed("ANY,x,y"), schema=None) == nmea.Message("ANY", ("x", "y"))


def test_reader_handles_any_chunking() -> None:
    s = make_stream(2000, seed=1)
    whole = nmea.LineReader(nmea.CAR_TO_HOST)
    got = whole.feed(s.data)
    bytewise = nmea.LineReader(nmea.CAR_TO_HOST)
    got1 = [m for i in range(len(s.data)) for m in bytewise.feed(s.data[i : i + 1])]
    rng = random.Random(2)
    cuts = sorted(rng.sample(range(1, len(s.data)), 300))
    chunks = [s.data[a:b] for a, b in zip([0, *cuts], [*cuts, len(s.data)], strict=True)]
    chunked = nmea.LineReader(nmea.CAR_TO_HOST)
    got2 = chunked.feed_all(chunks)
    assert got == got1 == got2 == s.valid
    assert whole.counts == bytewise.counts == chunked.counts
    assert whole.dropped == s.n_bad


def test_reader_resyncs_on_dollar_and_ignores_blank_lines() -> None:
    r = nmea.LineReader()
    good = nmea.encode("STP")
    assert r.feed(b"$TLM,1,2" + good + b"\r\n\r\n  \r\n") == [nmea.Message("STP")]
    assert r.counts[nmea.BAD_FRAMING] == 1 and r.dropped == 1
    # a complete line that lost its CRLF is still read when the next one starts
    assert r.feed(good[:-2] + good) == [nmea.Message("STP")] * 2


def test_overlong_lines_are_dropped_once_and_the_buffer_stays_small() -> None:
    r = nmea.LineReader(max_line=256)
    good = nmea.encode("HLO")
    for _ in range(50):  # 50 kB without a line end
        assert r.feed(b"A" * 1000) == []
        assert len(r._buf) <= 256
    assert r.feed(b"tail\r\n" + good) == [nmea.Message("HLO")]
    assert r.counts[nmea.OVERLONG] == 1 and r.dropped == 1
    # an overlong junk run cut short by '$' still lets the next line through
    assert r.feed(b"B" * 300 + good) == [nmea.Message("HLO")]
    assert r.counts[nmea.OVERLONG] == 2
    assert r.feed(b"C" * 300) == [] and r.feed(good) == [nmea.Message("HLO")]
    assert r.counts[nmea.OVERLONG] == 3


def test_random_bytes_never_raise() -> None:
    rng = random.Random(3)
    r = nmea.LineReader()
    for _ in range(2000):
        r.feed(os.urandom(rng.randint(0, 300)))
        nmea.decode(os.urandom(rng.randint(0, 40)))
    r.feed(None)  # type: ignore[arg-type]
    assert isinstance(nmea.decode(None), nmea.Reject)  # type: ignore[arg-type]
    assert len(r._buf) <= nmea.MAX_LINE


def test_fuzz_1e5_lines_exact_counts() -> None:
    s = make_stream(100_000, seed=4)
    r = nmea.LineReader(nmea.CAR_TO_HOST)
    data = s.data
    rng = random.Random(5)
    chunks, i = [], 0
    while i < len(data):
        n = rng.randint(1, 4096)
        chunks.append(data[i : i + n])
        i += n
    t0 = time.perf_counter()
    got = r.feed_all(chunks)
    dt = time.perf_counter() - t0
    assert got == s.valid
    for reason in nmea.DROP_REASONS:
        assert r.counts[reason] == s.bad.get(reason, 0), reason
    assert r.dropped == s.n_bad
    n = len(s.valid) + s.n_bad + s.blank
    print(
        f"\nLineReader: {n} lines ({s.n_bad} bad), {len(data) / 1e6:.1f} MB in {dt:.2f} s"
        f" = {n / dt:,.0f} lines/s"
    )

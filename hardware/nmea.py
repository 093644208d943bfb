"""The NMEA-style line codec of serial protocol v1 (docs: spec/rc_car.md).

A line on the wire is ``$<TYPE>,<field>,...*<CS>\\r\\n`` where ``<CS>`` is two hex
digits, the XOR of every byte between ``$`` and ``*``. The RC car speaks it on
its USB serial port and the arm's control port carries its ``EPS``/``EPE``/``JDG``
lines, so both drivers and both emulators share this module.

Receiving never raises: `decode` returns a `Message` or a `Reject` naming the
reason, and `LineReader` turns arbitrary byte chunks (partial lines, binary
noise, overlong junk) into valid messages while counting every dropped line by
reason. A ``$`` always starts a new sentence, so a line cut short (for example
by a reconnect) costs only itself, never the valid line that follows it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

# Reasons a received line is dropped; the keys of `LineReader.counts`.
BAD_FRAMING = "bad_framing"  #: not ``$...*HH``, or a byte that may not appear in a line
BAD_CHECKSUM = "bad_checksum"  #: the two hex digits disagree with the XOR of the body
UNKNOWN_TYPE = "unknown_type"  #: a TYPE the schema does not list
FIELD_COUNT = "field_count"  #: the TYPE is known but has the wrong number of fields
BAD_NUMBER = "bad_number"  #: a numeric field that does not parse or is out of range
OVERLONG = "overlong"  #: longer than `LineReader.max_line` bytes without a line end
DROP_REASONS: tuple[str, ...] = (
    BAD_FRAMING,
    BAD_CHECKSUM,
    UNKNOWN_TYPE,
    FIELD_COUNT,
    BAD_NUMBER,
    OVERLONG,
)

MAX_LINE = 256
"""Default cap on one line, in bytes (a v1 TLM line is under 100)."""


@dataclass(frozen=True)
class Field:
    """How one field of a line is validated.

    kind ``"int"``: a decimal integer ``-?[0-9]+`` within ``[lo, hi]``;
    ``"dec"``: a finite decimal number (``-1.5``, ``0.25``, ``3e-2``);
    ``"text"``: printable ASCII without ``$ * ,`` (may be empty).
    """

    name: str
    kind: str
    lo: int | None = None
    hi: int | None = None


_U32 = (0, 2**32 - 1)
_I32 = (-(2**31), 2**31 - 1)


def _int(name: str, rng: tuple[int, int] = _I32) -> Field:
    return Field(name, "int", rng[0], rng[1])


def _dec(name: str) -> Field:
    return Field(name, "dec")


def _text(name: str) -> Field:
    return Field(name, "text")


Schema = Mapping[str, tuple[Field, ...]]

HOST_TO_CAR: Schema = {
    "HLO": (),
    "DRV": (_int("seq", _U32), _int("steer"), _int("throttle")),
    "STP": (),
    "EPS": (_int("episode", _U32),),
    "EPE": (_int("episode", _U32),),
}
"""Lines the host sends to the car (and to the arm's control port: EPS/EPE)."""

CAR_TO_HOST: Schema = {
    "INF": (_int("protocol"), _text("firmware"), _text("name"), _dec("telemetry_hz")),
    "TLM": (
        _int("ack", (-1, 2**32 - 1)),
        _int("t_us", _U32),
        _int("enc"),
        _int("gz"),
        _int("ax"),
        _int("ay"),
        _int("vbat", (0, 2**31 - 1)),
        _int("flags", (0, 2**31 - 1)),
    ),
    "JDG": (_int("episode", _U32), _int("success", (0, 1)), _dec("score")),
    "ERR": (_text("code"), _text("text")),
}
"""Lines the car (or an emulator's judge) sends to the host."""

PROTOCOL_V1: Schema = {**HOST_TO_CAR, **CAR_TO_HOST}
"""Every line type of protocol v1, both directions."""

_INT_RE = re.compile(r"-?[0-9]{1,20}\Z")
_DEC_RE = re.compile(r"-?(?:[0-9]{1,40}(?:\.[0-9]{0,40})?|\.[0-9]{1,40})(?:[eE][-+]?[0-9]{1,3})?\Z")
_TEXT_RE = re.compile(r"[\x20-\x7e]*\Z")  # $ * , are excluded earlier, by framing and split
_BODY_RE = re.compile(rb"[\x20-\x23\x25-\x29\x2b-\x7e]*\Z")  # printable ASCII minus $ and *
_TYPE_RE = re.compile(r"[A-Z0-9]{1,8}\Z")
_HEX = b"0123456789ABCDEFabcdef"


@dataclass(frozen=True)
class Message:
    """One valid line: its TYPE and its fields as the text that was on the wire."""

    type: str
    fields: tuple[str, ...] = ()

    def int(self, i: int) -> int:
        """Field ``i`` as an integer (the schema already checked it parses)."""
        return int(self.fields[i])

    def float(self, i: int) -> float:
        """Field ``i`` as a float."""
        return float(self.fields[i])

    def encode(self) -> bytes:
        """The line again, checksum and CRLF included."""
        return encode(self.type, *self.fields)


@dataclass(frozen=True)
class Reject:
    """A dropped line: why (one of `DROP_REASONS`) and the bytes (without CRLF)."""

    reason: str
    line: bytes


def checksum(body: bytes) -> int:
    """XOR of every byte of ``body`` (the bytes between ``$`` and ``*``), 0..255."""
    cs = 0
    for b in body:
        cs ^= b
    return cs


def _format_field(value: object) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"cannot send a non-finite number: {value!r}")
        if value == int(value) and abs(value) < 1e15:
            return f"{value:.1f}"
        text = repr(value)  # shortest text that reads back exactly
        if "e" in text or "E" in text:
            text = f"{value:.12f}".rstrip("0")
        return text
    text = str(value)
    if not _TEXT_RE.match(text) or any(c in text for c in "$*,"):
        raise ValueError(f"field {text!r} has a character a protocol line cannot carry")
    return text


def encode(type: str, *fields: object) -> bytes:
    """The full line ``$TYPE,f1,f2*CS\\r\\n`` as ASCII bytes.

    Integers (and bools, as 0/1) are written in decimal, floats as plain
    decimals, anything else with `str`. Raises `ValueError` for a field holding
    ``$ * ,`` or a non-printable character, or a non-finite float: those are
    the caller's bugs, never the wire's.
    """
    if not _TYPE_RE.match(type):
        raise ValueError(f"bad line type {type!r}")
    body = ",".join([type, *(_format_field(f) for f in fields)]).encode("ascii")
    return b"$%s*%02X\r\n" % (body, checksum(body))


def _check_fields(fields: tuple[str, ...], spec: tuple[Field, ...]) -> bool:
    for text, f in zip(fields, spec, strict=True):
        if f.kind == "int":
            if not _INT_RE.match(text):
                return False
            v = int(text)
            if (f.lo is not None and v < f.lo) or (f.hi is not None and v > f.hi):
                return False
        elif f.kind == "dec":
            if not _DEC_RE.match(text):
                return False
            try:
                if not math.isfinite(float(text)):
                    return False
            except (ValueError, OverflowError):
                return False
    return True


def decode(line: bytes, schema: Schema | None = PROTOCOL_V1) -> Message | Reject:
    """Check one line (CR/LF and surrounding blanks allowed) and split it.

    Returns a `Message` or a `Reject` with the first reason found, in the order
    framing, checksum, type, field count, numbers. ``schema=None`` accepts any
    TYPE and any fields. Never raises.
    """
    try:
        raw = bytes(line).strip(b" \t\r\n")
    except Exception:  # not bytes-like at all
        return Reject(BAD_FRAMING, b"")
    n = len(raw)
    if n < 4 or raw[0] != 0x24 or raw[n - 3] != 0x2A:  # '$' ... '*'
        return Reject(BAD_FRAMING, raw)
    hi, lo = raw[n - 2], raw[n - 1]
    if hi not in _HEX or lo not in _HEX:
        return Reject(BAD_FRAMING, raw)
    body = raw[1 : n - 3]
    if not _BODY_RE.match(body):
        return Reject(BAD_FRAMING, raw)
    if checksum(body) != int(raw[n - 2 :], 16):
        return Reject(BAD_CHECKSUM, raw)
    parts = body.decode("ascii").split(",")
    mtype, fields = parts[0], tuple(parts[1:])
    if schema is None:
        if not _TYPE_RE.match(mtype):
            return Reject(BAD_FRAMING, raw)
        return Message(mtype, fields)
    spec = schema.get(mtype)
    if spec is None:
        return Reject(UNKNOWN_TYPE, raw)
    if len(fields) != len(spec):
        return Reject(FIELD_COUNT, raw)
    if not _check_fields(fields, spec):
        return Reject(BAD_NUMBER, raw)
    return Message(mtype, fields)


def parse(line: bytes, schema: Schema | None = PROTOCOL_V1) -> Message | None:
    """`decode` without the reason: the `Message`, or None for a line to drop."""
    m = decode(line, schema)
    return m if isinstance(m, Message) else None


_SEP = re.compile(rb"[\n$]")


class LineReader:
    """Frames a byte stream into valid messages, counting what it drops.

    Feed it whatever the port returned (any chunking); it returns the valid
    messages completed by that chunk. A sentence ends at ``\\n`` or at the next
    ``$``; bytes between a line end and the next ``$`` that are not blank count
    as one ``bad_framing`` drop; blank lines are ignored. A line that grows past
    ``max_line`` bytes is dropped once as ``overlong`` and the rest of it skipped.
    The buffer never holds more than ``max_line`` bytes. Never raises.
    """

    def __init__(self, schema: Schema | None = PROTOCOL_V1, max_line: int = MAX_LINE) -> None:
        self.schema = schema
        self.max_line = max_line
        self.counts: dict[str, int] = dict.fromkeys(DROP_REASONS, 0)
        self.received = 0  #: valid messages returned so far
        self._buf = b""
        self._skipping = False  # inside an overlong line already counted

    @property
    def dropped(self) -> int:
        """Total lines dropped, all reasons."""
        return sum(self.counts.values())

    def reset(self) -> None:
        """Forget a partial line (counts are kept)."""
        self._buf = b""
        self._skipping = False

    def feed(self, data: bytes) -> list[Message]:
        """Take the next chunk of bytes; return the messages it completed, in order."""
        out: list[Message] = []
        try:
            buf = self._buf + bytes(data)
        except Exception:
            return out
        start = 0
        for m in _SEP.finditer(buf):
            pos = m.start()
            if buf[pos] == 0x24:  # '$': a new sentence begins, whatever came before ends
                self._finish(buf[start:pos], out)
                start = pos
            else:  # '\n'
                self._finish(buf[start:pos], out)
                start = pos + 1
        rest = buf[start:]
        if self._skipping:
            rest = b""
        elif len(rest) > self.max_line:
            self.counts[OVERLONG] += 1
            self._skipping = True
            rest = b""
        self._buf = rest
        return out

    def feed_all(self, chunks: Iterable[bytes]) -> list[Message]:
        """`feed` every chunk in turn; all messages, in order."""
        out: list[Message] = []
        for c in chunks:
            out.extend(self.feed(c))
        return out

    def _finish(self, segment: bytes, out: list[Message]) -> None:
        if self._skipping:  # the tail of a line already counted as overlong
            self._skipping = False
            return
        if len(segment) > self.max_line:
            self.counts[OVERLONG] += 1
            return
        segment = segment.strip(b" \t\r")
        if not segment:
            return
        res = decode(segment, self.schema)
        if isinstance(res, Message):
            self.received += 1
            out.append(res)
        else:
            self.counts[res.reason] += 1

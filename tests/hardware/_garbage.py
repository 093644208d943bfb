"""A generator of valid and garbled protocol lines whose drop count is exact.

Every bad line is unambiguous: it is dropped exactly once, for a known reason,
and never swallows a neighbour (bad lines carry no ``$`` or ``\\n`` except a
leading ``$``). Lines are joined by ``\\r\\n``, except the "no CRLF" case, a
truncated line run straight into the next valid one.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from hardware import nmea

_PRINTABLE = bytes(b for b in range(0x20, 0x7F) if b not in b"$*,")
_TO_PRINTABLE = bytes(_PRINTABLE[b % len(_PRINTABLE)] for b in range(256))
_NO_DOLLAR_NL = bytes(b if b not in b"$\n" else 0x78 for b in range(256))


def _line(body: str) -> bytes:
    """A line with a correct checksum around an arbitrary body (str or bytes)."""
    b = body.encode("latin-1")
    return b"$%s*%02X" % (b, nmea.checksum(b))


def valid_line(rng: random.Random, k: int) -> tuple[bytes, nmea.Message]:
    r = rng.random()
    if r < 0.9:
        fields = (
            rng.randint(-1, 2**32 - 1),
            k,  # t_us doubles as an id
            rng.randint(-(2**31), 2**31 - 1),
            rng.randint(-500_000, 500_000),
            rng.randint(-16_000, 16_000),
            rng.randint(-16_000, 16_000),
            rng.randint(0, 9000),
            rng.randint(0, 7),
        )
        msg = nmea.Message("TLM", tuple(str(f) for f in fields))
    elif r < 0.97:
        msg = nmea.Message("JDG", (str(k), str(rng.randint(0, 1)), f"{rng.uniform(0, 3):.4f}"))
    else:
        text = "".join(rng.choice("abcdefgh XYZ_-.0123") for _ in range(rng.randint(0, 20)))
        msg = nmea.Message("ERR", (str(rng.randint(0, 99)), text))
    return nmea.encode(msg.type, *msg.fields)[:-2], msg


def _noise(rng: random.Random, n: int) -> bytes:
    out = rng.randbytes(n).translate(_NO_DOLLAR_NL)
    if not out.strip(b" \t\r"):
        out += b"x"
    return out


def bad_line(rng: random.Random, k: int) -> tuple[bytes, str, bool]:
    """(line without CRLF, reason, crlf) for one garbled line."""
    good, _ = valid_line(rng, k)
    kind = rng.randrange(10)
    if kind == 0:  # binary noise
        return _noise(rng, rng.randint(1, 60)), nmea.BAD_FRAMING, True
    if kind == 1:  # truncated, with CRLF
        return good[: rng.randint(1, len(good) - 1)], nmea.BAD_FRAMING, True
    if kind == 2:  # truncated, no CRLF: runs straight into the next line
        return good[: rng.randint(1, len(good) - 1)], nmea.BAD_FRAMING, False
    if kind == 3:  # a checksum digit flipped
        i = len(good) - rng.randint(1, 2)
        c = good[i]
        new = rng.choice([h for h in b"0123456789ABCDEF" if h != c])
        return good[:i] + bytes([new]) + good[i + 1 :], nmea.BAD_CHECKSUM, True
    if kind == 4:  # a body character changed (checksum now wrong)
        i = rng.randint(1, len(good) - 4)
        new = rng.choice([b for b in _PRINTABLE if b != good[i]])
        return good[:i] + bytes([new]) + good[i + 1 :], nmea.BAD_CHECKSUM, True
    if kind == 5:  # wrong field count, correct checksum
        n = rng.choice([0, 1, 2, 7, 9, 12])
        return (
            _line("TLM" + "".join(f",{rng.randint(0, 99)}" for _ in range(n))),
            nmea.FIELD_COUNT,
            True,
        )
    if kind == 6:  # huge / malformed numbers, correct checksum
        bad = rng.choice(
            ["99999999999999999999", "-4294967297", "1.5", "0x10", "", " 1", "1e3", "--1"]
        )
        fields = ["0", "1", "2", "3", "4", "5", "6", "7"]
        fields[rng.randrange(8)] = bad
        return _line("TLM," + ",".join(fields)), nmea.BAD_NUMBER, True
    if kind == 7:  # non-ASCII inside, correct checksum
        body = bytearray(good[1:-3])
        body.insert(rng.randint(0, len(body)), rng.randint(0x80, 0xFF))
        return _line(body.decode("latin-1")), nmea.BAD_FRAMING, True
    if kind == 8:  # unknown type, correct checksum (DRV is host->car only)
        t = rng.choice(["FOO", "XYZ", "DRV", "GPGGA", "tlm"])
        return _line(t + ",1,2,3"), nmea.UNKNOWN_TYPE, True
    # kind 9: overlong, no line end for a long while
    n = rng.randint(nmea.MAX_LINE + 1, 3 * nmea.MAX_LINE)
    return rng.randbytes(n).translate(_TO_PRINTABLE), nmea.OVERLONG, True


@dataclass
class Stream:
    data: bytes = b""
    valid: list[nmea.Message] = field(default_factory=list)
    bad: dict[str, int] = field(default_factory=dict)
    blank: int = 0

    @property
    def n_bad(self) -> int:
        return sum(self.bad.values())


def make_stream(n_lines: int, seed: int = 0, p_bad: float = 0.5) -> Stream:
    """About ``n_lines`` lines, a fraction ``p_bad`` garbled, some blank ones (not counted)."""
    rng = random.Random(seed)
    parts: list[bytes] = []
    s = Stream()
    k = 0
    while k < n_lines:
        k += 1
        r = rng.random()
        if r < 0.01:
            parts.append(rng.choice([b"\r\n", b"\n", b"  \r\n"]))
            s.blank += 1
        elif r < 0.01 + p_bad:
            line, reason, crlf = bad_line(rng, k)
            s.bad[reason] = s.bad.get(reason, 0) + 1
            if crlf:
                parts.append(line + b"\r\n")
            else:  # the next line must be a valid one, starting with '$'
                good, msg = valid_line(rng, k)
                k += 1
                parts.append(line + good + b"\r\n")
                s.valid.append(msg)
        else:
            good, msg = valid_line(rng, k)
            parts.append(good + b"\r\n")
            s.valid.append(msg)
    s.data = b"".join(parts)
    return s

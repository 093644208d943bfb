"""Feetech STS/SCS serial-bus servos (STS3215) spoken over pyserial (docs: spec/arm.md).

Packets are ``FF FF <id> <len> <instr|error> <params...> <chk>`` with ``len`` =
number of params + 2 and ``chk`` = NOT of the low byte of the sum of every byte
after the header. Registers are little-endian.

Why pyserial and not the vendor's ``feetech-servo-sdk`` (``scservo_sdk``, which
LeRobot wraps): the protocol is a dozen lines; the SDK's receive loop spins on a
non-blocking port without sleeping (one CPU core per waiting bus, on a 2-core
host next to the emulator and the cameras), measures its timeouts on the wall
clock (``time.time``), gives up a whole ``GroupSyncRead`` at the first servo
that fails (so one bad reply loses the other five), never retries and counts
nothing. Here a reply is awaited with ``select`` against a monotonic deadline,
each listed servo's reply is accepted on its own, only the missing ones are
asked again, and every fault is counted by kind.

`FeetechBus` is the host side: `ping`, `read`, `write`, `sync_read`,
`sync_write`, each bounded in time (no call blocks longer than about
``(retries + 1) * timeout``) and raising `realsim.errors.DeviceError` with one
line naming the servo, its joint and the port when a servo stays silent.
`StatusParser` frames any byte stream into status packets, resynchronising on
``FF FF`` after garbage. `JointCalibration` maps counts to SI and back.
The emulator uses `encode_packet` and `StatusParser` (without expectations) for its side.
"""

from __future__ import annotations

import math
import os
import select
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import serial

from realsim.errors import DeviceError

# ---------------------------------------------------------------- protocol constants

HEADER = b"\xff\xff"
BROADCAST_ID = 0xFE
MAX_ID = 0xFD  #: highest id a servo may have

PING = 0x01
READ = 0x02
WRITE = 0x03
SYNC_READ = 0x82
SYNC_WRITE = 0x83

# Registers (address, size in bytes) of the STS3215 (spec/arm.md).
P_COEFFICIENT = (21, 1)
TORQUE_ENABLE = (40, 1)
ACCELERATION = (41, 1)
GOAL_POSITION = (42, 2)
PRESENT_POSITION = (56, 2)
PRESENT_SPEED = (58, 2)
PRESENT_LOAD = (60, 2)
PRESENT_VOLTAGE = (62, 1)
PRESENT_TEMPERATURE = (63, 1)
MOVING = (66, 1)
STATE_BLOCK = (56, 8)
"""Present_Position .. Present_Temperature in one read: pos(2) speed(2) load(2) volt(1) temp(1)."""

COUNTS_PER_TURN = 4096
RAD_PER_COUNT = 2.0 * math.pi / COUNTS_PER_TURN

# Status error-byte bits (Feetech STS).
ERROR_BITS = {
    0x01: "voltage",
    0x02: "angle sensor",
    0x04: "overheat",
    0x08: "overcurrent",
    0x20: "overload",
}

# Fault counters of `FeetechBus.counts`.
TIMEOUT = "timeout"  #: an expected reply never started within the deadline
SHORT = "short"  #: a reply started but was cut off at the deadline
CHECKSUM = "checksum"  #: a reply whose checksum byte is wrong
CORRUPT = "corrupt"  #: a header with an impossible id/length/error byte, or a length not asked for
UNEXPECTED = "unexpected"  #: a valid reply from a servo that was not asked
GARBAGE = "garbage_bytes"  #: bytes skipped while resynchronising on FF FF (a byte count)
RETRIES = "retries"  #: packets sent again because a reply was missing or bad
SERVO_ERROR = "servo_error"  #: valid replies whose error byte was not 0
STALLS = "bus_stalls"  #: SYNC_READ rounds in which every servo stayed silent through the retries
FAULT_KINDS: tuple[str, ...] = (TIMEOUT, SHORT, CHECKSUM, CORRUPT, UNEXPECTED, GARBAGE, RETRIES,
                                SERVO_ERROR, STALLS)


def checksum(body: Iterable[int]) -> int:
    """NOT of the low byte of the sum of ``body`` (id, len, instr/error, params)."""
    return (~sum(body)) & 0xFF


def encode_packet(servo_id: int, code: int, params: bytes | Sequence[int] = b"") -> bytes:
    """One packet: ``FF FF id len code params chk`` (``code`` = instruction or error byte)."""
    p = bytes(params)
    if not 0 <= servo_id <= 0xFE:
        raise ValueError(f"servo id {servo_id} out of 0..254")
    if len(p) > 250:
        raise ValueError(f"{len(p)} parameter bytes do not fit one packet")
    body = bytes((servo_id, len(p) + 2, code & 0xFF)) + p
    return HEADER + body + bytes((checksum(body),))


def ping_packet(servo_id: int) -> bytes:
    """PING ``servo_id``."""
    return encode_packet(servo_id, PING)


def read_packet(servo_id: int, address: int, length: int) -> bytes:
    """READ ``length`` bytes from ``address``."""
    return encode_packet(servo_id, READ, (address, length))


def write_packet(servo_id: int, address: int, data: bytes) -> bytes:
    """WRITE ``data`` at ``address``."""
    return encode_packet(servo_id, WRITE, bytes((address,)) + bytes(data))


def sync_read_packet(address: int, length: int, ids: Sequence[int]) -> bytes:
    """SYNC_READ (broadcast): each listed servo answers ``length`` bytes from ``address``, in order."""
    return encode_packet(BROADCAST_ID, SYNC_READ, bytes((address, length, *ids)))


def sync_write_packet(address: int, length: int, data: Mapping[int, bytes]) -> bytes:
    """SYNC_WRITE (broadcast, no reply): ``data[id]`` (``length`` bytes each) at ``address``."""
    params = bytearray((address, length))
    for sid, d in data.items():
        if len(d) != length:
            raise ValueError(f"servo {sid}: {len(d)} bytes, expected {length}")
        params.append(sid)
        params += d
    return encode_packet(BROADCAST_ID, SYNC_WRITE, bytes(params))


def u16(value: int) -> bytes:
    """Little-endian 2-byte register value."""
    return int(value & 0xFFFF).to_bytes(2, "little")


def sign_magnitude(raw: int, sign_bit: int) -> int:
    """Decode a Feetech sign-magnitude field: bit ``sign_bit`` set = negative."""
    mag = raw & ((1 << sign_bit) - 1)
    return -mag if raw & (1 << sign_bit) else mag


def to_sign_magnitude(value: int, sign_bit: int) -> int:
    """Encode ``value`` as sign-magnitude with the sign in bit ``sign_bit`` (magnitude clamped)."""
    mag = min(abs(int(value)), (1 << sign_bit) - 1)
    return mag | (1 << sign_bit) if value < 0 else mag


# ---------------------------------------------------------------- framing


@dataclass(frozen=True)
class Packet:
    """One framed packet: id, code (instruction or error byte) and parameter bytes."""

    id: int
    code: int
    params: bytes


@dataclass(frozen=True)
class Bad:
    """A packet that failed: `kind` is one of `CHECKSUM`, `CORRUPT`; id as read (may be wrong)."""

    kind: str
    id: int


class StatusParser:
    """Frames status packets out of arbitrary byte chunks, resynchronising on ``FF FF``.

    ``expected_len(id) -> int | None`` gives the ``len`` byte each servo's reply
    must carry (params + 2); a header with another length, an id above 0xFD or
    an error byte above 0x7F is `CORRUPT` and costs only its first byte, so a
    corrupted length never swallows the good replies behind it. Bytes skipped
    before a header add to `garbage`. ``max_id=0xFE`` frames the host's
    instruction packets instead (the servo side). Never raises.
    """

    def __init__(self, max_len: int = 252, max_id: int = MAX_ID) -> None:
        self.buf = bytearray()
        self.max_len = max_len
        self.max_id = max_id
        self.garbage = 0

    def reset(self) -> None:
        """Forget buffered bytes."""
        self.buf.clear()

    def feed(self, data: bytes, expected_len: Mapping[int, int] | None = None) -> list[Packet | Bad]:
        """Take bytes; return the packets (or failures) they completed, in order."""
        self.buf += data
        out: list[Packet | Bad] = []
        buf = self.buf
        while True:
            i = buf.find(HEADER)
            if i < 0:
                keep = 1 if buf.endswith(b"\xff") else 0
                self.garbage += len(buf) - keep
                del buf[: len(buf) - keep]
                return out
            if i:
                self.garbage += i
                del buf[:i]
            if len(buf) < 4:
                return out
            sid, ln = buf[2], buf[3]
            if sid == 0xFF:  # FF FF FF ...: the header starts one byte later
                self.garbage += 1
                del buf[:1]
                continue
            want = None if expected_len is None else expected_len.get(sid)
            if sid > self.max_id or ln < 2 or ln > self.max_len or (want is not None and ln != want):
                out.append(Bad(CORRUPT, sid))
                del buf[:2]
                continue
            total = ln + 4
            if len(buf) >= 5 and buf[4] > 0x7F and expected_len is not None:
                out.append(Bad(CORRUPT, sid))
                del buf[:2]
                continue
            if len(buf) < total:
                return out
            body = bytes(buf[2 : total - 1])
            if checksum(body) != buf[total - 1]:
                out.append(Bad(CHECKSUM, sid))
                del buf[:2]  # resync: the real next header may be inside this one
                continue
            out.append(Packet(sid, body[2], body[3:]))
            del buf[:total]

    @property
    def partial(self) -> bool:
        """True while a header has been seen but its packet is not complete."""
        return self.buf.startswith(HEADER)


# ---------------------------------------------------------------- calibration


@dataclass(frozen=True)
class JointCalibration:
    """Counts <-> SI for one joint: ``si = (counts - zero) * scale``, limits in SI.

    scale: SI units per count: rad/count for a revolute joint (2 pi / 4096),
    m/count for the gripper (0.07 m / 952). lo, hi: joint limits in SI.
    """

    name: str
    zero: int
    scale: float
    lo: float
    hi: float

    def to_si(self, counts: float) -> float:
        """Position counts -> rad (or m)."""
        return (counts - self.zero) * self.scale

    def speed_to_si(self, counts_per_s: float) -> float:
        """Speed counts/s -> rad/s (or m/s)."""
        return counts_per_s * self.scale

    def to_counts(self, value: float) -> int:
        """rad (or m) -> goal counts, clamped to the joint limits and to 0..4095."""
        v = min(max(float(value), self.lo), self.hi) if math.isfinite(value) else self.lo
        return int(min(max(round(self.zero + v / self.scale), 0), COUNTS_PER_TURN - 1))


def revolute(name: str, lo: float, hi: float, zero: int = 2048) -> JointCalibration:
    """A joint per spec/arm.md: count ``zero`` is the joint's zero, +1 count = +2 pi / 4096 rad."""
    return JointCalibration(name, zero, RAD_PER_COUNT, lo, hi)


def linear(name: str, c0: int, c1: int, x0: float, x1: float) -> JointCalibration:
    """A linear joint mapping counts ``c0..c1`` to ``x0..x1`` (SI); limits ``x0..x1``."""
    scale = (x1 - x0) / (c1 - c0)
    return JointCalibration(name, int(round(c0 - x0 / scale)), scale, min(x0, x1), max(x0, x1))


# ---------------------------------------------------------------- the bus


@dataclass(frozen=True)
class Reply:
    """A valid status packet: servo id, error byte (0 = fine) and data bytes."""

    id: int
    error: int
    data: bytes

    def u8(self, offset: int = 0) -> int:
        """Data byte at ``offset``."""
        return self.data[offset]

    def u16(self, offset: int = 0) -> int:
        """Little-endian 2 bytes at ``offset``."""
        return self.data[offset] | (self.data[offset + 1] << 8)


class FeetechBus:
    """Host side of a half-duplex Feetech bus on a serial port.

    port: device path (``/dev/ttyACM0``, a pty) or a pyserial URL.
    names: ``{id: joint name}`` used in error messages.
    timeout: how long to wait for one reply to start arriving, s; a reply at
        1 Mbaud takes well under 1 ms on the wire, so 20 ms covers a USB
        adapter's latency timer and a busy host. A SYNC_READ waits this plus
        ``per_reply`` s for each further servo listed.
    retries: extra attempts for a missing or bad reply before `DeviceError`.
    patience: s a SYNC_READ keeps asking while EVERY servo is silent (a whole-bus stall: a
        USB adapter hiccup, a starved host) before `DeviceError`; 3 retries of 20 ms are
        shorter than one scheduler stall on a loaded machine, and aborting a recording
        for it loses the episode. One silent servo among answering ones fails at once.

    Counters: `counts` (totals by kind, see `FAULT_KINDS`), `failures_by_id`
    (bad or missing replies per servo), `transactions`, `servo_errors` (last
    non-zero error byte per id). Not thread-safe: one thread owns the bus.
    """

    def __init__(
        self,
        port: str,
        *,
        baudrate: int = 1_000_000,
        names: Mapping[int, str] | None = None,
        timeout: float = 0.02,
        per_reply: float = 0.002,
        retries: int = 3,
        patience: float = 0.5,
    ) -> None:
        self.port = port
        self.baudrate = baudrate
        self.names = dict(names or {})
        self.timeout = float(timeout)
        self.per_reply = float(per_reply)
        self.retries = int(retries)
        self.patience = float(patience)
        self.counts: dict[str, int] = dict.fromkeys(FAULT_KINDS, 0)
        self.failures_by_id: dict[int, int] = {}
        self.servo_errors: dict[int, int] = {}
        self.transactions = 0
        self._ser: serial.Serial | None = None
        self._fd: int | None = None
        self._parser = StatusParser()

    # -- lifecycle ------------------------------------------------------------------------------

    def open(self) -> FeetechBus:
        """Open the port (8N1, ``baudrate``); `DeviceError` (one line) if it cannot be opened."""
        if self._ser is not None:
            return self
        try:
            ser = serial.serial_for_url(self.port, baudrate=self.baudrate, timeout=0,
                                        write_timeout=0.5, exclusive=True)
        except (serial.SerialException, OSError, ValueError) as e:
            why = "no such device" if "://" not in self.port and not os.path.exists(self.port) \
                else (str(e).splitlines()[0] if str(e) else type(e).__name__)
            raise DeviceError(f"cannot open servo bus {self.port}: {why}") from None
        self._ser = ser
        try:
            self._fd = ser.fileno()
        except Exception:  # a URL port without a file descriptor: poll with short sleeps
            self._fd = None
        self._parser.reset()
        return self

    def close(self) -> None:
        """Close the port. Idempotent."""
        ser, self._ser, self._fd = self._ser, None, None
        if ser is not None:
            try:
                ser.close()
            except Exception:
                pass

    @property
    def is_open(self) -> bool:
        """True between `open` and `close`."""
        return self._ser is not None

    def __enter__(self) -> FeetechBus:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def name(self, servo_id: int) -> str:
        """``3 (elbow_flex)``, or just the id when it has no name."""
        n = self.names.get(servo_id)
        return f"{servo_id} ({n})" if n else str(servo_id)

    # -- low level ----------------------------------------------------------------------------

    def _send(self, packet: bytes) -> None:
        ser = self._ser
        if ser is None:
            raise DeviceError(f"servo bus {self.port} is not open")
        try:
            ser.reset_input_buffer()  # a late reply from an earlier try must not be taken for this one
            self._parser.reset()
            ser.write(packet)
        except (serial.SerialException, OSError) as e:
            raise DeviceError(f"servo bus {self.port} lost: {e}") from None

    def _read_some(self, deadline: float) -> bytes:
        ser = self._ser
        assert ser is not None
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return b""
        try:
            if self._fd is not None:
                r, _, _ = select.select([self._fd], [], [], remaining)
                if not r:
                    return b""
                return ser.read(max(1, ser.in_waiting)) or b""
            data = ser.read(max(1, ser.in_waiting))
            if not data:
                time.sleep(min(remaining, 0.0005))
            return data
        except (serial.SerialException, OSError) as e:
            raise DeviceError(f"servo bus {self.port} lost: {e}") from None

    def _exchange(self, packet: bytes, ids: Sequence[int], nbytes: int) -> dict[int, Reply]:
        """Send once; collect valid replies (``nbytes`` data each) from ``ids`` until all came
        or the deadline passed. Counts every fault; returns what arrived."""
        self._send(packet)
        self.transactions += 1
        expect = {sid: nbytes + 2 for sid in ids}
        deadline = time.monotonic() + self.timeout + self.per_reply * max(0, len(ids) - 1)
        got: dict[int, Reply] = {}
        failed: set[int] = set()  # a bad reply came: no use waiting for it
        parser = self._parser
        g0 = parser.garbage
        while len(got) + len(failed) < len(ids):
            data = self._read_some(deadline)
            if not data:
                break
            for item in parser.feed(data, expect):
                if isinstance(item, Bad):
                    self.counts[item.kind] += 1
                    if item.id in expect and item.id not in got:
                        failed.add(item.id)
                    continue
                if item.id not in expect or item.id in got:
                    self.counts[UNEXPECTED] += 1
                    continue
                if item.code:
                    self.counts[SERVO_ERROR] += 1
                    self.servo_errors[item.id] = item.code
                got[item.id] = Reply(item.id, item.code, item.params)
                failed.discard(item.id)
        silent = len(ids) - len(got) - len(failed)
        if silent > 0:
            if parser.partial:
                self.counts[SHORT] += 1
                silent -= 1
            self.counts[TIMEOUT] += silent
        self.counts[GARBAGE] += parser.garbage - g0
        return got

    def _collect(self, make: Callable[[list[int]], bytes], ids: Sequence[int],
                 nbytes: int) -> tuple[dict[int, Reply], list[int]]:
        """Exchange ``make(ids)``, then ask again only the servos whose reply was missing or
        bad, up to `retries` times. Returns (replies, ids still without one)."""
        todo = list(ids)
        got: dict[int, Reply] = {}
        for attempt in range(self.retries + 1):
            if attempt:
                self.counts[RETRIES] += 1
            new = self._exchange(make(todo), todo, nbytes)
            got.update(new)
            missed = [i for i in todo if i not in new]
            for i in missed:
                self.failures_by_id[i] = self.failures_by_id.get(i, 0) + 1
            todo = missed
            if not todo:
                break
        return got, todo

    def _with_retries(self, make: Callable[[list[int]], bytes], ids: Sequence[int], nbytes: int,
                      what: str, patience: float = 0.0) -> dict[int, Reply]:
        """`_collect`, raising `DeviceError` naming the first servo that never answered.

        patience: s. When EVERY listed servo stayed silent through the retries (the whole
        bus went quiet: a USB adapter hiccup or a starved host, not a lost servo), ask again
        until `patience` s have passed since the call began; each further round counts as
        a `bus_stalls`. A servo that is silent while the others answer fails at once.
        """
        t0 = time.monotonic()
        got, todo = self._collect(make, ids, nbytes)
        while todo and not got and time.monotonic() - t0 < patience:
            self.counts[STALLS] += 1
            got, todo = self._collect(make, ids, nbytes)
        if not todo:
            return got
        sid = todo[0]
        more = f" (also {', '.join(self.name(i) for i in todo[1:])})" if len(todo) > 1 else ""
        raise DeviceError(f"servo {self.name(sid)} does not answer {what} on {self.port} "
                          f"after {self.retries} retries{more}")

    # -- instructions ---------------------------------------------------------------------------

    def ping(self, servo_id: int) -> bool:
        """PING with retries; True if the servo answered, False if it stayed silent."""
        _, missing = self._collect(lambda ids: ping_packet(ids[0]), [servo_id], 0)
        return not missing

    def read(self, servo_id: int, address: int, length: int) -> bytes:
        """READ ``length`` bytes from ``address``; `DeviceError` after the retries."""
        r = self._with_retries(lambda ids: read_packet(ids[0], address, length), [servo_id],
                               length, f"READ {address}")
        return r[servo_id].data

    def write(self, servo_id: int, address: int, data: bytes) -> None:
        """WRITE ``data`` at ``address`` and wait for the acknowledgement (retried)."""
        self._with_retries(lambda ids: write_packet(ids[0], address, data), [servo_id], 0,
                           f"WRITE {address}")

    def sync_read(self, address: int, length: int, ids: Sequence[int]) -> dict[int, Reply]:
        """SYNC_READ ``length`` bytes at ``address`` from every servo in ``ids``.

        Missing or bad replies are asked again with a SYNC_READ of just those
        servos, up to `retries` times; then `DeviceError` names the first one.
        Returns ``{id: Reply}`` for every id.
        """
        return self._with_retries(lambda todo: sync_read_packet(address, length, todo), ids,
                                  length, "SYNC_READ", self.patience)

    def sync_write(self, address: int, length: int, data: Mapping[int, bytes]) -> None:
        """SYNC_WRITE (no reply on the bus: nothing to retry)."""
        self._send(sync_write_packet(address, length, data))
        self.transactions += 1

    # -- figures --------------------------------------------------------------------------------

    @property
    def faults(self) -> int:
        """Bad or missing replies so far (timeouts, short, checksum, corrupt)."""
        return sum(self.counts[k] for k in (TIMEOUT, SHORT, CHECKSUM, CORRUPT))

    def __repr__(self) -> str:
        return f"FeetechBus({self.port!r}, {'open' if self.is_open else 'closed'})"

"""The servos' side of an emulated Feetech bus: register files, instructions, injected faults.

`ServoBus` turns host bytes into the bytes six STS3215 servos would answer:
PING, READ, WRITE, SYNC_READ (each listed servo answers in list order) and
SYNC_WRITE (no answer), on a 256-byte register file per servo. The emulator
plugs its physics in through two hooks: ``refresh(id, regs)`` fills the
Present_* registers just before a read is answered, ``on_write(id, address,
data)`` sees every write (goals, torque). `BusFaults` injects what a tired bus
does: a servo that stops answering, a wrong checksum on every N-th reply,
corrupted (truncated or garbled) replies, noise bytes before a reply.

`PtyServoBus` serves a `ServoBus` on a fresh pseudo-terminal from a thread:
the tests use it to speak to the bus through real ptys with pyserial (`open_pty`
and `pty_write` are `hardware.emulators.frontend`'s, re-exported here).
"""

from __future__ import annotations

import os
import select
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from hardware import feetech
from hardware.emulators.frontend import close_fds, open_pty, pty_write
from hardware.feetech import Bad, Packet, StatusParser

__all__ = ["BusFaults", "PtyServoBus", "ServoBus", "open_pty", "pty_write"]

ANGLE_MIN = 9  #: Min_Angle_Limit register (2 bytes)
ANGLE_MAX = 11  #: Max_Angle_Limit register (2 bytes)
MODEL_NUMBER = 3  #: Model number register (2 bytes); the STS3215 reads 777


@dataclass
class BusFaults:
    """Faults the emulated bus injects (all off by default).

    drop_servo: id of a servo that stops answering (0: none), ``drop_after_s``
        seconds after the bus starts.
    checksum_every: every N-th reply carries a wrong checksum byte.
    corrupt_every: every N-th reply is corrupted: cut short, or its length byte garbled.
    garbage_every: every N-th reply is preceded by 1..8 noise bytes.
    """

    drop_servo: int = 0
    drop_after_s: float = 0.0
    checksum_every: int = 0
    corrupt_every: int = 0
    garbage_every: int = 0


class ServoBus:
    """Servos ``ids`` on one bus. Feed host bytes to `handle`; write back what it returns."""

    def __init__(
        self,
        ids: Iterable[int] = (1, 2, 3, 4, 5, 6),
        faults: BusFaults | None = None,
        seed: int = 0,
        refresh: Callable[[int, bytearray], None] | None = None,
        on_write: Callable[[int, int, bytes], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ids = tuple(ids)
        self.faults = faults or BusFaults()
        self.refresh = refresh
        self.on_write = on_write
        self.clock = clock
        self.t0 = clock()
        self.regs: dict[int, bytearray] = {}
        for sid in self.ids:
            r = bytearray(256)
            r[MODEL_NUMBER : MODEL_NUMBER + 2] = feetech.u16(777)
            r[5] = sid
            r[ANGLE_MIN : ANGLE_MIN + 2] = feetech.u16(0)
            r[ANGLE_MAX : ANGLE_MAX + 2] = feetech.u16(4095)
            r[feetech.P_COEFFICIENT[0]] = 32
            r[56:58] = feetech.u16(2048)
            r[feetech.GOAL_POSITION[0] : feetech.GOAL_POSITION[0] + 2] = feetech.u16(2048)
            r[62] = 74
            r[63] = 30
            self.regs[sid] = r
        self._parser = StatusParser(max_id=feetech.BROADCAST_ID)
        self._rng = np.random.default_rng([seed, 11])
        self.stats: dict[str, Any] = {
            "instructions": 0, "bad_instructions": 0, "replies": 0, "sync_reads": 0,
            "sync_writes": 0, "dropped_replies": 0, "checksum_injected": 0,
            "corrupt_injected": 0, "garbage_injected": 0,
        }

    def dropped(self, sid: int) -> bool:
        """True when ``sid`` has stopped answering (fault injection)."""
        f = self.faults
        return sid == f.drop_servo and self.clock() - self.t0 >= f.drop_after_s

    def handle(self, data: bytes) -> bytes:
        """Host bytes in; the servos' answers out (possibly empty), in bus order."""
        out = bytearray()
        for p in self._parser.feed(data, None):
            if isinstance(p, Bad):
                self.stats["bad_instructions"] += 1
                continue
            self.stats["instructions"] += 1
            out += self._instruction(p)
        return bytes(out)

    # -- instructions ---------------------------------------------------------------------------

    def _instruction(self, p: Packet) -> bytes:
        sid, ins, prm = p.id, p.code, p.params
        if sid == feetech.BROADCAST_ID:
            if ins == feetech.SYNC_WRITE and len(prm) >= 2:
                addr, n = prm[0], prm[1]
                self.stats["sync_writes"] += 1
                body = prm[2:]
                for k in range(0, len(body) - n, n + 1):
                    tid = body[k]
                    if tid in self.regs:
                        self._write(tid, addr, bytes(body[k + 1 : k + 1 + n]))
                return b""
            if ins == feetech.SYNC_READ and len(prm) >= 2:
                addr, n = prm[0], prm[1]
                self.stats["sync_reads"] += 1
                return b"".join(self._reply(tid, self._read(tid, addr, n)) for tid in prm[2:]
                                if tid in self.regs)
            if ins == feetech.WRITE and len(prm) >= 1:
                for tid in self.ids:
                    self._write(tid, prm[0], bytes(prm[1:]))
            return b""
        if sid not in self.regs:
            return b""
        if ins == feetech.PING:
            return self._reply(sid, b"")
        if ins == feetech.READ and len(prm) == 2:
            return self._reply(sid, self._read(sid, prm[0], prm[1]))
        if ins == feetech.WRITE and len(prm) >= 1:
            self._write(sid, prm[0], bytes(prm[1:]))
            return self._reply(sid, b"")
        return self._reply(sid, b"", error=0)  # unknown instruction: acknowledged, ignored

    def _read(self, sid: int, addr: int, n: int) -> bytes:
        regs = self.regs[sid]
        if self.refresh is not None and addr + n > 56 and addr <= 70:
            self.refresh(sid, regs)
        return bytes(regs[addr : addr + n]).ljust(n, b"\0")

    def _write(self, sid: int, addr: int, data: bytes) -> None:
        regs = self.regs[sid]
        if addr == feetech.GOAL_POSITION[0] and len(data) >= 2:  # the servo clamps to its limits
            lo = regs[ANGLE_MIN] | regs[ANGLE_MIN + 1] << 8
            hi = regs[ANGLE_MAX] | regs[ANGLE_MAX + 1] << 8
            goal = feetech.sign_magnitude(data[0] | data[1] << 8, 15)
            data = feetech.u16(min(max(goal, lo), hi)) + data[2:]
        regs[addr : addr + len(data)] = data[: 256 - addr]
        if self.on_write is not None:
            self.on_write(sid, addr, data)

    # -- replies and faults -----------------------------------------------------------------------

    def _reply(self, sid: int, data: bytes, error: int = 0) -> bytes:
        if self.dropped(sid):
            self.stats["dropped_replies"] += 1
            return b""
        self.stats["replies"] += 1
        n = self.stats["replies"]
        pkt = bytearray(feetech.encode_packet(sid, error, data))
        f = self.faults
        if f.checksum_every and n % f.checksum_every == 0:
            pkt[-1] ^= 0x5A
            self.stats["checksum_injected"] += 1
        if f.corrupt_every and n % f.corrupt_every == 0:
            self.stats["corrupt_injected"] += 1
            if self._rng.random() < 0.5:
                del pkt[-int(self._rng.integers(1, len(pkt) - 2)) :]  # cut short
            else:
                pkt[3] = int(self._rng.integers(20, 200))  # garbled length byte
        if f.garbage_every and n % f.garbage_every == 0:
            self.stats["garbage_injected"] += 1
            noise = self._rng.integers(0, 256, int(self._rng.integers(1, 9)), dtype=np.uint8)
            pkt[0:0] = noise.tobytes()
        return bytes(pkt)


class PtyServoBus:
    """A `ServoBus` served on a fresh pty by a background thread (tests, tools).

    ``with PtyServoBus(bus) as path:`` yields the slave path to open with pyserial.
    ``reply_delay`` s is waited before each answer (a slow servo).
    """

    def __init__(self, bus: ServoBus, reply_delay: float = 0.0) -> None:
        self.bus = bus
        self.reply_delay = reply_delay
        self.master, self.slave, self.path = open_pty()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pty-servo-bus", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                r, _, _ = select.select([self.master], [], [], 0.05)
                if not r:
                    continue
                data = os.read(self.master, 4096)
            except BlockingIOError:
                continue
            except OSError:
                return
            out = self.bus.handle(data)
            if out:
                if self.reply_delay:
                    time.sleep(self.reply_delay)
                pty_write(self.master, self.slave, out)

    def start(self) -> str:
        """Start serving; return the slave path."""
        self._thread.start()
        return self.path

    def close(self) -> None:
        """Stop the thread and close the pty."""
        self._stop.set()
        self._thread.join(timeout=1.0)
        close_fds((self.master, self.slave))

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

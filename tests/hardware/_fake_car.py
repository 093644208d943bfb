"""A tiny fake RC car on a real pseudo-terminal, for the driver tests.

It answers ``HLO`` with ``INF``, records every host line it parses, acks
``DRV`` in its telemetry and sends ``TLM`` at ``hz`` (deadline-scheduled, no
busy wait). Tests can inject raw bytes and make the port vanish.
"""

from __future__ import annotations

import os
import select
import threading
import time
import tty
from collections.abc import Callable

from hardware import nmea

# (k) -> (t_us, enc, gz, ax, ay, vbat_mV, flags) for the k-th telemetry line
TlmFields = Callable[[int], tuple[int, int, int, int, int, int, int]]


def default_fields(k: int) -> tuple[int, int, int, int, int, int, int]:
    return (k * 20_000, k, 0, 0, 0, 8000, 1)


class FakeCar:
    def __init__(
        self,
        *,
        hz: float = 50.0,
        answer_hlo: bool = True,
        protocol: int = 1,
        fields: TlmFields = default_fields,
        streaming: bool = True,
    ) -> None:
        self.master, self._slave = os.openpty()
        tty.setraw(self._slave)
        self.port = os.ttyname(self._slave)
        self.hz = hz
        self.answer_hlo = answer_hlo
        self.protocol = protocol
        self.fields = fields
        self.streaming = streaming
        self.received: list[tuple[float, nmea.Message]] = []  # (time.monotonic(), line)
        self.tlm_sent: list[tuple[int, float]] = []  # (t_us, time.monotonic() after the write)
        self.ack = -1
        self.k = 0
        self.reader = nmea.LineReader(nmea.HOST_TO_CAR)
        self._wlock = threading.Lock()
        self._stop_r, self._stop_w = os.pipe()
        self._closed = False
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    # --- host lines seen
    def lines(self, mtype: str | None = None) -> list[nmea.Message]:
        return [m for _, m in list(self.received) if mtype is None or m.type == mtype]

    def wait_for(self, pred: Callable[[], bool], timeout: float = 2.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if pred():
                return True
            time.sleep(0.005)
        return pred()

    # --- sending
    def send_raw(self, data: bytes) -> None:
        with self._wlock:
            view = memoryview(data)
            while view:
                n = os.write(self.master, view)
                view = view[n:]

    def send(self, mtype: str, *fields: object) -> None:
        self.send_raw(nmea.encode(mtype, *fields))

    def send_tlm(self) -> None:
        t_us, enc, gz, ax, ay, vbat, flags = self.fields(self.k)
        self.k += 1
        line = nmea.encode("TLM", self.ack, t_us % 2**32, enc, gz, ax, ay, vbat, flags)
        self.send_raw(line)
        self.tlm_sent.append((t_us % 2**32, time.monotonic()))

    # --- the car's loop
    def _run(self) -> None:
        period = 1.0 / self.hz
        next_tlm = time.monotonic() + period
        while True:
            wait = max(0.0, next_tlm - time.monotonic()) if self.streaming else 0.05
            try:
                ready, _, _ = select.select([self.master, self._stop_r], [], [], wait)
            except (OSError, ValueError):
                return
            if self._stop_r in ready:
                return
            if self.master in ready:
                try:
                    data = os.read(self.master, 4096)
                except OSError:
                    return
                now = time.monotonic()
                for msg in self.reader.feed(data):
                    self.received.append((now, msg))
                    if msg.type == "HLO" and self.answer_hlo:
                        self.send("INF", self.protocol, "fake-1.0", "fakecar", 50)
                    elif msg.type == "DRV":
                        self.ack = msg.int(0)
            now = time.monotonic()
            if self.streaming and now >= next_tlm:
                self.send_tlm()
                next_tlm += period
                if next_tlm < now:
                    next_tlm = now + period
            elif not self.streaming:
                next_tlm = now + period

    def _halt(self) -> None:
        if not self._closed:
            self._closed = True
            os.write(self._stop_w, b"x")
            self._thread.join(timeout=2.0)

    def vanish(self) -> None:
        """The device is unplugged: the pty master goes away."""
        self._halt()
        os.close(self.master)
        os.close(self._slave)

    def close(self) -> None:
        if not self._closed:
            self.vanish()
        for fd in (self._stop_r, self._stop_w):
            try:
                os.close(fd)
            except OSError:
                pass

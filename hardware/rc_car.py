"""Driver for the reference RC car over serial protocol v1 (docs: spec/rc_car.md).

`RcCarDriver` opens the car's serial port (a USB serial device, or the
pseudo-terminal of ``realsim emulate rc_car``), handshakes with ``HLO``/``INF``
and runs one background thread that reads telemetry as it arrives. Commands
(`drive`, `stop`, `episode_start`, `episode_end`) may be sent from any thread.

Times are ``time.monotonic()`` seconds on the host; the car's own clock is
unwrapped into seconds in `Telemetry.t_device`. All sensor values are SI.
"""

from __future__ import annotations

import logging
import math
import os
import statistics
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass

import serial

from hardware import nmea
from hardware.base import RobotDriver
from realsim.errors import DeviceError

log = logging.getLogger(__name__)

PROTOCOL = 1
"""The serial protocol version this driver speaks."""
ENCODER_COUNTS_PER_REV = 116.4
"""Motor encoder counts per rear-wheel revolution."""
RAD_PER_COUNT = 2.0 * math.pi / ENCODER_COUNTS_PER_REV
G = 9.80665
"""Standard gravity, m/s^2 (the IMU reports milli-g)."""
FLAG_WATCHDOG = 1
FLAG_BATTERY_LOW = 2
FLAG_IN_EPISODE = 4

_READ_TIMEOUT = 0.1  # s; only bounds how long stop() waits, data wakes the reader at once
_WRITE_TIMEOUT = 0.5  # s; a device that stops draining its input is treated as lost
_MAX_PENDING = 1024  # DRV send times kept while waiting for their ack
_MAX_LATENCIES = 2000


@dataclass(frozen=True)
class DeviceInfo:
    """What the car said in its ``INF`` line."""

    protocol: int
    firmware: str
    name: str
    telemetry_hz: float


@dataclass(frozen=True)
class Telemetry:
    """One ``TLM`` line in SI units.

    t_host: ``time.monotonic()`` when the line's last byte was read, s.
    t_device: the car's clock, s, unwrapped across its uint32 microsecond wrap
        (never decreases within one connection).
    enc_rad: mean rear-wheel angle, rad (cumulative encoder counts * 2 pi / 116.4).
    yaw_rate: gyro z, rad/s.
    accel: (ax, ay) in the body frame, m/s^2.
    vbat: battery voltage, V.
    ack: ``seq`` of the last ``DRV`` the car parsed, -1 before the first.
    flags: bit 0 watchdog, bit 1 battery low, bit 2 inside an episode.
    """

    t_host: float
    t_device: float
    enc_rad: float
    yaw_rate: float
    accel: tuple[float, float]
    vbat: float
    ack: int
    flags: int

    @property
    def watchdog(self) -> bool:
        """The car braked because no DRV came for 300 ms (or none yet)."""
        return bool(self.flags & FLAG_WATCHDOG)

    @property
    def battery_low(self) -> bool:
        """Battery below 7.0 V."""
        return bool(self.flags & FLAG_BATTERY_LOW)

    @property
    def in_episode(self) -> bool:
        """Between EPS and EPE."""
        return bool(self.flags & FLAG_IN_EPISODE)


@dataclass(frozen=True)
class LatencyStats:
    """Host-measured DRV-send to first-TLM-acking-it delay, s (includes the wait for the next TLM)."""

    n: int
    mean: float
    median: float
    p95: float
    max: float


class ClockUnwrapper:
    """Turns a wrapping unsigned microsecond counter into non-decreasing seconds.

    A step backwards by more than half the range is a wrap; a smaller step
    backwards (a device reset or glitch) is absorbed so time holds still
    rather than running backwards, and counted in `resets`.
    """

    def __init__(self, bits: int = 32, scale: float = 1e-6) -> None:
        self.modulus = 1 << bits
        self.scale = scale
        self.offset = 0
        self.last_raw: int | None = None
        self.resets = 0

    def __call__(self, raw: int) -> float:
        """The unwrapped time of counter value ``raw``, s."""
        last = self.last_raw
        if last is not None and raw < last:
            if last - raw > self.modulus // 2:
                self.offset += self.modulus
            else:
                self.offset += last - raw
                self.resets += 1
        self.last_raw = raw
        return (raw + self.offset) * self.scale


def telemetry_from_message(msg: nmea.Message, t_host: float, clock: ClockUnwrapper) -> Telemetry:
    """SI `Telemetry` from a validated ``TLM`` message (``clock`` unwraps ``t_us``)."""
    f = msg.fields
    return Telemetry(
        t_host=t_host,
        t_device=clock(int(f[1])),
        enc_rad=int(f[2]) * RAD_PER_COUNT,
        yaw_rate=math.radians(int(f[3]) * 1e-3),
        accel=(int(f[4]) * 1e-3 * G, int(f[5]) * 1e-3 * G),
        vbat=int(f[6]) * 1e-3,
        ack=int(f[0]),
        flags=int(f[7]),
    )


TelemetryCallback = Callable[[Telemetry], None]
JudgeCallback = Callable[[int, int, float], None]
ErrorCallback = Callable[[str, str], None]


class RcCarDriver(RobotDriver):
    """The RC car on its serial port.

    Callbacks run on the reader thread; keep them short. ``on_telemetry(tlm)``
    for every TLM; ``on_judge(episode, success, score)`` for every JDG;
    ``on_error(code, text)`` for every ERR the car sends, and once with code
    ``"LOST"`` when the link dies (port gone, read error, write timeout).
    An exception raised in a callback is logged and counted, never fatal.
    """

    def __init__(
        self,
        port: str,
        *,
        baudrate: int = 115200,
        connect_timeout: float = 2.0,
        on_telemetry: TelemetryCallback | None = None,
        on_judge: JudgeCallback | None = None,
        on_error: ErrorCallback | None = None,
    ) -> None:
        self.port = port
        self.baudrate = baudrate
        self.connect_timeout = connect_timeout
        self.on_telemetry = on_telemetry
        self.on_judge = on_judge
        self.on_error = on_error

        self.info: DeviceInfo | None = None
        self.latest: Telemetry | None = None
        self.last_judge: tuple[int, int, float] | None = None  #: (episode, success, score)
        self.errors: list[tuple[str, str]] = []  #: ERR lines (code, text), last 100
        self.err_count = 0
        self.callback_errors = 0
        self.lost = False
        self.lost_reason = ""
        self.last_command: tuple[int, float, float, float] | None = None
        """(seq, host send time s, steer, throttle) of the last DRV, as sent (clamped, /1000)."""

        self._ser: serial.Serial | None = None
        self._connected = False
        self._reader = nmea.LineReader(nmea.CAR_TO_HOST)
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._write_lock = threading.RLock()  # on_error may write from inside a write
        self._cond = threading.Condition()  # guards latest/info/_tlm_count/_pending/_latencies
        self._tlm_count = 0
        self._seq = 0
        self._pending: OrderedDict[int, float] = OrderedDict()
        self._latencies: deque[float] = deque(maxlen=_MAX_LATENCIES)
        self._max_ack = -1
        self._clock = ClockUnwrapper()
        self._dev_times: deque[float] = deque(maxlen=51)
        self._host_times: deque[float] = deque(maxlen=51)

    # ----------------------------------------------------------------- connect

    @property
    def is_connected(self) -> bool:
        """True between a successful `connect` and `disconnect`, while the link lives."""
        return self._connected and not self.lost

    def connect(self) -> None:
        """Open the port, send ``HLO`` until ``INF`` answers (within `connect_timeout` s).

        Raises `DeviceError` (one line) when the port cannot be opened, nothing
        answers, or the car speaks another protocol version.
        """
        if self._ser is not None:
            if not self.lost:
                return
            self._close(send_stop=False)  # reconnect after a lost link
        try:
            ser = serial.serial_for_url(
                self.port,
                baudrate=self.baudrate,
                timeout=_READ_TIMEOUT,
                write_timeout=_WRITE_TIMEOUT,
                exclusive=True,  # two programs driving one car would fight over it
            )
        except (serial.SerialException, OSError, ValueError) as e:
            raise DeviceError(
                f"cannot open port {self.port}: {_why_open_failed(self.port, e)}"
            ) from None
        self._ser = ser
        self.lost, self.lost_reason = False, ""
        self.info = None
        self._seq = 0
        self._max_ack = -1
        self._clock = ClockUnwrapper()
        self._reader.reset()
        with self._cond:
            self._pending.clear()
            self._dev_times.clear()
            self._host_times.clear()
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._read_loop, name=f"rc_car-reader {self.port}", daemon=True
        )
        self._thread.start()
        try:
            self._handshake()
        except BaseException:
            self._close(send_stop=False)
            raise
        self._connected = True

    def _handshake(self) -> None:
        deadline = time.monotonic() + self.connect_timeout
        tries = 3
        per_try = self.connect_timeout / tries
        for _ in range(tries):
            if self.lost:
                break
            try:
                self._write(nmea.encode("HLO"))
            except DeviceError:
                break
            with self._cond:
                self._cond.wait_for(
                    lambda: self.info is not None or self.lost,
                    timeout=max(0.0, min(per_try, deadline - time.monotonic())),
                )
            if self.info is not None:
                break
        if self.info is None:
            if self.lost:
                raise DeviceError(f"lost connection to {self.port} during HLO: {self.lost_reason}")
            raise DeviceError(
                f"no answer to HLO on {self.port} after {self.connect_timeout:.1f} s"
                f" (is it the car's port, at {self.baudrate} baud?)"
            )
        if self.info.protocol != PROTOCOL:
            raise DeviceError(
                f"{self.port} speaks protocol {self.info.protocol}; realsim speaks {PROTOCOL}"
            )

    def disconnect(self) -> None:
        """Send ``STP`` (if the link still lives), stop the reader, close the port. Idempotent."""
        self._close(send_stop=True)

    def _close(self, send_stop: bool) -> None:
        ser = self._ser
        if ser is None:
            return
        if send_stop and not self.lost:
            try:
                self._write(nmea.encode("STP"))
                ser.flush()  # the stop must leave the port before it closes
            except Exception:  # the port may have died; nothing left to do for the car
                pass
        self._stop.set()
        try:
            ser.cancel_read()
        except Exception:
            pass
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=2.0)
        self._thread = None
        try:
            ser.close()
        except Exception:
            pass
        self._ser = None
        self._connected = False
        with self._cond:
            self._cond.notify_all()

    # ----------------------------------------------------------------- commands

    def drive(self, steer: float, throttle: float) -> int:
        """Send ``DRV``; steer and throttle in [-1, 1] (clamped; +steer turns left,
        -throttle brakes). Returns the command's ``seq`` (0, 1, 2, ... per connection)."""
        s = _per_mille(steer)
        t = _per_mille(throttle)
        with self._write_lock:
            seq = self._seq
            line = nmea.encode("DRV", seq, s, t)
            t_send = time.monotonic()
            with self._cond:  # before the write, so even an instant ack finds it
                self._pending[seq] = t_send
                while len(self._pending) > _MAX_PENDING:
                    self._pending.popitem(last=False)
            try:
                self._write_locked(line)
            except DeviceError:
                with self._cond:
                    self._pending.pop(seq, None)
                raise
            self._seq = (seq + 1) & 0xFFFFFFFF
            self.last_command = (seq, t_send, s / 1000.0, t / 1000.0)
        return seq

    def stop(self) -> None:
        """Send ``STP``: neutral steering, full brake."""
        self._write(nmea.encode("STP"))

    def episode_start(self, episode: int) -> None:
        """Send ``EPS,episode`` (the car only echoes it in its flags)."""
        self._write(nmea.encode("EPS", int(episode)))

    def episode_end(self, episode: int) -> None:
        """Send ``EPE,episode``; the car centres its steering and brakes."""
        self._write(nmea.encode("EPE", int(episode)))

    @property
    def next_seq(self) -> int:
        """The ``seq`` the next `drive` will use."""
        return self._seq

    def _write(self, line: bytes) -> None:
        with self._write_lock:
            self._write_locked(line)

    def _write_locked(self, line: bytes) -> None:
        ser = self._ser
        if self.lost:
            raise DeviceError(f"lost connection to {self.port}: {self.lost_reason}")
        if ser is None:
            raise DeviceError(f"not connected to {self.port}")
        try:
            ser.write(line)
        except serial.SerialTimeoutException:
            self._mark_lost("write timed out (device not reading)")
            raise DeviceError(f"lost connection to {self.port}: {self.lost_reason}") from None
        except (serial.SerialException, OSError, TypeError, AttributeError) as e:
            self._mark_lost(f"write failed: {_short(e)}")
            raise DeviceError(f"lost connection to {self.port}: {self.lost_reason}") from None

    # ----------------------------------------------------------------- reading

    def _read_loop(self) -> None:
        ser = self._ser
        assert ser is not None
        while not self._stop.is_set():
            try:
                data = ser.read(1)  # blocks until a byte arrives (or the timeout)
                if data:
                    n = ser.in_waiting
                    if n:
                        data += ser.read(n)
            except Exception as e:  # SerialException, OSError (EIO on a closed pty), ...
                if not self._stop.is_set():
                    self._mark_lost(f"read failed: {_short(e)}")
                return
            if data:
                self._handle(data, time.monotonic())

    def _handle(self, data: bytes, t_host: float) -> None:
        for msg in self._reader.feed(data):
            try:
                if msg.type == "TLM":
                    self._on_tlm(msg, t_host)
                elif msg.type == "INF":
                    info = DeviceInfo(msg.int(0), msg.fields[1], msg.fields[2], msg.float(3))
                    with self._cond:
                        self.info = info
                        self._cond.notify_all()
                elif msg.type == "JDG":
                    self.last_judge = (msg.int(0), msg.int(1), msg.float(2))
                    if self.on_judge is not None:
                        self.on_judge(*self.last_judge)
                elif msg.type == "ERR":
                    self.err_count += 1
                    self.errors = [*self.errors[-99:], (msg.fields[0], msg.fields[1])]
                    log.warning("%s reports error %s: %s", self.port, *msg.fields)
                    if self.on_error is not None:
                        self.on_error(msg.fields[0], msg.fields[1])
            except Exception:
                self.callback_errors += 1
                log.exception("callback for %s line from %s failed", msg.type, self.port)

    def _on_tlm(self, msg: nmea.Message, t_host: float) -> None:
        with self._cond:
            tlm = telemetry_from_message(msg, t_host, self._clock)
            if tlm.ack > self._max_ack:
                self._max_ack = tlm.ack
                while self._pending:
                    seq, t_sent = next(iter(self._pending.items()))
                    if seq > tlm.ack:
                        break
                    del self._pending[seq]
                    self._latencies.append(t_host - t_sent)
            self.latest = tlm
            self._tlm_count += 1
            self._dev_times.append(tlm.t_device)
            self._host_times.append(t_host)
            self._cond.notify_all()
        if self.on_telemetry is not None:
            self.on_telemetry(tlm)

    def _mark_lost(self, reason: str) -> None:
        with self._cond:
            if self.lost:
                return
            self.lost = True
            self.lost_reason = reason
            self._cond.notify_all()
        log.warning("lost connection to %s: %s", self.port, reason)
        if self.on_error is not None:
            try:
                self.on_error("LOST", reason)
            except Exception:
                self.callback_errors += 1
                log.exception("on_error callback failed")

    # ----------------------------------------------------------------- queries

    @property
    def counts(self) -> dict[str, int]:
        """Dropped received lines by reason (see `hardware.nmea.DROP_REASONS`)."""
        return dict(self._reader.counts)

    @property
    def dropped(self) -> int:
        """Received lines dropped so far, all reasons."""
        return self._reader.dropped

    @property
    def received(self) -> int:
        """Valid lines received so far (all types)."""
        return self._reader.received

    @property
    def telemetry_count(self) -> int:
        """TLM lines received so far."""
        return self._tlm_count

    @property
    def last_tlm_host_time(self) -> float | None:
        """``time.monotonic()`` arrival of the latest TLM, s (None before the first)."""
        tlm = self.latest
        return None if tlm is None else tlm.t_host

    def wait_telemetry(self, timeout: float = 1.0) -> Telemetry | None:
        """Block until a TLM newer than the call arrives; None after ``timeout`` s.

        Raises `DeviceError` if the link is (or gets) lost.
        """
        with self._cond:
            start = self._tlm_count
            ok = self._cond.wait_for(
                lambda: self._tlm_count > start or self.lost or self._ser is None, timeout
            )
            if self.lost:
                raise DeviceError(f"lost connection to {self.port}: {self.lost_reason}")
            return self.latest if ok and self._tlm_count > start else None

    def telemetry_period(self) -> float | None:
        """Telemetry period, s: the median step of the car's clock over the last 50
        TLMs (jitter-free), else of host arrivals, else ``1/telemetry_hz`` from INF."""
        with self._cond:
            dev = list(self._dev_times)
            host = list(self._host_times)
        for times in (dev, host):
            steps = [b - a for a, b in zip(times, times[1:], strict=False) if b > a]
            if len(steps) >= 2:
                return statistics.median(steps)
        if self.info is not None and self.info.telemetry_hz > 0:
            return 1.0 / self.info.telemetry_hz
        return None

    def ack_latencies(self) -> list[float]:
        """Each acked DRV's send-to-first-acking-TLM delay, s (the last 2000)."""
        with self._cond:
            return list(self._latencies)

    def ack_latency(self) -> LatencyStats | None:
        """Statistics of `ack_latencies`; None before any DRV was acked."""
        lat = sorted(self.ack_latencies())
        if not lat:
            return None
        return LatencyStats(
            n=len(lat),
            mean=statistics.fmean(lat),
            median=statistics.median(lat),
            p95=lat[min(len(lat) - 1, int(round(0.95 * (len(lat) - 1))))],
            max=lat[-1],
        )

    @property
    def clock_resets(self) -> int:
        """Times the car's clock stepped backwards without wrapping (device reboots)."""
        return self._clock.resets

    def __repr__(self) -> str:
        state = "lost" if self.lost else ("connected" if self.is_connected else "closed")
        return f"RcCarDriver({self.port!r}, {state})"


def _per_mille(x: float) -> int:
    """[-1, 1] -> -1000..1000, clamped; NaN -> 0."""
    x = float(x)
    if math.isnan(x):
        return 0
    return int(round(max(-1.0, min(1.0, x)) * 1000))


def _short(e: BaseException) -> str:
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return text


def _why_open_failed(port: str, e: BaseException) -> str:
    if "://" not in port and not os.path.exists(port):
        return "no such device"
    if "exclusively lock" in str(e):
        return "busy (another program has it open)"
    if isinstance(getattr(e, "errno", None), int) and e.errno is not None:  # type: ignore[attr-defined]
        return os.strerror(e.errno)  # type: ignore[attr-defined]
    return _short(e)

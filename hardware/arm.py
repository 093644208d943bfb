"""Driver for the reference arm: six STS3215 servos on one bus, plus its control port.

`ArmDriver` owns the servo bus (`hardware.feetech.FeetechBus`, 1 Mbaud): on
`connect` it pings all six servos, sets every goal to the present position and
enables torque; on `disconnect` it disables torque and closes the bus. The
control loop calls `write_goals` (one SYNC_WRITE) and `read_state` (one
SYNC_READ of Present_Position .. Present_Temperature) once per tick, on one
thread. Units are SI: rad for the five revolute joints, m for the gripper
opening (spec/arm.md calibration: count 2048 = joint zero, 2 pi / 4096 rad per
count; gripper 2048..3000 counts = 0..0.07 m).

Episode markers travel on a separate line-based control port
(`ArmControl`, the EPS/EPE/JDG lines of spec/rc_car.md). On a real arm that
port is the operator's keyboard; without one the markers are no-ops.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import serial

from hardware import feetech, nmea
from hardware.base import RobotDriver
from hardware.feetech import FeetechBus, JointCalibration
from realsim.errors import DeviceError

log = logging.getLogger(__name__)

JOINTS: tuple[str, ...] = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex",
                           "wrist_roll", "gripper")
"""Joint names in servo-id order (ids 1..6)."""
IDS: tuple[int, ...] = (1, 2, 3, 4, 5, 6)
GRIPPER_MAX = 0.07
"""Gripper opening at 3000 counts, m."""
CALIBRATION: tuple[JointCalibration, ...] = (
    feetech.revolute("shoulder_pan", -1.9, 1.9),
    feetech.revolute("shoulder_lift", -1.7, 1.7),
    feetech.revolute("elbow_flex", -1.6, 1.6),
    feetech.revolute("wrist_flex", -1.7, 1.7),
    feetech.revolute("wrist_roll", -2.7, 2.7),
    feetech.linear("gripper", 2048, 3000, 0.0, GRIPPER_MAX),
)
"""Counts <-> SI per joint, with the joint limits of spec/arm.md."""
LOWER = np.array([c.lo for c in CALIBRATION])
"""Joint lower limits, rad (gripper m). Shape: (6,)."""
UPPER = np.array([c.hi for c in CALIBRATION])
"""Joint upper limits, rad (gripper m). Shape: (6,)."""
HOME = np.array([0.0, 0.0, 1.2, 1.4, 0.0, 0.0])
"""Home pose, where the arm rests between episodes, rad (gripper m). Shape: (6,)."""
LOAD_FULL = 1000
"""Present_Load at 100 % of drive."""


def normalise(q: np.ndarray) -> np.ndarray:
    """Joint goals -> actions in [-1, 1]: ``2 (q - lo) / (hi - lo) - 1``. Shape: (..., 6)."""
    return 2.0 * (np.asarray(q, dtype=np.float64) - LOWER) / (UPPER - LOWER) - 1.0


def denormalise(a: np.ndarray) -> np.ndarray:
    """Actions in [-1, 1] (clipped) -> joint goals, rad (gripper m). Shape: (..., 6)."""
    a = np.clip(np.asarray(a, dtype=np.float64), -1.0, 1.0)
    return LOWER + (a + 1.0) * 0.5 * (UPPER - LOWER)


@dataclass(frozen=True)
class ArmState:
    """One SYNC_READ of all six servos, SI.

    t_host: ``time.monotonic()`` when the last reply arrived, s.
    qpos: joint positions, rad (gripper opening, m). Shape: (6,).
    qvel: joint speeds, rad/s (gripper m/s). Shape: (6,).
    load: signed fraction of the servo's drive, -1..1. Shape: (6,).
    voltage: mean supply voltage over the servos, V.
    temperature: servo temperatures, deg C. Shape: (6,).
    raw: Present_Position counts. Shape: (6,).
    """

    t_host: float
    qpos: np.ndarray
    qvel: np.ndarray
    load: np.ndarray
    voltage: float
    temperature: np.ndarray
    raw: np.ndarray


def decode_state(replies: dict[int, feetech.Reply], t_host: float,
                 ids: Sequence[int] = IDS,
                 calibration: Sequence[JointCalibration] = CALIBRATION) -> ArmState:
    """`ArmState` from the replies to a SYNC_READ of `feetech.STATE_BLOCK`."""
    n = len(ids)
    raw = np.empty(n, dtype=np.int64)
    qpos, qvel, load = np.empty(n), np.empty(n), np.empty(n)
    volt, temp = np.empty(n), np.empty(n)
    for k, (sid, cal) in enumerate(zip(ids, calibration, strict=True)):
        r = replies[sid]
        raw[k] = feetech.sign_magnitude(r.u16(0), 15)
        qpos[k] = cal.to_si(raw[k])
        qvel[k] = cal.speed_to_si(feetech.sign_magnitude(r.u16(2), 15))
        load[k] = feetech.sign_magnitude(r.u16(4), 10) / LOAD_FULL
        volt[k] = r.u8(6) * 0.1
        temp[k] = float(r.u8(7))
    return ArmState(t_host, qpos, qvel, load, float(volt.mean()), temp, raw)


JudgeCallback = Callable[[int, int, float], None]


class ArmControl:
    """The control port: sends ``EPS``/``EPE``, receives ``JDG`` (and ``ERR``) lines.

    A background thread reads the port; ``on_judge(episode, success, score)``
    runs on it for every JDG. Bad lines are dropped and counted (`dropped`).
    """

    def __init__(self, port: str, *, baudrate: int = 115200,
                 on_judge: JudgeCallback | None = None) -> None:
        self.port = port
        self.baudrate = baudrate
        self.on_judge = on_judge
        self.judges: dict[int, tuple[int, float]] = {}  #: episode -> (success, score)
        self.errors: list[tuple[str, str]] = []
        self.lost_reason = ""
        self._reader = nmea.LineReader(nmea.CAR_TO_HOST)
        self._ser: serial.Serial | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._cond = threading.Condition()

    def open(self) -> ArmControl:
        """Open the port and start the reader; `DeviceError` if it cannot be opened."""
        if self._ser is not None:
            return self
        try:
            self._ser = serial.serial_for_url(self.port, baudrate=self.baudrate, timeout=0.1,
                                              write_timeout=0.5)
        except (serial.SerialException, OSError, ValueError) as e:
            raise DeviceError(f"cannot open control port {self.port}: "
                              f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
        self._ser.reset_input_buffer()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=f"arm-control {self.port}",
                                        daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop the reader and close the port. Idempotent."""
        self._stop.set()
        ser, self._ser = self._ser, None
        if ser is not None:
            try:
                ser.cancel_read()
            except Exception:
                pass
        if self._thread is not None:
            self._thread.join(timeout=1.0)
            self._thread = None
        if ser is not None:
            try:
                ser.close()
            except Exception:
                pass

    def send(self, type: str, *fields: object) -> None:
        """One line (``EPS``/``EPE``); `DeviceError` if the port is gone."""
        ser = self._ser
        if ser is None:
            raise DeviceError(f"control port {self.port} is not open")
        try:
            ser.write(nmea.encode(type, *fields))
        except (serial.SerialException, OSError) as e:
            raise DeviceError(f"control port {self.port} lost: {e}") from None

    def wait_judge(self, episode: int, timeout: float) -> tuple[int, float] | None:
        """The (success, score) of ``episode`` once its JDG came; None after ``timeout`` s."""
        with self._cond:
            self._cond.wait_for(lambda: episode in self.judges, timeout)
            return self.judges.get(episode)

    @property
    def dropped(self) -> int:
        """Control lines dropped (bad checksum, framing, ...)."""
        return self._reader.dropped

    def _run(self) -> None:
        ser = self._ser
        assert ser is not None
        while not self._stop.is_set():
            try:
                data = ser.read(max(1, ser.in_waiting))
            except Exception as e:
                if not self._stop.is_set():
                    self.lost_reason = str(e)
                    log.warning("control port %s lost: %s", self.port, e)
                return
            for m in self._reader.feed(data) if data else ():
                if m.type == "JDG":
                    ep, ok, score = m.int(0), m.int(1), m.float(2)
                    with self._cond:
                        self.judges[ep] = (ok, score)
                        self._cond.notify_all()
                    if self.on_judge is not None:
                        try:
                            self.on_judge(ep, ok, score)
                        except Exception:
                            log.exception("on_judge callback failed")
                elif m.type == "ERR":
                    self.errors = [*self.errors[-99:], (m.fields[0], m.fields[1])]


class ArmDriver(RobotDriver):
    """The arm on its servo bus (and, optionally, its control port).

    port: the servo bus (USB adapter or the emulator's pty), 1 Mbaud.
    control: the control port for EPS/EPE/JDG, or None.
    timeout, retries: per-reply timeout (s) and retries of `FeetechBus`.
    torque_on_connect: enable torque at `connect` (goals first set to the present pose).
    """

    def __init__(self, port: str, control: str | None = None, *, timeout: float = 0.02,
                 retries: int = 3, torque_on_connect: bool = True,
                 on_judge: JudgeCallback | None = None) -> None:
        self.port = port
        self.ids = IDS
        self.calibration = CALIBRATION
        self.bus = FeetechBus(port, names=dict(zip(IDS, JOINTS, strict=True)), timeout=timeout,
                              retries=retries)
        self.control = ArmControl(control, on_judge=on_judge) if control else None
        self.torque_on_connect = torque_on_connect
        self.latest: ArmState | None = None
        self.last_goal: np.ndarray | None = None  #: the last goals sent, SI, after clamping
        self.reads = 0
        self._connected = False

    # -- lifecycle ------------------------------------------------------------------------------

    @property
    def is_connected(self) -> bool:
        """True between `connect` and `disconnect`."""
        return self._connected

    def connect(self) -> None:
        """Open the bus, ping every servo, hold the present pose, enable torque; open control.

        Raises `DeviceError` (one line) naming a servo that does not answer.
        """
        if self._connected:
            return
        self.bus.open()
        try:
            for sid in self.ids:
                if not self.bus.ping(sid):
                    raise DeviceError(f"servo {self.bus.name(sid)} does not answer PING on "
                                      f"{self.port} after {self.bus.retries} retries")
            state = self.read_state()
            if self.torque_on_connect:
                self.bus.sync_write(feetech.GOAL_POSITION[0], 2,
                                    {sid: feetech.u16(int(c)) for sid, c in zip(self.ids, state.raw,
                                                                                strict=True)})
                self.last_goal = state.qpos.copy()
                for sid in self.ids:
                    self.bus.write(sid, feetech.TORQUE_ENABLE[0], b"\x01")
            if self.control is not None:
                self.control.open()
        except BaseException:
            self.bus.close()
            raise
        self._connected = True

    def disconnect(self) -> None:
        """Disable torque (best effort), close the bus and the control port. Idempotent."""
        if self.bus.is_open:
            for sid in self.ids:
                try:
                    self.bus.write(sid, feetech.TORQUE_ENABLE[0], b"\x00")
                except DeviceError:
                    pass
            self.bus.close()
        if self.control is not None:
            self.control.close()
        self._connected = False

    # -- the loop ---------------------------------------------------------------------------------

    def read_state(self) -> ArmState:
        """SYNC_READ all six servos (retried); `DeviceError` if one stays silent."""
        replies = self.bus.sync_read(*feetech.STATE_BLOCK, self.ids)
        state = decode_state(replies, time.monotonic(), self.ids, self.calibration)
        self.latest = state
        self.reads += 1
        return state

    def write_goals(self, q: Sequence[float] | np.ndarray) -> np.ndarray:
        """SYNC_WRITE Goal_Position for all six joints; ``q`` in rad (gripper m), clamped
        to the joint limits. Returns the goals as sent, SI. Shape: (6,)."""
        q = np.asarray(q, dtype=np.float64).reshape(len(self.ids))
        counts = [cal.to_counts(float(v)) for cal, v in zip(self.calibration, q, strict=True)]
        self.bus.sync_write(feetech.GOAL_POSITION[0], 2,
                            {sid: feetech.u16(c) for sid, c in zip(self.ids, counts, strict=True)})
        sent = np.array([cal.to_si(c) for cal, c in zip(self.calibration, counts, strict=True)])
        self.last_goal = sent
        return sent

    def set_torque(self, enable: bool) -> None:
        """Torque_Enable on every servo (acknowledged WRITEs)."""
        for sid in self.ids:
            self.bus.write(sid, feetech.TORQUE_ENABLE[0], b"\x01" if enable else b"\x00")

    # -- episode markers --------------------------------------------------------------------------

    def episode_start(self, episode: int) -> None:
        """``EPS,episode`` on the control port (no-op without one)."""
        if self.control is not None:
            self.control.send("EPS", int(episode))

    def episode_end(self, episode: int) -> None:
        """``EPE,episode`` on the control port (no-op without one)."""
        if self.control is not None:
            self.control.send("EPE", int(episode))

    def wait_judge(self, episode: int, timeout: float = 1.0) -> tuple[int, float] | None:
        """(success, score) from the JDG of ``episode``; None without one within ``timeout`` s."""
        if self.control is None:
            return None
        return self.control.wait_judge(episode, timeout)

    @property
    def counts(self) -> dict[str, int]:
        """The bus's fault counters (see `hardware.feetech.FAULT_KINDS`)."""
        return dict(self.bus.counts)

    @property
    def dropped(self) -> int:
        """Bad or missing servo replies plus dropped control lines."""
        return self.bus.faults + (self.control.dropped if self.control is not None else 0)

    def __repr__(self) -> str:
        return f"ArmDriver({self.port!r}, {'connected' if self._connected else 'closed'})"

"""What every emulator's front end shares: raw ptys, cameras in a child process, the run loop.

An emulator (`rc_car.emulator.RcCarEmulator`, `arm.emulator.ArmEmulator`) is a
`FrontEnd`: it opens its serial ports with `FrontEnd.open_pty` (raw, non-blocking
masters; `pty_read` / `pty_write` move the bytes), draws its camera frames in a
`CameraProcess` (its own interpreter, so rendering never holds the device loop's
GIL), serves them on `hardware.emulators.mjpeg.MjpegServer` s started by
`FrontEnd.serve_cameras` (each with the emulator's ``/stats``), and publishes them
from the thread `FrontEnd.start_camera_thread` paces. `run_emulator` is the
``realsim emulate ROBOT`` lifecycle: open, print the ready line once, serve until
SIGINT/SIGTERM, close.

What is the robot's own stays in its emulator: the protocol on the wire (line
framing through `hardware.nmea.LineReader`, the servo bus through
`arm.bus.ServoBus`), the physics, what a frame shows and the counters.
"""

from __future__ import annotations

import copy
import os
import signal
import sys
import termios
import threading
import time
import tty
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # the servers are the emulator's: importing this module opens no sockets
    from hardware.emulators.mjpeg import MjpegServer

Draw = Callable[[Any], Sequence[bytes]]
"""One camera request (what the world looks like) -> its JPEG frames, one per camera."""


# -- pseudo-terminals ------------------------------------------------------------------------


def open_pty(baud: int = termios.B1000000) -> tuple[int, int, str]:
    """A raw pseudo-terminal: (master fd, non-blocking; slave fd, kept open; slave path).

    The slave is raw (no echo, no CR/NL translation: bytes pass as they are) at ``baud``
    (a ``termios.B*`` constant), the "USB serial port" the host opens.
    """
    master, slave = os.openpty()
    tty.setraw(slave)
    attrs = termios.tcgetattr(slave)
    attrs[4] = attrs[5] = baud
    termios.tcsetattr(slave, termios.TCSANOW, attrs)
    os.set_blocking(master, False)
    return master, slave, os.ttyname(slave)


def pty_read(master: int, n: int = 4096) -> bytes:
    """Up to ``n`` bytes the host wrote, b"" when there are none (or the pty is gone)."""
    try:
        return os.read(master, n)
    except OSError:  # BlockingIOError and InterruptedError included
        return b""


def pty_write(master: int, slave: int, data: bytes) -> bool:
    """Write to a pty master; when nobody drains the slave, drop its stale input (as USB would).

    Returns False when the bytes could not be written."""
    for attempt in range(2):
        try:
            os.write(master, data)
            return True
        except BlockingIOError:
            if attempt == 0:
                try:
                    termios.tcflush(slave, termios.TCIFLUSH)
                except termios.error:
                    pass
        except OSError:
            return False
    return False


def close_fds(fds: Sequence[int]) -> None:
    """Close every fd >= 0 of ``fds``, ignoring ones already closed."""
    for fd in fds:
        if fd >= 0:
            try:
                os.close(fd)
            except OSError:
                pass


# -- cameras -----------------------------------------------------------------------------------


def _camera_worker(conn: Any, make: Callable[..., Draw], args: tuple[Any, ...]) -> None:
    """Child process: ``draw = make(*args)``, then turn requests into frames until None."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop
    try:
        draw = make(*args)
        conn.send("ready")
        while True:
            msg = conn.recv()
            if msg is None:
                break
            for jpeg in draw(msg):
                conn.send_bytes(jpeg)
    except (EOFError, OSError, KeyboardInterrupt):
        pass


class CameraProcess:
    """``make(*args)`` (a module-level function returning a `Draw`) run in a child process.

    `frames(request)` returns the ``n`` JPEGs the draw function makes of a request.
    Falls back to drawing in the calling thread when no process can be started.
    """

    def __init__(self, make: Callable[..., Draw], args: tuple[Any, ...], n: int, name: str,
                 label: str) -> None:
        self.n = n
        self._local: Draw | None = None
        self._proc: Any = None
        self._conn: Any = None
        import multiprocessing  # here: importing this module (the arm's bus does) opens no sockets

        try:
            ctx = multiprocessing.get_context("spawn")
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_camera_worker, args=(child, make, args), name=name, daemon=True)
            proc.start()
            child.close()
            if not parent.poll(60.0) or parent.recv() != "ready":
                raise OSError("camera process did not start")
            self._proc, self._conn = proc, parent
        except (OSError, EOFError, RuntimeError) as e:
            print(f"emulate {label}: camera in-process ({e})", file=sys.stderr)
            self._local = make(*args)

    def frames(self, request: Any) -> tuple[bytes, ...]:
        """The JPEG bytes of one request, one per camera (``n`` of them)."""
        if self._local is not None:
            return tuple(self._local(request))
        self._conn.send(request)
        return tuple(self._conn.recv_bytes() for _ in range(self.n))

    def close(self) -> None:
        """Ask the child to finish (kill it after 2 s). Idempotent."""
        if self._conn is not None:
            try:
                self._conn.send(None)
            except (OSError, ValueError):
                pass
            self._proc.join(2.0)
            if self._proc.is_alive():
                self._proc.kill()
                self._proc.join(1.0)
            self._conn.close()
            self._conn = None


# -- the front end -------------------------------------------------------------------------------


class FrontEnd:
    """The lifecycle an emulator shares: ptys, camera process and thread, servers, stop event.

    Subclasses set ``label`` (the robot, for messages), fill ``stats`` (counters, under
    ``_lock``), keep ``t0`` (host time of reality time 0) and ``episode`` (the open
    episode or None), and define `serve` (the device loop) and `open`, which calls
    `open_pty`, `serve_cameras` and `start_camera_thread`. `close` undoes all of it.
    """

    label = "emulator"

    def __init__(self, seed: int) -> None:
        self.seed = int(seed)
        self.t0 = 0.0
        self.episode: int | None = None
        self.stats: dict[str, Any] = {}
        self._lock = threading.Lock()
        self.camera: CameraProcess | None = None
        self._servers: list[MjpegServer] = []
        self._fds: list[int] = []
        self._stop = threading.Event()
        self._cam_thread: threading.Thread | None = None

    def snapshot(self) -> dict[str, Any]:
        """A copy of the counters plus `more_stats`, uptime, seed and the open episode
        (served as ``GET /stats``)."""
        with self._lock:
            s = copy.deepcopy(self.stats)
        s.update(self.more_stats())
        s["uptime_s"] = round(time.monotonic() - self.t0, 3)
        s["seed"] = self.seed
        s["episode_open"] = self.episode
        return s

    def more_stats(self) -> dict[str, Any]:
        """Figures `snapshot` adds that are not counters kept in ``stats``."""
        return {}

    def serve(self) -> None:
        """The device loop, until `stop`."""
        raise NotImplementedError

    def open(self) -> str:
        """Open ports and cameras; return the ready line."""
        raise NotImplementedError

    def open_pty(self, baud: int = termios.B1000000) -> tuple[int, int, str]:
        """`open_pty`, closed again by `close`."""
        master, slave, path = open_pty(baud)
        self._fds += [master, slave]
        return master, slave, path

    def serve_cameras(self, servers: Sequence[MjpegServer]) -> None:
        """Start the MJPEG servers, each also serving `snapshot` as ``/stats``."""
        for s in servers:
            s.add_json_route("/stats", self.snapshot)
            s.start()
            self._servers.append(s)

    def start_camera_thread(self, fps: float, frame: Callable[[], None]) -> None:
        """Call ``frame`` (draw with `camera`, publish) ``fps`` times a second until `stop`.

        The thread ends when the camera process goes away (EOFError, OSError,
        ValueError); any other error in one frame is printed and the next one tried, so a
        renderer bug never takes the serial side down. Behind by more than a period, it
        drops frames rather than bursting.
        """

        def loop() -> None:
            period = 1.0 / fps
            nxt = time.monotonic()
            while not self._stop.is_set():
                try:
                    frame()
                except (EOFError, OSError, ValueError) as e:
                    if not self._stop.is_set():
                        print(f"emulate {self.label}: camera stopped: {type(e).__name__}: {e}",
                              file=sys.stderr)
                    return
                except Exception as e:  # noqa: BLE001 - see the docstring
                    print(f"emulate {self.label}: camera: {type(e).__name__}: {e}", file=sys.stderr)
                    self._stop.wait(period)
                    continue
                nxt += period
                delay = nxt - time.monotonic()
                if delay < -period:
                    nxt = time.monotonic()
                elif delay > 0:
                    self._stop.wait(delay)

        self._cam_thread = threading.Thread(target=loop, name=f"emu-{self.label}-camera", daemon=True)
        self._cam_thread.start()

    def stop(self) -> None:
        """Ask `serve` to return (thread- and signal-safe)."""
        self._stop.set()

    def close(self) -> None:
        """Stop the camera thread and process, close the servers and the ptys. Idempotent."""
        self._stop.set()
        if self._cam_thread is not None:
            self._cam_thread.join(timeout=2.0)
            self._cam_thread = None
        if self.camera is not None:
            self.camera.close()
            self.camera = None
        for s in self._servers:
            s.close()
        self._servers = []
        close_fds(self._fds)
        self._fds = []


class Emulator(Protocol):
    """What `run_emulator` drives."""

    def open(self) -> str: ...
    def serve(self) -> None: ...
    def stop(self) -> None: ...
    def close(self) -> None: ...


def run_emulator(emu: Emulator, ready: Callable[[str], object] = print) -> None:
    """``realsim emulate ROBOT``: open ``emu``, give ``ready`` its ready line once, serve it
    until SIGINT/SIGTERM (or `stop`), close it.

    On the main thread SIGINT and SIGTERM stop it (the previous handlers come back
    after); the interpreter's switch interval is 0.5 ms meanwhile, so that the device
    loop wins the GIL from the HTTP threads quickly.
    """
    previous: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, lambda *_: emu.stop())
    old_switch = sys.getswitchinterval()
    sys.setswitchinterval(0.0005)
    try:
        line = emu.open()
        ready(line)
        try:
            sys.stdout.flush()
        except (OSError, ValueError):
            pass
        emu.serve()
    finally:
        emu.close()
        sys.setswitchinterval(old_switch)
        for sig, h in previous.items():
            signal.signal(sig, h)

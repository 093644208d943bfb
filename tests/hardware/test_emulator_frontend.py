"""The emulators' shared front end: raw ptys, the camera process and its paced thread,
``/stats``, and the run-until-signal lifecycle (hardware.emulators.frontend)."""

from __future__ import annotations

import json
import os
import select
import signal
import threading
import time
import urllib.request
from typing import Any

import pytest

from hardware.emulators.frontend import (
    CameraProcess,
    FrontEnd,
    open_pty,
    pty_read,
    pty_write,
    run_emulator,
)
from hardware.emulators.mjpeg import MjpegServer


def _make_echo(prefix: bytes) -> Any:
    """A 'camera' for CameraProcess (module level: the child process imports it)."""
    return lambda req: (prefix + req, req[::-1])


def _read_slave(fd: int, n: int, timeout: float = 2.0) -> bytes:
    out = b""
    deadline = time.monotonic() + timeout
    while len(out) < n and time.monotonic() < deadline:
        if select.select([fd], [], [], 0.05)[0]:
            out += os.read(fd, n - len(out))
    return out


def test_pty_is_raw_both_ways_and_a_stalled_reader_loses_old_bytes() -> None:
    master, slave, path = open_pty()
    try:
        assert path.startswith("/dev/") and os.get_blocking(master) is False
        assert pty_read(master) == b""  # nothing written: no wait, no error
        data = bytes(range(256))  # CR, NL, ^C, ^D ... pass untouched
        os.write(slave, data)
        got = b""
        deadline = time.monotonic() + 2.0
        while len(got) < len(data) and time.monotonic() < deadline:
            got += pty_read(master)
        assert got == data
        assert pty_write(master, slave, b"$TLM,1\r\n")
        assert _read_slave(slave, 8) == b"$TLM,1\r\n"
        for _ in range(20000):  # nobody reads the slave: the buffer fills, stale input goes
            assert pty_write(master, slave, b"x" * 64)
    finally:
        os.close(master)
        os.close(slave)


def test_camera_process_draws_in_a_child_and_closes() -> None:
    cam = CameraProcess(_make_echo, (b"jpeg:",), 2, "test-camera", "test")
    try:
        assert cam._proc is not None and cam._proc.pid != os.getpid()  # a real child
        assert cam.frames(b"abc") == (b"jpeg:abc", b"cba")
        assert cam.frames(b"") == (b"jpeg:", b"")
    finally:
        proc = cam._proc
        cam.close()
        cam.close()  # idempotent
    assert not proc.is_alive()


class _Fake(FrontEnd):
    label = "fake"

    def __init__(self, frame_error: BaseException | None = None) -> None:
        super().__init__(seed=7)
        self.frames = 0
        self.frame_error = frame_error
        self.server = MjpegServer()
        self.stats = {"frames_published": 0}
        self.served = self.closed = False

    def open(self) -> str:
        self.master, self.slave, path = self.open_pty()
        self.serve_cameras([self.server])
        self.t0 = time.monotonic()
        self.start_camera_thread(50.0, self._frame)
        return f"port={path} camera={self.server.url}"

    def _frame(self) -> None:
        self.frames += 1
        if self.frame_error is not None:
            raise self.frame_error
        self.server.publish(b"\xff\xd8\xff\xd9")
        with self._lock:
            self.stats["frames_published"] += 1

    def more_stats(self) -> dict[str, Any]:
        return {"more": 1}

    def serve(self) -> None:
        self.served = True
        self._stop.wait(5.0)

    def close(self) -> None:
        self.closed = True
        super().close()


def _stats(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url.rsplit("/", 1)[0] + "/stats", timeout=5) as r:
        return json.loads(r.read())


def test_camera_thread_is_paced_and_stats_are_served() -> None:
    emu = _Fake()
    try:
        line = emu.open()
        url = line.split("camera=")[1]
        time.sleep(0.5)
        s = _stats(url)
        assert 10 <= s["frames_published"] <= 35  # 50 /s for 0.5 s, not a busy loop
        assert s["more"] == 1 and s["seed"] == 7 and s["episode_open"] is None
        assert 0.4 < s["uptime_s"] < 5.0
    finally:
        emu.close()
        emu.close()  # idempotent
    n = emu.frames
    time.sleep(0.1)
    assert emu.frames == n  # the thread stopped
    with pytest.raises(OSError):
        os.fstat(emu.master)  # the pty is closed


@pytest.mark.parametrize(("error", "keeps_going"), [(EOFError("gone"), False), (RuntimeError("bug"), True)])
def test_a_lost_camera_ends_the_thread_and_a_drawing_bug_does_not(error: BaseException, keeps_going: bool,
                                                                 capfd: pytest.CaptureFixture[str]) -> None:
    emu = _Fake(frame_error=error)
    try:
        emu.open()
        time.sleep(0.3)
        alive = emu._cam_thread is not None and emu._cam_thread.is_alive()
    finally:
        emu.close()
    assert alive is keeps_going
    assert (emu.frames > 3) is keeps_going
    assert f"emulate fake: camera{' stopped' if not keeps_going else ''}: {type(error).__name__}" in capfd.readouterr().err


def test_run_emulator_serves_until_sigterm_and_restores_the_handler() -> None:
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers need the main thread")
    before = signal.getsignal(signal.SIGTERM)
    emu = _Fake()
    lines: list[str] = []
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGTERM))
    timer.start()
    t = time.monotonic()
    try:
        run_emulator(emu, ready=lines.append)
    finally:
        timer.cancel()
    assert time.monotonic() - t < 3.0  # stopped by the signal, not by serve's 5 s
    assert emu.served and emu.closed and len(lines) == 1 and lines[0].startswith("port=/dev/")
    assert signal.getsignal(signal.SIGTERM) is before

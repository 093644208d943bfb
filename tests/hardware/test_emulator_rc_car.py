"""The emulated RC car end to end: a subprocess, its pty spoken to with pyserial, its MJPEG and /stats."""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import serial

from hardware import nmea

ROOT = Path(__file__).resolve().parents[2]


class Link:
    """The host side of the emulated serial port; a reader thread keeps every line with its
    arrival time (time.monotonic, s)."""

    def __init__(self, port: str) -> None:
        self.ser = serial.Serial(port, 115200, timeout=0)
        self.ser.reset_input_buffer()
        self.reader = nmea.LineReader(nmea.CAR_TO_HOST)
        self.lines: list[tuple[float, nmea.Message]] = []
        self._lock = threading.Lock()
        self._stop = False
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        fd = self.ser.fileno()
        while not self._stop:
            r, _, _ = select.select([fd], [], [], 0.05)
            if not r:
                continue
            try:
                data = os.read(fd, 4096)
            except OSError:
                return
            now = time.monotonic()
            msgs = self.reader.feed(data)
            with self._lock:
                self.lines.extend((now, m) for m in msgs)

    def send(self, type: str, *fields: object) -> None:
        self.ser.write(nmea.encode(type, *fields))

    def mark(self) -> int:
        with self._lock:
            return len(self.lines)

    def since(self, mark: int, type: str | None = None) -> list[tuple[float, nmea.Message]]:
        with self._lock:
            out = self.lines[mark:]
        return [x for x in out if type is None or x[1].type == type]

    def wait_for(
        self, mark: int, pred: Callable[[nmea.Message], bool], timeout: float = 2.0
    ) -> nmea.Message:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for _, m in self.since(mark):
                if pred(m):
                    return m
            time.sleep(0.01)
        raise AssertionError("timed out waiting for a line")

    def close(self) -> None:
        self._stop = True
        self._t.join(1.0)
        self.ser.close()


class Emu:
    def __init__(self, proc: subprocess.Popen[str], port: str, camera: str) -> None:
        self.proc, self.port, self.camera = proc, port, camera
        self.base = camera.rsplit("/", 1)[0]
        self.link = Link(port)

    def stats(self) -> dict:
        with urllib.request.urlopen(self.base + "/stats", timeout=2) as r:
            return json.loads(r.read())


@pytest.fixture(scope="module")
def emu() -> Iterator[Emu]:
    proc = subprocess.Popen(
        [sys.executable, "-c", "from hardware.emulators.rc_car import run; run(seed=1)"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        r, _, _ = select.select([proc.stdout], [], [], 30)
        assert r, "emulator printed no ready line"
        line = proc.stdout.readline().strip()
        fields = dict(kv.split("=", 1) for kv in line.split())
        assert set(fields) == {"port", "camera"}, line
        e = Emu(proc, fields["port"], fields["camera"])
        yield e
        e.link.close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)


def test_ready_line_hello_and_boot_state(emu: Emu) -> None:
    assert os.path.exists(emu.port)
    assert emu.camera.startswith("http://127.0.0.1:") and emu.camera.endswith("/stream")
    mark = emu.link.mark()
    emu.link.send("HLO")
    inf = emu.link.wait_for(mark, lambda m: m.type == "INF")
    assert inf.fields[0] == "1" and inf.fields[2] == "emu-rc-car" and inf.fields[3] == "50"
    tlm = emu.link.wait_for(mark, lambda m: m.type == "TLM")
    assert tlm.int(0) == -1  # no DRV parsed yet
    assert tlm.int(7) & 1  # boots braked, watchdog flag set


def test_drive_episode_judge_and_stats(emu: Emu) -> None:
    link = emu.link
    before = emu.stats()
    mark = link.mark()
    link.send("EPS", 7)
    seq, t_end = 1000, time.monotonic() + 1.5
    nxt = time.monotonic()
    while time.monotonic() < t_end:
        link.send("DRV", seq, 5000 if seq % 2 else 0, 500)  # steer clamps to 1000
        seq += 1
        nxt += 0.02
        time.sleep(max(0.0, nxt - time.monotonic()))
    sent = seq - 1000
    link.wait_for(mark, lambda m: m.type == "TLM" and m.int(0) == seq - 1)  # ack = last seq
    link.send("EPE", 7)
    jdg = link.wait_for(mark, lambda m: m.type == "JDG")
    assert jdg.int(0) == 7 and jdg.int(1) in (0, 1) and float(jdg.fields[2]) >= 0.0
    tlms = [(h, m) for h, m in link.since(mark, "TLM")]
    in_ep = [m for _, m in tlms if m.int(7) & 4]
    assert len(in_ep) > 60
    encs = [m.int(2) for m in in_ep]
    assert encs[-1] - encs[0] > 50  # the wheels turned
    acks = [m.int(0) for m in in_ep]
    assert acks == sorted(acks) and acks[-1] == seq - 1
    # every TLM after the JDG is outside the episode
    after = link.wait_for(mark, lambda m: m.type == "TLM" and not m.int(7) & 4)
    assert not after.int(7) & 4
    s = emu.stats()
    ep = s["episodes"]["7"]
    assert ep["drv_received"] == sent
    assert ep["tlm_sent"] == len(in_ep)
    assert ep["first_tlm_t_us"] == in_ep[0].int(1) and ep["last_tlm_t_us"] == in_ep[-1].int(1)
    assert ep["success"] == jdg.int(1) and f"{ep['score']:.3f}" == jdg.fields[2]
    assert s["drv_received"] - before["drv_received"] == sent
    # the microcontroller's clock: 20 ms steps of its own, the host sees them about then
    tus = np.array([m.int(1) for _, m in tlms], dtype=np.int64)
    host = np.array([h for h, _ in tlms])
    assert np.all(np.abs(np.diff(tus) % 2**32 - 20000) <= 50)
    assert abs(np.median(np.diff(host)) - 0.02) < 0.002


def test_watchdog_trips_after_300ms_and_clears(emu: Emu) -> None:
    link = emu.link
    mark = link.mark()
    link.send("DRV", 5000, 0, 300)
    t_drv = time.monotonic()
    link.wait_for(mark, lambda m: m.type == "TLM" and m.int(0) == 5000 and not m.int(7) & 1)
    time.sleep(0.5)
    tripped = [(h, m) for h, m in link.since(mark, "TLM") if m.int(7) & 1]
    assert tripped, "watchdog never tripped"
    assert 0.28 < tripped[0][0] - t_drv < 0.45
    mark = link.mark()
    link.send("DRV", 5001, 0, 0)
    link.wait_for(mark, lambda m: m.type == "TLM" and m.int(0) == 5001 and not m.int(7) & 1)


def test_garbage_is_counted_not_fatal(emu: Emu) -> None:
    before = emu.stats()["lines_dropped"]
    link = emu.link
    good = nmea.encode("HLO")
    junk = [
        b"$DRV,1,2,3*00\r\n",  # bad checksum
        nmea.encode("FOO", 1),  # unknown type
        nmea.encode("DRV", 1, 2),  # wrong number of fields
        b"\x00\xff garbage\r\n",  # framing
        nmea.encode("TLM", 1, 2, 3, 4, 5, 6, 7, 8),  # a car->host line sent to the car
    ]
    mark = link.mark()
    link.ser.write(b"".join(junk) + good)
    link.wait_for(
        mark, lambda m: m.type == "INF"
    )  # still alive, the good line after the junk parsed
    after = emu.stats()["lines_dropped"]
    diff = {k: after[k] - before.get(k, 0) for k in after}
    assert diff["bad_checksum"] == 1 and diff["unknown_type"] == 2 and diff["field_count"] == 1
    assert diff["bad_framing"] == 1


def _read_parts(url: str, seconds: float) -> list[tuple[float, bytes, dict[str, str]]]:
    host, rest = url.split("//", 1)[1].split("/", 1)
    h, port = host.split(":")
    sock = socket.create_connection((h, int(port)), timeout=2)
    sock.sendall(f"GET /{rest} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
    f = sock.makefile("rb")
    status = f.readline()
    assert b" 200 " in status
    headers = {}
    while ln := f.readline().strip():
        k, v = ln.decode().split(":", 1)
        headers[k.lower()] = v.strip()
    assert headers["content-type"] == "multipart/x-mixed-replace; boundary=frame"
    parts = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        ln = f.readline().strip()
        if not ln:
            continue
        assert ln == b"--frame"
        ph = {}
        while ln := f.readline().strip():
            k, v = ln.decode().split(":", 1)
            ph[k.lower()] = v.strip()
        body = f.read(int(ph["content-length"]))
        parts.append((time.monotonic(), body, ph))
    sock.close()
    return parts


def test_mjpeg_stream_rate_and_frames(emu: Emu) -> None:
    parts = _read_parts(emu.camera, 2.5)
    assert all(p[2]["content-type"] == "image/jpeg" for p in parts)
    assert all(p[1][:2] == b"\xff\xd8" and p[1][-2:] == b"\xff\xd9" for p in parts)
    fps = (len(parts) - 1) / (parts[-1][0] - parts[0][0])
    assert fps >= 18, fps
    import cv2

    img = cv2.imdecode(np.frombuffer(parts[-1][1], np.uint8), cv2.IMREAD_COLOR)
    assert img.shape == (240, 320, 3)
    with urllib.request.urlopen(emu.base + "/frame.jpg", timeout=2) as r:
        assert r.headers["Content-Type"] == "image/jpeg" and r.read()[:2] == b"\xff\xd8"
    assert emu.stats()["frames_published"] > 20


def test_sigterm_exits_cleanly(emu: Emu) -> None:
    emu.link.close()
    emu.proc.send_signal(signal.SIGTERM)
    assert emu.proc.wait(10) == 0
    assert "Traceback" not in emu.proc.stderr.read()

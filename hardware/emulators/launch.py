"""Start `realsim emulate ROBOT` as a child process and read its ready line.

Used by the cycle (when the config names no connection), the main job and the
tests: they talk to the emulator only through what it prints, exactly as a
user's script would (spec/cli.md: `port=<path> camera=<src> [control=<path>]`).
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from realsim.errors import DeviceError


def parse_ready_line(line: str) -> dict[str, str]:
    """`port=/dev/pts/3 camera=http://...` -> {"port": ..., "camera": ...}."""
    out = {}
    for part in line.split():
        key, sep, val = part.partition("=")
        if sep:
            out[key] = val
    if "port" not in out or "camera" not in out:
        raise DeviceError(f"emulator printed no ready line: {line.strip()!r}")
    return out


class EmulatorProcess:
    """Context manager: `with EmulatorProcess("rc_car", seed=1) as emu: emu.port, emu.camera`."""

    def __init__(self, robot: str, seed: int = 0, reality: str | Path | None = None,
                 timeout: float = 30.0, log: str | Path | None = None) -> None:
        self.robot, self.seed, self.reality, self.timeout = robot, seed, reality, timeout
        self.log = Path(log) if log else None
        self.proc: subprocess.Popen[str] | None = None
        self.ready: dict[str, str] = {}

    @property
    def port(self) -> str:
        return self.ready["port"]

    @property
    def camera(self) -> str:
        return self.ready["camera"]

    @property
    def control(self) -> str | None:
        return self.ready.get("control")

    def stats(self) -> dict[str, Any]:
        """The emulator's own counters (GET /stats next to the camera stream)."""
        base = self.camera.split(",")[0].split("=", 1)[-1].rsplit("/", 1)[0]
        with urllib.request.urlopen(base + "/stats", timeout=5) as r:
            return json.loads(r.read())

    def start(self) -> EmulatorProcess:
        cmd = [sys.executable, "-m", "realsim", "emulate", self.robot, "--seed", str(self.seed)]
        if self.reality is not None:
            cmd += ["--reality", str(self.reality)]
        err = open(self.log, "w") if self.log else subprocess.DEVNULL  # noqa: SIM115
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"})
        assert self.proc.stdout is not None
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            r, _, _ = select.select([self.proc.stdout], [], [], 0.2)
            if r:
                line = self.proc.stdout.readline()
                if line.startswith("port="):
                    self.ready = parse_ready_line(line)
                    return self
                if not line:
                    break
            if self.proc.poll() is not None:
                break
        self.stop()
        raise DeviceError(f"emulate {self.robot}: no ready line within {self.timeout:.0f} s")

    def stop(self) -> int | None:
        """SIGTERM, then SIGKILL after 5 s. Returns the exit status."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL at once: the robot vanishes mid-episode."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> EmulatorProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

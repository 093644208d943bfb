"""Action sources for `realsim record`: excitation signals and keyboard teleop.

A policy source is built by the CLI from a student checkpoint and has the same
shape (`name`, `begin`, `act`); this module never imports a learner.
"""

from __future__ import annotations

import os
import select
import sys
import threading
from collections.abc import Callable
from typing import IO

import numpy as np

from hardware.recorder import Control, Observation


class ExcitationSource:
    """Plays a seeded excitation signal; episode k uses seed base_seed + k.

    `make(seconds, seed)` returns f(t) -> action, so an episode can be
    regenerated from its logged (driver, seed) attributes.
    """

    def __init__(self, signal: str, make: Callable[[float, int], Callable[[float], np.ndarray]],
                 seconds: float, base_seed: int = 0) -> None:
        self.name = f"excite:{signal}"
        self._make, self._seconds, self._base = make, seconds, base_seed
        self._f: Callable[[float], np.ndarray] | None = None

    def begin(self, episode: int) -> int:
        seed = self._base + episode
        self._f = self._make(self._seconds, seed)
        return seed

    def act(self, obs: Observation) -> np.ndarray:
        assert self._f is not None, "begin() first"
        return self._f(obs.t)


class TeleopSource:
    """Keyboard driving: w/s throttle up/down, a/d steer, space brake and centre.

    n ends the episode (kept), r re-records it (the old one stays in the file
    marked discarded), q quits after this episode. On a terminal keys act at
    once (cbreak mode, restored on exit); on a plain pipe each line is a key
    sequence, so a script or a serial console can drive it too. Steering
    eases back to centre when no key comes, like a spring-loaded transmitter.
    """

    name = "teleop"
    STEP = 0.1
    CENTRE_RATE = 0.02  # steer units per tick back to centre

    def __init__(self, stream: IO[str] | None = None) -> None:
        self._in = stream or sys.stdin
        self._keys: list[str] = []
        self._lock = threading.Lock()
        self._steer = 0.0
        self._throttle = 0.0
        self._stop = threading.Event()
        self._tty_state = None
        self._thread = threading.Thread(target=self._read, name="teleop-keys", daemon=True)
        self._started = False

    def _read(self) -> None:
        fd = self._in.fileno()
        while not self._stop.is_set():
            r, _, _ = select.select([fd], [], [], 0.1)
            if not r:
                continue
            data = os.read(fd, 64).decode(errors="ignore")
            if not data:
                self._push("q")
                return
            self._push(data)

    def _push(self, keys: str) -> None:
        with self._lock:
            self._keys.extend(k for k in keys.lower() if k in "wasd nrq")

    def begin(self, episode: int) -> int:
        if not self._started:
            self._started = True
            if self._in.isatty():
                import termios
                import tty
                fd = self._in.fileno()
                self._tty_state = termios.tcgetattr(fd)
                tty.setcbreak(fd)
            sys.stderr.write("teleop: w/s throttle, a/d steer, space brake, "
                             "n next episode, r re-record, q quit\n")
            self._thread.start()
        self._steer = self._throttle = 0.0
        return -1

    def act(self, obs: Observation) -> np.ndarray | Control:
        with self._lock:
            keys, self._keys = self._keys, []
        steered = False
        for k in keys:
            if k == "n":
                return Control.NEXT
            if k == "r":
                return Control.RERECORD
            if k == "q":
                return Control.QUIT
            if k == "w":
                self._throttle = min(1.0, self._throttle + self.STEP)
            elif k == "s":
                self._throttle = max(-1.0, self._throttle - self.STEP)
            elif k == "a":
                self._steer, steered = min(1.0, self._steer + 2 * self.STEP), True
            elif k == "d":
                self._steer, steered = max(-1.0, self._steer - 2 * self.STEP), True
            elif k == " ":
                self._steer, self._throttle = 0.0, -1.0
        if not steered:
            self._steer -= float(np.clip(self._steer, -self.CENTRE_RATE, self.CENTRE_RATE))
        return np.array([self._steer, self._throttle])

    def close(self) -> None:
        self._stop.set()
        if self._tty_state is not None:
            import termios
            termios.tcsetattr(self._in.fileno(), termios.TCSADRAIN, self._tty_state)
            self._tty_state = None

"""The emulated RC car: a reality model, a camera renderer and the pty/MJPEG front end.

`run` is what ``realsim emulate rc_car`` calls. The submodules load lazily, so
importing `reality` alone (tests, notebooks) does not pull in OpenCV or sockets.
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    """``run`` (`hardware.emulators.rc_car.emulator.run`) is imported on first use."""
    if name == "run":
        from hardware.emulators.rc_car.emulator import run

        return run
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["run"]

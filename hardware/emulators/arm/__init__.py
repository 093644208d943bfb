"""The emulated arm: servo-bus and control ptys, two MJPEG cameras, a reality of its own.

`run` is what ``realsim emulate arm`` calls. Submodules load lazily, so importing
`bus` or `reality` alone (tests, tools) pulls in neither OpenCV nor sockets.
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    """``run`` (`hardware.emulators.arm.emulator.run`) is imported on first use."""
    if name == "run":
        from hardware.emulators.arm.emulator import run

        return run
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["run"]

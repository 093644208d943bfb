"""The emulated arm: servo-bus and control ptys, two MJPEG cameras, a reality of its own.

`run` is what ``realsim emulate arm`` calls. Submodules load lazily, so importing
`bus` or `reality` alone (tests, tools) pulls in neither OpenCV nor sockets.
"""

from __future__ import annotations

from collections.abc import Callable


def run(
    seed: int = 0,
    reality: str | None = None,
    camera_port: int = 0,
    ready: Callable[[str], object] = print,
) -> None:
    """Run the emulated arm until SIGINT/SIGTERM; see `hardware.emulators.arm.emulator.run`."""
    from hardware.emulators.arm.emulator import run as _run

    _run(seed=seed, reality=reality, camera_port=camera_port, ready=ready)


__all__ = ["run"]

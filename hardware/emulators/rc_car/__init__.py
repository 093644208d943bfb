"""The emulated RC car: a reality model, a camera renderer and the pty/MJPEG front end.

`run` is what ``realsim emulate rc_car`` calls. The submodules load lazily, so
importing `reality` alone (tests, notebooks) does not pull in OpenCV or sockets.
"""

from __future__ import annotations

from collections.abc import Callable


def run(
    seed: int = 0,
    reality: str | None = None,
    camera_port: int = 0,
    ready: Callable[[str], object] = print,
) -> None:
    """Run the emulated car until SIGINT/SIGTERM; see `hardware.emulators.rc_car.emulator.run`."""
    from hardware.emulators.rc_car.emulator import run as _run

    _run(seed=seed, reality=reality, camera_port=camera_port, ready=ready)


__all__ = ["run"]

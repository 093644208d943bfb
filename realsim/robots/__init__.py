"""One folder per robot: MJCF, constants, uncertain parameters, task."""

from __future__ import annotations

from realsim.errors import UserError

ROBOTS = ("rc_car", "arm")


def check_robot(name: str) -> str:
    """Return `name` if it is a known robot, else raise a one-line UserError."""
    if name not in ROBOTS:
        raise UserError(f"unknown robot {name!r}: expected one of {', '.join(ROBOTS)}")
    return name

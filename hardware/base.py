"""The one shape every robot driver has (like LeRobot's ``Robot``): connect, disconnect, ``with``."""

from __future__ import annotations

from abc import ABC, abstractmethod
from types import TracebackType
from typing import TypeVar

_D = TypeVar("_D", bound="RobotDriver")


class RobotDriver(ABC):
    """A connection to one robot (real or emulated).

    ``with driver:`` connects on entry (unless already connected) and always
    disconnects on exit, also when the body raises; a driver's `disconnect`
    leaves the robot safe (the car: ``STP``, neutral steering, full brake).
    """

    @abstractmethod
    def connect(self) -> None:
        """Open the link and handshake; raise `realsim.errors.DeviceError` with one line if not."""

    @abstractmethod
    def disconnect(self) -> None:
        """Make the robot safe, then close the link. Idempotent; never raises for a dead link."""

    @property
    @abstractmethod
    def is_connected(self) -> bool:
        """True while the link is open and the robot answering."""

    def __enter__(self: _D) -> _D:
        if not self.is_connected:
            self.connect()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.disconnect()

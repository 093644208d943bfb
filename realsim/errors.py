"""Errors a user can cause and fix. The CLI prints them as one line and exits 2."""

from __future__ import annotations


class UserError(Exception):
    """Bad input from the user or the outside world (file, option, wire).

    Raised anywhere in the library; `realsim.cli.main` turns it into one line on
    stderr and exit status 2, never a traceback.
    """


class LogFormatError(UserError):
    """A log file that is not realsim-log v1, or whose datasets disagree.

    The message always names the file, and the episode and dataset when known.
    """


class DeviceError(UserError):
    """The robot (or emulator) stopped answering, or answered nonsense at connect."""

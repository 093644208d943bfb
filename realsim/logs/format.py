"""Constants, validation helpers and crash recovery for realsim-log v1 files.

The layout itself is specified in ``spec/log_format.md``.  This module holds
what both the writer and the reader need: the format constants, the dtype
rules for sensor fields and the one-line error helper.
"""

from __future__ import annotations

import os

import numpy as np

from realsim.errors import LogFormatError

FORMAT = "realsim-log"
FORMAT_VERSION = 1
ROBOTS = ("rc_car", "arm")
SOURCES = ("real", "sim")
INT_FIELDS = frozenset({"ack", "flags", "seq"})
"""Sensor/command fields stored as int64; every other sensor field is float64."""

EPISODE_PREFIX = "ep_"
HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
_SUPERBLOCK_OFFSETS = (0, 512, 1024, 2048, 4096, 8192)


def fail(path: str | os.PathLike[str], msg: str, episode: str | None = None) -> LogFormatError:
    """Build the one-line error ``"FILE: episode EP: msg"`` (never raised here)."""
    where = f"{path}: " + (f"episode {episode}: " if episode else "")
    return LogFormatError(where + " ".join(str(msg).split()))


def episode_name(index: int) -> str:
    """``ep_000003`` for index 3."""
    return f"{EPISODE_PREFIX}{index:06d}"


def field_dtype(name: str) -> np.dtype:
    """int64 for ack/flags/seq, float64 for every other field."""
    return np.dtype(np.int64) if name in INT_FIELDS else np.dtype(np.float64)


def fill_value(dtype: np.dtype) -> float | int:
    """Value used for a sensor field that a sample lacks: NaN, or -1 for ints."""
    return -1 if np.issubdtype(dtype, np.integer) else float("nan")


def find_superblock(path: str | os.PathLike[str]) -> int | None:
    """Byte offset of the HDF5 signature, or None if the file is not HDF5."""
    try:
        with open(path, "rb") as fh:
            for off in _SUPERBLOCK_OFFSETS:
                fh.seek(off)
                if fh.read(8) == HDF5_SIGNATURE:
                    return off
    except OSError:
        return None
    return None

"""realsim log format v1: one HDF5 file, many episodes, raw streams with their own clocks.

See ``spec/log_format.md``.  Write with :class:`LogWriter` (appending,
crash-safe), read with :class:`LogReader`, align streams with
:func:`resample` / :func:`control_timeline`, print with :func:`summarize`.
"""

from realsim.logs.format import FORMAT, FORMAT_VERSION
from realsim.logs.reader import CameraStream, Episode, LogReader, Stream
from realsim.logs.resample import control_timeline, resample
from realsim.logs.summary import summarize
from realsim.logs.writer import EpisodeWriter, LogWriter

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "CameraStream",
    "Episode",
    "EpisodeWriter",
    "LogReader",
    "LogWriter",
    "Stream",
    "control_timeline",
    "resample",
    "summarize",
]

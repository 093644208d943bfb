"""Crash-safe, appending writer for realsim-log v1 files.

Crash safety (what ``kill -9`` at any moment leaves behind):

* ``add_*`` only appends to in-memory lists under a per-episode lock (cheap,
  thread-safe).  A background thread flushes every open episode at least
  every ``flush_interval`` s (0.5 s by default), so a stalled recorder still
  flushes; ``flush()``, ``close()``, ``set_attrs()`` and ``set_judge()`` flush
  at once.
* A flush writes the buffered rows of every stream, calls ``H5Fflush`` and
  then commits the journal (:mod:`realsim.logs.journal`): HDF5's own in-place
  metadata writes are held back and applied all-or-nothing, so the file on
  disk is always exactly the state after some complete flush.  Killed at any
  moment, the file holds every closed episode intact and the open one up to
  its last flush with ``complete=False``; a killed flush is replayed or
  dropped as a whole by the next writer (reading needs no repair).
* Closed episodes are never touched again: appending only adds new groups.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import math
import os
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import h5py
import numpy as np

import realsim
from realsim.errors import LogFormatError
from realsim.logs.format import (
    EPISODE_PREFIX,
    FORMAT,
    FORMAT_VERSION,
    ROBOTS,
    SOURCES,
    episode_name,
    fail,
    field_dtype,
    fill_value,
    find_superblock,
)
from realsim.logs.journal import JournaledFile

_CHUNK_ROWS = 256
_CHUNK_FRAMES = 64
_VLEN_U8 = h5py.vlen_dtype(np.uint8)


def _attr_value(v: Any) -> Any:
    if isinstance(v, Path):
        return str(v)
    if v is None:
        return "None"
    return v


class _Stream:
    """Buffered rows of one stream (command, sensors, one camera, one privileged)."""

    def __init__(self, group: str) -> None:
        self.group = group  # path inside the episode, e.g. "sensors"
        self.t: list[np.ndarray] = []
        self.fields: list[dict[str, Any]] = []  # one dict of arrays per block
        self.rows: list[int] = []
        self.committed = 0  # rows with t on disk
        self.schema: dict[str, tuple[np.dtype, tuple[int, ...]]] = {}

    def pending(self) -> int:
        return sum(self.rows)


class EpisodeWriter:
    """One episode being recorded; create it with ``LogWriter.begin_episode``."""

    def __init__(self, writer: LogWriter, name: str) -> None:
        self.name = name
        self._w = writer
        self._lock = threading.Lock()
        self._streams: dict[str, _Stream] = {}
        self._static: dict[str, np.ndarray] = {}
        self._static_names: set[str] = set()
        self._closed = False
        self._error: Exception | None = None  # a background flush failure, raised on add_*
        self._last_flush = time.monotonic()

    # ----------------------------------------------------------------- adding
    def _stream(self, group: str) -> _Stream:
        s = self._streams.get(group)
        if s is None:
            s = self._streams[group] = _Stream(group)
        return s

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"episode {self.name} is closed")
        if self._error is not None:
            raise self._error

    def add_command(self, t: float, seq: int, action: Sequence[float]) -> None:
        """One command sent at host time ``t`` (s since episode start). Shape action: (A,)."""
        a = np.asarray(action, dtype=np.float32).reshape(1, -1)
        with self._lock:
            self._check_open()
            s = self._stream("command")
            s.t.append(np.array([t], dtype=np.float64))
            s.fields.append({"seq": np.array([seq], dtype=np.int64), "action": a})
            s.rows.append(1)

    def add_commands(self, t: np.ndarray, seq: np.ndarray, action: np.ndarray) -> None:
        """Bulk commands. Shape: t (N,), seq (N,), action (N, A)."""
        t = np.asarray(t, dtype=np.float64).reshape(-1)
        n = len(t)
        seq = np.asarray(seq, dtype=np.int64).reshape(n)
        action = np.asarray(action, dtype=np.float32).reshape(n, -1)
        with self._lock:
            self._check_open()
            s = self._stream("command")
            s.t.append(t)
            s.fields.append({"seq": seq, "action": action})
            s.rows.append(n)

    def add_sensors(self, t: float, t_device: float = math.nan, **fields: Any) -> None:
        """One sensor sample. Scalars make (M,) datasets, (k,)-vectors make (M, k)."""
        block = {k: np.asarray(v, dtype=field_dtype(k)).reshape((1, *np.shape(v)))
                 for k, v in fields.items()}
        block["t_device"] = np.array([t_device], dtype=np.float64)
        with self._lock:
            self._check_open()
            s = self._stream("sensors")
            s.t.append(np.array([t], dtype=np.float64))
            s.fields.append(block)
            s.rows.append(1)

    def add_sensor_block(self, t: np.ndarray, t_device: np.ndarray | None = None,
                         **fields: np.ndarray) -> None:
        """Bulk sensor samples. Shape: t (M,), t_device (M,), each field (M,) or (M, k)."""
        t = np.asarray(t, dtype=np.float64).reshape(-1)
        n = len(t)
        td = (np.full(n, math.nan) if t_device is None
              else np.asarray(t_device, dtype=np.float64).reshape(n))
        block = {}
        for k, v in fields.items():
            a = np.asarray(v, dtype=field_dtype(k))
            if a.ndim == 0 or a.shape[0] != n:
                raise ValueError(f"sensor field {k!r} has shape {a.shape}, expected ({n}, ...)")
            block[k] = a
        block["t_device"] = td
        with self._lock:
            self._check_open()
            s = self._stream("sensors")
            s.t.append(t)
            s.fields.append(block)
            s.rows.append(n)

    def add_frame(self, camera: str, t: float, jpeg: bytes) -> None:
        """One camera frame, stored exactly as received (variable-length uint8)."""
        if not camera or "/" in camera:
            raise ValueError(f"bad camera name {camera!r}")
        data = np.frombuffer(bytes(jpeg), dtype=np.uint8)
        with self._lock:
            self._check_open()
            s = self._stream(f"camera/{camera}")
            s.t.append(np.array([t], dtype=np.float64))
            s.fields.append({"jpeg": [data]})
            s.rows.append(1)

    def add_privileged(self, name: str, array: Any, t: Any = None) -> None:
        """Simulator-only state. Without ``t``: one static array ``privileged/<name>``.

        With ``t`` (scalar or (n,)): rows appended to ``privileged/<name>/data``
        (Shape: (n, ...)) with their times in ``privileged/<name>/t``; the
        reader returns them as ``<name>`` and ``<name>_t``.
        """
        if self._w.source != "sim":
            raise LogFormatError(
                f"{self._w.path}: episode {self.name}: privileged data is only allowed when source='sim'"
            )
        if not name or "/" in name:
            raise ValueError(f"bad privileged name {name!r}")
        a = np.asarray(array)
        if a.dtype.kind == "U":  # HDF5 has no UCS-4 strings: store UTF-8 bytes
            a = np.char.encode(a, "utf-8")
        with self._lock:
            self._check_open()
            if t is None:
                if name in self._static_names or f"privileged/{name}" in self._streams:
                    raise ValueError(f"privileged/{name} already written")
                self._static_names.add(name)
                self._static[name] = a.copy()
                return
            if name in self._static_names:
                raise ValueError(f"privileged/{name} already written as a static array")
            tt = np.asarray(t, dtype=np.float64).reshape(-1)
            if np.ndim(t) == 0:
                a = a.reshape((1, *a.shape))
            if a.shape[0] != len(tt):
                raise ValueError(f"privileged {name!r}: {a.shape[0]} rows but {len(tt)} times")
            s = self._stream(f"privileged/{name}")
            s.t.append(tt)
            s.fields.append({"data": a.copy()})
            s.rows.append(len(tt))

    def set_judge(self, success: int, score: float) -> None:
        """Record a judge verdict: ``judge`` attrs and the episode's success/score."""
        self._w._write_attrs(self, {"success": int(success), "score": float(score)}, judge=True)

    def set_attrs(self, **kw: Any) -> None:
        """Set episode attributes now (e.g. dropped_lines=, watchdog_trips=)."""
        self._w._write_attrs(self, kw)

    def flush(self) -> None:
        """Write everything buffered to disk now, as one atomic commit."""
        self._w._flush_episode(self)

    def close(self, success: int | None = None, score: float | None = None) -> None:
        """Final flush, then ``complete=True`` (and success/score if given)."""
        if self._closed:
            return
        self._w._close_episode(self, success, score)

    def __enter__(self) -> EpisodeWriter:
        return self

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        if exc_type is None:
            self.close()
        else:
            self._w._flush_episode(self)


class LogWriter:
    """Create or append to a realsim log file; never rewrites earlier episodes.

    ``LogWriter(path, robot="rc_car", source="real", attrs={...})``.  On append
    the file's format, robot and source must match, else LogFormatError.  One
    writer per file at a time (a second one gets LogFormatError).  If the last
    writer was killed, its unfinished commit is replayed or dropped first
    (``recovered`` tells which happened).
    """

    def __init__(self, path: str | os.PathLike[str], robot: str, source: str = "real",
                 attrs: Mapping[str, Any] | None = None, flush_interval: float = 0.5) -> None:
        if robot not in ROBOTS:
            raise LogFormatError(f"{path}: unknown robot {robot!r} (expected one of {', '.join(ROBOTS)})")
        if source not in SOURCES:
            raise LogFormatError(f"{path}: unknown source {source!r} (expected real or sim)")
        self.path = Path(path)
        self.robot = robot
        self.source = source
        self.flush_interval = float(flush_interval)
        self._io = threading.RLock()
        self._open_eps: dict[str, EpisodeWriter] = {}
        self._closed = False
        self.recovered = False
        try:
            self._jf = JournaledFile(self.path, writable=True)
        except OSError as e:
            raise LogFormatError(f"{path}: cannot open for writing ({e.strerror})") from None
        try:
            if not self._jf.lock_writer():
                raise LogFormatError(f"{path}: another process is writing this log")
            self._f = self._open(attrs or {})
        except BaseException:
            self._jf.close()
            raise
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._flusher, name="realsim-log-flush", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------ open/create
    def _open(self, attrs: Mapping[str, Any]) -> h5py.File:
        path, jf = self.path, self._jf
        self.recovered = jf.recover()
        if jf.size > 0 and find_superblock(path) is None:
            head = os.pread(jf.fd, 8, 0)
            if head.strip(b"\0"):
                raise fail(path, "not an HDF5 file, refusing to append to it")
            # zeros: a writer was killed before its very first commit
            os.ftruncate(jf.fd, 0)
            jf.size = jf.base = 0
        if jf.size == 0:
            jf.base = 1 << 62  # hold even the first writes: creation is atomic too
            f = h5py.File(jf, "w")
            f.attrs["format"] = FORMAT
            f.attrs["format_version"] = FORMAT_VERSION
            f.attrs["robot"] = self.robot
            f.attrs["source"] = self.source
            f.attrs["created"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
            f.attrs["software"] = f"realsim {realsim.__version__}"
            for k, v in attrs.items():
                f.attrs[k] = _attr_value(v)
            f.create_group("episodes")
        else:
            try:
                f = h5py.File(jf, "r+")
            except Exception as e:
                raise fail(path, f"cannot open HDF5 file for appending (truncated or corrupt?): {e}") from None
            try:
                self._check_existing(f)
                for k, v in attrs.items():  # new root attrs only; never rewrite existing ones
                    if k not in f.attrs:
                        f.attrs[k] = _attr_value(v)
                if "episodes" not in f:
                    f.create_group("episodes")
            except BaseException:
                f.close()
                raise
        f.flush()
        jf.commit()
        return f

    def _check_existing(self, f: h5py.File) -> None:
        a = f.attrs
        fmt = _str(a.get("format"))
        if fmt != FORMAT:
            raise fail(self.path, f"not a realsim log (format={fmt!r}), refusing to append")
        ver = a.get("format_version")
        if ver is None or int(ver) != FORMAT_VERSION:
            raise fail(self.path, f"format_version {ver} is not supported (expected {FORMAT_VERSION})")
        robot, source = _str(a.get("robot")), _str(a.get("source"))
        if robot != self.robot:
            raise fail(self.path, f"log is for robot {robot!r}, not {self.robot!r}")
        if source != self.source:
            raise fail(self.path, f"log has source {source!r}, not {self.source!r}")

    def _commit(self) -> None:
        """H5Fflush, then make it atomic on disk. Caller holds ``_io``."""
        self._f.flush()
        self._jf.commit()

    # ------------------------------------------------------------- episodes
    def episode_names(self) -> list[str]:
        """All episode names in the file, sorted."""
        with self._io:
            return sorted(k for k in self._f["episodes"] if k.startswith(EPISODE_PREFIX))

    def complete_episodes(self) -> list[str]:
        """Names of episodes closed cleanly (complete=True)."""
        with self._io:
            eps = self._f["episodes"]
            return [n for n in self.episode_names() if bool(eps[n].attrs.get("complete", False))]

    def begin_episode(self, driver: str = "", seed: int | None = -1,
                      attrs: Mapping[str, Any] | None = None,
                      name: str | None = None) -> EpisodeWriter:
        """Start the next episode ``ep_%06d`` (attrs complete=False, success=-1, score=NaN).

        ``name`` picks an explicit unused ``ep_...`` name instead (e.g. a replay
        that keeps its source's episode names).
        """
        with self._io:
            self._check_open()
            names = self.episode_names()
            if name is not None:
                if not name.startswith(EPISODE_PREFIX) or "/" in name or name in names:
                    raise ValueError(f"{self.path}: episode name {name!r} is taken or not ep_...")
            else:
                idx = 0
                for n in names:
                    with contextlib.suppress(ValueError):
                        idx = max(idx, int(n[len(EPISODE_PREFIX):]) + 1)
                name = episode_name(idx)
            g = self._f["episodes"].create_group(name)
            g.attrs["complete"] = False
            g.attrs["start_unix"] = time.time()
            g.attrs["driver"] = str(driver)
            g.attrs["seed"] = -1 if seed is None else int(seed)
            g.attrs["success"] = -1
            g.attrs["score"] = math.nan
            for k, v in (attrs or {}).items():
                g.attrs[k] = _attr_value(v)
            self._commit()
            ep = EpisodeWriter(self, name)
            self._open_eps[name] = ep
            return ep

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"{self.path}: LogWriter is closed")

    def _write_attrs(self, ep: EpisodeWriter, kw: Mapping[str, Any], judge: bool = False) -> None:
        self._flush_episode(ep)
        with self._io:
            self._check_open()
            g = self._f["episodes"][ep.name]
            if judge:
                j = g.require_group("judge")
                for k, v in kw.items():
                    j.attrs[k] = v
            for k, v in kw.items():
                g.attrs[k] = _attr_value(v)
            self._commit()

    def _flush_episode(self, ep: EpisodeWriter) -> None:
        with self._io:
            with ep._lock:
                todo = []
                for s in ep._streams.values():
                    if s.rows:
                        todo.append((s, s.t, s.fields, s.rows))
                        s.t, s.fields, s.rows = [], [], []
                static, ep._static = ep._static, {}
                ep._last_flush = time.monotonic()
            if not todo and not static:
                return
            self._check_open()
            g = self._f["episodes"][ep.name]
            for name, arr in static.items():
                g.create_dataset(f"privileged/{name}", data=arr)
            for s, ts, fields, rows in todo:
                n = sum(rows)
                sg = g.require_group(s.group)
                cols = _merge_fields(s, fields, rows)
                cols["t"] = np.concatenate(ts)
                for key, col in cols.items():
                    d = sg.get(key)
                    if d is None:
                        d = _create(sg, key, col, s.committed)
                    elif d.shape[1:] != col.shape[1:]:
                        raise ValueError(
                            f"{ep.name}: {s.group}/{key} rows have shape {col.shape[1:]}, "
                            f"earlier rows {d.shape[1:]}")
                    d.resize(s.committed + n, axis=0)
                    if key == "jpeg":  # vlen: one element at a time (equal sizes would broadcast)
                        for i, x in enumerate(col):
                            d[s.committed + i] = x
                    else:
                        d[s.committed:s.committed + n] = col
                s.committed += n
            self._commit()

    def _close_episode(self, ep: EpisodeWriter, success: int | None, score: float | None) -> None:
        with self._io:
            self._flush_episode(ep)
            with ep._lock:
                ep._closed = True
            self._check_open()
            g = self._f["episodes"][ep.name]
            if success is not None:
                g.attrs["success"] = int(success)
            if score is not None:
                g.attrs["score"] = float(score)
            g.attrs["complete"] = True
            self._commit()
            self._open_eps.pop(ep.name, None)

    # ----------------------------------------------------------- lifecycle
    def _flusher(self) -> None:
        period = max(0.02, min(0.1, self.flush_interval / 4))
        while not self._stop.wait(period):
            now = time.monotonic()
            for ep in list(self._open_eps.values()):
                if now - ep._last_flush >= self.flush_interval:
                    try:
                        self._flush_episode(ep)
                    except RuntimeError:
                        return
                    except Exception as e:  # keep the thread alive; add_* reports it
                        ep._error = e

    def flush(self) -> None:
        """Flush every open episode now."""
        for ep in list(self._open_eps.values()):
            self._flush_episode(ep)

    def close(self) -> None:
        """Flush open episodes (they stay complete=False) and close the file."""
        if self._closed:
            return
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()
        try:
            for ep in list(self._open_eps.values()):
                self._flush_episode(ep)
                with ep._lock:
                    ep._closed = True
        finally:
            with self._io:
                self._closed = True
                try:
                    self._f.close()  # HDF5's last writes (and truncate) commit too
                    self._jf.commit()
                finally:
                    self._jf.close()

    def __enter__(self) -> LogWriter:
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()


def _str(v: Any) -> Any:
    return v.decode() if isinstance(v, bytes) else (str(v) if isinstance(v, np.str_) else v)


def _chunk_rows(group: str) -> int:
    return _CHUNK_FRAMES if group.startswith("camera/") else _CHUNK_ROWS


def _create(sg: h5py.Group, key: str, col: Any, existing: int) -> h5py.Dataset:
    """Create a resizable dataset, back-filling ``existing`` earlier rows."""
    rows = _chunk_rows(sg.name.split("/", 3)[-1])
    if key == "jpeg":
        return sg.create_dataset(key, shape=(existing,), maxshape=(None,), dtype=_VLEN_U8,
                                 chunks=(rows,))
    tail = col.shape[1:]
    d = sg.create_dataset(key, shape=(existing, *tail), maxshape=(None, *tail), dtype=col.dtype,
                          chunks=(rows, *tail) if tail else (rows,),
                          fillvalue=fill_value(col.dtype) if col.dtype.kind in "fi" else None)
    return d


def _merge_fields(s: _Stream, blocks: list[dict[str, Any]], rows: list[int]) -> dict[str, Any]:
    """Concatenate buffered blocks per field, filling fields a block lacks."""
    keys: dict[str, None] = {}
    for b in blocks:
        for k in b:
            keys.setdefault(k)
    for k in s.schema:
        keys.setdefault(k)
    out: dict[str, Any] = {}
    for k in keys:
        if k == "jpeg":
            arr = np.empty(sum(rows), dtype=object)
            i = 0
            for b, n in zip(blocks, rows, strict=True):
                for x in b.get(k, [np.zeros(0, np.uint8)] * n):
                    arr[i] = x
                    i += 1
            out[k] = arr
            continue
        proto = next((b[k] for b in blocks if k in b), None)
        if proto is None:
            dt, tail = s.schema[k]
        else:
            dt, tail = proto.dtype, proto.shape[1:]
        s.schema.setdefault(k, (dt, tail))
        parts = []
        for b, n in zip(blocks, rows, strict=True):
            if k in b:
                parts.append(b[k])
            else:
                parts.append(np.full((n, *tail), fill_value(dt), dtype=dt))
        out[k] = np.concatenate(parts, axis=0)
    return out

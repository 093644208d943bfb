"""Validating reader for realsim-log v1 files (works on live and killed files too)."""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from realsim.errors import LogFormatError
from realsim.logs.format import (
    EPISODE_PREFIX,
    FORMAT,
    FORMAT_VERSION,
    HDF5_SIGNATURE,
    ROBOTS,
    SOURCES,
    fail,
)
from realsim.logs.journal import JournaledFile


def _py(v: Any) -> Any:
    """numpy/bytes attribute values as plain Python values."""
    if isinstance(v, bytes):
        return v.decode(errors="replace")
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, np.ndarray):
        return v.tolist() if v.dtype.kind != "O" else [_py(x) for x in v]
    return v


@dataclass
class Stream:
    """Samples with their own timestamps. Shape: t (N,), each field (N,) or (N, k)."""

    t: np.ndarray
    fields: dict[str, np.ndarray] = field(default_factory=dict)

    def __getitem__(self, name: str) -> np.ndarray:
        if name == "t":
            return self.t
        return self.fields[name]

    def __contains__(self, name: str) -> bool:
        return name == "t" or name in self.fields

    def __len__(self) -> int:
        return len(self.t)


class CameraStream:
    """Frames of one camera. Shape: t (K,); JPEG bytes are read lazily."""

    def __init__(self, t: np.ndarray, source: Callable[[slice | int], Any] | None = None,
                 frames: list[bytes] | None = None) -> None:
        self.t = t
        self._src = source  # reads jpeg rows from the (current) file
        self._cache = frames

    def __len__(self) -> int:
        return len(self.t)

    def frame(self, i: int) -> bytes:
        """The JPEG bytes of frame ``i``, exactly as received."""
        if self._cache is not None:
            return self._cache[i]
        n = len(self.t)
        if not -n <= i < n:
            raise IndexError(f"frame {i} out of range ({n} frames)")
        assert self._src is not None
        return bytes(self._src(i % n).tobytes())

    @property
    def jpeg(self) -> list[bytes]:
        """All frames' JPEG bytes (loaded on first use)."""
        if self._cache is None:
            n = len(self.t)
            assert self._src is not None
            self._cache = [x.tobytes() for x in self._src(slice(0, n))] if n else []
        return self._cache

    def decode(self, i: int) -> np.ndarray:
        """Frame ``i`` decoded. Shape: (H, W, 3) RGB uint8."""
        import cv2

        img = cv2.imdecode(np.frombuffer(self.frame(i), np.uint8), cv2.IMREAD_COLOR)
        if img is None:
            raise ValueError(f"frame {i} is not a decodable image")
        return cv2.cvtColor(img, cv2.COLOR_BGR2RGB)


@dataclass
class Episode:
    """One episode as read: attrs plus raw streams, each on its own timestamps."""

    name: str
    attrs: dict[str, Any]
    command: Stream
    sensors: Stream
    cameras: dict[str, CameraStream]
    privileged: dict[str, np.ndarray] | None = None
    judge: dict[str, Any] | None = None

    @property
    def complete(self) -> bool:
        return bool(self.attrs.get("complete", False))

    @property
    def success(self) -> int:
        return int(self.attrs.get("success", -1))

    @property
    def score(self) -> float:
        return float(self.attrs.get("score", math.nan))

    @property
    def driver(self) -> str:
        return str(self.attrs.get("driver", ""))

    @property
    def seed(self) -> int:
        return int(self.attrs.get("seed", -1))

    @property
    def start_unix(self) -> float:
        return float(self.attrs.get("start_unix", math.nan))

    @property
    def duration(self) -> float:
        """Last timestamp of any stream (s since episode start); 0 if empty."""
        ends = [s.t[-1] for s in (self.command, self.sensors) if len(s)]
        ends += [c.t[-1] for c in self.cameras.values() if len(c)]
        return float(max(ends)) if ends else 0.0


def _stream_groups(g: h5py.Group) -> list[str]:
    out = []
    for key in ("command", "sensors"):
        if key in g:
            out.append(key)
    if "camera" in g:
        out += [f"camera/{c}" for c in g["camera"]]
    return out


class LogReader:
    """Open and validate a realsim log; ``episode(i)`` loads one episode.

    Never modifies the file.  A file still being recorded can be read: each
    call sees the latest whole commit (see :mod:`realsim.logs.journal`); the
    episode list is the one at open time.  A file whose writer was
    killed reads as the writer's last commit.  Every problem is a one-line
    LogFormatError naming the file (and episode and dataset when known).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        p = self.path
        if not p.exists():
            raise LogFormatError(f"{p}: no such file")
        if p.is_dir():
            raise LogFormatError(f"{p}: is a directory, not a log file")
        try:
            self._jf = JournaledFile(p, writable=False)
        except OSError as e:
            raise LogFormatError(f"{p}: cannot open ({e.strerror})") from None
        try:
            with self._jf.reading():
                self._jf.attach_reader()
                self._sig = self._signature()
                self._open_and_validate()
        except BaseException:
            self._jf.close()
            raise

    def _signature(self) -> tuple[int, int, bytes]:
        """Changes whenever a writer commits (size, mtime, superblock)."""
        st = os.fstat(self._jf.fd)
        return st.st_size, st.st_mtime_ns, os.pread(self._jf.fd, 64, 0)

    @contextlib.contextmanager
    def _current(self) -> Iterator[h5py.File]:
        """The file as of the latest commit, held still while in use.

        A writer may have committed since we last looked (a live recording):
        HDF5's cached metadata would then be stale, so the file is reopened.
        """
        with self._jf.reading():
            sig = self._signature()
            if sig != self._sig:
                self._f.close()
                self._jf.attach_reader()
                try:
                    self._f = h5py.File(self._jf, "r")
                except Exception as e:  # noqa: BLE001
                    raise fail(self.path, f"cannot reopen HDF5 file ({_first_line(e)})") from None
                self._sig = self._signature()
                self._lengths = {}
            yield self._f

    def _open_and_validate(self) -> None:
        p = self.path
        head = self._jf.read(8) if self._jf.seek(0) == 0 else b""
        if head != HDF5_SIGNATURE:
            if self._jf.size == 0 or not head.strip(b"\0"):
                raise fail(p, "empty file, not a realsim log (a recording killed before its first flush?)")
            raise fail(p, "not an HDF5 file (not a realsim log)")
        try:
            self._f = h5py.File(self._jf, "r")
        except Exception as e:  # noqa: BLE001 - h5py raises OSError and friends
            raise fail(p, f"cannot open HDF5 file, truncated or corrupt ({_first_line(e)})") from None
        try:
            self._validate_root()
            self.episode_names: list[str] = sorted(
                k for k in self._f["episodes"] if k.startswith(EPISODE_PREFIX))
            self._lengths = {n: self._validate_episode(n) for n in self.episode_names}
        except LogFormatError:
            self._f.close()
            raise
        except Exception as e:  # corrupt metadata deep inside the file
            self._f.close()
            raise fail(p, f"corrupt or truncated HDF5 file ({_first_line(e)})") from None

    def _validate_root(self) -> None:
        a = self._f.attrs
        fmt = _py(a.get("format"))
        if fmt != FORMAT:
            what = "no 'format' attribute" if fmt is None else f"format={fmt!r}"
            raise fail(self.path, f"not a realsim log ({what}; expected format={FORMAT!r})")
        ver = _py(a.get("format_version"))
        if ver != FORMAT_VERSION:
            raise fail(self.path, f"format_version {ver!r} is not supported (this reader knows {FORMAT_VERSION})")
        self.robot: str = _py(a.get("robot"))
        self.source: str = _py(a.get("source"))
        if self.robot not in ROBOTS:
            raise fail(self.path, f"unknown robot {self.robot!r}")
        if self.source not in SOURCES:
            raise fail(self.path, f"unknown source {self.source!r}")
        if "episodes" not in self._f:
            raise fail(self.path, "no /episodes group")
        self.attrs: dict[str, Any] = {k: _py(v) for k, v in a.items()}

    def _validate_episode(self, name: str) -> dict[str, int]:
        """Row count per stream group; raises on any disagreement."""
        g = self._f["episodes"][name]
        out: dict[str, int] = {}
        groups = _stream_groups(g)
        if "privileged" in g:  # privileged/<name>: a static dataset or a group {t, data}
            pg = g["privileged"]
            for k, v in pg.items():
                if isinstance(v, h5py.Group):
                    if "t" not in v or "data" not in v:
                        raise fail(self.path, f"privileged/{k} lacks t or data", name)
                    out[f"privileged/{k}"] = self._check_lengths(
                        name, f"privileged/{k}/t", {f"privileged/{k}/data": v["data"]}, v["t"])
        for sg_name in groups:
            sg = g[sg_name]
            dsets = {f"{sg_name}/{k}": v for k, v in sg.items()
                     if isinstance(v, h5py.Dataset) and k != "t"}
            if "t" not in sg:
                if dsets:
                    raise fail(self.path, f"dataset {sg_name}/t is missing", name)
                out[sg_name] = 0
                continue
            out[sg_name] = self._check_lengths(name, f"{sg_name}/t", dsets, sg["t"])
        return out

    def _check_lengths(self, ep: str, tname: str, dsets: dict[str, h5py.Dataset],
                       t: h5py.Dataset) -> int:
        n = t.shape[0] if t.shape else 0
        for dname, d in dsets.items():
            m = d.shape[0] if d.shape else 0
            if m != n:
                raise fail(self.path, f"dataset {dname} has {m} rows but {tname} has {n}", ep)
        return n

    # ------------------------------------------------------------------ API
    def __len__(self) -> int:
        return len(self.episode_names)

    def episode(self, key: str | int, privileged: bool = False) -> Episode:
        """Load episode by name or index. Privileged data only if ``privileged=True``."""
        if isinstance(key, (int, np.integer)):
            try:
                name = self.episode_names[key]
            except IndexError:
                raise LogFormatError(f"{self.path}: no episode #{key} ({len(self)} episodes)") from None
        else:
            name = key
            if name not in self.episode_names:
                raise LogFormatError(f"{self.path}: no episode {name!r}")
        try:
            with self._current():
                if name not in self._lengths:
                    self._lengths[name] = self._validate_episode(name)
                return self._load(name, privileged)
        except LogFormatError:
            raise
        except Exception as e:
            raise fail(self.path, f"cannot read ({_first_line(e)})", name) from None

    def _load(self, name: str, privileged: bool) -> Episode:
        g = self._f["episodes"][name]
        lengths = self._lengths[name]
        attrs = {k: _py(v) for k, v in g.attrs.items()}

        def stream(sg_name: str) -> Stream:
            if sg_name not in g:
                return Stream(np.zeros(0, np.float64), {})
            sg = g[sg_name]
            n = lengths.get(sg_name, 0)
            t = sg["t"][:n] if "t" in sg else np.zeros(0, np.float64)
            fields = {}
            for k, d in sg.items():
                if k != "t" and isinstance(d, h5py.Dataset):
                    fields[k] = d[:n]
            return Stream(np.asarray(t, np.float64), fields)

        command = stream("command")
        sensors = stream("sensors")
        cams = {}
        if "camera" in g:
            for c in g["camera"]:
                s = g[f"camera/{c}"]
                n = lengths.get(f"camera/{c}", 0)
                t = s["t"][:n] if "t" in s else np.zeros(0, np.float64)
                cams[c] = CameraStream(np.asarray(t, np.float64),
                                       self._jpeg_reader(f"{g.name}/camera/{c}/jpeg"),
                                       None if n and "jpeg" in s else [])
        priv = None
        if privileged and "privileged" in g:
            priv = {}
            for k, v in g["privileged"].items():
                if isinstance(v, h5py.Dataset):
                    priv[k] = v[()]
                else:
                    n = lengths[f"privileged/{k}"]
                    priv[k] = v["data"][:n]
                    priv[f"{k}_t"] = v["t"][:n]
        judge = {k: _py(v) for k, v in g["judge"].attrs.items()} if "judge" in g else None
        return Episode(name, attrs, command, sensors, cams, priv, judge)

    def _jpeg_reader(self, path: str) -> Callable[[slice | int], Any]:
        def read(sel: slice | int) -> Any:
            try:
                with self._current() as f:
                    return f[path][sel]
            except LogFormatError:
                raise
            except Exception as e:  # noqa: BLE001
                raise fail(self.path, f"cannot read {path} ({_first_line(e)})") from None
        return read

    def episodes(self, complete_only: bool = False, privileged: bool = False) -> Iterator[Episode]:
        """Every episode in name order (only complete ones if ``complete_only``)."""
        for n in self.episode_names:
            ep = self.episode(n, privileged=privileged)
            if complete_only and not ep.complete:
                continue
            yield ep

    def close(self) -> None:
        if self._jf.fd >= 0:
            self._f.close()
            self._jf.close()

    def __enter__(self) -> LogReader:
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"LogReader({str(self.path)!r}, robot={self.robot!r}, source={self.source!r}, episodes={len(self)})"


def _first_line(e: BaseException | None) -> str:
    if e is None:
        return "unknown error"
    s = str(e).strip().splitlines()
    return " ".join((s[0] if s else type(e).__name__).split())

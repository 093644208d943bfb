"""Atomic flushes for HDF5: a redo journal under h5py's file-object driver.

HDF5 rewrites its metadata (superblock, B-tree nodes, object headers, heaps)
in place, in many separate writes, so a process killed in the middle of a
flush can leave a file that no longer opens.  HDF5's SWMR mode does not close
that hole for object creation and end-of-allocation updates: a strace sweep
that kills the writer at every single write found many unreadable states.
This module makes every commit all-or-nothing instead:

* The HDF5 library does its I/O through :class:`JournaledFile` (h5py's
  ``fileobj`` driver).  Writes at or beyond the file's size when the
  transaction began go straight to disk: they overwrite nothing, and nothing
  committed refers to them.  Writes *into* the committed region are held in
  memory (reads see them, the file does not).
* :meth:`JournaledFile.commit` appends the held writes to the end of the file
  as one record (body, then a trailer with the new size and CRC-32s), applies
  them in place, then truncates the file to its new size, which drops the
  record.  A kill before the trailer is complete leaves the previous commit
  (plus ignorable bytes past HDF5's end of allocation); a kill after it leaves
  a complete record that the next opener replays (idempotent).
* Locks (open-file-description locks, released by the kernel on SIGKILL):
  byte 0 is held exclusively by the one writer for its lifetime; byte 1 is
  held exclusively by the writer while it applies a record and shared by
  readers while they read, so a reader of a live file only ever sees whole
  commits.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import struct
import time
import zlib
from collections.abc import Iterator

_MAGIC = b"RSJRNL01"
_TRAILER = struct.Struct("<8sQQQII8s")  # magic, new_size, n_ranges, body_len, body_crc, head_crc, magic
_RANGE = struct.Struct("<QQ")
WRITER_BYTE = 0
APPLY_BYTE = 1
_OFD_SETLK = getattr(fcntl, "F_OFD_SETLK", None)
_OFD_SETLKW = getattr(fcntl, "F_OFD_SETLKW", None)
_OFD_GETLK = getattr(fcntl, "F_OFD_GETLK", None)
_FLOCK = struct.Struct("hhqqi4x")


def _lock(fd: int, kind: int, byte: int, wait: bool) -> bool:
    """OFD lock ``kind`` (F_RDLCK/F_WRLCK/F_UNLCK) on one byte; False if busy."""
    cmd = _OFD_SETLKW if wait else _OFD_SETLK
    if cmd is None:  # pragma: no cover - non-Linux: no cross-process locking
        return True
    try:
        fcntl.fcntl(fd, cmd, _FLOCK.pack(kind, os.SEEK_SET, byte, 1, 0))
        return True
    except OSError as e:
        if e.errno in (errno.EAGAIN, errno.EACCES):
            return False
        raise


def writer_alive(fd: int) -> bool:
    """True if some process holds the writer lock on this file."""
    if _OFD_GETLK is None:  # pragma: no cover
        return False
    res = fcntl.fcntl(fd, _OFD_GETLK, _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, WRITER_BYTE, 1, 0))
    return _FLOCK.unpack(res)[0] != fcntl.F_UNLCK


def read_record(fd: int) -> tuple[int, list[tuple[int, bytes]]] | None:
    """The complete journal record at the end of the file, or None."""
    size = os.fstat(fd).st_size
    if size < _TRAILER.size:
        return None
    tr = os.pread(fd, _TRAILER.size, size - _TRAILER.size)
    m1, new_size, n, body_len, body_crc, head_crc, m2 = _TRAILER.unpack(tr)
    if m1 != _MAGIC or m2 != _MAGIC:
        return None
    if zlib.crc32(tr[8:36]) != head_crc or body_len > size - _TRAILER.size:
        return None
    body = os.pread(fd, body_len, size - _TRAILER.size - body_len)
    if len(body) != body_len or zlib.crc32(body) != body_crc:
        return None
    ranges, pos = [], 0
    for _ in range(n):
        off, ln = _RANGE.unpack_from(body, pos)
        pos += _RANGE.size
        ranges.append((off, body[pos:pos + ln]))
        pos += ln
    return new_size, ranges


def replay(fd: int) -> bool:
    """Apply a complete record left by a killed writer; True if there was one."""
    rec = read_record(fd)
    if rec is None:
        return False
    new_size, ranges = rec
    for off, data in ranges:
        os.pwrite(fd, data, off)
    os.ftruncate(fd, new_size)
    return True


class JournaledFile:
    """File-like object for ``h5py.File(JournaledFile(...))`` with atomic commits.

    ``writable=False`` gives a read-only view; if a killed writer left a
    complete record, the view shows the file as if it had been replayed.
    """

    def __init__(self, path: str | os.PathLike[str], writable: bool) -> None:
        self.path = os.fspath(path)
        self.writable = writable
        self.fd = os.open(self.path, (os.O_RDWR | os.O_CREAT) if writable else os.O_RDONLY, 0o644)
        self._pos = 0
        self._held: dict[int, bytearray] = {}  # offset -> bytes, for the committed region
        self._overlay: list[tuple[int, bytes]] = []  # read-only replay view
        self._trunc_pending = False
        self.size = os.fstat(self.fd).st_size  # logical size HDF5 sees
        self.base = self.size  # writes below this are held until commit
        self.commits = 0

    # -------------------------------------------------------------- locking
    def lock_writer(self) -> bool:
        """Take the lifetime writer lock (non-blocking); False if another writer has it."""
        return _lock(self.fd, fcntl.F_WRLCK, WRITER_BYTE, wait=False)

    @contextlib.contextmanager
    def reading(self) -> Iterator[None]:
        """Hold the shared apply lock, so no commit is applied meanwhile."""
        _lock(self.fd, fcntl.F_RDLCK, APPLY_BYTE, wait=True)
        try:
            yield
        finally:
            _lock(self.fd, fcntl.F_UNLCK, APPLY_BYTE, wait=False)

    def recover(self) -> bool:
        """Writer side, under the writer lock: replay a dead writer's record."""
        _lock(self.fd, fcntl.F_WRLCK, APPLY_BYTE, wait=True)
        try:
            done = replay(self.fd)
        finally:
            _lock(self.fd, fcntl.F_UNLCK, APPLY_BYTE, wait=False)
        self.size = self.base = os.fstat(self.fd).st_size
        return done

    def attach_reader(self, timeout: float = 5.0) -> None:
        """Reader side, under ``reading()``: use a dead writer's record as an overlay.

        A live writer applies its record within milliseconds, so then we wait.
        """
        deadline = time.monotonic() + timeout
        while True:
            rec = read_record(self.fd)
            if rec is None:
                self.size = os.fstat(self.fd).st_size
                self._overlay = []
                return
            if not writer_alive(self.fd) or time.monotonic() > deadline:
                self.size, self._overlay = rec[0], rec[1]
                return
            _lock(self.fd, fcntl.F_UNLCK, APPLY_BYTE, wait=False)
            time.sleep(0.005)
            _lock(self.fd, fcntl.F_RDLCK, APPLY_BYTE, wait=True)

    # ------------------------------------------------------ file-like (h5py)
    def seek(self, pos: int, whence: int = 0) -> int:
        self._pos = pos if whence == 0 else (self._pos + pos if whence == 1 else self.size + pos)
        return self._pos

    def tell(self) -> int:
        return self._pos

    def read(self, n: int = -1) -> bytes:
        pos = self._pos
        if n < 0:
            n = max(self.size - pos, 0)
        avail = max(min(n, self.size - pos), 0)
        buf = bytearray(os.pread(self.fd, avail, pos) if avail else b"")
        buf.extend(b"\0" * (n - len(buf)))  # like sec2: zeros past the end
        for off, data in self._overlay:
            _paste(buf, pos, off, data)
        for off, data in self._held.items():
            _paste(buf, pos, off, data)
        self._pos = pos + n
        return bytes(buf)

    def write(self, b: bytes | bytearray | memoryview) -> int:
        if not self.writable:
            raise OSError(errno.EBADF, "read-only log file")
        data = bytes(b)
        pos, n = self._pos, len(data)
        split = min(max(self.base - pos, 0), n)
        if split:
            self._hold(pos, data[:split])
        if split < n:
            os.pwrite(self.fd, data[split:], pos + split)
        self._pos = pos + n
        self.size = max(self.size, pos + n)
        return n

    def truncate(self, size: int | None = None) -> int:
        size = self._pos if size is None else int(size)
        if not self.writable:
            return size
        if size >= self.base:
            os.ftruncate(self.fd, size)
        else:
            self._trunc_pending = True
        self.size = size
        return size

    def flush(self) -> None:
        pass

    # ---------------------------------------------------------- transactions
    def _hold(self, pos: int, data: bytes) -> None:
        end = pos + len(data)
        for off in list(self._held):  # merge with overlapping/adjacent held writes
            cur = self._held[off]
            if off <= end and pos <= off + len(cur):
                lo = min(off, pos)
                merged = bytearray(max(off + len(cur), end) - lo)
                merged[off - lo:off - lo + len(cur)] = cur
                merged[pos - lo:end - lo] = data
                del self._held[off]
                pos, end, data = lo, lo + len(merged), bytes(merged)
        self._held[pos] = bytearray(data)

    def commit(self) -> None:
        """Make everything written so far durable against kill, atomically."""
        if not self.writable:
            return
        phys = os.fstat(self.fd).st_size
        if not self._held and not self._trunc_pending and phys == self.size:
            self.base = self.size
            return
        ranges = sorted((off, bytes(d)) for off, d in self._held.items())
        body = b"".join(_RANGE.pack(off, len(d)) + d for off, d in ranges)
        head = struct.pack("<QQQI", self.size, len(ranges), len(body), zlib.crc32(body))
        trailer = _TRAILER.pack(_MAGIC, self.size, len(ranges), len(body), zlib.crc32(body),
                                zlib.crc32(head[:28]), _MAGIC)
        at = max(phys, self.size)
        os.pwrite(self.fd, body + trailer, at)  # 1. the record: now the commit is decided
        _lock(self.fd, fcntl.F_WRLCK, APPLY_BYTE, wait=True)
        try:
            for off, d in ranges:  # 2. apply in place
                os.pwrite(self.fd, d, off)
            os.ftruncate(self.fd, self.size)  # 3. drop the record
        finally:
            _lock(self.fd, fcntl.F_UNLCK, APPLY_BYTE, wait=False)
        self._held.clear()
        self._trunc_pending = False
        self.base = self.size
        self.commits += 1

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _paste(buf: bytearray, pos: int, off: int, data: bytes) -> None:
    """Copy the part of ``data`` (at file offset ``off``) that falls into ``buf`` (at ``pos``)."""
    lo, hi = max(pos, off), min(pos + len(buf), off + len(data))
    if lo < hi:
        buf[lo - pos:hi - pos] = data[lo - off:hi - off]

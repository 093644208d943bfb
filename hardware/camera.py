"""Camera readers: MJPEG over HTTP (ESP32-CAM style) or anything OpenCV opens.

`CameraReader` runs one background thread per camera, so a slow or stalled
camera never holds up the control loop. Each frame is stamped with
``time.monotonic()`` (s) when its last byte arrives. From an ``http://`` MJPEG
stream the JPEG bytes are kept exactly as the camera sent them; frames from
OpenCV sources (a device index, a video or image file, an RTSP URL) are
re-encoded as JPEG.
"""

from __future__ import annotations

import base64
import logging
import os
import re
import socket
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable
from types import TracebackType
from typing import Any
from urllib.parse import unquote, urlsplit

import numpy as np

from realsim.errors import UserError

log = logging.getLogger(__name__)

FrameCallback = Callable[[float, bytes], None]

_SOI = b"\xff\xd8"
_EOI = b"\xff\xd9"
_RECV = 65536
_SOCK_TIMEOUT = 0.5  # s; bounds how long stop() waits on a quiet socket
_MAX_HEADER = 16384
_MAX_PART = 16 * 1024 * 1024  # a part larger than this is junk, not a frame
_IMAGE_EXT = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff")
_NAME_RE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(.*)\Z", re.S)


def parse_camera_spec(spec: str) -> dict[str, str]:
    """``"front=http://a,wrist=http://b"`` -> ``{"front": ..., "wrist": ...}``.

    A single source without ``name=`` is the ``front`` camera. Raises
    `UserError` for an empty spec, an empty source, a repeated name, or several
    sources of which one has no name. (Sources may not contain commas.)
    """
    parts = [p.strip() for p in str(spec).split(",")]
    if not spec or not spec.strip() or not any(parts):
        raise UserError("empty camera spec: give SRC or name=SRC,name=SRC")
    out: dict[str, str] = {}
    for part in parts:
        m = _NAME_RE.match(part)
        if m is None:
            if len(parts) > 1:
                raise UserError(
                    f"camera spec {spec!r}: give every source a name, as name=SRC,name=SRC"
                )
            name, src = "front", part
        else:
            name, src = m.group(1), m.group(2).strip()
        if not src:
            raise UserError(f"camera spec {spec!r}: camera {name!r} has no source")
        if name in out:
            raise UserError(f"camera spec {spec!r}: camera {name!r} given twice")
        out[name] = src
    return out


class _StreamError(Exception):
    """A camera stream failed; the message is one line for the user."""


# --------------------------------------------------------------------------- HTTP


class _HttpStream:
    """A raw-socket HTTP GET whose body is handed out in pieces (chunked decoding included).

    Socket timeouts surface as `socket.timeout` and leave the state intact, so
    the caller may simply call `read_some` again.
    """

    def __init__(self, url: str, timeout: float) -> None:
        u = urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise _StreamError(f"not an http URL: {url}")
        self.url = url
        port = u.port or (443 if u.scheme == "https" else 80)
        path = u.path or "/"
        if u.query:
            path += "?" + u.query
        try:
            sock = socket.create_connection((u.hostname, port), timeout=timeout)
        except TimeoutError:
            raise _StreamError(
                f"no answer from {u.hostname}:{port} within {timeout:.1f} s"
            ) from None
        except OSError as e:
            raise _StreamError(_oserror_text(e)) from None
        try:
            if u.scheme == "https":
                sock = ssl.create_default_context().wrap_socket(sock, server_hostname=u.hostname)
            sock.settimeout(timeout)
            host = u.hostname if u.port is None else f"{u.hostname}:{u.port}"
            req = (
                f"GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: realsim\r\n"
                "Accept: multipart/x-mixed-replace, image/jpeg, */*\r\nConnection: close\r\n"
            )
            if u.username is not None:
                cred = f"{unquote(u.username)}:{unquote(u.password or '')}".encode()
                req += f"Authorization: Basic {base64.b64encode(cred).decode()}\r\n"
            sock.sendall((req + "\r\n").encode("latin-1"))
            self.sock = sock
            self._raw = bytearray()
            self._chunked = False
            self._chunk_left = 0
            self._need_crlf = False
            self._eof = False
            self.status, self.headers = self._read_head(timeout)
        except BaseException:
            sock.close()
            raise
        if self.status != 200:
            self.close()
            raise _StreamError(f"HTTP {self.status} {self.reason}")
        self._chunked = "chunked" in self.headers.get("transfer-encoding", "").lower()
        self.content_type = self.headers.get("content-type", "")
        self.sock.settimeout(_SOCK_TIMEOUT)

    def _read_head(self, timeout: float) -> tuple[int, dict[str, str]]:
        deadline = time.monotonic() + timeout
        while True:
            end = self._raw.find(b"\r\n\r\n")
            sep = 4
            if end < 0:
                end = self._raw.find(b"\n\n")
                sep = 2
            if end >= 0:
                break
            if len(self._raw) > _MAX_HEADER:
                raise _StreamError("HTTP header too long")
            if time.monotonic() > deadline:
                raise _StreamError(f"no HTTP answer within {timeout:.1f} s")
            try:
                self._fill()
            except TimeoutError:
                raise _StreamError(f"no HTTP answer within {timeout:.1f} s") from None
        head = bytes(self._raw[:end]).decode("latin-1")
        del self._raw[: end + sep]
        lines = head.replace("\r\n", "\n").split("\n")
        m = re.match(r"HTTP/\d(?:\.\d)?\s+(\d{3})\s*(.*)", lines[0])
        if m is None:
            raise _StreamError("not an HTTP server (bad status line)")
        self.reason = m.group(2).strip()
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if ":" in line:
                k, v = line.split(":", 1)
                headers[k.strip().lower()] = v.strip()
        return int(m.group(1)), headers

    def _fill(self) -> None:
        d = self.sock.recv(_RECV)
        if not d:
            raise _StreamError("server closed the stream")
        self._raw += d

    def read_some(self) -> bytes:
        """The next piece of the (de-chunked) body; raises `_StreamError` at its end."""
        if not self._chunked:
            if self._raw:
                d = bytes(self._raw)
                self._raw.clear()
                return d
            d = self.sock.recv(_RECV)
            if not d:
                raise _StreamError("server closed the stream")
            return d
        while True:
            if self._chunk_left > 0:
                if not self._raw:
                    self._fill()
                n = min(self._chunk_left, len(self._raw))
                d = bytes(self._raw[:n])
                del self._raw[:n]
                self._chunk_left -= n
                self._need_crlf = self._chunk_left == 0
                return d
            if self._need_crlf:
                while len(self._raw) < 2:
                    self._fill()
                if self._raw[:2] != b"\r\n":
                    raise _StreamError("bad chunked encoding")
                del self._raw[:2]
                self._need_crlf = False
            i = self._raw.find(b"\r\n")
            while i < 0:
                if len(self._raw) > 1024:
                    raise _StreamError("bad chunked encoding")
                self._fill()
                i = self._raw.find(b"\r\n")
            try:
                size = int(bytes(self._raw[:i]).split(b";")[0].strip(), 16)
            except ValueError:
                raise _StreamError("bad chunked encoding") from None
            del self._raw[: i + 2]
            if size == 0:
                raise _StreamError("server ended the stream")
            self._chunk_left = size

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


class MjpegParser:
    """Splits a ``multipart/x-mixed-replace`` body into JPEGs, bytes untouched.

    Parts are found by their boundary line; a part's body is exactly its
    ``Content-Length`` bytes when the part header gives one, else everything up
    to the line break before the next boundary. Without a boundary, JPEGs are
    cut out by their SOI/EOI markers. Parts that are not JPEGs are counted in
    `skipped` and dropped.
    """

    def __init__(self, boundary: str | None) -> None:
        b = (boundary or "").strip().strip('"').lstrip("-")
        self.boundary = b.encode("latin-1") if b else None
        self.buf = bytearray()
        self.skipped = 0
        self._state = "boundary"  # boundary -> headers -> body
        self._length: int | None = None

    def feed(self, data: bytes) -> list[bytes]:
        """Take the next piece of the body; return the JPEGs it completed."""
        self.buf += data
        out: list[bytes] = []
        if self.boundary is None:
            self._feed_markers(out)
        else:
            while self._step(out):
                pass
        if len(self.buf) > _MAX_PART:
            self.skipped += 1
            self.buf.clear()
            self._state = "boundary"
        return out

    def _find_delimiter(self, start: int = 0) -> int:
        """Start of the next boundary line (``--token`` at the start of a line), or -1."""
        assert self.boundary is not None
        buf = self.buf
        tok = b"--" + self.boundary
        i = buf.find(tok, start)
        while i >= 0:
            j = i
            while j > 0 and buf[j - 1] == 0x2D:  # extra dashes of a boundary declared with them
                j -= 1
            if j == 0 or buf[j - 1] == 0x0A:
                return j
            i = buf.find(tok, i + 1)
        return -1

    def _step(self, out: list[bytes]) -> bool:
        assert self.boundary is not None
        buf = self.buf
        if self._state == "boundary":
            i = self._find_delimiter()
            if i < 0:
                keep = len(self.boundary) + 8  # a tail that may hold the start of the boundary
                if len(buf) > keep:
                    del buf[: len(buf) - keep]
                return False
            del buf[:i]
            self._state = "headers"
            return True
        if self._state == "headers":
            end, sep = buf.find(b"\r\n\r\n"), 4
            if end < 0:
                end, sep = buf.find(b"\n\n"), 2
            if end < 0:
                if len(buf) > _MAX_HEADER:
                    del buf[:2]
                    self._state = "boundary"
                    return True
                return False
            head = bytes(buf[:end]).decode("latin-1")
            del buf[: end + sep]
            first = head.split("\n", 1)[0].strip().lstrip("-")
            if first[len(self.boundary) :].startswith("--"):  # the closing boundary
                self._state = "boundary"
                return True
            self._length = None
            m = re.search(r"(?im)^content-length:\s*(\d+)\s*$", head)
            if m:
                self._length = int(m.group(1))
            self._state = "body"
            return True
        # body
        if self._length is not None:
            if len(buf) < self._length:
                return False
            part = bytes(buf[: self._length])
            del buf[: self._length]
        else:
            # No length: a complete JPEG ends the part at once, without waiting a frame
            # period for the next boundary; a part that is no complete JPEG ends there.
            end = jpeg_end(buf)
            d = self._find_delimiter()
            if end is not None and end > 0 and (d < 0 or end <= d):
                part = bytes(buf[:end])
                del buf[:end]
            elif d >= 0:
                j = d
                if j >= 2 and buf[j - 2 : j] == b"\r\n":
                    j -= 2
                elif j >= 1 and buf[j - 1] == 0x0A:
                    j -= 1
                part = bytes(buf[:j])
                del buf[:d]
            else:
                return False
        self._state = "boundary"
        self._emit(part, out)
        return True

    def _feed_markers(self, out: list[bytes]) -> None:
        buf = self.buf
        while True:
            s = buf.find(_SOI)
            if s < 0:
                if len(buf) > 1:
                    del buf[:-1]
                return
            del buf[:s]
            end = jpeg_end(buf)
            if end is None:
                return
            if end < 0:  # not a JPEG after all: skip this SOI
                self.skipped += 1
                del buf[:2]
                continue
            out.append(bytes(buf[:end]))
            del buf[:end]

    def _emit(self, part: bytes, out: list[bytes]) -> None:
        if part.startswith(_SOI):
            out.append(part)
        else:
            self.skipped += 1


def jpeg_end(buf: bytes | bytearray) -> int | None:
    """Length of the JPEG at the start of ``buf`` (SOI .. EOI), by walking its segments.

    None while it is incomplete, -1 if it is not a well-formed JPEG. An EXIF
    thumbnail's own EOI is skipped with its segment; inside entropy-coded data
    0xFF is always stuffed, so the first FF D9 after a scan header is the end.
    """
    n = len(buf)
    if n < 2 or buf[0] != 0xFF or buf[1] != 0xD8:
        return -1 if n >= 2 else None
    i = 2
    while True:
        if i + 2 > n:
            return None
        if buf[i] != 0xFF:
            return -1
        marker = buf[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker == 0xD9:
            return i + 2
        if 0xD0 <= marker <= 0xD7 or marker == 0x01:
            i += 2
            continue
        if marker < 0xC0:  # no such marker in a JPEG header
            return -1
        if i + 4 > n:
            return None
        seglen = (buf[i + 2] << 8) | buf[i + 3]
        if seglen < 2:
            return -1
        if marker == 0xDA:  # start of scan: entropy-coded data up to EOI
            j = buf.find(_EOI, i + 2 + seglen)
            return None if j < 0 else j + 2
        i += 2 + seglen


def _boundary_of(content_type: str) -> str | None:
    m = re.search(r'boundary\s*=\s*"?([^";]+)"?', content_type, re.I)
    return m.group(1).strip() if m else None


# --------------------------------------------------------------------------- OpenCV


class _CvSource:
    """An OpenCV `VideoCapture`; files are paced at their frame rate and loop."""

    def __init__(self, source: str | int, timeout: float) -> None:
        import cv2

        self._cv2 = cv2
        self.source = source
        self.is_file = isinstance(source, str) and os.path.isfile(source)
        exists = isinstance(source, str) and os.path.exists(source)
        self.still: bytes | None = None
        self.cap: Any = None
        if self.is_file and str(source).lower().endswith(_IMAGE_EXT):
            data = open(source, "rb").read()  # noqa: SIM115
            img = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
            if img is None:
                raise _StreamError("not an image OpenCV can read")
            if not data.startswith(_SOI):
                ok, enc = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 90])
                data = enc.tobytes()
            self.still = data
            self.period = 1.0 / 20.0
            return
        if isinstance(source, str) and not exists and "://" not in source:
            raise _StreamError("no such file or device")
        level = cv2.utils.logging.getLogLevel()
        cv2.utils.logging.setLogLevel(cv2.utils.logging.LOG_LEVEL_ERROR)  # no WARN lines on stderr
        try:
            cap = cv2.VideoCapture(source)
        finally:
            cv2.utils.logging.setLogLevel(level)
        if not cap.isOpened():
            cap.release()
            raise _StreamError("OpenCV cannot open it")
        self.cap = cap
        fps = cap.get(cv2.CAP_PROP_FPS) if self.is_file else 0.0
        self.period = (
            1.0 / fps if self.is_file and 0 < fps < 1000 else (0.05 if self.is_file else 0)
        )
        self._next = time.monotonic()

    def read(self, stop: threading.Event) -> bytes | None:
        """The next frame as JPEG bytes, or None if none came (end of a non-looping source)."""
        if self.still is not None or self.is_file:
            self._next = max(getattr(self, "_next", 0.0) + self.period, time.monotonic() - 1.0)
            if stop.wait(max(0.0, self._next - time.monotonic())):
                return None
        if self.still is not None:
            return self.still
        ok, img = self.cap.read()
        if not ok and self.is_file:  # loop the file
            self.cap.set(self._cv2.CAP_PROP_POS_FRAMES, 0)
            ok, img = self.cap.read()
        if not ok or img is None:
            raise _StreamError("OpenCV read no frame")
        ok, enc = self._cv2.imencode(".jpg", img, [self._cv2.IMWRITE_JPEG_QUALITY, 90])
        if not ok:
            raise _StreamError("cannot encode the frame as JPEG")
        return enc.tobytes()

    def close(self) -> None:
        if self.cap is not None:
            self.cap.release()


# --------------------------------------------------------------------------- reader


class CameraReader:
    """One camera read on a background thread.

    source: an ``http(s)://`` MJPEG URL, a device index (``0`` or ``"0"``), a
        video or image file, or any other URL OpenCV opens.
    name: the camera's name in the log (``front``, ``wrist``).
    on_frame: ``on_frame(t_host, jpeg)`` from the reader thread for every frame
        (``t_host`` = ``time.monotonic()`` at arrival, s); may be set later.

    A dropped HTTP stream is reopened with backoff (0.1 s doubling to 2 s);
    failures count in `errors`, the last in `last_error`. Use as a context
    manager, or `start` / `stop`.
    """

    def __init__(
        self, source: str | int, name: str = "front", on_frame: FrameCallback | None = None
    ) -> None:
        self.source = source
        self.name = name
        self.on_frame = on_frame
        self.frames = 0  #: frames delivered
        self.errors = 0  #: failed opens, dropped streams, unreadable parts
        self.last_error = ""
        self.callback_errors = 0
        self._latest: tuple[float, bytes] | None = None
        self._rgb: tuple[float, np.ndarray] | None = None
        self._times: deque[float] = deque(maxlen=31)
        self._lock = threading.Lock()
        self._new = threading.Condition(self._lock)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._handoff: Any = None  # an opened stream from open_check, for the thread to use
        self._current: Any = None
        src = str(source).strip()
        self._http = src.lower().startswith(("http://", "https://"))
        self._cv_source: str | int = int(src) if src.isdigit() else src

    # --------------------------------------------------------------- lifecycle

    def open_check(self, timeout: float = 5.0) -> None:
        """Open the source and read its first frame within ``timeout`` s, or raise
        `UserError` ("cannot open camera SRC: why", one line). The opened
        stream is kept for `start` (an ESP32-CAM serves one client at a time)."""
        if self._handoff is not None:
            return
        try:
            if self._http:
                stream = _HttpStream(str(self.source), timeout)
                ctype = stream.content_type.split(";")[0].strip().lower()
                if ctype and not ctype.startswith(("multipart/", "image/", "application/octet")):
                    stream.close()
                    raise _StreamError(f"not an MJPEG stream (Content-Type {ctype})")
                parser = MjpegParser(_boundary_of(stream.content_type))
                deadline = time.monotonic() + timeout
                try:
                    while True:
                        try:
                            frames = parser.feed(stream.read_some())
                        except TimeoutError:
                            frames = []
                        if frames:
                            self._store(time.monotonic(), frames[-1], callback=False)
                            break
                        if time.monotonic() > deadline:
                            raise _StreamError(f"no JPEG frame within {timeout:.1f} s")
                except BaseException:
                    stream.close()
                    raise
                self._handoff = (stream, parser)
            else:
                src = _CvSource(self._cv_source, timeout)
                try:
                    jpeg = src.read(self._stop) if src.still is None else src.still
                except BaseException:
                    src.close()
                    raise
                if jpeg is not None:
                    self._store(time.monotonic(), jpeg, callback=False)
                self._handoff = src
        except _StreamError as e:
            raise UserError(f"cannot open camera {self.source}: {e}") from None

    def start(self, check: bool = True, timeout: float = 5.0) -> CameraReader:
        """Start the reader thread (after `open_check` when ``check``, which may raise
        `UserError`). Returns self."""
        if self._thread is not None:
            return self
        if check:
            self.open_check(timeout)
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=f"camera {self.name}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the thread and close the source. Idempotent."""
        self._stop.set()
        cur = self._current
        if cur is not None:
            try:
                cur.close()
            except Exception:
                pass
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=3.0)
        self._thread = None
        if self._handoff is not None:
            h = self._handoff
            self._handoff = None
            try:
                (h[0] if isinstance(h, tuple) else h).close()
            except Exception:
                pass
        with self._new:
            self._new.notify_all()

    close = stop

    @property
    def running(self) -> bool:
        """True while the reader thread runs."""
        return self._thread is not None and self._thread.is_alive()

    def __enter__(self) -> CameraReader:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # --------------------------------------------------------------- frames

    def latest(self) -> tuple[float, bytes] | None:
        """(t_host s, JPEG bytes) of the newest frame, None before the first."""
        return self._latest

    def latest_rgb(self) -> tuple[float, np.ndarray] | None:
        """(t_host s, H x W x 3 uint8 RGB) of the newest frame, decoded on first ask."""
        lat = self._latest
        if lat is None:
            return None
        cached = self._rgb
        if cached is not None and cached[0] == lat[0]:
            return cached
        rgb = decode_jpeg(lat[1])
        if rgb is None:
            return None
        self._rgb = (lat[0], rgb)
        return self._rgb

    def wait_frame(self, timeout: float = 1.0) -> tuple[float, bytes] | None:
        """Block until a frame newer than the call arrives; None after ``timeout`` s."""
        with self._new:
            n = self.frames
            self._new.wait_for(lambda: self.frames > n or self._stop.is_set(), timeout)
            return self._latest if self.frames > n else None

    def fps(self) -> float:
        """Frames per second over the last 30 frames (0.0 before two)."""
        with self._lock:
            t = list(self._times)
        if len(t) < 2 or t[-1] <= t[0]:
            return 0.0
        return (len(t) - 1) / (t[-1] - t[0])

    def _store(self, t: float, jpeg: bytes, callback: bool = True) -> None:
        with self._new:
            self._latest = (t, jpeg)
            self.frames += 1
            self._times.append(t)
            self._new.notify_all()
        cb = self.on_frame
        if callback and cb is not None:
            try:
                cb(t, jpeg)
            except Exception:
                self.callback_errors += 1
                log.exception("on_frame callback of camera %s failed", self.name)

    def _fail(self, why: str) -> None:
        self.errors += 1
        self.last_error = why
        log.warning("camera %s (%s): %s", self.name, self.source, why)

    # --------------------------------------------------------------- thread

    def _run(self) -> None:
        backoff = 0.1
        while not self._stop.is_set():
            h, self._handoff = self._handoff, None
            frames_before = self.frames
            try:
                if self._http:
                    if h is None:
                        stream = _HttpStream(str(self.source), 2.0)
                        h = (stream, MjpegParser(_boundary_of(stream.content_type)))
                    self._current = h[0]
                    if self._stop.is_set():
                        break
                    self._pump_http(*h)
                else:
                    if h is None:
                        h = _CvSource(self._cv_source, 2.0)
                    self._current = h
                    while not self._stop.is_set():
                        jpeg = h.read(self._stop)
                        if jpeg is not None:
                            self._store(time.monotonic(), jpeg)
            except (_StreamError, OSError) as e:
                if not self._stop.is_set():
                    self._fail(str(e) if isinstance(e, _StreamError) else _oserror_text(e))
            except Exception as e:  # never let a camera kill the process
                if not self._stop.is_set():
                    self._fail(f"{type(e).__name__}: {e}")
            finally:
                cur, self._current = self._current, None
                if cur is not None:
                    try:
                        cur.close()
                    except Exception:
                        pass
            if self.frames > frames_before:  # it ran a while: start the backoff afresh
                backoff = 0.1
            if self._stop.wait(backoff):
                break
            backoff = min(2.0, backoff * 2)

    def _pump_http(self, stream: _HttpStream, parser: MjpegParser) -> None:
        last_data = time.monotonic()
        skipped = parser.skipped
        while not self._stop.is_set():
            try:
                data = stream.read_some()
            except TimeoutError:
                if time.monotonic() - last_data > 5.0:
                    raise _StreamError("no data for 5 s") from None
                continue
            t = time.monotonic()
            last_data = t
            for jpeg in parser.feed(data):
                self._store(t, jpeg)
            if parser.skipped != skipped:
                self._fail(f"{parser.skipped - skipped} part(s) that are not JPEG")
                skipped = parser.skipped


def decode_jpeg(jpeg: bytes) -> np.ndarray | None:
    """JPEG bytes -> H x W x 3 uint8 RGB array, None if they do not decode."""
    import cv2

    img = cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR)
    if img is None:
        return None
    return cv2.cvtColor(img, cv2.COLOR_BGR2RGB)


def _oserror_text(e: OSError) -> str:
    if isinstance(e, ConnectionRefusedError):
        return "connection refused"
    if isinstance(e, socket.gaierror):
        return f"unknown host ({e.strerror or e})"
    if isinstance(e, TimeoutError):
        return "timed out"
    return e.strerror or str(e) or type(e).__name__

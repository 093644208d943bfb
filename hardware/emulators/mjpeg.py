"""A small MJPEG-over-HTTP server, as an ESP32-CAM board serves its camera.

``GET /stream`` answers ``multipart/x-mixed-replace; boundary=frame``; every part
is one JPEG with its own ``Content-Type: image/jpeg`` and ``Content-Length``
headers. Each client gets every newly published frame once (a slow client skips
to the newest). ``GET /frame.jpg`` returns the latest frame alone, and
`MjpegServer.add_json_route` serves extra JSON endpoints (the emulator's
``/stats``). The server binds to the loopback interface only.

Used by the RC car emulator (one camera) and, later, the arm's (two servers).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

BOUNDARY = "frame"
_LOOPBACK = ("127.0.0.1", "localhost")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    owner: MjpegServer


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.0"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _send(self, code: int, ctype: str, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        owner = self.server.owner
        path = self.path.split("?", 1)[0]
        try:
            if path == "/stream":
                self._stream(owner)
            elif path == "/frame.jpg":
                jpeg, _ = owner.latest()
                if jpeg is None:
                    self._send(503, "text/plain", b"no frame yet\n")
                else:
                    self._send(200, "image/jpeg", jpeg)
            elif path in owner._routes:
                try:
                    body = json.dumps(owner._routes[path](), sort_keys=True).encode()
                except Exception as e:  # a route's bug must not kill the server
                    self._send(500, "text/plain", f"{type(e).__name__}: {e}\n".encode())
                    return
                self._send(200, "application/json", body)
            elif path == "/":
                self._send(200, "text/html", b'<html><body><img src="/stream"></body></html>\n')
            else:
                self._send(404, "text/plain", b"not found\n")
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, TimeoutError):
            pass

    def _stream(self, owner: MjpegServer) -> None:
        self.send_response(200)
        self.send_header("Content-Type", f"multipart/x-mixed-replace; boundary={BOUNDARY}")
        self.send_header("Cache-Control", "no-store")
        self.send_header("Pragma", "no-cache")
        self.send_header("Access-Control-Allow-Origin", "*")
        self.end_headers()
        _, cur = owner.latest()
        seq = max(cur - 1, 0)  # start with the frame on hand, like a camera board
        while True:
            jpeg, seq = owner._wait_newer(seq)
            if jpeg is None:
                return  # server closing
            self.wfile.write(
                b"--%s\r\nContent-Type: image/jpeg\r\nContent-Length: %d\r\n\r\n"
                % (BOUNDARY.encode(), len(jpeg))
                + jpeg
                + b"\r\n"
            )
            self.wfile.flush()


class MjpegServer:
    """MJPEG over HTTP on 127.0.0.1. Start with `start` (or ``with``), feed with `publish`.

    ``port=0`` picks a free port; `url` is the stream's address after `start`.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        if host not in _LOOPBACK:
            raise ValueError(f"MjpegServer binds to the loopback interface only, not {host!r}")
        self._addr = ("127.0.0.1", int(port))
        self._cond = threading.Condition()
        self._jpeg: bytes | None = None
        self._seq = 0
        self._closing = False
        self._routes: dict[str, Callable[[], Any]] = {}
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None
        self.frames_published = 0

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> MjpegServer:
        """Bind and serve in a background thread; returns self."""
        if self._httpd is not None:
            return self
        httpd = _Server(self._addr, _Handler)
        httpd.owner = self
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever,
            kwargs={"poll_interval": 0.1},
            name="mjpeg-http",
            daemon=True,
        )
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving; streaming clients see their connection end. Idempotent."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> MjpegServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def port(self) -> int:
        """The bound TCP port (after `start`)."""
        if self._httpd is None:
            raise RuntimeError("MjpegServer not started")
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>/stream``: what OpenCV (and ``record --camera``) opens."""
        return f"http://127.0.0.1:{self.port}/stream"

    # -- frames and routes ------------------------------------------------------------------

    def publish(self, jpeg: bytes) -> None:
        """Make ``jpeg`` (one complete JPEG file) the latest frame and wake every client."""
        with self._cond:
            self._jpeg = bytes(jpeg)
            self._seq += 1
            self.frames_published += 1
            self._cond.notify_all()

    def latest(self) -> tuple[bytes | None, int]:
        """The latest frame (None before the first) and its sequence number (1, 2, ...)."""
        with self._cond:
            return self._jpeg, self._seq

    def add_json_route(self, path: str, fn: Callable[[], Any]) -> None:
        """Serve ``GET path`` as ``json.dumps(fn())`` (``fn`` runs on the request's thread)."""
        if not path.startswith("/"):
            raise ValueError(f"route must start with '/': {path!r}")
        self._routes[path] = fn

    def _wait_newer(self, seq: int, timeout: float = 1.0) -> tuple[bytes | None, int]:
        with self._cond:
            while not self._closing and self._seq <= seq:
                self._cond.wait(timeout)
            if self._closing:
                return None, seq
            return self._jpeg, self._seq

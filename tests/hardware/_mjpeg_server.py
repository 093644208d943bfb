"""A tiny MJPEG-over-HTTP camera for the camera tests (ThreadingHTTPServer on 127.0.0.1)."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import cv2
import numpy as np

BOUNDARY = "123456789000000000000987654321"  # what an ESP32-CAM sends


def make_jpegs(n: int = 30, w: int = 320, h: int = 240) -> list[bytes]:
    """n distinct JPEGs."""
    out = []
    for k in range(n):
        img = np.zeros((h, w, 3), np.uint8)
        img[:, :] = (k * 8 % 256, 100, 255 - k * 8 % 256)
        cv2.putText(img, str(k), (20, 120), cv2.FONT_HERSHEY_SIMPLEX, 3, (255, 255, 255), 4)
        ok, enc = cv2.imencode(".jpg", img)
        assert ok
        out.append(enc.tobytes())
    assert len(set(out)) == n
    return out


class MjpegServer:
    """Paths: /stream (Content-Length per part), /chunked (ESP32 style: chunked transfer,
    no part lengths), /drop (5 frames, then the connection closes), /html, /404."""

    def __init__(self, fps: float = 30.0) -> None:
        self.frames = make_jpegs()
        self.fps = fps
        self.connections = 0
        self.stopping = threading.Event()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802
                owner.connections += 1
                if self.path == "/html":
                    body = b"<html>not a camera</html>" * 10
                    self.send_response(200)
                    self.send_header("Content-Type", "text/html")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                if self.path not in ("/stream", "/chunked", "/drop"):
                    self.send_error(404)
                    return
                chunked = self.path == "/chunked"
                self.send_response(200)
                self.send_header("Content-Type", f"multipart/x-mixed-replace;boundary={BOUNDARY}")
                if chunked:
                    self.send_header("Transfer-Encoding", "chunked")
                else:
                    self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True
                k = 0
                period = 1.0 / owner.fps
                nxt = time.monotonic()
                try:
                    while not owner.stopping.is_set():
                        jpeg = owner.frames[k % len(owner.frames)]
                        if chunked:
                            part = (
                                f"\r\n--{BOUNDARY}\r\nContent-Type: image/jpeg\r\n\r\n".encode()
                                + jpeg
                            )
                            # split into a few chunks, as a small device would
                            for a in range(0, len(part), 1000):
                                piece = part[a : a + 1000]
                                self.wfile.write(b"%X\r\n%s\r\n" % (len(piece), piece))
                        else:
                            self.wfile.write(
                                f"--{BOUNDARY}\r\nContent-Type: image/jpeg\r\n"
                                f"Content-Length: {len(jpeg)}\r\n\r\n".encode()
                                + jpeg
                                + b"\r\n"
                            )
                        self.wfile.flush()
                        k += 1
                        if self.path == "/drop" and k % 5 == 0:
                            return
                        nxt += period
                        time.sleep(max(0.0, nxt - time.monotonic()))
                except (BrokenPipeError, ConnectionResetError, OSError):
                    return

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()

    def url(self, path: str = "/stream") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def index(self, jpeg: bytes) -> int:
        return self.frames.index(jpeg)

    def close(self) -> None:
        self.stopping.set()
        self.httpd.shutdown()
        self.httpd.server_close()

"""`CameraReader`: MJPEG over HTTP (bytes exact), files through OpenCV, one-line errors."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import cv2
import numpy as np
import pytest

from hardware.camera import CameraReader, MjpegParser, jpeg_end, parse_camera_spec
from realsim.errors import UserError
from tests.hardware._mjpeg_server import MjpegServer, make_jpegs


@pytest.fixture(scope="module")
def server() -> Iterator[MjpegServer]:
    s = MjpegServer(fps=30.0)
    yield s
    s.close()


def _collect(cam: CameraReader, n: int, timeout: float = 5.0) -> list[tuple[float, bytes]]:
    got: list[tuple[float, bytes]] = []
    done = threading.Event()

    def on_frame(t: float, jpeg: bytes) -> None:
        got.append((t, jpeg))
        if len(got) >= n:
            done.set()

    cam.on_frame = on_frame
    assert done.wait(timeout), f"{len(got)} frames, errors={cam.errors} {cam.last_error}"
    return got


@pytest.mark.parametrize("path", ["/stream", "/chunked"])
def test_mjpeg_frames_arrive_byte_exact(server: MjpegServer, path: str) -> None:
    with CameraReader(server.url(path), name="front") as cam:
        got = _collect(cam, 30)
        fps = cam.fps()
        assert cam.latest() is not None
        t_rgb = cam.latest_rgb()
        assert t_rgb is not None and t_rgb[1].shape == (240, 320, 3) and t_rgb[1].dtype == np.uint8
    idx = [server.index(j) for _, j in got]  # raises if any frame's bytes differ
    n = len(server.frames)
    assert all((b - a) % n == 1 for a, b in zip(idx, idx[1:], strict=False)), (
        idx
    )  # none lost/merged
    t = [tt for tt, _ in got]
    assert t == sorted(t) and abs(t[-1] - time.monotonic()) < 5
    assert 25 < fps < 35, fps
    assert cam.errors == 0 and not cam.running
    print(f"\n{path}: {fps:.1f} fps measured")


def test_dropped_stream_reconnects(server: MjpegServer) -> None:
    before = server.connections
    with CameraReader(server.url("/drop")) as cam:
        got = _collect(cam, 12, timeout=10)
    assert server.connections - before >= 3
    assert cam.errors >= 2 and "closed" in cam.last_error
    assert all(j in server.frames for _, j in got)


def test_stop_is_prompt(server: MjpegServer) -> None:
    cam = CameraReader(server.url()).start()
    _collect(cam, 3)
    t0 = time.monotonic()
    cam.stop()
    assert time.monotonic() - t0 < 1.0 and not cam.running
    cam.stop()


def test_video_file_source(tmp_path: Path) -> None:
    path = tmp_path / "clip.avi"
    vw = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), 20.0, (160, 120))
    assert vw.isOpened()
    for k in range(8):
        vw.write(np.full((120, 160, 3), k * 30, np.uint8))
    vw.release()
    with CameraReader(str(path), name="wrist") as cam:
        got = _collect(cam, 12)  # more than the file holds: it loops
        fps = cam.fps()
        rgb = cam.latest_rgb()
    assert all(j.startswith(b"\xff\xd8") for _, j in got)
    assert rgb is not None and rgb[1].shape == (120, 160, 3)
    assert 15 < fps < 25, fps  # paced at the file's 20 fps


def test_jpeg_file_is_served_as_is(tmp_path: Path) -> None:
    jpeg = make_jpegs(1)[0]
    path = tmp_path / "still.jpg"
    path.write_bytes(jpeg)
    with CameraReader(str(path)) as cam:
        got = _collect(cam, 3)
    assert all(j == jpeg for _, j in got)


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.mark.parametrize(
    "source, why",
    [
        (f"http://127.0.0.1:{_closed_port()}/stream", "connection refused"),
        ("/no/such/file.avi", "no such file"),
        ("http://127.0.0.1:{port}/nothing", "HTTP 404"),
        ("http://127.0.0.1:{port}/html", "not an MJPEG stream (Content-Type text/html)"),
    ],
)
def test_unreadable_sources_raise_one_line(server: MjpegServer, source: str, why: str) -> None:
    source = source.replace("{port}", str(server.port))
    cam = CameraReader(source)
    with pytest.raises(UserError) as e:
        cam.open_check(timeout=1.0)
    msg = str(e.value)
    assert msg.startswith(f"cannot open camera {source}: ") and why in msg and "\n" not in msg
    with pytest.raises(UserError):
        cam.start(timeout=1.0)
    assert not cam.running


def test_garbage_file_raises(tmp_path: Path) -> None:
    bad = tmp_path / "bad.avi"
    bad.write_bytes(b"this is not a video" * 100)
    with pytest.raises(UserError, match="cannot open camera .*bad.avi"):
        CameraReader(str(bad)).open_check(1.0)
    badjpg = tmp_path / "bad.jpg"
    badjpg.write_bytes(b"nope")
    with pytest.raises(UserError, match="not an image"):
        CameraReader(str(badjpg)).open_check(1.0)


def test_parser_without_lengths_and_by_markers() -> None:
    jpegs = make_jpegs(3)
    body = b"".join(b"--xx\r\nContent-Type: image/jpeg\r\n\r\n" + j + b"\r\n" for j in jpegs)
    p = MjpegParser("--xx")  # a boundary declared with its dashes, as some servers do
    assert [f for i in range(0, len(body), 7) for f in p.feed(body[i : i + 7])] == jpegs
    m = MjpegParser(None)
    assert m.feed(b"junk" + b"".join(jpegs) + b"more") == jpegs


def test_parse_camera_spec() -> None:
    assert parse_camera_spec("http://a/stream") == {"front": "http://a/stream"}
    assert parse_camera_spec("0") == {"front": "0"}
    assert parse_camera_spec("front=http://a:81/s, wrist=http://b/s?x=1") == {
        "front": "http://a:81/s",
        "wrist": "http://b/s?x=1",
    }
    for bad in ["", "front=", "a=1,a=2", "0,1", "front=x,http://y"]:
        with pytest.raises(UserError):
            parse_camera_spec(bad)


def test_jpeg_end_skips_an_exif_thumbnail() -> None:
    big, thumb = make_jpegs(2)
    app1 = b"Exif\x00\x00" + thumb
    jpeg = big[:2] + b"\xff\xe1" + (len(app1) + 2).to_bytes(2, "big") + app1 + big[2:]
    assert jpeg_end(jpeg) == len(jpeg)
    assert jpeg_end(jpeg[:-1]) is None and jpeg_end(b"nope") == -1
    p = MjpegParser("b")
    body = b"--b\r\n\r\n" + jpeg + b"\r\n--b\r\n\r\n" + big
    assert [f for i in range(0, len(body), 500) for f in p.feed(body[i : i + 500])] == [jpeg, big]
    assert MjpegParser(None).feed(b"\xff\xd8\xff\x00" + jpeg) == [jpeg]

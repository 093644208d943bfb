"""The emulated arm's two cameras, drawn with OpenCV: table, green square, red cube, the arm.

A pinhole projection of a handful of 3D polygons and thick line segments,
painted far to near. Good enough for a policy to find the cube and the square
and for a recorder to log two 640 x 480 MJPEG streams; it is no renderer.
Camera poses and fields of view come from spec/arm.md, perturbed per seed
within the stated uncertainty (+-2 cm, +-3 degrees, +-5 degrees of FOV).
"""

from __future__ import annotations

import math

import cv2
import numpy as np

from hardware.emulators.arm.reality import CUBE, SQUARE, forward_kinematics

W, H = 640, 480
NEAR = 0.01
TABLE = np.array([[-0.15, -0.45, 0.0], [0.65, -0.45, 0.0], [0.65, 0.45, 0.0], [-0.15, 0.45, 0.0]])
_BGR_TABLE = (150, 170, 185)
_BGR_WALL = (95, 90, 85)
_BGR_GREEN = (60, 170, 40)
_BGR_RED = (40, 40, 205)
_BGR_ARM = (235, 235, 235)
_BGR_JOINT = (40, 40, 40)


def _look(fwd: np.ndarray, up_hint: np.ndarray) -> np.ndarray:
    """World->camera rotation (rows: x right, y down, z forward) for a forward direction."""
    z = fwd / np.linalg.norm(fwd)
    x = np.cross(z, up_hint)
    if np.linalg.norm(x) < 1e-6:
        x = np.cross(z, np.array([1.0, 0.0, 0.0]))
    x /= np.linalg.norm(x)
    y = np.cross(z, x)
    return np.stack([x, y, z])


class _View:
    """One pinhole camera: pose (world position, world->camera rotation) and focal length."""

    def __init__(self, vfov_deg: float) -> None:
        self.f = (H / 2) / math.tan(math.radians(vfov_deg) / 2)
        self.pos = np.zeros(3)
        self.rot = np.eye(3)

    def cam(self, pts: np.ndarray) -> np.ndarray:
        """World points (N, 3) -> camera coordinates (N, 3)."""
        return (np.asarray(pts) - self.pos) @ self.rot.T

    def project(self, pc: np.ndarray) -> np.ndarray:
        """Camera points (N, 3) with z > 0 -> pixel coordinates (N, 2), fixed-point x16."""
        uv = np.empty((len(pc), 2))
        uv[:, 0] = W / 2 + self.f * pc[:, 0] / pc[:, 2]
        uv[:, 1] = H / 2 + self.f * pc[:, 1] / pc[:, 2]
        return np.round(np.clip(uv, -1e5, 1e5) * 16).astype(np.int32)


def _clip_polygon(pc: np.ndarray) -> np.ndarray:
    """Sutherland-Hodgman against the near plane z = NEAR. Shape: (K, 3)."""
    out = []
    n = len(pc)
    for i in range(n):
        a, b = pc[i], pc[(i + 1) % n]
        ina, inb = a[2] >= NEAR, b[2] >= NEAR
        if ina:
            out.append(a)
        if ina != inb:
            s = (NEAR - a[2]) / (b[2] - a[2])
            out.append(a + s * (b - a))
    return np.array(out) if out else np.zeros((0, 3))


class ArmCameras:
    """The fixed front camera and the wrist camera; `jpegs` draws both."""

    def __init__(self, seed: int = 0, quality: int = 80) -> None:
        rng = np.random.default_rng([seed, 5])
        self.quality = quality
        d = rng.uniform(-0.02, 0.02, 3)
        pitch = math.radians(35.0 + rng.uniform(-3, 3))
        yaw = math.radians(rng.uniform(-3, 3))
        self.front = _View(66.0 + rng.uniform(-5, 5))
        self.front.pos = np.array([0.45, 0.0, 0.30]) + d
        fwd = np.array([-math.cos(pitch) * math.cos(yaw), -math.cos(pitch) * math.sin(yaw),
                        -math.sin(pitch)])
        self.front.rot = _look(fwd, np.array([0.0, 0.0, 1.0]))
        self.wrist = _View(72.0 + rng.uniform(-5, 5))
        self.wrist_offset = np.array([0.03 + rng.uniform(-0.01, 0.01), 0.0, 0.02])
        self.wrist_tilt = math.radians(rng.uniform(-3, 3))

    # -- scene ------------------------------------------------------------------------------

    def _items(self, q: np.ndarray, cube_pos: np.ndarray, cube_yaw: float,
               square: tuple[float, float] | None) -> tuple[list, list]:
        """Flat polygons on the table (drawn first) and solid items (polygons and segments)."""
        flat: list = [("poly", TABLE, _BGR_TABLE)]
        if square is not None:
            h = SQUARE / 2
            sx, sy = square
            flat.append(("poly", np.array([[sx - h, sy - h, 1e-4], [sx + h, sy - h, 1e-4],
                                           [sx + h, sy + h, 1e-4], [sx - h, sy + h, 1e-4]]),
                         _BGR_GREEN))
        solid: list = []
        if square is not None:  # the cube exists only inside an episode
            c, s, h = math.cos(cube_yaw), math.sin(cube_yaw), CUBE / 2
            corners = np.array([[x, y, z] for z in (-h, h) for x, y in
                                ((-h, -h), (h, -h), (h, h), (-h, h))])
            corners = corners @ np.array([[c, s, 0], [-s, c, 0], [0, 0, 1]]) + cube_pos
            faces = [(0, 1, 2, 3), (4, 5, 6, 7), (0, 1, 5, 4), (1, 2, 6, 5), (2, 3, 7, 6), (3, 0, 4, 7)]
            for k, f in enumerate(faces):
                shade = 1.0 if k == 1 else 0.75
                solid.append(("poly", corners[list(f)], tuple(int(v * shade) for v in _BGR_RED)))
        fk = forward_kinematics(q)
        chain = [fk["base"], fk["shoulder"], fk["elbow"], fk["wrist"], fk["roll"]]
        for a, b in zip(chain, chain[1:], strict=False):
            solid.append(("seg", np.stack([a, b]), _BGR_ARM, 0.022, "link"))
        for tip in fk["tips"]:
            solid.append(("seg", np.stack([fk["roll"], tip]), (200, 200, 200), 0.01, "finger"))
        for p in chain[1:]:
            solid.append(("seg", np.stack([p, p + 1e-4]), _BGR_JOINT, 0.03, "link"))
        return flat, solid

    def _draw(self, view: _View, flat: list, solid: list) -> np.ndarray:
        img = np.empty((H, W, 3), np.uint8)
        img[:] = _BGR_WALL
        drawn = []
        for item in flat:
            drawn.append((math.inf, item))
        for item in solid:
            pc = view.cam(item[1])
            drawn.append((float(pc[:, 2].mean()), item))
        drawn.sort(key=lambda d: -d[0])
        for _, item in drawn:
            pc = view.cam(item[1])
            if item[0] == "poly":
                pc = _clip_polygon(pc)
                if len(pc) >= 3:
                    cv2.fillPoly(img, [view.project(pc)], item[2], cv2.LINE_AA, shift=4)
            else:
                a, b = pc
                if a[2] < NEAR and b[2] < NEAR:
                    continue
                if a[2] < NEAR or b[2] < NEAR:  # clip the segment at the near plane
                    s = (NEAR - a[2]) / (b[2] - a[2])
                    cut = a + s * (b - a)
                    a, b = (cut, b) if a[2] < NEAR else (a, cut)
                uv = view.project(np.stack([a, b]))
                z = max(0.5 * (a[2] + b[2]), NEAR)
                width = int(max(1, min(60, view.f * item[3] / z)))
                cv2.line(img, tuple(int(v) for v in uv[0]), tuple(int(v) for v in uv[1]), item[2],
                         width, cv2.LINE_AA, shift=4)
        return img

    def _place_wrist(self, q: np.ndarray) -> None:
        fk = forward_kinematics(q)
        rt = fk["R_tool"]
        self.wrist.pos = fk["roll"] + rt @ self.wrist_offset
        fwd = rt @ np.array([math.sin(self.wrist_tilt), 0.0, 1.0])
        self.wrist.rot = _look(fwd, rt @ np.array([1.0, 0.0, 0.0]))

    def images(self, q: np.ndarray, cube_pos: np.ndarray, cube_yaw: float,
               square: tuple[float, float] | None) -> tuple[np.ndarray, np.ndarray]:
        """(front, wrist) BGR images, each (480, 640, 3) uint8."""
        flat, solid = self._items(np.asarray(q, float), np.asarray(cube_pos, float), cube_yaw, square)
        front = self._draw(self.front, flat, solid)
        self._place_wrist(np.asarray(q, float))
        # the wrist camera sees the cube and its own fingers, not the links behind it
        wrist = self._draw(self.wrist, flat, [s for s in solid if s[0] == "poly" or s[4] == "finger"])
        return front, wrist

    def jpegs(self, q: np.ndarray, cube_pos: np.ndarray, cube_yaw: float,
              square: tuple[float, float] | None) -> tuple[bytes, bytes]:
        """(front, wrist) as JPEG bytes."""
        params = [cv2.IMWRITE_JPEG_QUALITY, self.quality]
        out = []
        for img in self.images(q, cube_pos, cube_yaw, square):
            ok, buf = cv2.imencode(".jpg", img, params)
            if not ok:
                raise ValueError("JPEG encoding failed")
            out.append(buf.tobytes())
        return out[0], out[1]

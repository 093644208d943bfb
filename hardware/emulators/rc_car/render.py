"""The emulated car's front camera: a room rendered with NumPy and OpenCV, not MuJoCo.

The training simulator renders with MuJoCo; this camera is deliberately built
differently so a policy meets a gap it has to bridge: its own floor (planks,
linoleum or tiles, drawn per session), ceiling-lamp light pools baked into the
floor, walls with a skirting board, doors, a window and pictures beyond the 6 x
6 m floor, cones with a square base plate and a round shaded body and a soft
contact shadow, white balance and exposure off neutral, a wide lens with barrel
distortion and vignetting, sensor noise and JPEG compression.

How a frame is made (`CarCamera.render`):

1. An undistorted pinhole image slightly wider than the lens's field is filled:
   every pixel's ray is fixed in the body frame (the floor is flat and the
   camera rigid), so the floor point each pixel sees is precomputed in the body
   frame and only rotated and shifted per frame, then looked up in a
   world-space floor texture (three resolutions, picked per pixel by footprint).
   Pixels that may see past the floor are intersected with the room's four walls.
2. Cones are convex polygons projected with the same pinhole model, clipped at a
   near plane, back faces culled, drawn far to near.
3. `cv2.remap` with a precomputed map applies the barrel distortion to the
   final 320 x 240 image; vignetting, a slight lens blur and noise follow.

Images are BGR uint8 (OpenCV order) unless a name says RGB. Frames: world =
the episode's frame (x forward at the start, y left, z up; m); body = the car's.
"""

from __future__ import annotations

import math

import cv2
import numpy as np

from hardware.emulators.rc_car.reality import RealityParams
from realsim.robots.rc_car.task import BLUE_RGB, CONE_BASE, CONE_HEIGHT, ORANGE_RGB, Scene

WIDTH = 320
"""Output image width (px)."""
HEIGHT = 240
"""Output image height (px)."""
CAM_X = 0.08
"""Lens ahead of the body origin (m)."""
CAM_Z = 0.14
"""Lens above the floor (m)."""
JPEG_QUALITY = 80
ROOM_HEIGHT = 2.6
"""Ceiling height (m)."""
_FLOOR_RES = (0.005, 0.02, 0.08)  # floor texture resolutions (m/texel), finest first
_WALL_RES = 0.02  # wall texture resolution (m/texel)
_PLATE_H = 0.015  # cone base plate height (m)
_BODY_R0, _BODY_R1 = 0.05, 0.012  # cone body radius at the bottom / top (m)
_NEAR = 0.01  # near clipping plane (m)
_PINHOLE_SCALE = 0.8  # pinhole render resolution / lens centre resolution (speed vs sharpness)


def _bgr(rgb: tuple[int, int, int]) -> np.ndarray:
    return np.array(rgb[::-1], dtype=np.float32)


def _pack(bgr: np.ndarray) -> np.ndarray:
    """(h, w, 3) uint8 BGR -> (h, w) uint32 whose bytes are B, G, R, 0 (little-endian)."""
    h, w = bgr.shape[:2]
    out = np.zeros((h, w, 4), np.uint8)
    out[..., :3] = bgr
    return out.view(np.uint32).reshape(h, w)


class CarCamera:
    """Renders the front camera for one session's reality (`RealityParams`).

    Construction precomputes maps and textures (a few hundred ms); `render`
    then costs a few milliseconds per frame.
    """

    def __init__(self, params: RealityParams, seed: int = 0) -> None:
        self.p = params
        self.rng = np.random.default_rng([seed, 2])
        self._frame = 0
        self._wb = (
            np.array([params.cam_wb_b, 1.0, params.cam_wb_r], np.float32) * params.cam_exposure
        )
        self._setup_lens()
        self._setup_rays()
        self._make_floor()
        self._make_walls()
        self._make_noise()

    # -- precomputation -------------------------------------------------------------

    def _setup_lens(self) -> None:
        p = self.p
        lam = p.cam_distortion  # division model: x_u = x_d / (1 + lam r_d^2), lam < 0: barrel
        T = math.tan(math.radians(p.cam_hfov_deg) / 2.0)
        a = T if abs(lam) < 1e-9 else (1.0 - math.sqrt(1.0 - 4.0 * lam * T * T)) / (2.0 * lam * T)
        f_d = (WIDTH / 2.0) / a
        cx, cy = (WIDTH - 1) / 2.0, (HEIGHT - 1) / 2.0
        u, v = np.meshgrid(np.arange(WIDTH, dtype=np.float64), np.arange(HEIGHT, dtype=np.float64))
        xd, yd = (u - cx) / f_d, (v - cy) / f_d
        k = 1.0 + lam * (xd * xd + yd * yd)
        k = np.maximum(k, 0.2)
        xu, yu = xd / k, yd / k
        # the pinhole render covers every undistorted point the lens needs, at the
        # lens's centre resolution
        self.f_s = f_d * _PINHOLE_SCALE
        xm, ym = float(np.abs(xu).max()), float(np.abs(yu).max())
        self.w_s = int(math.ceil(2 * xm * self.f_s)) + 4
        self.h_s = int(math.ceil(2 * ym * self.f_s)) + 4
        self.cx_s, self.cy_s = (self.w_s - 1) / 2.0, (self.h_s - 1) / 2.0
        mx = (xu * self.f_s + self.cx_s).astype(np.float32)
        my = (yu * self.f_s + self.cy_s).astype(np.float32)
        self._map1, self._map2 = cv2.convertMaps(mx, my, cv2.CV_16SC2)
        # vignetting (cos^4-like falloff with the ray angle), as a 0..256 integer scale
        r2 = xu * xu + yu * yu
        vig = (1.0 / (1.0 + r2)) ** 1.6
        vig = 0.55 + 0.45 * vig / vig.max()
        self._vig = np.repeat((vig * 256).astype(np.uint16)[:, :, None], 3, axis=2)

    def _setup_rays(self) -> None:
        p = self.p
        pitch = math.radians(p.cam_pitch_deg)
        roll = math.radians(p.cam_roll_deg)
        cp, sp = math.cos(pitch), math.sin(pitch)
        # camera axes in the body frame: x right, y down, z forward (OpenCV)
        self._Xc = np.array([0.0, -1.0, 0.0])
        self._Zc = np.array([cp, 0.0, -sp])
        self._Yc = np.cross(self._Zc, self._Xc)
        self._roll = roll
        j, i = np.meshgrid(
            np.arange(self.w_s, dtype=np.float64), np.arange(self.h_s, dtype=np.float64)
        )
        xu, yu = (j - self.cx_s) / self.f_s, (i - self.cy_s) / self.f_s
        cr, sr = math.cos(roll), math.sin(roll)
        xr, yr = cr * xu - sr * yu, sr * xu + cr * yu
        d = xr[..., None] * self._Xc + yr[..., None] * self._Yc + self._Zc  # (h, w, 3)
        dx, dy, dz = d[..., 0].ravel(), d[..., 1].ravel(), d[..., 2].ravel()
        floor = dz < -1e-4
        t_f = np.full(dx.shape, np.inf)
        t_f[floor] = CAM_Z / -dz[floor]
        self._dx, self._dy, self._dz = (
            dx.astype(np.float32),
            dy.astype(np.float32),
            dz.astype(np.float32),
        )
        self._t_floor = t_f
        # floor point of each floor pixel (body frame) and its footprint (m/px)
        bx = (CAM_X + t_f * dx).reshape(self.h_s, self.w_s)
        by = (t_f * dy).reshape(self.h_s, self.w_s)
        with np.errstate(invalid="ignore"):
            gy = np.hypot(*np.gradient(np.where(np.isfinite(bx), bx, 1e3)))
            gx = np.hypot(*np.gradient(np.where(np.isfinite(by), by, 1e3)))
        foot = np.maximum(gx, gy).ravel()
        self._floor_sets = []
        lo = 0.0
        for k, res in enumerate(_FLOOR_RES):
            hi = 2.5 * res if k < len(_FLOOR_RES) - 1 else np.inf
            sel = np.nonzero(floor & (foot >= lo) & (foot < hi))[0]
            self._floor_sets.append(
                (sel, bx.ravel()[sel].astype(np.float32), by.ravel()[sel].astype(np.float32))
            )
            lo = hi
        # pixels that may see a wall, nearest floor point farthest first
        rho = np.where(floor, t_f * np.hypot(dx, dy), np.inf)
        order = np.argsort(-rho, kind="stable")
        self._wall_order = order
        self._wall_rho_desc = rho[order]  # descending
        self._wall_t_floor = t_f[order]

    def _make_floor(self) -> None:
        p = self.p
        rng = np.random.default_rng(self.rng.integers(0, 2**63))
        x0, y0 = p.room_x_min - 0.5, p.room_y_min - 0.5
        x1, y1 = p.room_x_max + 0.5, p.room_y_max + 0.5
        res = _FLOOR_RES[0]
        nx, ny = int((x1 - x0) / res) + 1, int((y1 - y0) / res) + 1
        self._floor_origin = (x0, y0)
        xs = (x0 + res * np.arange(nx, dtype=np.float32))[None, :]
        ys = (y0 + res * np.arange(ny, dtype=np.float32))[:, None]

        def smooth_noise(cell: float, amp: float) -> np.ndarray:
            g = rng.normal(0, amp, (int(ny * res / cell) + 2, int(nx * res / cell) + 2)).astype(
                np.float32
            )
            return cv2.resize(g, (nx, ny), interpolation=cv2.INTER_CUBIC)

        shade = np.ones((ny, nx), np.float32)
        tint = np.zeros((ny, nx, 3), np.float32)
        kind = p.floor_kind
        if kind == "wood":
            along_x = bool(rng.integers(0, 2))
            u, v = (xs, ys) if along_x else (ys, xs)
            w = float(rng.uniform(0.1, 0.16))
            length = float(rng.uniform(0.9, 1.5))
            row = np.floor(v / w)
            offs = (row * 0.618 % 1.0) * length
            col = np.floor((u + offs) / length)
            pid = (row * 7919 + col * 104729).astype(np.int64) % 4096
            table = rng.normal(0, 0.09, 4096).astype(np.float32)
            fv = v - row * w
            fu = u + offs - col * length
            grain = np.sin(2 * np.pi * (fv * 55.0 + 0.8 * np.sin(u * 1.7 + row * 2.3)) + row)
            shade = (1.0 + table[pid] + 0.05 * grain).astype(np.float32)
            seam = (fv < 0.003) | (fu < 0.004)
            shade = np.broadcast_to(shade, (ny, nx)).copy()
            shade[np.broadcast_to(seam, (ny, nx))] *= 0.55
            tint[..., 2] = 0.04 * np.broadcast_to(table[pid], (ny, nx))
        elif kind == "tiles":
            s = float(rng.uniform(0.3, 0.5))
            ix, iy = np.floor(xs / s), np.floor(ys / s)
            tid = (ix * 92821 + iy * 68917).astype(np.int64) % 4096
            table = rng.normal(0, 0.04, 4096).astype(np.float32)
            shade = 1.0 + table[tid] + smooth_noise(0.05, 0.02)
            grout = ((xs - ix * s) < 0.006) | ((ys - iy * s) < 0.006)
            shade[np.broadcast_to(grout, (ny, nx))] *= 0.7
        else:  # lino: mottled with speckles
            shade = 1.0 + smooth_noise(0.25, 0.05) + smooth_noise(0.03, 0.03)
            speck = rng.random((ny, nx)) < 0.02
            shade[speck] *= rng.uniform(0.6, 1.3)
        # ceiling lamps: light pools; a dimmer far corner
        light = np.full((ny, nx), 0.55, np.float32)
        for _ in range(int(rng.integers(2, 4))):
            lx, ly = (
                rng.uniform(p.room_x_min + 1, p.room_x_max - 1),
                rng.uniform(p.room_y_min + 1, p.room_y_max - 1),
            )
            sig = rng.uniform(1.2, 2.2)
            light += 0.45 * np.exp(-(((xs - lx) ** 2 + (ys - ly) ** 2) / (2 * sig * sig)))
        light *= p.light_gain
        base = _bgr(p.floor_rgb) * self._wb
        tex = (shade * light)[..., None] * base * (1.0 + tint)
        lvl0 = np.clip(tex, 0, 255).astype(np.uint8)
        levels = [lvl0]
        for res_k in _FLOOR_RES[1:]:
            f = res / res_k
            levels.append(
                cv2.resize(
                    lvl0, (max(2, int(nx * f)), max(2, int(ny * f))), interpolation=cv2.INTER_AREA
                )
            )
        # texels packed as uint32 (B, G, R, pad) so a lookup is one 1-D gather
        self._floor_tex = [_pack(t) for t in levels]

    def _make_walls(self) -> None:
        p = self.p
        rng = np.random.default_rng(self.rng.integers(0, 2**63))
        wx, wy = p.room_x_max - p.room_x_min, p.room_y_max - p.room_y_min
        self._wall_len = (wy, wx, wy, wx)
        perim = 2 * (wx + wy)
        n_s, n_z = int(perim / _WALL_RES) + 2, int(ROOM_HEIGHT / _WALL_RES) + 2
        s = (np.arange(n_s, dtype=np.float32) * _WALL_RES)[None, :]
        z = (np.arange(n_z, dtype=np.float32) * _WALL_RES)[:, None]
        base = _bgr(p.wall_rgb)
        img = np.broadcast_to(base, (n_z, n_s, 3)).copy()
        shade = (0.8 + 0.15 * np.exp(-((z - 2.4) ** 2) / 0.8)) * (1 + 0.02 * np.sin(s * 0.7))
        img *= shade[..., None]

        def rect(s0: float, s1: float, z0: float, z1: float, color: np.ndarray) -> None:
            a, b = int(s0 / _WALL_RES), int(s1 / _WALL_RES)
            c, d = int(z0 / _WALL_RES), int(z1 / _WALL_RES)
            img[max(c, 0) : max(d, 0), max(a, 0) : max(b, 0)] = color

        corners = np.cumsum([0.0, wy, wx, wy, wx])
        for w in range(4):
            s0, s1 = corners[w], corners[w + 1]
            span = s1 - s0
            n_items = int(rng.integers(1, 4))
            for _ in range(n_items):
                kind = rng.choice(
                    ["door", "window", "picture", "cabinet"], p=[0.25, 0.2, 0.35, 0.2]
                )
                c = s0 + rng.uniform(0.8, max(0.9, span - 0.8))
                if kind == "door":
                    col = np.array(rng.uniform([40, 60, 90], [90, 110, 150]), np.float32)
                    rect(c - 0.45, c + 0.45, 0.0, 2.05, col)
                    rect(c + 0.3, c + 0.36, 1.0, 1.06, np.array([190, 190, 190], np.float32))
                elif kind == "window":
                    rect(c - 0.8, c + 0.8, 0.85, 2.15, np.array([250, 245, 235], np.float32))
                    rect(c - 0.02, c + 0.02, 0.85, 2.15, base * 0.9)
                elif kind == "picture":
                    col = np.array(rng.uniform(30, 220, 3), np.float32)
                    wd, ht = rng.uniform(0.3, 0.9), rng.uniform(0.3, 0.7)
                    rect(c - wd / 2, c + wd / 2, 1.3, 1.3 + ht, col)
                else:  # a low cabinet against the wall (flat: the floor stays clear)
                    col = np.array(rng.uniform(40, 200, 3), np.float32)
                    rect(c - 0.5, c + 0.5, 0.0, rng.uniform(0.5, 0.9), col)
            rect(s0 + 0.3, s0 + 0.38, 0.25, 0.33, np.array([235, 235, 235], np.float32))
        skirting = (
            np.array([235, 235, 230], np.float32)
            if rng.random() < 0.5
            else np.array([40, 60, 80], np.float32)
        )
        img[: int(0.08 / _WALL_RES)] = skirting
        img *= p.light_gain * self._wb
        self._wall_tex = _pack(np.clip(img, 0, 255).astype(np.uint8))
        self._wall_ns, self._wall_nz = n_s, n_z
        ceiling = np.clip(np.array([225, 228, 230], np.float32) * 0.8 * self._wb, 0, 255).astype(
            np.uint8
        )
        self._ceiling = _pack(ceiling.reshape(1, 1, 3))[0, 0]

    def _make_noise(self) -> None:
        rng = np.random.default_rng(self.rng.integers(0, 2**63))
        sd = self.p.cam_noise
        self._noise = []
        for _ in range(6):
            n = rng.normal(0.0, sd, (HEIGHT, WIDTH, 3))
            n[..., :] += rng.normal(0.0, sd * 0.5, (HEIGHT, WIDTH, 1))  # luminance part
            self._noise.append(
                (np.clip(n, 0, 255).astype(np.uint8), np.clip(-n, 0, 255).astype(np.uint8))
            )

    # -- per frame ------------------------------------------------------------------------

    def _background(self, x: float, y: float, yaw: float) -> np.ndarray:
        p = self.p
        img = np.zeros(self.h_s * self.w_s, np.uint32)
        c, s = math.cos(yaw), math.sin(yaw)
        x0, y0 = self._floor_origin
        for (sel, bx, by), res, tex in zip(
            self._floor_sets, _FLOOR_RES, self._floor_tex, strict=True
        ):
            if sel.size == 0:
                continue
            ny, nx = tex.shape
            inv = 1.0 / res
            ix = ((x - x0 + c * bx - s * by) * inv).astype(np.int32)
            iy = ((y - y0 + s * bx + c * by) * inv).astype(np.int32)
            np.clip(ix, 0, nx - 1, out=ix)
            np.clip(iy, 0, ny - 1, out=iy)
            iy *= nx
            iy += ix
            img[sel] = tex.ravel().take(iy)
        # walls: only pixels whose floor point lies farther than the nearest wall
        cx, cy = x + c * CAM_X, y + s * CAM_X
        d_min = min(p.room_x_max - cx, cx - p.room_x_min, p.room_y_max - cy, cy - p.room_y_min)
        d_min = max(d_min, 0.0)
        k = int(np.searchsorted(-self._wall_rho_desc, -d_min, side="left"))
        if k > 0:
            idx = self._wall_order[:k]
            bdx, bdy, dz = self._dx[idx], self._dy[idx], self._dz[idx]
            wdx = c * bdx - s * bdy
            wdy = s * bdx + c * bdy
            with np.errstate(divide="ignore", invalid="ignore"):
                tx = np.where(wdx > 0, (p.room_x_max - cx) / wdx, (p.room_x_min - cx) / wdx)
                ty = np.where(wdy > 0, (p.room_y_max - cy) / wdy, (p.room_y_min - cy) / wdy)
            tx = np.where(tx > 0, tx, np.inf)
            ty = np.where(ty > 0, ty, np.inf)
            hit_x = tx < ty
            t = np.minimum(tx, ty)
            see = t < self._wall_t_floor[:k]
            if np.any(see):
                idx, t, hit_x, wdx, wdy, dz = (
                    idx[see],
                    t[see],
                    hit_x[see],
                    wdx[see],
                    wdy[see],
                    dz[see],
                )
                hx, hy = cx + t * wdx, cy + t * wdy
                z = CAM_Z + t * dz
                wy_len, wx_len = self._wall_len[0], self._wall_len[1]
                s_front = hy - p.room_y_min
                s_left = wy_len + (p.room_x_max - hx)
                s_back = wy_len + wx_len + (p.room_y_max - hy)
                s_right = 2 * wy_len + wx_len + (hx - p.room_x_min)
                sc = np.where(
                    hit_x,
                    np.where(wdx > 0, s_front, s_back),
                    np.where(wdy > 0, s_left, s_right),
                )
                z = np.nan_to_num(z, nan=0.0, posinf=ROOM_HEIGHT, neginf=0.0)
                sc = np.nan_to_num(sc, nan=0.0, posinf=0.0, neginf=0.0)
                iz = np.clip(z * (1.0 / _WALL_RES), -1, self._wall_nz).astype(np.int32)
                isx = np.clip(sc * (1.0 / _WALL_RES), -1, self._wall_ns).astype(np.int32)
                np.clip(isx, 0, self._wall_ns - 1, out=isx)
                ceil = iz >= self._wall_nz
                np.clip(iz, 0, self._wall_nz - 1, out=iz)
                col = self._wall_tex.ravel().take(iz * self._wall_ns + isx)
                col[ceil] = self._ceiling
                img[idx] = col
        return img.view(np.uint8).reshape(self.h_s, self.w_s, 4)

    def _project(self, pts_w: np.ndarray, x: float, y: float, yaw: float) -> np.ndarray:
        """World points (N, 3) -> camera coordinates (N, 3): x right, y down, z forward (m)."""
        c, s = math.cos(yaw), math.sin(yaw)
        dxw, dyw = pts_w[:, 0] - x, pts_w[:, 1] - y
        b = np.stack([c * dxw + s * dyw - CAM_X, -s * dxw + c * dyw, pts_w[:, 2] - CAM_Z], axis=1)
        xc, yc, zc = b @ self._Xc, b @ self._Yc, b @ self._Zc
        cr, sr = math.cos(self._roll), math.sin(self._roll)
        return np.stack([cr * xc + sr * yc, -sr * xc + cr * yc, zc], axis=1)

    def _to_px(self, pc: np.ndarray) -> np.ndarray:
        return np.stack(
            [
                pc[:, 0] / pc[:, 2] * self.f_s + self.cx_s,
                pc[:, 1] / pc[:, 2] * self.f_s + self.cy_s,
            ],
            axis=1,
        )

    def _poly(self, img: np.ndarray, pc: np.ndarray, color: np.ndarray) -> None:
        """Fill one convex polygon given in camera coordinates, clipped at the near plane."""
        if np.all(pc[:, 2] > _NEAR):
            poly = pc
        else:
            out = []
            n = len(pc)
            for i in range(n):
                a, b = pc[i], pc[(i + 1) % n]
                ina, inb = a[2] > _NEAR, b[2] > _NEAR
                if ina:
                    out.append(a)
                if ina != inb:
                    f = (_NEAR - a[2]) / (b[2] - a[2])
                    out.append(a + f * (b - a))
            if len(out) < 3:
                return
            poly = np.array(out)
        px = self._to_px(poly)
        if np.abs(px).max() > 1e5:
            px = np.clip(px, -1e5, 1e5)
        cv2.fillConvexPoly(img, np.round(px * 16).astype(np.int32), color.tolist(), cv2.LINE_AA, 4)

    def _cone(
        self,
        img: np.ndarray,
        cxw: float,
        cyw: float,
        rgb: tuple[int, int, int],
        pose: tuple[float, float, float],
    ) -> None:
        x, y, yaw = pose
        base = _bgr(rgb) * self._wb
        light = np.array([0.35, 0.25, 0.9])
        light /= np.linalg.norm(light)
        cam = np.array([x + math.cos(yaw) * CAM_X, y + math.sin(yaw) * CAM_X, CAM_Z])

        def face(pts: np.ndarray, normal: np.ndarray, ambient: float = 0.45) -> None:
            centre = pts.mean(axis=0)
            if np.dot(normal, cam - centre) <= 0:
                return
            lam = max(0.0, float(np.dot(normal, light)))
            col = np.clip(base * (ambient + 0.6 * lam), 0, 255)
            self._poly(img, self._project(pts, x, y, yaw), col)

        # soft contact shadow on the floor
        ang = np.linspace(0, 2 * np.pi, 16, endpoint=False)
        sh = np.stack(
            [cxw + 0.1 * np.cos(ang) - 0.02, cyw + 0.1 * np.sin(ang) - 0.015, np.zeros(16)], axis=1
        )
        pc = self._project(sh, x, y, yaw)
        if np.all(pc[:, 2] > _NEAR):
            px = np.round(self._to_px(pc)).astype(np.int32)
            x0, y0 = np.maximum(px.min(axis=0) - 1, 0)
            x1, y1 = np.minimum(px.max(axis=0) + 2, [self.w_s, self.h_s])
            if x1 > x0 and y1 > y0:
                mask = np.zeros((y1 - y0, x1 - x0), np.uint8)
                cv2.fillConvexPoly(mask, px - [x0, y0], 90, cv2.LINE_AA)
                mask = cv2.GaussianBlur(mask, (0, 0), 1.5)
                roi = img[y0:y1, x0:x1]
                roi[:] = (
                    roi.astype(np.uint16) * (256 - mask[..., None].astype(np.uint16)) >> 8
                ).astype(np.uint8)
        # square base plate
        h = CONE_BASE / 2
        sq = np.array([[h, h], [-h, h], [-h, -h], [h, -h]])
        for i in range(4):
            a, b = sq[i], sq[(i + 1) % 4]
            n = np.array([*(a + b) / np.linalg.norm(a + b), 0.0])
            pts = np.array(
                [
                    [cxw + a[0], cyw + a[1], 0],
                    [cxw + b[0], cyw + b[1], 0],
                    [cxw + b[0], cyw + b[1], _PLATE_H],
                    [cxw + a[0], cyw + a[1], _PLATE_H],
                ]
            )
            face(pts, n, 0.35)
        top = np.array([[cxw + q[0], cyw + q[1], _PLATE_H] for q in sq])
        face(top, np.array([0.0, 0.0, 1.0]), 0.35)
        # round body: a 14-sided frustum
        nseg = 14
        ang = np.linspace(0, 2 * np.pi, nseg + 1)
        slope = (_BODY_R0 - _BODY_R1) / (CONE_HEIGHT - _PLATE_H)
        for i in range(nseg):
            a0, a1 = ang[i], ang[i + 1]
            am = 0.5 * (a0 + a1)
            n = np.array([math.cos(am), math.sin(am), slope])
            n /= np.linalg.norm(n)
            pts = np.array(
                [
                    [cxw + _BODY_R0 * math.cos(a0), cyw + _BODY_R0 * math.sin(a0), _PLATE_H],
                    [cxw + _BODY_R0 * math.cos(a1), cyw + _BODY_R0 * math.sin(a1), _PLATE_H],
                    [cxw + _BODY_R1 * math.cos(a1), cyw + _BODY_R1 * math.sin(a1), CONE_HEIGHT],
                    [cxw + _BODY_R1 * math.cos(a0), cyw + _BODY_R1 * math.sin(a0), CONE_HEIGHT],
                ]
            )
            face(pts, n)
        cap = np.array(
            [
                [cxw + _BODY_R1 * math.cos(a), cyw + _BODY_R1 * math.sin(a), CONE_HEIGHT]
                for a in ang[:-1]
            ]
        )
        face(cap, np.array([0.0, 0.0, 1.0]))

    def render(self, pose: tuple[float, float, float], scene: Scene | None = None) -> np.ndarray:
        """The camera image for the body origin at ``pose`` = (x, y, yaw) (m, m, rad, world
        frame) with the cones of ``scene`` (None: no cones). Returns (240, 320, 3) uint8 BGR."""
        x, y, yaw = pose
        img = self._background(x, y, yaw)
        if scene is not None:
            cones = [(scene.cone_xy, ORANGE_RGB)]
            if scene.distractor_xy is not None:
                cones.append((scene.distractor_xy, BLUE_RGB))
            cones.sort(key=lambda c: -math.hypot(c[0][0] - x, c[0][1] - y))
            for (cxw, cyw), rgb in cones:
                self._cone(img, cxw, cyw, rgb, pose)
        out = cv2.remap(
            img, self._map1, self._map2, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE
        )
        out = cv2.cvtColor(out, cv2.COLOR_BGRA2BGR)
        out = cv2.GaussianBlur(out, (3, 3), 0.6)
        out = ((out.astype(np.uint16) * self._vig) >> 8).astype(np.uint8)
        self._frame += 1
        pos, neg = self._noise[int(self.rng.integers(0, len(self._noise)))]
        sh = int(self.rng.integers(0, 8))
        if sh:
            pos, neg = np.roll(pos, sh, axis=1), np.roll(neg, sh, axis=0)
        out = cv2.subtract(cv2.add(out, pos), neg)
        return out

    def render_rgb(
        self, pose: tuple[float, float, float], scene: Scene | None = None
    ) -> np.ndarray:
        """`render` in RGB channel order: (240, 320, 3) uint8."""
        return np.ascontiguousarray(self.render(pose, scene)[:, :, ::-1])

    def jpeg(self, pose: tuple[float, float, float], scene: Scene | None = None) -> bytes:
        """`render` encoded as a JPEG at quality `JPEG_QUALITY`."""
        ok, buf = cv2.imencode(
            ".jpg", self.render(pose, scene), [cv2.IMWRITE_JPEG_QUALITY, JPEG_QUALITY]
        )
        if not ok:  # pragma: no cover - OpenCV never fails on a valid uint8 image
            raise RuntimeError("JPEG encoding failed")
        return buf.tobytes()

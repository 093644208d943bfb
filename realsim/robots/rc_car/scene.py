"""The reach-the-cone task in MuJoCo (rc_car.md, "The task"): scene, camera, environment.

`build_scene_spec(draw, scene)` puts the car of `model.build_spec` into a room: a floor
with a randomized texture, four walls beyond it, lights, the orange cone and (maybe) the
blue distractor (cones never collide: "cones are light and do not stop the car").

`CarTaskEnv` is the closed-loop environment that the teacher (data generation) and the
student's closed-loop evaluation both run:

- physics through `CarSim` (latency, deadband, servo, battery; its own timestep),
  control at `control_hz`, one telemetry sample per control step (the log's rc_car
  fields); given a learned residual (issue 4), through `realsim.sim.HybridCarSim`
  instead: the same physics with the residual's bounded force applied inside every
  MuJoCo step;
- the `front` camera rendered at 20 frames/s at 320x240 with the episode's randomized
  look, barrel distortion, white balance, blur, sensor noise and JPEG; each frame arrives
  one camera latency after its exposure, as on the real Wi-Fi camera;
- one judge (`task.TaskJudge`): the same success rule as the emulator.

`Obs` carries robot-legal streams only (camera, telemetry, time). Everything else the
simulator knows is in `env.privileged()`, for teachers.

Frames: world = the episode's frame (car's start pose: x forward, y left, z up), m, rad.
"""

from __future__ import annotations

import copy
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

os.environ.setdefault("MUJOCO_GL", "egl")

import cv2  # noqa: E402
import mujoco  # noqa: E402
import numpy as np  # noqa: E402

from realsim.randomization import Draw, Randomization  # noqa: E402
from realsim.robots.rc_car import constants as C  # noqa: E402
from realsim.robots.rc_car import task  # noqa: E402
from realsim.robots.rc_car.actuation import StreamingActuation  # noqa: E402
from realsim.robots.rc_car.model import FLOOR_CONAFFINITY, add_tyre_contacts, build_spec  # noqa: E402
from realsim.robots.rc_car.params import CarParams  # noqa: E402
from realsim.robots.rc_car.sim import Battery, CarSim  # noqa: E402

if TYPE_CHECKING:
    from realsim.residual import Residual

CONE_GEOMS = ("cone_base", "cone_body")
"""Geoms of the orange cone (segmentation: the footprint check counts these)."""
DISTRACTOR_GEOMS = ("distractor_base", "distractor_body")
"""Geoms of the blue cone."""
CAMERA_POS = np.array([0.08, 0.0, 0.14])
"""Lens position in the body frame (m), datasheet."""
ROOM_HEIGHT = 2.6
"""Wall height (m)."""
_PLATE_H = 0.015  # cone base plate thickness (m)
_CONE_R0, _CONE_R1 = 0.05, 0.012  # cone body radius at the plate / at the top (m)
_TEX_PX = 256  # floor texture size (texels)


# ---------------------------------------------------------------------------------------
# the scene
# ---------------------------------------------------------------------------------------
def _floor_texture(draw: Draw) -> np.ndarray:
    """Procedural floor texture (H, W, 3) uint8 for `draw.floor_kind`; one texture tile
    spans 2 pattern periods (texrepeat sets the metric size)."""
    rng = np.random.default_rng(draw.floor_seed)
    n = _TEX_PX
    c1 = np.array(draw.floor_rgb1) * 255.0
    c2 = np.array(draw.floor_rgb2) * 255.0
    yy, xx = np.mgrid[0:n, 0:n] / n  # [0, 1)
    kind = draw.floor_kind
    if kind == "checker":
        m = ((np.floor(xx * 2) + np.floor(yy * 2)) % 2).astype(np.float64)
        grout = ((xx * 2) % 1 < 0.03) | ((yy * 2) % 1 < 0.03)
        m = np.where(grout, 0.5, m)
    elif kind == "planks":
        row = np.floor(yy * 4)
        shade = rng.uniform(0, 1, size=8)[row.astype(int)]
        grain = 0.25 * np.sin(2 * np.pi * (xx * 3 + 0.15 * np.sin(2 * np.pi * yy * 16)) * 4)
        seam = ((yy * 4) % 1) < 0.04
        m = np.clip(shade + grain, 0, 1)
        m = np.where(seam, 1.0, m)
    elif kind == "noise":
        m = rng.uniform(0, 1, size=(n // 8, n // 8))
        m = cv2.resize(m, (n, n), interpolation=cv2.INTER_CUBIC)
        m = np.clip(m, 0, 1)
    else:  # flat with faint speckle
        m = 0.15 * rng.uniform(0, 1, size=(n, n))
    img = c1[None, None] * (1 - m[..., None]) + c2[None, None] * m[..., None]
    return np.clip(img, 0, 255).astype(np.uint8)


def _add_cone(spec: mujoco.MjSpec, name: str, xy: Sequence[float], rgb: Sequence[float]) -> None:
    """A traffic cone: square base plate + truncated-cone body mesh, no collisions."""
    mesh_name = f"{name}_mesh"
    mesh = spec.add_mesh(name=mesh_name)
    k = 24
    a = np.linspace(0, 2 * np.pi, k, endpoint=False)
    bottom = np.stack([_CONE_R0 * np.cos(a), _CONE_R0 * np.sin(a), np.zeros(k)], 1)
    top = np.stack(
        [_CONE_R1 * np.cos(a), _CONE_R1 * np.sin(a), np.full(k, task.CONE_HEIGHT - _PLATE_H)], 1
    )
    mesh.uservert = np.concatenate([bottom, top]).reshape(-1).tolist()
    body = spec.worldbody.add_body(name=name, pos=[xy[0], xy[1], 0.0])
    rgba = [*map(float, rgb), 1.0]
    half = task.CONE_BASE / 2
    body.add_geom(
        name=f"{name}_base",
        type=mujoco.mjtGeom.mjGEOM_BOX,
        size=[half, half, _PLATE_H / 2],
        pos=[0, 0, _PLATE_H / 2],
        rgba=rgba,
        contype=0,
        conaffinity=0,
        group=0,
    )
    body.add_geom(
        name=f"{name}_body",
        type=mujoco.mjtGeom.mjGEOM_MESH,
        meshname=mesh_name,
        pos=[0, 0, _PLATE_H],
        rgba=rgba,
        contype=0,
        conaffinity=0,
        group=0,
    )


def camera_axes(pitch_deg: float, roll_deg: float = 0.0) -> np.ndarray:
    """MuJoCo camera xyaxes (6,) in the body frame: looking along +x, pitched down
    `pitch_deg`, rolled `roll_deg` (positive: image turns clockwise)."""
    p, r = math.radians(pitch_deg), math.radians(roll_deg)
    fwd = np.array([math.cos(p), 0.0, -math.sin(p)])  # viewing direction
    up = np.array([math.sin(p), 0.0, math.cos(p)])
    right = np.cross(fwd, up)  # = -y when level
    # roll about the viewing axis
    x = math.cos(r) * right + math.sin(r) * up
    y = -math.sin(r) * right + math.cos(r) * up
    return np.concatenate([x, y])


def render_fovy_deg(hfov_deg: float, k: float, aspect: float = 4 / 3) -> float:
    """Vertical fovy (deg) of the pinhole render that covers the distorted image's corners.

    Distortion model (output coordinates s in [-1, 1] across the width, t = row offset
    on the same scale): undistorted tan coordinates = c (s, t) (1 + k (s^2 + t^2)) with
    c = tan(hfov / 2) / (1 + k), so the horizontal edge-to-edge field is `hfov_deg`.
    """
    c = math.tan(math.radians(hfov_deg) / 2) / (1 + k)
    corner = 1 + k * (1 + 1 / aspect**2)
    return math.degrees(2 * math.atan(c * corner / aspect))


def distortion_maps(
    width: int, height: int, hfov_deg: float, k: float
) -> tuple[np.ndarray, np.ndarray]:
    """cv2.remap maps (height, width) float32: output (distorted) pixel -> pixel of the
    pinhole render made with `render_fovy_deg(hfov_deg, k)` at the same size."""
    aspect = width / height
    c = math.tan(math.radians(hfov_deg) / 2) / (1 + k)
    xr = c * (1 + k * (1 + 1 / aspect**2))  # render half-width in tan units
    u = (np.arange(width) + 0.5 - width / 2) / (width / 2)
    v = (np.arange(height) + 0.5 - height / 2) / (width / 2)
    s, t = np.meshgrid(u, v)
    f = 1 + k * (s * s + t * t)
    X, Y = c * s * f, c * t * f
    mx = X / xr * (width / 2) + width / 2 - 0.5
    my = Y / (xr / aspect) * (height / 2) + height / 2 - 0.5
    return mx.astype(np.float32), my.astype(np.float32)


def build_scene_spec(draw: Draw, scene: task.Scene) -> mujoco.MjSpec:
    """The car (draw.params) on a textured floor in a walled room with the cones of `scene`
    and the draw's lights and camera mount. Returns an uncompiled MjSpec."""
    params = draw.params
    spec = build_spec(params, floor=False)
    spec.visual.quality.shadowsize = 0
    spec.visual.quality.offsamples = 0
    # clip planes are fractions of the model extent: pin it so near = 1 cm, far = 30 m
    spec.stat.extent = 1.0
    spec.visual.map.znear = 0.01
    spec.visual.map.zfar = 30.0
    spec.visual.headlight.ambient = [draw.light_ambient] * 3
    spec.visual.headlight.diffuse = [0.15] * 3
    spec.visual.headlight.specular = [0.0] * 3
    tex = _floor_texture(draw)
    t = spec.add_texture(
        name="floor_tex",
        type=mujoco.mjtTexture.mjTEXTURE_2D,
        width=tex.shape[1],
        height=tex.shape[0],
        nchannel=3,
    )
    t.data = tex.tobytes()
    mat = spec.add_material(name="floor_mat", specular=0.1, shininess=0.1, reflectance=0.0)
    mat.textures[mujoco.mjtTextureRole.mjTEXROLE_RGB] = "floor_tex"
    period = 2 * draw.floor_scale_m  # one texture tile = two pattern periods
    mat.texrepeat = [1.0 / period, 1.0 / period]
    mat.texuniform = True
    spec.worldbody.add_geom(
        name=C.FLOOR_GEOM,
        type=mujoco.mjtGeom.mjGEOM_PLANE,
        size=[0, 0, 0.05],
        contype=0,
        conaffinity=FLOOR_CONAFFINITY,
        material="floor_mat",
    )
    add_tyre_contacts(spec, params)
    # four walls: +x, -x, +y, -y
    wx_p, wx_m, wy_p, wy_m = draw.walls_m
    cx, cy = 0.5 * (wx_p - wx_m), 0.5 * (wy_p - wy_m)
    hx, hy = 0.5 * (wx_p + wx_m), 0.5 * (wy_p + wy_m)
    wall_rgba = [*map(float, draw.wall_rgb), 1.0]
    for name, pos, size in (
        ("wall_px", [wx_p + 0.05, cy, ROOM_HEIGHT / 2], [0.05, hy + 0.1, ROOM_HEIGHT / 2]),
        ("wall_mx", [-wx_m - 0.05, cy, ROOM_HEIGHT / 2], [0.05, hy + 0.1, ROOM_HEIGHT / 2]),
        ("wall_py", [cx, wy_p + 0.05, ROOM_HEIGHT / 2], [hx + 0.1, 0.05, ROOM_HEIGHT / 2]),
        ("wall_my", [cx, -wy_m - 0.05, ROOM_HEIGHT / 2], [hx + 0.1, 0.05, ROOM_HEIGHT / 2]),
    ):
        spec.worldbody.add_geom(
            name=name,
            type=mujoco.mjtGeom.mjGEOM_BOX,
            pos=pos,
            size=size,
            rgba=wall_rgba,
            contype=0,
            conaffinity=0,
        )
    spec.worldbody.add_light(
        name="sun",
        type=mujoco.mjtLightType.mjLIGHT_DIRECTIONAL,
        dir=list(draw.light_dir),
        pos=[0, 0, ROOM_HEIGHT],
        diffuse=[draw.light_diffuse] * 3,
        specular=[0.1] * 3,
        castshadow=False,
    )
    _add_cone(spec, "cone", scene.cone_xy, draw.cone_rgb)
    if scene.distractor_xy is not None:
        _add_cone(spec, "distractor", scene.distractor_xy, draw.distractor_rgb)
    cam = spec.camera(C.FRONT_CAMERA)
    cam.pos = (CAMERA_POS + np.asarray(draw.camera_offset)).tolist()
    cam.alt.xyaxes = camera_axes(draw.camera_pitch_deg, draw.camera_roll_deg).tolist()
    cam.fovy = render_fovy_deg(draw.camera_hfov_deg, draw.distortion)
    return spec


# ---------------------------------------------------------------------------------------
# the camera's image pipeline
# ---------------------------------------------------------------------------------------
class CameraPipeline:
    """Pinhole render -> barrel distortion -> white balance/exposure -> blur -> noise -> JPEG.

    `capture(data, rng)` returns (jpeg bytes, decoded RGB (H, W, 3) uint8).
    """

    def __init__(self, model: mujoco.MjModel, draw: Draw, size: tuple[int, int]) -> None:
        self.height, self.width = size
        self.draw = draw
        self.renderer = mujoco.Renderer(model, self.height, self.width)
        self.camera = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, C.FRONT_CAMERA)
        self.mapx, self.mapy = distortion_maps(
            self.width, self.height, draw.camera_hfov_deg, draw.distortion
        )
        wb_r, wb_b = draw.white_balance
        self.gain = np.array([wb_r, 1.0, wb_b], dtype=np.float32) * draw.exposure

    def close(self) -> None:
        """Free the GL context."""
        self.renderer.close()

    def render_rgb(self, data: mujoco.MjData) -> np.ndarray:
        """Clean distorted RGB image (H, W, 3) uint8 (before noise and JPEG)."""
        self.renderer.update_scene(data, camera=self.camera)
        img = self.renderer.render()
        return cv2.remap(
            img, self.mapx, self.mapy, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE
        )

    def capture(self, data: mujoco.MjData, rng: np.random.Generator) -> tuple[bytes, np.ndarray]:
        """One camera frame of the current state: (JPEG bytes, decoded RGB (H, W, 3) uint8)."""
        d = self.draw
        img = self.render_rgb(data).astype(np.float32) * self.gain
        if d.blur_sigma > 0.05:
            img = cv2.GaussianBlur(img, (0, 0), d.blur_sigma)
        if d.pixel_noise > 0:
            img += np.float32(d.pixel_noise) * rng.standard_normal(img.shape, dtype=np.float32)
        bgr = cv2.cvtColor(np.clip(img, 0, 255).astype(np.uint8), cv2.COLOR_RGB2BGR)
        ok, buf = cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, d.jpeg_quality])
        if not ok:  # pragma: no cover
            raise RuntimeError("JPEG encoding failed")
        jpeg = buf.tobytes()
        return jpeg, decode_jpeg(jpeg)


def decode_jpeg(jpeg: bytes) -> np.ndarray:
    """JPEG bytes -> RGB (H, W, 3) uint8."""
    bgr = cv2.imdecode(np.frombuffer(jpeg, dtype=np.uint8), cv2.IMREAD_COLOR)
    return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)


# ---------------------------------------------------------------------------------------
# the environment
# ---------------------------------------------------------------------------------------
@dataclass
class Obs:
    """What a policy on the real car gets at one control step: nothing else.

    t: host time since the episode start (s).
    telemetry: the log's rc_car sensor fields: enc_rad (rad), yaw_rate (rad/s),
        accel Shape: (2,) (m/s^2), vbat (V), ack (int), flags (int).
    frame_jpeg: a camera frame that arrived during this step (JPEG, 320x240), else None.
    frame: the same frame decoded, RGB Shape: (H, W, 3) uint8 (JPEG artefacts included).
    frame_t: arrival time of that frame (s), NaN if none.
    """

    t: float
    telemetry: dict[str, Any]
    frame_jpeg: bytes | None = None
    frame: np.ndarray | None = None
    frame_t: float = math.nan


def episode_seed(seed: int, index: int) -> int:
    """Seed of episode `index` of a run seeded `seed`: independent of worker count."""
    return int(np.random.SeedSequence([int(seed), int(index)]).generate_state(1)[0])


class CarTaskEnv:
    """Reach-the-cone environment (see module docstring).

    params: physics centre. None: nominal, physics drawn over the datasheet ranges;
        given (a fit): drawn around it (its ci95, else `Randomization.fitted_spread`).
    randomization: what varies per episode (defaults if None; `Randomization.none()` for
        a fixed world). image_size: (H, W) of the camera
        (320x240, the real camera's).
    residual: a learned residual (`realsim.residual.Residual`, or the path of its
        checkpoint, loaded with ``weights_only=True``; a foreign or corrupt file is a
        `UserError`). Given one, every episode runs through `realsim.sim.HybridCarSim`:
        the physics parameters are drawn exactly as without it, and the residual's
        force is applied inside every physics step (its history restarts at `reset`).
        None (default): plain `CarSim`, unchanged.
    render: False skips the camera (teacher checks, recoverability).
    """

    def __init__(
        self,
        params: CarParams | None = None,
        randomization: Randomization | None = None,
        image_size: tuple[int, int] = (C.CAMERA_HEIGHT, C.CAMERA_WIDTH),
        control_hz: float = 50.0,
        camera_fps: float = 20.0,
        residual: Residual | str | os.PathLike[str] | None = None,
        render: bool = True,
    ) -> None:
        self.residual = _load_residual(residual)
        self.params = params or CarParams()
        self.fitted = params is not None  # randomize around given params, else datasheet
        self.randomization = randomization or Randomization()
        self.image_size = (int(image_size[0]), int(image_size[1]))
        self.control_hz = float(control_hz)
        self.camera_fps = float(camera_fps)
        self.render = bool(render)
        self.sim: CarSim | None = None
        self.camera: CameraPipeline | None = None
        self.draw: Draw | None = None
        self.scene: task.Scene | None = None
        self.seed: int | None = None

    # --- episode ---------------------------------------------------------------------------
    def reset(
        self,
        seed: int,
        distractor: bool | None = None,
        scene: task.Scene | None = None,
        draw: Draw | None = None,
    ) -> Obs:
        """Start an episode: the scene (task.sample_scene, or `scene`) and the world's
        randomization (or `draw`) both drawn from `seed`; the car at rest at the origin.
        distractor: force the blue cone on/off (None: randomization.distractor_prob)."""
        rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0x5CE7E]))
        if scene is None:
            want = (
                rng.uniform() < self.randomization.distractor_prob
                if distractor is None
                else bool(distractor)
            )
            for _ in range(1000):
                scene = task.sample_scene(rng)
                if (scene.distractor_xy is not None) == want:
                    break
        assert scene is not None
        if draw is None:
            draw = self.randomization.sample(rng, self.params, fitted=self.fitted)
        self.seed = int(seed)
        self._build(scene, draw)
        assert self.sim is not None
        tel = self.sim.reset(seed=int(rng.integers(2**31)), pose=(0.0, 0.0, 0.0), soc=draw.soc)
        self.rng = np.random.default_rng(int(rng.integers(2**31)))  # action + pixel noise
        self.judge = task.TaskJudge(scene)
        self.judge.update(0.0, 0.0, 0.0)
        self.steps = 0
        self._next_capture = 0.0
        self._pending: list[tuple[float, bytes, np.ndarray]] = []
        return self._obs(tel)

    def _build(self, scene: task.Scene, draw: Draw) -> None:
        if self.camera is not None:
            self.camera.close()
            self.camera = None
        self.scene, self.draw = scene, draw
        spec = build_scene_spec(draw, scene)
        if self.residual is None:
            self.sim = CarSim(draw.params, spec=spec, noise=True)
        else:
            from realsim.sim import HybridCarSim

            self.sim = HybridCarSim(draw.params, self.residual, spec=spec, noise=True)
        if self.render:
            self.camera = CameraPipeline(self.sim.model, draw, self.image_size)

    def close(self) -> None:
        """Free the renderer."""
        if self.camera is not None:
            self.camera.close()
            self.camera = None

    def step(self, action: np.ndarray | Sequence[float]) -> Obs:
        """Send `action` [steer, throttle] (Shape: (2,), clipped to [-1, 1]; the episode's
        action noise is added on the way), advance 1 / control_hz s, return the Obs."""
        if self.sim is None:
            raise RuntimeError("CarTaskEnv.step before reset")
        a = np.clip(np.asarray(action, dtype=np.float64).reshape(2), -1.0, 1.0)
        assert self.draw is not None
        if self.draw.action_noise > 0:
            a = np.clip(a + self.draw.action_noise * self.rng.standard_normal(2), -1.0, 1.0)
        tel = self.sim.step(a, dt_control=1.0 / self.control_hz)
        self.steps += 1
        x, y, _ = self.sim.pose
        self.judge.update(self.sim.time, float(x), float(y))
        return self._obs(tel)

    def _obs(self, tel: dict[str, Any]) -> Obs:
        assert self.sim is not None and self.draw is not None
        t = self.sim.time
        tel = {k: tel[k] for k in C.SENSOR_FIELDS}
        if self.camera is not None:
            if t + 1e-9 >= self._next_capture:
                jpeg, img = self.camera.capture(self.sim.data, self.rng)
                self._pending.append((t + self.draw.camera_latency, jpeg, img))
                self._next_capture += 1.0 / self.camera_fps
                while self._next_capture <= t + 1e-9:
                    self._next_capture += 1.0 / self.camera_fps
            arrived = [p for p in self._pending if p[0] <= t + 1e-9]
            if arrived:
                self._pending = [p for p in self._pending if p[0] > t + 1e-9]
                ta, jpeg, img = arrived[-1]
                return Obs(t=t, telemetry=tel, frame_jpeg=jpeg, frame=img, frame_t=t)
        return Obs(t=t, telemetry=tel)

    @property
    def t(self) -> float:
        """Time since the episode start (s)."""
        return self.sim.time if self.sim is not None else 0.0

    @property
    def done(self) -> bool:
        """True once the episode is decided: success, the distractor touched (a failure
        for good), or the TIME_LIMIT (10 s) window over."""
        return self.judge.decided or self.t >= task.TIME_LIMIT - 1e-9

    def verdict(self) -> tuple[int, float]:
        """(success 0/1, score = closest distance to the orange cone, m)."""
        return self.judge.verdict()

    # --- privileged ------------------------------------------------------------------------
    def privileged(self) -> dict[str, Any]:
        """Everything the simulator knows (teachers only; never give this to a student).

        t (s); pose (3,) x, y, yaw; velocity (3,) v_forward, v_left, yaw_rate (body);
        qpos (nq,), qvel (nv,); steer (2,) wheel angles (rad); cone_xy (2,);
        distractor_xy (2,) or None; params (CarParams); draw (Draw); vbat (V);
        closest (m); touched_distractor (bool).
        """
        assert self.sim is not None and self.scene is not None
        s = self.sim
        return {
            "t": s.time,
            "pose": s.pose,
            "velocity": s.velocity,
            "qpos": s.data.qpos.copy(),
            "qvel": s.data.qvel.copy(),
            "steer": s.steer_angles(),
            "cone_xy": np.asarray(self.scene.cone_xy, dtype=np.float64),
            "distractor_xy": (
                None
                if self.scene.distractor_xy is None
                else np.asarray(self.scene.distractor_xy, dtype=np.float64)
            ),
            "params": s.params,
            "draw": self.draw,
            "vbat": s.battery.voltage,
            "closest": self.judge.closest,
            "touched_distractor": self.judge.touched_distractor,
        }

    # --- state -----------------------------------------------------------------------------
    def get_state(self) -> dict[str, Any]:
        """The complete simulator state (physics, actuation queue, battery, noise streams,
        camera schedule, judge, scene and draw, and the residual hook's history and held
        force when there is a residual): `set_state` on any CarTaskEnv with the same
        residual resumes exactly from here."""
        assert self.sim is not None
        s, m, d = self.sim, self.sim.model, self.sim.data
        phys = np.empty(mujoco.mj_stateSize(m, mujoco.mjtState.mjSTATE_INTEGRATION))
        mujoco.mj_getState(m, d, phys, mujoco.mjtState.mjSTATE_INTEGRATION)
        return {
            "seed": self.seed,
            "scene": self.scene,
            "draw": self.draw,
            "physics": phys,
            "actuation": (list(s.actuation._t), [v.copy() for v in s.actuation._v]),
            "battery": (s.battery.soc, s.battery.current),
            "car": (s.seq, s.last_cmd_t, s._enc0, copy.deepcopy(s.rng.bit_generator.state)),
            "rng": copy.deepcopy(self.rng.bit_generator.state),
            "steps": self.steps,
            "next_capture": self._next_capture,
            "pending": list(self._pending),
            "judge": copy.copy(self.judge.__dict__),
            "hook": _hook_state(s),
        }

    def set_state(self, state: dict[str, Any], params: CarParams | None = None) -> None:
        """Restore `get_state()`'s result (rebuilding the world if it is another episode's).
        params: run the continuation with these physics instead of the state's draw's."""
        draw = state["draw"] if params is None else replace(state["draw"], params=params)
        if draw is not self.draw or state["scene"] != self.scene or self.sim is None:
            self._build(state["scene"], draw)
        assert self.sim is not None
        s, m, d = self.sim, self.sim.model, self.sim.data
        mujoco.mj_resetData(m, d)
        mujoco.mj_setState(m, d, state["physics"], mujoco.mjtState.mjSTATE_INTEGRATION)
        mujoco.mj_forward(m, d)
        s.actuation = StreamingActuation(s.params)
        s.actuation._t = list(state["actuation"][0])
        s.actuation._v = [v.copy() for v in state["actuation"][1]]
        s.battery = Battery(state["battery"][0])
        s.battery.current = state["battery"][1]
        s.seq, s.last_cmd_t, s._enc0, rs = state["car"]
        s.rng = np.random.default_rng()
        s.rng.bit_generator.state = copy.deepcopy(rs)
        self.rng = np.random.default_rng()
        self.rng.bit_generator.state = copy.deepcopy(state["rng"])
        self.seed = state["seed"]
        self.steps = state["steps"]
        self._next_capture = state["next_capture"]
        self._pending = list(state["pending"])
        self.judge = task.TaskJudge(state["scene"])
        self.judge.__dict__.update(copy.copy(state["judge"]))
        self.judge.scene = state["scene"]
        hook = getattr(s, "hook", None)
        if hook is not None and state.get("hook") is not None:
            hook.__dict__.update(copy.deepcopy(state["hook"]))
        elif hook is not None:
            hook.reset()


def _load_residual(residual: Residual | str | os.PathLike[str] | None) -> Residual | None:
    """A loaded rc_car residual from a `Residual` or a checkpoint path (None stays None).

    Raises UserError for a missing, corrupt or other robot's checkpoint."""
    if residual is None:
        return None
    from realsim.errors import UserError
    from realsim.residual import load_residual

    if isinstance(residual, (str, os.PathLike)):
        return load_residual(residual, "rc_car")
    if residual.cfg.robot != "rc_car":
        raise UserError(f"residual checkpoint is for {residual.cfg.robot}, not rc_car")
    return residual


def _hook_state(sim: CarSim) -> dict[str, Any] | None:
    """The residual hook's running state (history, step count, held force), if any."""
    hook = getattr(sim, "hook", None)
    if hook is None:
        return None
    return {k: copy.deepcopy(v) for k, v in hook.__dict__.items() if k not in ("residual", "layout")}

"""The cube-on-square task in MuJoCo (arm.md, "The task"): cameras and environment.

`ArmTaskEnv` is the closed-loop environment that the teacher (data generation) and a
student's closed-loop evaluation both run, with the car's `CarTaskEnv` API shape:

- physics through `ArmSim` (latency, servos, backlash in MuJoCo), control at
  `control_hz`, one telemetry sample (the log's arm fields) per control step;
- the `front` and `wrist` cameras rendered at up to `camera_fps` (at most one frame per
  control step) at 640x480 (the real cameras') or a smaller `image_size`, JPEG-encoded;
  the episode's camera poses and fields of view drawn within the datasheet's
  uncertainty (+-2 cm, +-3 deg, +-5 deg fov);
- one judge (`task.TaskJudge`): the same success rule as the emulator.

`Obs` carries robot-legal streams only (telemetry, camera frames, time). Everything else
the simulator knows is in `env.privileged()`, for teachers.
"""

from __future__ import annotations

import copy
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

os.environ.setdefault("MUJOCO_GL", "egl")

import cv2  # noqa: E402
import mujoco  # noqa: E402
import numpy as np  # noqa: E402

from realsim.robots.arm import constants as C  # noqa: E402
from realsim.robots.arm import task  # noqa: E402
from realsim.robots.arm.model import build_spec  # noqa: E402
from realsim.robots.arm.params import PARAMS, ArmParams  # noqa: E402
from realsim.robots.arm.sim import ArmSim, GoalStream  # noqa: E402


# ---------------------------------------------------------------------------------------
# randomization
# ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ArmRandomization:
    """What varies between episodes (uniform draws).

    physics: draw the uncertain parameters (over their datasheet ranges, or around a
    fitted centre within its ci95 x fitted_ci_scale, else +-fitted_spread of the range).
    camera_pos_m / camera_rot_deg / camera_fov_deg: datasheet uncertainty of the camera
    poses and fields of view. action_noise: std of Gaussian noise on every goal (on the
    [-1, 1] scale) drawn per episode in [0, action_noise]. reach_weight: the layout's
    weight on far cube starts (`task.sample_scene`; a teacher-data option, 1 = the task's
    uniform layouts, which every evaluation uses).
    """

    physics: bool = True
    fitted_spread: float = 0.15
    fitted_ci_scale: float = 1.5
    camera_pos_m: float = 0.02
    camera_rot_deg: float = 3.0
    camera_fov_deg: float = 5.0
    action_noise: float = 0.0
    jpeg_quality: tuple[int, int] = (70, 95)
    reach_weight: float = 1.0  # 1 for teaching too, measured: 2000 teacher episodes with 3
    #   (cube starts beyond 0.25 m from the base 57 % of them, against 40 %) trained a student
    #   that scored 81.0 % over the 200 fresh scenes against 81.5 % (same seeds: won 22, lost
    #   23), 75 / 77 % beyond 0.25 / 0.30 m against 74 / 69 %: the far misses are not scarce data

    def __post_init__(self) -> None:
        if not self.reach_weight > 0:
            raise ValueError(f"reach_weight must be > 0, got {self.reach_weight}")

    @classmethod
    def none(cls) -> ArmRandomization:
        """A fixed world: the centre parameters, datasheet camera poses, no noise."""
        return cls(physics=False, camera_pos_m=0.0, camera_rot_deg=0.0, camera_fov_deg=0.0)

    def sample(self, rng: np.random.Generator, center: ArmParams, fitted: bool) -> ArmDraw:
        """One episode's concrete values."""
        vals: dict[str, float] = {}
        for p in PARAMS:
            c = center[p.name]
            if not self.physics:
                lo = hi = c
            elif p.name in center.ci95:
                a, b = center.ci95[p.name]
                half = 0.5 * (b - a) * self.fitted_ci_scale
                lo, hi = c - half, c + half
            elif fitted:
                half = 0.5 * (p.high - p.low) * self.fitted_spread
                lo, hi = c - half, c + half
            else:
                lo, hi = p.low, p.high
            x = rng.uniform(lo, hi) if hi > lo else lo
            vals[p.name] = float(np.clip(x, p.low, p.high))
        cams = {}
        for name in C.CAMERAS:
            cams[name] = (
                tuple(rng.uniform(-1, 1, 3) * self.camera_pos_m),
                tuple(rng.uniform(-1, 1, 3) * math.radians(self.camera_rot_deg)),
                float(rng.uniform(-1, 1) * self.camera_fov_deg),
            )
        return ArmDraw(
            params=ArmParams(vals),
            camera_jitter=cams,
            action_noise=float(rng.uniform(0.0, self.action_noise)),
            jpeg_quality=int(rng.integers(self.jpeg_quality[0], self.jpeg_quality[1] + 1)),
        )


@dataclass(frozen=True)
class ArmDraw:
    """One episode's drawn values: params; per camera (position offset (3,) m, rotation
    vector (3,) rad in the camera frame, fovy offset deg); action noise; JPEG quality."""

    params: ArmParams
    camera_jitter: dict[str, tuple[tuple[float, ...], tuple[float, ...], float]] = field(
        default_factory=dict
    )
    action_noise: float = 0.0
    jpeg_quality: int = 90


def build_scene_spec(draw: ArmDraw) -> mujoco.MjSpec:
    """The arm scene with the draw's params and camera poses (uncompiled)."""
    spec = build_spec(draw.params)
    for name, (dpos, drot, dfov) in draw.camera_jitter.items():
        cam = spec.camera(name)
        cam.pos = (np.asarray(cam.pos) + np.asarray(dpos)).tolist()
        # the camera's frame rotated by the small rotation vector drot (camera frame)
        q0 = np.asarray(cam.quat, dtype=np.float64)
        if cam.alt.type == mujoco.mjtOrientation.mjORIENTATION_XYAXES:
            xy = np.asarray(cam.alt.xyaxes, dtype=np.float64)
            x = xy[:3] / np.linalg.norm(xy[:3])
            y = xy[3:] - (xy[3:] @ x) * x
            y /= np.linalg.norm(y)
            mat = np.stack([x, y, np.cross(x, y)], axis=1).reshape(-1)
            q0 = np.empty(4)
            mujoco.mju_mat2Quat(q0, mat)
            cam.alt.type = mujoco.mjtOrientation.mjORIENTATION_QUAT
        dq = np.empty(4)
        mujoco.mju_axisAngle2Quat(
            dq, np.r_[drot] / max(np.linalg.norm(drot), 1e-12), float(np.linalg.norm(drot))
        )
        q = np.empty(4)
        mujoco.mju_mulQuat(q, q0, dq)
        cam.quat = q.tolist()
        cam.fovy = float(cam.fovy + dfov)
    return spec


# ---------------------------------------------------------------------------------------
# observations
# ---------------------------------------------------------------------------------------
@dataclass
class Frame:
    """One camera frame: JPEG bytes as a real camera would send, the decoded RGB image
    (H, W, 3) uint8 (JPEG artefacts included) and its arrival time (s)."""

    jpeg: bytes
    image: np.ndarray
    t: float


@dataclass
class Obs:
    """What a policy on the real arm gets at one control step: nothing else.

    t: host time since the episode start (s).
    telemetry: the log's arm sensor fields: qpos (6,) rad / m, qvel (6,), load (6,),
        voltage (V), temperature (6,) deg C.
    frames: camera name ("front", "wrist") -> Frame, for the frames that arrived during
        this step (empty when none did).
    """

    t: float
    telemetry: dict[str, Any]
    frames: dict[str, Frame] = field(default_factory=dict)


def decode_jpeg(jpeg: bytes) -> np.ndarray:
    """JPEG bytes -> RGB (H, W, 3) uint8."""
    bgr = cv2.imdecode(np.frombuffer(jpeg, dtype=np.uint8), cv2.IMREAD_COLOR)
    return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)


class Cameras:
    """Renders the arm's two cameras to JPEG (one offscreen renderer for both)."""

    def __init__(self, model: mujoco.MjModel, size: tuple[int, int], quality: int) -> None:
        self.height, self.width = size
        self.quality = int(quality)
        self.renderer = mujoco.Renderer(model, self.height, self.width)
        self.ids = {n: mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, n) for n in C.CAMERAS}

    def close(self) -> None:
        """Free the GL context."""
        self.renderer.close()

    def render(self, data: mujoco.MjData, name: str) -> np.ndarray:
        """Clean RGB image (H, W, 3) uint8 of camera `name`."""
        self.renderer.update_scene(data, camera=self.ids[name])
        return self.renderer.render()

    def capture(self, data: mujoco.MjData, t: float) -> dict[str, Frame]:
        """Both cameras now, JPEG-encoded and decoded back."""
        out = {}
        for name in C.CAMERAS:
            bgr = cv2.cvtColor(self.render(data, name), cv2.COLOR_RGB2BGR)
            ok, buf = cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, self.quality])
            if not ok:  # pragma: no cover
                raise RuntimeError("JPEG encoding failed")
            jpeg = buf.tobytes()
            out[name] = Frame(jpeg=jpeg, image=decode_jpeg(jpeg), t=t)
        return out


def episode_seed(seed: int, index: int) -> int:
    """Seed of episode `index` of a run seeded `seed`: independent of worker count."""
    return int(np.random.SeedSequence([int(seed), int(index)]).generate_state(1)[0])


# ---------------------------------------------------------------------------------------
# the environment
# ---------------------------------------------------------------------------------------
class ArmTaskEnv:
    """Cube-on-square environment (see module docstring).

    params: physics centre (None: nominal, drawn over the datasheet ranges; given: drawn
        around it). randomization: what varies (`ArmRandomization.none()` for a fixed
        world). image_size: (H, W) of both cameras (480x640 like the real ones).
        render: False skips the cameras (teacher checks). residual: a learned residual
        (`realsim.residual.Residual` or a checkpoint path, checked to be the arm's;
        UserError otherwise): every episode's physics then runs through
        `realsim.sim.HybridArmSim`, the residual's torques inside each MuJoCo step.
    """

    def __init__(
        self,
        params: ArmParams | None = None,
        randomization: ArmRandomization | None = None,
        image_size: tuple[int, int] = (C.CAMERA_HEIGHT, C.CAMERA_WIDTH),
        control_hz: float = 25.0,
        camera_fps: float = C.CAMERA_FPS,
        render: bool = True,
        residual: Any = None,
    ) -> None:
        self.residual = _load_residual(residual)
        self.params = params or ArmParams()
        self.fitted = params is not None
        self.randomization = randomization or ArmRandomization()
        self.image_size = (int(image_size[0]), int(image_size[1]))
        self.control_hz = float(control_hz)
        self.camera_fps = float(camera_fps)
        self.render = bool(render)
        self.sim: ArmSim | None = None
        self.cameras: Cameras | None = None
        self.draw: ArmDraw | None = None
        self.scene: task.Scene | None = None
        self.seed: int | None = None
        self._built_key: Any = None

    # --- episode ---------------------------------------------------------------------------
    def reset(self, seed: int, scene: task.Scene | None = None, draw: ArmDraw | None = None) -> Obs:
        """Start an episode: the layout (task.sample_scene, or `scene`) and the world's
        randomization (or `draw`) drawn from `seed`; the arm at rest at home."""
        rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0xA73]))
        scene = scene if scene is not None else task.sample_scene(rng, self.randomization.reach_weight)
        if draw is None:
            draw = self.randomization.sample(rng, self.params, fitted=self.fitted)
        self.seed = int(seed)
        self._build(draw)
        self.scene = scene
        assert self.sim is not None
        tel = self.sim.reset(
            seed=int(rng.integers(2**31)),
            joints=C.HOME,
            cube_pose=scene.cube_pose(),
            target_xy=scene.target_xy,
        )
        self.rng = np.random.default_rng(int(rng.integers(2**31)))
        self.judge = task.TaskJudge(scene)
        self.steps = 0
        self._next_capture = 0.0
        self._judge_update()
        return self._obs(tel)

    def _build(self, draw: ArmDraw) -> None:
        key = (draw.params.spec_key(), repr(draw.camera_jitter))
        self.draw = draw
        if self.sim is not None and key == self._built_key:
            self.sim.params = draw.params  # same compiled model; latency may differ
            return
        self.close()
        if self.residual is None:
            self.sim = ArmSim(draw.params, spec=build_scene_spec(draw), noise=True)
        else:
            from realsim.sim import HybridArmSim

            self.sim = HybridArmSim(draw.params, self.residual, spec=build_scene_spec(draw), noise=True)
        self._built_key = key
        if self.render:
            self.cameras = Cameras(self.sim.model, self.image_size, draw.jpeg_quality)

    def close(self) -> None:
        """Free the renderer."""
        if self.cameras is not None:
            self.cameras.close()
            self.cameras = None

    def step(self, action: np.ndarray | Sequence[float]) -> Obs:
        """Send `action` (6,) normalised goals in [-1, 1] (clipped; the episode's action
        noise is added on the way), advance 1 / control_hz s, return the Obs."""
        if self.sim is None or self.draw is None:
            raise RuntimeError("ArmTaskEnv.step before reset")
        a = np.clip(np.asarray(action, dtype=np.float64).reshape(C.NJ), -1.0, 1.0)
        if self.draw.action_noise > 0:
            a = np.clip(a + self.draw.action_noise * self.rng.standard_normal(C.NJ), -1.0, 1.0)
        tel = self.sim.step(a, dt_control=1.0 / self.control_hz)
        self.steps += 1
        self._judge_update()
        return self._obs(tel)

    def _judge_update(self) -> None:
        assert self.sim is not None
        s = self.sim
        v = s.cube_velocity()
        left, right, _ = s.cube_contacts()
        self.judge.update(
            s.time,
            s.cube_pose()[:3],
            float(np.linalg.norm(v[:3])),
            float(np.linalg.norm(v[3:])),
            left,
            right,
        )

    def _obs(self, tel: dict[str, Any]) -> Obs:
        assert self.sim is not None
        t = self.sim.time
        tel = {k: tel[k] for k in C.SENSOR_FIELDS}
        frames: dict[str, Frame] = {}
        if self.cameras is not None and t + 1e-9 >= self._next_capture:
            frames = self.cameras.capture(self.sim.data, t)
            while self._next_capture <= t + 1e-9:
                self._next_capture += 1.0 / self.camera_fps
        return Obs(t=t, telemetry=tel, frames=frames)

    @property
    def t(self) -> float:
        """Time since the episode start (s)."""
        return self.sim.time if self.sim is not None else 0.0

    @property
    def done(self) -> bool:
        """True once the episode is decided (success) or the TIME_LIMIT (20 s) is over."""
        return self.judge.decided or self.t >= task.TIME_LIMIT - 1e-9

    def verdict(self) -> tuple[int, float]:
        """(success 0/1, score = cube centre's distance to the square's centre, m)."""
        return self.judge.verdict()

    # --- privileged ------------------------------------------------------------------------
    def privileged(self) -> dict[str, Any]:
        """Everything the simulator knows (teachers only; never give this to a student).

        t (s); joints (6,) exact servo readings; goal (6,) the goals acting now;
        qpos (nq,), qvel (nv,); cube_pose (7,) position + quaternion (w, x, y, z);
        cube_vel (6,) linear, angular; target_xy (2,); gripper_pos (3,), gripper_rot
        (3, 3) the gripper body's pose; grasp_pos (3,) the grasp site; cube_touch
        (left pad, right pad, table); params (ArmParams); draw (ArmDraw); scene.
        """
        assert self.sim is not None and self.scene is not None
        s, d = self.sim, self.sim.data
        gb = self.sim.model.body(C.GRIPPER_BODY).id
        return {
            "t": s.time,
            "joints": s.joints(),
            "goal": s.goal_now(),
            "qpos": d.qpos.copy(),
            "qvel": d.qvel.copy(),
            "cube_pose": s.cube_pose(),
            "cube_vel": s.cube_velocity(),
            "target_xy": s.target_xy(),
            "gripper_pos": d.xpos[gb].copy(),
            "gripper_rot": d.xmat[gb].reshape(3, 3).copy(),
            "grasp_pos": d.site_xpos[s.layout.grasp_site].copy(),
            "cube_touch": s.cube_contacts(),
            "params": s.params,
            "draw": self.draw,
            "scene": self.scene,
        }

    # --- state -----------------------------------------------------------------------------
    def get_state(self) -> dict[str, Any]:
        """The complete simulator state (physics, goal queue, temperatures, noise streams,
        camera schedule, judge, scene and draw): `set_state` resumes exactly from here."""
        assert self.sim is not None
        s, m, d = self.sim, self.sim.model, self.sim.data
        phys = np.empty(mujoco.mj_stateSize(m, mujoco.mjtState.mjSTATE_INTEGRATION))
        mujoco.mj_getState(m, d, phys, mujoco.mjtState.mjSTATE_INTEGRATION)
        return {
            "seed": self.seed,
            "scene": self.scene,
            "draw": self.draw,
            "physics": phys,
            "stream": (s.stream.hold.copy(), list(s.stream._t), [v.copy() for v in s.stream._v]),
            "arm": (s.seq, s.temperature.copy(), s._t_base.copy()),
            "sim_rng": copy.deepcopy(s.rng.bit_generator.state),
            "rng": copy.deepcopy(self.rng.bit_generator.state),
            "steps": self.steps,
            "next_capture": self._next_capture,
            "judge": copy.copy(self.judge.__dict__),
            "hook": _hook_state(s),
        }

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore `get_state()`'s result (rebuilding the world if it is another draw's)."""
        self._build(state["draw"])
        self.scene = state["scene"]
        assert self.sim is not None
        s, m, d = self.sim, self.sim.model, self.sim.data
        mujoco.mj_resetData(m, d)
        mujoco.mj_setState(m, d, state["physics"], mujoco.mjtState.mjSTATE_INTEGRATION)
        mujoco.mj_forward(m, d)
        hold, ts, vs = state["stream"]
        s.stream = GoalStream(s.params, hold)
        s.stream._t = list(ts)
        s.stream._v = [v.copy() for v in vs]
        s.seq, temp, base = state["arm"]
        s.temperature, s._t_base = temp.copy(), base.copy()
        s.rng = np.random.default_rng()
        s.rng.bit_generator.state = copy.deepcopy(state["sim_rng"])
        self.rng = np.random.default_rng()
        self.rng.bit_generator.state = copy.deepcopy(state["rng"])
        self.seed = state["seed"]
        self.steps = state["steps"]
        self._next_capture = state["next_capture"]
        self.judge = task.TaskJudge(state["scene"])
        self.judge.__dict__.update(copy.copy(state["judge"]))
        hook = getattr(s, "hook", None)
        if hook is not None and state.get("hook") is not None:
            hook.__dict__.update(copy.deepcopy(state["hook"]))
            d.qfrc_applied[:] = 0.0
            d.qfrc_applied[hook._dofs] = hook._qfrc


def _load_residual(residual: Any) -> Any:
    """A loaded arm residual from a `Residual` or a checkpoint path (None stays None).

    Raises UserError for a missing, corrupt or other robot's checkpoint."""
    if residual is None:
        return None
    from realsim.errors import UserError
    from realsim.residual import load_residual

    if isinstance(residual, (str, os.PathLike)):
        return load_residual(residual, "arm")
    cfg = getattr(residual, "cfg", None)
    if getattr(cfg, "robot", None) != "arm":
        raise UserError(f"residual is for {getattr(cfg, 'robot', '?')}, not arm")
    return residual


def _hook_state(sim: ArmSim) -> dict[str, Any] | None:
    """The residual hook's running state (history, step count, held force), if any."""
    hook = getattr(sim, "hook", None)
    if hook is None:
        return None
    return {k: copy.deepcopy(v) for k, v in hook.__dict__.items() if k not in ("residual", "layout")}

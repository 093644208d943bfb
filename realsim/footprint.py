"""Pixel-footprint check: is the task's object big enough in the student's input image?

The car (default, `robot="rc_car"`): the orange cone in the front camera. The arm
(`robot="arm"`): the red cube (`subject="cube"`) or the green square (`"target"`) in
the front camera at the episode start (arm at home), over `ArmTaskEnv`'s scene layouts
and camera pose / field-of-view draws, through segmentation renders at 640x480; the
same counting (input pixels at least half covered after area downsampling).

The car's details:

Over the randomized start distribution (cone layout from `task.sample_scene`, camera
pitch, roll, field of view, lens position and barrel distortion from `Randomization`),
render a segmentation image of the front camera at 320x240 through the same lens model
as `scene.CameraPipeline`, downsample the cone's mask to the input width (area
averaging, height = width * 3 / 4) and count the input pixels at least half covered by
the cone. At the episode start the cone is at its farthest (1 to 3 m), so this is the
worst case a policy must resolve. An input may also show only a band of camera rows
(`crop_rows`, rows of the 320x240 frame): the band is cut first, then resized to the
width at its own aspect ratio (as `student.features.preprocess_jpeg` does).

`check_footprint(width, floor_px, robot=...)` -> `FootprintReport` (min / p5 / median /
fraction below the floor, `warn` when the 5th percentile is below the floor);
`footprint_table(widths, robot=...)` shares one set of renders between widths.
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

os.environ.setdefault("MUJOCO_GL", "egl")

import cv2  # noqa: E402
import mujoco  # noqa: E402
import numpy as np  # noqa: E402

from realsim.randomization import Randomization  # noqa: E402
from realsim.robots.rc_car import constants as C  # noqa: E402
from realsim.robots.rc_car import task  # noqa: E402
from realsim.robots.rc_car.scene import (  # noqa: E402
    CAMERA_POS,
    CONE_GEOMS,
    build_scene_spec,
    camera_axes,
    distortion_maps,
    render_fovy_deg,
)

DEFAULT_FLOOR_PX = 8
"""Least cone area (input pixels at least half cone) at the start that we accept (its 5th
percentile over randomized starts). From data, not taste: the 160x60 student's closed-loop
success by start footprint (experiments/footprint_table.py --success, 100 episodes) was
7/8 at 8-11 px, 19/20 at 12-15 px and 72/72 at >= 16 px. Below 8 px there is no evidence
that a policy works (the 80 px whole-frame student, p5 ~1.5 px, plateaued at 82 %)."""


ARM_FRAME = (640, 480)
"""The arm's camera frame (W, H), spec/arm.md."""


def input_height(width: int, crop_rows: Sequence[int] | None = None,
                 frame: tuple[int, int] = (C.CAMERA_WIDTH, C.CAMERA_HEIGHT)) -> int:
    """Input height for `width` px showing camera rows `crop_rows` of a `frame` (W, H)
    image (None: the whole frame)."""
    rows = frame[1] if crop_rows is None else int(crop_rows[1]) - int(crop_rows[0])
    return max(1, int(round(width * rows / frame[0])))


@dataclass(frozen=True)
class FootprintReport:
    """Cone footprint statistics at one input width (pixels at least half cone).

    counts: Shape: (n,) per sampled start. `warn` when the 5th percentile is below
    `floor_px` (more than 5 % of starts show the cone smaller than the floor).
    """

    width: int
    height: int
    floor_px: float
    counts: np.ndarray
    crop_rows: tuple[int, int] | None = None
    frame_rows: int = C.CAMERA_HEIGHT
    """Rows of the camera frame (the car's 240, the arm's 480)."""
    subject: str = "cone"

    @property
    def min(self) -> float:
        return float(np.min(self.counts))

    @property
    def p5(self) -> float:
        return float(np.percentile(self.counts, 5))

    @property
    def median(self) -> float:
        return float(np.median(self.counts))

    @property
    def frac_below(self) -> float:
        """Fraction of starts with fewer than floor_px cone pixels."""
        return float(np.mean(self.counts < self.floor_px))

    @property
    def warn(self) -> bool:
        return self.p5 < self.floor_px

    @staticmethod
    def header() -> str:
        """Markdown table header matching `row()`."""
        return (
            "| input (px) | camera rows | min | p5 | median | below floor | verdict |\n"
            "|---|---|---|---|---|---|---|"
        )

    def row(self) -> str:
        """One Markdown table row."""
        verdict = f"WARN (< {self.floor_px:g} px)" if self.warn else "ok"
        return (
            f"| {self.width}x{self.height} | {self.rows_label} | {self.min:.0f} | {self.p5:.1f} | "
            f"{self.median:.0f} | {100 * self.frac_below:.1f} % | {verdict} |"
        )

    @property
    def rows_label(self) -> str:
        """'0-240' (whole frame) or the band, e.g. '32-152'."""
        top, bottom = self.crop_rows if self.crop_rows is not None else (0, self.frame_rows)
        return f"{top}-{bottom}"

    def __str__(self) -> str:
        return f"{self.header()}\n{self.row()}"


def _quat_from_xyaxes(xy: np.ndarray) -> np.ndarray:
    x, y = xy[:3], xy[3:]
    z = np.cross(x, y)
    mat = np.stack([x, y, z], axis=1).reshape(-1)
    q = np.zeros(4)
    mujoco.mju_mat2Quat(q, mat)
    return q


def cone_masks(
    n: int = 200,
    seed: int = 0,
    randomization: Randomization | None = None,
    size: tuple[int, int] = (C.CAMERA_HEIGHT, C.CAMERA_WIDTH),
    cone_xy: Sequence[tuple[float, float]] | None = None,
    draws: Sequence[Any] | None = None,
) -> np.ndarray:
    """Cone masks at the episode start: float32 Shape: (n, H, W) in {0, 1}, through the
    randomized lens. `cone_xy` fixes the cone positions (default: task.sample_scene);
    `draws` (randomization draws, e.g. of evaluated episodes) fix the camera's."""
    rand = randomization or Randomization()
    rng = np.random.default_rng(seed)
    base = Randomization.none().sample(np.random.default_rng(0))
    spec = build_scene_spec(base, task.Scene(cone_xy=(2.0, 0.0)))
    model = spec.compile()
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    h, w = size
    cam = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, C.FRONT_CAMERA)
    body = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, "cone")
    geoms = {mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, g) for g in CONE_GEOMS}
    out = np.zeros((n, h, w), dtype=np.float32)
    with mujoco.Renderer(model, h, w) as r:
        r.enable_segmentation_rendering()
        for i in range(n):
            xy = (
                cone_xy[i % len(cone_xy)] if cone_xy is not None else task.sample_scene(rng).cone_xy
            )
            d = draws[i % len(draws)] if draws is not None else rand.sample(rng)
            model.body_pos[body, :2] = xy
            model.cam_pos[cam] = CAMERA_POS + np.asarray(d.camera_offset)
            model.cam_quat[cam] = _quat_from_xyaxes(
                camera_axes(d.camera_pitch_deg, d.camera_roll_deg)
            )
            model.cam_fovy[cam] = render_fovy_deg(d.camera_hfov_deg, d.distortion)
            mujoco.mj_forward(model, data)
            r.update_scene(data, camera=cam)
            seg = r.render()
            mask = np.isin(seg[..., 0], list(geoms)) & (seg[..., 1] == mujoco.mjtObj.mjOBJ_GEOM)
            mx, my = distortion_maps(w, h, d.camera_hfov_deg, d.distortion)
            out[i] = cv2.remap(mask.astype(np.float32), mx, my, cv2.INTER_NEAREST)
    return out


def arm_masks(n: int = 60, seed: int = 0, subject: str = "cube",
              size: tuple[int, int] = (ARM_FRAME[1], ARM_FRAME[0])) -> np.ndarray:
    """Masks of the arm task's `subject` ("cube" or "target") in the front camera at the
    start of the episodes seeded seed..seed+n-1 (their layouts and camera draws, as
    `ArmTaskEnv.reset` makes them; the arm at home may hide part of it): float32
    Shape: (n, H, W) in {0, 1}."""
    from realsim.robots.arm import constants as AC
    from realsim.robots.arm.scene import ArmRandomization, ArmTaskEnv

    geom_name = {"cube": AC.CUBE_GEOM, "target": AC.TARGET_GEOM}[subject]
    env = ArmTaskEnv(render=False, randomization=ArmRandomization(physics=False))
    env.reset(seed)
    assert env.sim is not None
    base_model = env.sim.model  # every draw compiles the same structure: one renderer
    base_data = mujoco.MjData(base_model)
    cam = mujoco.mj_name2id(base_model, mujoco.mjtObj.mjOBJ_CAMERA, AC.FRONT_CAMERA)
    gid = mujoco.mj_name2id(base_model, mujoco.mjtObj.mjOBJ_GEOM, geom_name)
    h, w = size
    out = np.zeros((n, h, w), dtype=np.float32)
    with mujoco.Renderer(base_model, h, w) as r:
        r.enable_segmentation_rendering()
        for i in range(n):
            env.reset(seed + i)
            m, d = env.sim.model, env.sim.data
            base_model.cam_pos[cam] = m.cam_pos[cam]
            base_model.cam_quat[cam] = m.cam_quat[cam]
            base_model.cam_fovy[cam] = m.cam_fovy[cam]
            base_data.qpos[:] = d.qpos
            base_data.mocap_pos[:] = d.mocap_pos
            base_data.mocap_quat[:] = d.mocap_quat
            mujoco.mj_forward(base_model, base_data)
            r.update_scene(base_data, camera=cam)
            seg = r.render()
            out[i] = (seg[..., 0] == gid) & (seg[..., 1] == mujoco.mjtObj.mjOBJ_GEOM)
    env.close()
    return out


def count_pixels(masks: np.ndarray, width: int,
                 crop_rows: Sequence[int] | None = None,
                 frame: tuple[int, int] = (C.CAMERA_WIDTH, C.CAMERA_HEIGHT)) -> np.ndarray:
    """Input pixels at least half covered by the object after cutting the camera rows
    `crop_rows` (None: all; rows of a `frame` (W, H) image) and area downsampling to
    `width` x `input_height(width, crop_rows, frame)`. masks: Shape: (n, H, W).
    Returns Shape: (n,)."""
    height = input_height(width, crop_rows, frame)
    if crop_rows is not None:
        s = masks.shape[1] / frame[1]
        masks = masks[:, int(round(crop_rows[0] * s)):int(round(crop_rows[1] * s))]
    return np.array(
        [
            int(
                np.count_nonzero(
                    cv2.resize(m, (width, height), interpolation=cv2.INTER_AREA) >= 0.5
                )
            )
            for m in masks
        ]
    )


Input = int | tuple[int, Sequence[int] | None]
"""An input: a width (whole frame) or (width, crop_rows)."""


def _input(spec: Input) -> tuple[int, tuple[int, int] | None]:
    if isinstance(spec, (int, np.integer)):
        return int(spec), None
    w, rows = spec
    return int(w), None if rows is None else (int(rows[0]), int(rows[1]))


def footprint_table(
    widths: Sequence[Input] = (64, 96, 128, 160),
    floor_px: float = DEFAULT_FLOOR_PX,
    n: int = 200,
    seed: int = 0,
    randomization: Randomization | None = None,
    cone_xy: Sequence[tuple[float, float]] | None = None,
    robot: str = "rc_car",
    subject: str = "cube",
) -> list[FootprintReport]:
    """One `FootprintReport` per input (a width, or (width, crop_rows)) from one set of `n`
    randomized starts. robot: "rc_car" (the cone) or "arm" (its `subject`: "cube" or
    "target", the green square)."""
    if robot == "arm":
        masks, frame, label = arm_masks(n, seed, subject), ARM_FRAME, subject
    else:
        masks = cone_masks(n, seed, randomization, cone_xy=cone_xy)
        frame, label = (C.CAMERA_WIDTH, C.CAMERA_HEIGHT), "cone"
    out = []
    for spec in widths:
        w, rows = _input(spec)
        out.append(FootprintReport(w, input_height(w, rows, frame), float(floor_px),
                                   count_pixels(masks, w, rows, frame), rows, frame[1], label))
    return out


def check_footprint(
    width: int,
    floor_px: float = DEFAULT_FLOOR_PX,
    n: int = 200,
    seed: int = 0,
    randomization: Randomization | None = None,
    cone_xy: Sequence[tuple[float, float]] | None = None,
    crop_rows: Sequence[int] | None = None,
    robot: str = "rc_car",
    subject: str = "cube",
) -> FootprintReport:
    """Footprint at input `width` (camera rows `crop_rows`); a UserWarning when `report.warn`."""
    rep = footprint_table([(width, crop_rows)], floor_px, n, seed, randomization, cone_xy,
                          robot, subject)[0]
    if rep.warn:
        warnings.warn(
            f"{rep.subject} footprint at {rep.width}x{rep.height} (camera rows {rep.rows_label}): "
            f"5th percentile {rep.p5:.1f} px < floor {floor_px:g} px "
            f"({100 * rep.frac_below:.0f} % of starts below)",
            stacklevel=2,
        )
    return rep


def cone_distance_range() -> tuple[float, float]:
    """(nearest, farthest) start distance of the cone (m), for reports."""
    return task.START_RANGE[0], task.START_RANGE[1] if math.isfinite(task.START_RANGE[1]) else 0.0

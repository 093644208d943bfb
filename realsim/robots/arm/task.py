"""The arm's task, "put the red cube on the green square" (arm.md, "The task"), as data and rules.

No MuJoCo here: the emulator's judge, the simulator's scene and the teacher read the same
constants and the same success rule from this module.

Frames: the table frame (origin at the arm's base on the table top, x forward, z up), m,
rad, s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

CUBE_SIZE = 0.03
"""Edge of the red cube (m)."""
TARGET_SIZE = 0.08
"""Side of the green square (m), aligned with the table axes."""
AREA_X: tuple[float, float] = (0.15, 0.30)
"""Range of the cube's (and the square's) centre x (m)."""
AREA_Y: tuple[float, float] = (-0.12, 0.12)
"""Range of the cube's (and the square's) centre y (m)."""
MIN_SEPARATION = 0.08
"""Smallest distance between the cube's start centre and the square's centre (m)."""
TIME_LIMIT = 20.0
"""Length of the judged window (s)."""
REST_TIME = 0.3
"""The cube must stay at rest on the square this long (s)."""
REST_SPEED = 0.01
"""At rest: centre speed below this (m/s) ..."""
REST_SPIN = 0.2
"""... and angular speed below this (rad/s)."""
ON_TABLE_TOL = 0.003
"""On the table: the centre within this of CUBE_SIZE / 2 above the table top (m), i.e.
lying flat on a face."""
RED_RGB: tuple[int, int, int] = (216, 20, 20)
GREEN_RGB: tuple[int, int, int] = (25, 190, 50)


@dataclass(frozen=True)
class Scene:
    """One episode's layout: the cube's start (centre x, y in m; yaw in rad, resting on the
    table) and the square's centre."""

    cube_xy: tuple[float, float]
    cube_yaw: float
    target_xy: tuple[float, float]

    def cube_pose(self) -> np.ndarray:
        """Start pose of the cube: position (3,) + quaternion (w, x, y, z). Shape: (7,)."""
        h = 0.5 * self.cube_yaw
        return np.array(
            [self.cube_xy[0], self.cube_xy[1], CUBE_SIZE / 2, math.cos(h), 0.0, 0.0, math.sin(h)]
        )


REACH_RAMP: tuple[float, float] = (0.20, 0.30)
"""Cube distances from the base (m) over which `sample_scene`'s reach weight ramps from 1 to
its full value: the far corners (beyond ~0.25 m) take the teacher's tilted grasps."""


def reach_density(r: float, reach_weight: float) -> float:
    """Relative density of a cube start at distance `r` (m) from the base under `reach_weight`
    (1 at and inside REACH_RAMP[0], `reach_weight` at and beyond REACH_RAMP[1], linear between)."""
    s = min(max((r - REACH_RAMP[0]) / (REACH_RAMP[1] - REACH_RAMP[0]), 0.0), 1.0)
    return 1.0 + (reach_weight - 1.0) * s


def sample_scene(rng: np.random.Generator, reach_weight: float = 1.0) -> Scene:
    """Draw one episode's layout: cube centre uniform over the area, any yaw; the square's
    centre uniform over the same area at least MIN_SEPARATION from the cube.

    `reach_weight` != 1 reweights the cube's start by its distance from the base
    (`reach_density`, by rejection): a training-data option (more of the far, tilted
    grasps); the task and every evaluation use 1. With 1, no extra numbers are drawn, so
    the layouts of a seed are those of the uniform sampler."""
    if reach_weight <= 0:
        raise ValueError("reach_weight must be > 0")
    top = max(1.0, reach_weight)
    while True:
        cube = (float(rng.uniform(*AREA_X)), float(rng.uniform(*AREA_Y)))
        if reach_weight == 1.0 or rng.uniform() * top < reach_density(math.hypot(*cube), reach_weight):
            break
    yaw = float(rng.uniform(-math.pi, math.pi))
    for _ in range(10000):
        t = (float(rng.uniform(*AREA_X)), float(rng.uniform(*AREA_Y)))
        if math.dist(t, cube) >= MIN_SEPARATION:
            return Scene(cube, yaw, t)
    raise RuntimeError("no room for the target")  # pragma: no cover - the area always has room


def inside(cube_xy: tuple[float, float] | np.ndarray, target_xy: tuple[float, float]) -> bool:
    """True if the cube's centre lies inside the square (edges included)."""
    h = TARGET_SIZE / 2
    return abs(cube_xy[0] - target_xy[0]) <= h and abs(cube_xy[1] - target_xy[1]) <= h


class TaskJudge:
    """Incremental judge of one episode, fed the cube's state in time order.

    ``update(t, pos, lin_speed, ang_speed, touching_left, touching_right)`` takes the cube's
    centre `pos` (3,) m, its speeds (m/s, rad/s) and whether it touches each finger, at time
    `t` (s, same clock as `t_start`). Samples after the TIME_LIMIT window are ignored.
    Success latches once the cube has stayed, for REST_TIME without a break, at rest, flat
    on the table, centre inside the square and not touching both fingers.
    """

    def __init__(self, scene: Scene, t_start: float = 0.0) -> None:
        self.scene = scene
        self.t_start = float(t_start)
        self.success = False
        self.rest_since: float | None = None
        self.last_xy: tuple[float, float] = scene.cube_xy
        self.samples = 0

    def expired(self, t: float) -> bool:
        """True once `t` lies past the judged window."""
        return t - self.t_start > TIME_LIMIT + 1e-9

    @property
    def decided(self) -> bool:
        """True once success has latched."""
        return self.success

    def update(
        self,
        t: float,
        pos: np.ndarray | tuple[float, float, float],
        lin_speed: float,
        ang_speed: float,
        touching_left: bool,
        touching_right: bool,
    ) -> None:
        """Take one sample of the cube's state (see class doc)."""
        if t < self.t_start or self.expired(t) or self.success:
            return
        self.samples += 1
        self.last_xy = (float(pos[0]), float(pos[1]))
        ok = (
            lin_speed < REST_SPEED
            and ang_speed < REST_SPIN
            and abs(float(pos[2]) - CUBE_SIZE / 2) <= ON_TABLE_TOL
            and inside(self.last_xy, self.scene.target_xy)
            and not (touching_left and touching_right)
        )
        if not ok:
            self.rest_since = None
            return
        if self.rest_since is None:
            self.rest_since = t
        if t - self.rest_since >= REST_TIME - 1e-9:
            self.success = True

    def distance(self) -> float:
        """Cube centre to square centre in the plane (m), at the last sample."""
        return math.dist(self.last_xy, self.scene.target_xy)

    def verdict(self) -> tuple[int, float]:
        """(success 0/1, score = the cube centre's distance to the square centre, m)."""
        return int(self.success), float(self.distance())

"""The RC car's task, "reach the orange cone" (spec/rc_car.md, section "The task"), as data and rules.

No MuJoCo here: the emulator's judge, the simulator's scene builder and the
teacher's reward all read the same constants and the same success rule from this
module, so that a verdict means the same thing everywhere.

Frames: the world frame is the car's body frame at the start of an episode
(origin midpoint between the axles on the floor, x forward, y left); distances
are metres, times seconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

GOAL_RADIUS = 0.35
"""Success radius around the orange cone's centre, and the distractor's "touch" radius (m)."""
TIME_LIMIT = 10.0
"""Length of the judged window after ``EPS`` (s)."""
CONE_BASE = 0.12
"""Side of a cone's square base (m)."""
CONE_HEIGHT = 0.16
"""Height of a cone (m)."""
ORANGE_RGB: tuple[int, int, int] = (255, 100, 0)
"""Colour of the target cone (8-bit RGB)."""
BLUE_RGB: tuple[int, int, int] = (20, 70, 230)
"""Colour of the distractor cone (8-bit RGB)."""
START_RANGE: tuple[float, float] = (1.0, 3.0)
"""Distance of a cone from the car's start pose (m), min and max."""
MAX_BEARING = math.radians(40.0)
"""Largest absolute bearing of a cone seen from the start pose (rad)."""
DISTRACTOR_PROB = 0.5
"""Fraction of episodes with a blue distractor cone."""
MIN_CONE_SEPARATION = 0.8
"""Smallest distance between the two cones' centres (m): the goal disc and the
distractor disc (radius `GOAL_RADIUS` each) never overlap."""
MIN_PATH_CLEARANCE = 0.5
"""Smallest distance from the distractor to the straight segment start -> orange cone (m):
driving straight at the target never touches the distractor."""


@dataclass(frozen=True)
class Scene:
    """Where the cones stand, in the episode's world frame (m).

    ``distractor_xy`` is None in episodes without the blue cone.
    """

    cone_xy: tuple[float, float]
    distractor_xy: tuple[float, float] | None = None


def _polar(rng: np.random.Generator) -> tuple[float, float]:
    # Uniform over the annular sector's area, not over (r, bearing).
    lo, hi = START_RANGE
    r = math.sqrt(rng.uniform(lo * lo, hi * hi))
    b = rng.uniform(-MAX_BEARING, MAX_BEARING)
    return (r * math.cos(b), r * math.sin(b))


def _segment_distance(
    p: tuple[float, float], a: tuple[float, float], b: tuple[float, float]
) -> float:
    ax, ay = a
    dx, dy = b[0] - ax, b[1] - ay
    L2 = dx * dx + dy * dy
    s = 0.0 if L2 == 0.0 else max(0.0, min(1.0, ((p[0] - ax) * dx + (p[1] - ay) * dy) / L2))
    return math.hypot(p[0] - ax - s * dx, p[1] - ay - s * dy)


def sample_scene(rng: np.random.Generator) -> Scene:
    """Draw one episode's cone layout.

    The orange cone stands 1..3 m away within +-40 degrees of the start heading
    (uniform over that area). In half of the episodes a blue cone stands
    elsewhere in the same sector, at least `MIN_CONE_SEPARATION` from the orange
    one and at least `MIN_PATH_CLEARANCE` off the straight path to it, so the
    layout is always solvable.
    """
    cone = _polar(rng)
    if rng.uniform() >= DISTRACTOR_PROB:
        return Scene(cone_xy=cone)
    for _ in range(1000):
        d = _polar(rng)
        if (
            math.dist(d, cone) >= MIN_CONE_SEPARATION
            and _segment_distance(d, (0.0, 0.0), cone) >= MIN_PATH_CLEARANCE
        ):
            return Scene(cone_xy=cone, distractor_xy=d)
    return Scene(cone_xy=cone)  # pragma: no cover - the sector always has room


class TaskJudge:
    """Incremental judge of one episode, fed body-origin positions in time order.

    ``update(t, x, y)`` takes a sample at time ``t`` (s, same clock as
    ``t_start``, the time of ``EPS``) with the body origin at ``(x, y)`` (m,
    episode world frame). Samples after ``t_start + TIME_LIMIT`` are ignored.
    Success latches when the origin comes within `GOAL_RADIUS` of the orange
    cone before it has ever come within `GOAL_RADIUS` of the blue one; touching
    the blue cone first fails the episode for good.
    """

    def __init__(self, scene: Scene, t_start: float = 0.0) -> None:
        self.scene = scene
        self.t_start = float(t_start)
        self.closest = math.inf  #: closest distance to the orange cone so far (m)
        self.success = False
        self.touched_distractor = False
        self.samples = 0

    def expired(self, t: float) -> bool:
        """True once ``t`` lies past the judged window."""
        return t - self.t_start > TIME_LIMIT

    @property
    def decided(self) -> bool:
        """True once the outcome can no longer change its success bit."""
        return self.success or self.touched_distractor

    def update(self, t: float, x: float, y: float) -> None:
        """Take the body origin's position ``(x, y)`` (m) at time ``t`` (s)."""
        if t - self.t_start > TIME_LIMIT or t < self.t_start:
            return
        self.samples += 1
        cx, cy = self.scene.cone_xy
        d = math.hypot(x - cx, y - cy)
        if d < self.closest:
            self.closest = d
        if d <= GOAL_RADIUS and not self.touched_distractor:
            self.success = True
        if self.scene.distractor_xy is not None and not self.success:
            bx, by = self.scene.distractor_xy
            if math.hypot(x - bx, y - by) <= GOAL_RADIUS:
                self.touched_distractor = True

    def verdict(self) -> tuple[int, float]:
        """``(success, score)``: success 0 or 1; score the closest distance to the orange
        cone in the window (m; the start distance if no sample came)."""
        score = self.closest
        if not math.isfinite(score):
            score = math.hypot(*self.scene.cone_xy)
        return int(self.success), float(score)

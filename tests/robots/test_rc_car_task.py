"""The reach-the-cone task: scene sampling and the judge's success rule (spec/rc_car.md)."""

from __future__ import annotations

import math

import numpy as np

from realsim.robots.rc_car.task import (
    GOAL_RADIUS,
    MAX_BEARING,
    MIN_CONE_SEPARATION,
    START_RANGE,
    TIME_LIMIT,
    Scene,
    TaskJudge,
    sample_scene,
)


def test_sample_scene_ranges_and_distractor_share() -> None:
    rng = np.random.default_rng(0)
    scenes = [sample_scene(rng) for _ in range(400)]
    with_d = 0
    for s in scenes:
        for xy in [s.cone_xy] + ([s.distractor_xy] if s.distractor_xy else []):
            r, b = math.hypot(*xy), math.atan2(xy[1], xy[0])
            assert START_RANGE[0] - 1e-9 <= r <= START_RANGE[1] + 1e-9
            assert abs(b) <= MAX_BEARING + 1e-9
        if s.distractor_xy is not None:
            with_d += 1
            assert math.dist(s.cone_xy, s.distractor_xy) >= MIN_CONE_SEPARATION
    assert 0.4 < with_d / len(scenes) < 0.6
    # seeded: the same generator state gives the same scene
    assert sample_scene(np.random.default_rng([1, 2])) == sample_scene(
        np.random.default_rng([1, 2])
    )


def _drive(
    judge: TaskJudge, path: list[tuple[float, float]], t0: float = 0.0, dt: float = 0.02
) -> None:
    for i, (x, y) in enumerate(path):
        judge.update(t0 + i * dt, x, y)


def _line(a: tuple[float, float], b: tuple[float, float], n: int) -> list[tuple[float, float]]:
    return [(a[0] + (b[0] - a[0]) * k / n, a[1] + (b[1] - a[1]) * k / n) for k in range(n + 1)]


def test_judge_success_and_score() -> None:
    j = TaskJudge(Scene(cone_xy=(2.0, 0.0)), t_start=5.0)
    _drive(j, _line((0, 0), (1.9, 0.0), 100), t0=5.0)
    success, score = j.verdict()
    assert success == 1 and math.isclose(score, 0.1, abs_tol=1e-9)


def test_judge_near_miss_fails_with_closest_distance() -> None:
    j = TaskJudge(Scene(cone_xy=(2.0, 0.0)))
    _drive(j, _line((0, 0.5), (3.0, 0.5), 300))
    success, score = j.verdict()
    assert success == 0 and math.isclose(score, 0.5, abs_tol=1e-9)


def test_judge_distractor_first_fails() -> None:
    j = TaskJudge(Scene(cone_xy=(2.0, 0.0), distractor_xy=(1.0, 0.0)))
    _drive(j, _line((0, 0), (2.0, 0.0), 100))  # passes over the blue cone on the way
    success, score = j.verdict()
    assert success == 0 and score < GOAL_RADIUS


def test_judge_orange_then_blue_still_succeeds() -> None:
    j = TaskJudge(Scene(cone_xy=(1.0, 0.0), distractor_xy=(2.0, 0.0)))
    _drive(j, _line((0, 0), (2.0, 0.0), 100))
    assert j.verdict()[0] == 1


def test_judge_timeout() -> None:
    j = TaskJudge(Scene(cone_xy=(2.0, 0.0)), t_start=0.0)
    j.update(0.0, 0.0, 0.0)
    j.update(TIME_LIMIT - 0.01, 1.0, 0.0)
    j.update(TIME_LIMIT + 0.01, 2.0, 0.0)  # too late: ignored, also for the score
    assert j.verdict() == (0, 1.0)

"""The privileged ("GOD-mode") teacher for reach-the-cone: pure pursuit on exact poses.

It reads what no real policy can: the car's exact pose and velocity, the cones'
positions and the episode's true physical parameters (steering trim and gain, ESC
deadband, latency, battery voltage). Per control step:

1. Plan (every `replan_s`): the path is the straight line from the car to the orange
   cone; if a kinematic rollout of this controller along it would pass within
   GOAL_RADIUS + `clearance` of the blue cone, a via-point beside the blue cone (on
   the far side from it, widening until the rollout clears) is inserted first.
2. Steer: predict the pose one latency ahead, take the lookahead point on the path,
   curvature k = 2 sin(alpha) / Ld, wheel angle atan(wheelbase k), and invert the
   steering map (trim, steer_max) to a command.
3. Speed: v_ref = min(v_max, sqrt(a_lat / |k|), sqrt(2 a_brake (d - d_stop))): it
   brakes into the goal and stops about `d_stop` from the cone's centre, inside the
   success radius. Throttle = feed-forward through the ESC map (deadband, the no-load
   speed at the present battery voltage) + proportional correction; when too fast it
   brakes (negative throttle brakes, never reverses).

Frames: the episode's world frame (m, rad); actions [steer, throttle] in [-1, 1].
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from realsim.robots.rc_car import constants as C
from realsim.robots.rc_car.task import GOAL_RADIUS


@dataclass(frozen=True)
class PursuitConfig:
    """Teacher gains and limits (SI units)."""

    v_max: float = 1.4  # m/s cruise speed (top speed is 3-4 m/s; grip and latency limit it)
    a_brake: float = 1.2  # m/s^2 planned deceleration into the goal
    a_lat: float = 2.0  # m/s^2 lateral acceleration limit (slippery floors: mu 0.4)
    d_stop: float = 0.12  # m stopping point short of the cone's centre (inside 0.35 m)
    v_min: float = 0.35  # m/s least reference speed while far from the goal
    lookahead: tuple[float, float] = (0.3, 0.35)  # Ld = a + b v (m, s)
    clearance: float = 0.22  # m margin beyond GOAL_RADIUS around the blue cone
    replan_s: float = 0.2  # s between plans
    kp_speed: float = 0.5  # throttle per m/s of speed error
    brake_gain: float = 0.8  # brake throttle per m/s of over-speed


def _wrap(a: float) -> float:
    return (a + math.pi) % (2 * math.pi) - math.pi


class PurePursuitTeacher:
    """Pure-pursuit controller on privileged state (see module docstring).

    `act(priv)` takes `CarTaskEnv.privileged()` (pose, velocity, cone_xy, distractor_xy,
    params, vbat, t) and returns the action [steer, throttle], Shape: (2,).
    """

    def __init__(self, config: PursuitConfig | None = None) -> None:
        self.cfg = config or PursuitConfig()
        self.reset()

    def reset(self) -> None:
        """Forget the plan (call at each episode start or after a state jump)."""
        self.path: list[np.ndarray] = []
        self._t_plan = -math.inf

    # --- planning ----------------------------------------------------------------------
    def _rollout_min_dist(
        self,
        pose: np.ndarray,
        v0: float,
        waypoints: Sequence[np.ndarray],
        blue: np.ndarray,
        params: Mapping[str, float],
    ) -> float:
        """Kinematic-bicycle rollout of this controller along `waypoints` (0.05 s steps,
        first-order speed and steering lags); least distance to `blue` (m) before the
        rollout reaches the goal radius."""
        x, y, th = float(pose[0]), float(pose[1]), float(pose[2])
        v, delta = max(v0, 0.0), 0.0
        path = [np.array([x, y])] + list(waypoints)
        goal = path[-1]
        dt, best = 0.05, math.inf
        smax = params["steer_max"]
        for _ in range(200):
            best = min(best, math.hypot(x - blue[0], y - blue[1]))
            if math.hypot(x - goal[0], y - goal[1]) < GOAL_RADIUS:
                break
            kappa, v_ref, path = self._track(np.array([x, y, th]), v, path, goal)
            d_ref = max(-smax, min(smax, math.atan(C.WHEELBASE * kappa)))
            delta += (d_ref - delta) * min(1.0, dt / 0.12)
            v += (v_ref - v) * min(1.0, dt / 0.35)
            x += v * math.cos(th) * dt
            y += v * math.sin(th) * dt
            th += v * math.tan(delta) / C.WHEELBASE * dt
        return best

    def _plan(self, pose: np.ndarray, v: float, priv: Mapping[str, Any]) -> None:
        cone = np.asarray(priv["cone_xy"], dtype=np.float64)
        blue = priv.get("distractor_xy")
        self.path = [cone]
        if blue is None:
            return
        blue = np.asarray(blue, dtype=np.float64)
        need = GOAL_RADIUS + self.cfg.clearance
        params = priv["params"]
        if self._rollout_min_dist(pose, v, [cone], blue, params) >= need:
            return
        # via-points beside the blue cone, on the side of the straight car->cone line
        p = pose[:2]
        u = cone - p
        L = float(np.linalg.norm(u)) or 1.0
        u = u / L
        n = np.array([-u[1], u[0]])
        side = float(np.dot(blue - p, n))
        away = -n if side >= 0 else n  # from the blue cone toward (and past) the line
        s = float(np.clip(np.dot(blue - p, u), 0.0, L))
        best_path, best_d = [cone], -math.inf
        for off in (0.75, 0.95, 1.15, 1.4):
            for along in (0.0, -0.3):
                via = blue + off * away + along * u
                if np.dot(via - p, u) < 0.2 or s <= 0:
                    continue
                d = self._rollout_min_dist(pose, v, [via, cone], blue, params)
                if d > best_d:
                    best_path, best_d = [via, cone], d
                if d >= need:
                    self.path = [via, cone]
                    return
        self.path = best_path

    # --- tracking ----------------------------------------------------------------------
    def _track(
        self, pose: np.ndarray, v: float, path: list[np.ndarray], goal: np.ndarray
    ) -> tuple[float, float, list[np.ndarray]]:
        """(curvature 1/m, reference speed m/s, remaining path) at `pose`.

        `path`: [current position, waypoint..., goal]; a waypoint is dropped once the car
        is within 0.3 m of it or past it.
        """
        cfg = self.cfg
        p = pose[:2]
        pts = list(path)
        while len(pts) > 2:  # pts[0] = segment start, pts[1] = next waypoint
            w, prev = pts[1], pts[0]
            seg = w - prev
            if np.linalg.norm(w - p) < 0.3 or np.dot(p - w, seg) > 0:
                pts = [w, *pts[2:]]
            else:
                break
        Ld = cfg.lookahead[0] + cfg.lookahead[1] * max(v, 0.0)
        # lookahead point: walk the polyline from the projection of p
        a, b = pts[0], pts[1]
        seg = b - a
        L2 = float(np.dot(seg, seg))
        s = 0.0 if L2 == 0 else float(np.clip(np.dot(p - a, seg) / L2, 0.0, 1.0))
        target = None
        rem = Ld
        cur = a + s * seg
        for q in pts[1:]:
            dq = float(np.linalg.norm(q - cur))
            if dq >= rem:
                target = cur + (q - cur) * (rem / dq)
                break
            rem -= dq
            cur = q
        if target is None or np.linalg.norm(goal - p) < Ld:
            target = goal
        dx, dy = target[0] - p[0], target[1] - p[1]
        dist = math.hypot(dx, dy)
        alpha = _wrap(math.atan2(dy, dx) - float(pose[2]))
        kappa = 2.0 * math.sin(alpha) / max(dist, 0.15)
        d_goal = math.hypot(goal[0] - p[0], goal[1] - p[1])
        # remaining path length to the goal
        rest = float(np.linalg.norm(pts[1] - p)) + sum(
            float(np.linalg.norm(pts[i + 1] - pts[i])) for i in range(1, len(pts) - 1)
        )
        d_left = max(rest, d_goal)
        v_brake = math.sqrt(max(0.0, 2 * cfg.a_brake * (d_left - cfg.d_stop)))
        v_curve = math.sqrt(cfg.a_lat / max(abs(kappa), 1e-3))
        v_ref = min(cfg.v_max, v_curve, max(v_brake, 0.0))
        if d_left > GOAL_RADIUS + 0.3:
            v_ref = max(v_ref, cfg.v_min)
        if abs(alpha) > 1.2:  # target behind the side: creep round at minimum radius
            v_ref = min(v_ref, 0.6)
        return kappa, v_ref, pts

    # --- control -----------------------------------------------------------------------
    def act(self, priv: Mapping[str, Any]) -> np.ndarray:
        """Action [steer, throttle] (Shape: (2,)) for the privileged state `priv`."""
        cfg = self.cfg
        params = priv["params"]
        pose = np.asarray(priv["pose"], dtype=np.float64)
        vel = np.asarray(priv["velocity"], dtype=np.float64)
        v = float(vel[0])
        # predict one command latency ahead (constant speed and yaw rate)
        lat = float(params["latency"])
        th = float(pose[2])
        pred = pose.copy()
        pred[0] += v * math.cos(th + 0.5 * vel[2] * lat) * lat
        pred[1] += v * math.sin(th + 0.5 * vel[2] * lat) * lat
        pred[2] += vel[2] * lat
        t = float(priv["t"])
        if not self.path or t - self._t_plan >= cfg.replan_s - 1e-9:
            self._plan(pred, v, priv)
            self._t_plan = t
        goal = self.path[-1]
        kappa, v_ref, pts = self._track(pred, v, [pred[:2].copy(), *self.path], goal)
        self.path = pts[1:]
        # steering: wheel angle -> command through the true steering map
        delta = math.atan(C.WHEELBASE * kappa)
        steer = (delta - params["steer_trim"]) / params["steer_max"]
        # throttle: ESC feed-forward + P, brake when too fast
        db = params["deadband"]
        vbat = float(priv.get("vbat", 8.0))
        v_noload = max(vbat / params["back_emf"] * C.WHEEL_RADIUS, 0.5)
        if v > v_ref + 0.15 or v_ref < 0.05:
            over = v - v_ref
            throttle = -(db + cfg.brake_gain * max(over, 0.1)) if v > 0.05 else 0.0
        else:
            duty = 1.15 * v_ref / v_noload + 0.06 + cfg.kp_speed * (v_ref - v)
            duty = max(0.0, duty)
            throttle = db + 0.01 + (1.0 - db) * duty if duty > 0 else 0.0
        return np.clip(np.array([steer, throttle]), -1.0, 1.0)


def run_teacher_episode(env: Any, teacher: PurePursuitTeacher | None = None) -> tuple[int, float]:
    """Drive an already reset `CarTaskEnv` with the teacher until `env.done`.
    Returns env.verdict() (success 0/1, score m)."""
    teacher = teacher or PurePursuitTeacher()
    teacher.reset()
    while not env.done:
        env.step(teacher.act(env.privileged()))
    return env.verdict()

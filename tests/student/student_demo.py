"""A stand-in expert for the student's tests: a privileged pure-pursuit driver writing sim logs.

Tests only (tests may read the simulator's privileged state to *make* data;
`student/` never does). It writes the log format exactly as `realsim teach`
does: commands and telemetry at 50 Hz, camera/front JPEGs at 20 fps,
driver="teacher", and a privileged/ group.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")

import numpy as np  # noqa: E402


def expert_action(priv: dict) -> np.ndarray:
    """Steer at the orange cone, bend away from the blue one. Shape: (2,)."""
    x, y, yaw = priv["pose"]
    cx, cy = priv["cone_xy"]
    c, s = math.cos(yaw), math.sin(yaw)
    bx, by = c * (cx - x) + s * (cy - y), -s * (cx - x) + c * (cy - y)
    bearing = math.atan2(by, bx)
    d = priv["distractor_xy"]
    if d is not None:
        dx, dy = c * (d[0] - x) + s * (d[1] - y), -s * (d[0] - x) + c * (d[1] - y)
        dist = math.hypot(dx, dy)
        if dx > 0 and dist < 0.9 and dist < math.hypot(bx, by):
            bearing -= 0.6 * math.copysign(1.0, dy) * (0.9 - dist) / 0.9
    steer = float(np.clip(2.5 * bearing, -1, 1))
    v = priv["velocity"][0]
    throttle = float(np.clip(0.8 * (1.6 - v) + 0.35, -0.2, 0.8))
    return np.array([steer, throttle])


def write_demos(path: str | Path, episodes: int, seed: int = 0, image_size=(240, 320)) -> int:
    """Run the expert for `episodes` episodes in CarTaskEnv; write them to `path`. Returns successes."""
    from realsim.logs import LogWriter
    from realsim.robots.rc_car.scene import CarTaskEnv, episode_seed

    env = CarTaskEnv(image_size=image_size)
    wins = 0
    with LogWriter(path, robot="rc_car", source="sim") as w:
        for i in range(episodes):
            s = episode_seed(seed, i)
            obs = env.reset(s)
            ep = w.begin_episode(driver="teacher", seed=s)
            poses = []
            k = 0
            while True:
                ep.add_sensors(obs.t, obs.t, **obs.telemetry)
                if obs.frame_jpeg is not None:
                    ep.add_frame("front", obs.t, obs.frame_jpeg)
                if env.done:
                    break
                priv = env.privileged()
                poses.append(priv["pose"])
                a = expert_action(priv)
                ep.add_command(obs.t, k, a)
                k += 1
                obs = env.step(a)
            ep.add_privileged("pose", np.asarray(poses))
            succ, score = env.verdict()
            wins += succ
            ep.close(success=succ, score=score)
    env.close()
    return wins

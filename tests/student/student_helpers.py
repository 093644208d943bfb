"""Helpers for the student's tests: synthetic logs, a tiny stand-in environment."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cv2
import numpy as np


def cone_image(x_px: float, size: int = 18, rng: np.random.Generator | None = None) -> bytes:
    """A 320x240 JPEG: grey floor, an orange block centred at column x_px."""
    rng = rng or np.random.default_rng(0)
    img = np.full((240, 320, 3), rng.integers(90, 140), np.uint8)
    img[:120] = (170, 180, 190)
    x = int(round(x_px))
    cv2.rectangle(img, (x - size // 2, 110), (x + size // 2, 110 + size), (0, 100, 255), -1)  # BGR orange
    ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 85])
    assert ok
    return buf.tobytes()


def synthetic_log(path: str | Path, episodes: int = 6, seconds: float = 1.6, seed: int = 0,
                  privileged: bool = True) -> Path:
    """A sim log in the teach layout: 50 Hz commands and telemetry, 20 fps JPEGs, privileged/.

    The "expert" steers at the orange block: steer = (x_px - 160) / 160, throttle 0.5.
    """
    from realsim.logs import LogWriter

    rng = np.random.default_rng(seed)
    with LogWriter(path, robot="rc_car", source="sim") as w:
        for e in range(episodes):
            ep = w.begin_episode(driver="teacher", seed=seed + e)
            x = rng.uniform(40, 280)
            enc = 0.0
            n = int(seconds * 50)
            for i in range(n):
                t = i / 50
                x += (160 - x) * 0.03
                enc += 0.5
                ep.add_sensors(t, t, enc_rad=enc, yaw_rate=float(rng.normal(0, 0.1)),
                               accel=np.array(rng.normal(0, 0.2, 2)), vbat=8.0 - 0.01 * i,
                               ack=i - 1, flags=4)
                if i == 0 or i * 20 // 50 != (i - 1) * 20 // 50:  # 20 frames/s
                    ep.add_frame("front", t, cone_image(x, rng=rng))
                ep.add_command(t, i, np.array([(x - 160) / 160, 0.5]))
            if privileged:
                ep.add_privileged("pose", np.zeros((n, 3)))
            ep.close(success=1, score=0.2)
    return Path(path)


@dataclass
class FakeObs:
    t: float
    telemetry: dict[str, Any]
    frame_jpeg: bytes | None = None
    frame: Any = None
    frame_t: float = math.nan


@dataclass
class FakeEnv:
    """Stand-in for CarTaskEnv: a block drifts towards the centre as the policy steers at it.

    Success when |x - 160| < 20 px for 10 consecutive steps within 2 s. Deterministic per seed.
    """

    control_hz: float = 50.0
    steps: int = 0
    x: float = 0.0
    ok: int = 0
    enc: float = 0.0
    _done: bool = False
    rng: Any = field(default=None)

    def reset(self, seed: int, distractor: bool | None = None) -> FakeObs:
        self.rng = np.random.default_rng(seed)
        self.x = float(self.rng.choice([self.rng.uniform(20, 100), self.rng.uniform(220, 300)]))
        self.steps, self.ok, self.enc, self._done = 0, 0, 0.0, False
        return self._obs()

    def _obs(self) -> FakeObs:
        t = self.steps / self.control_hz
        tel = {"enc_rad": self.enc, "yaw_rate": 0.0, "accel": np.zeros(2), "vbat": 8.0,
               "ack": self.steps - 1, "flags": 4}
        jpeg = cone_image(self.x, rng=self.rng) if self.steps % 2 == 0 else None
        return FakeObs(t, tel, jpeg)

    def step(self, action: np.ndarray) -> FakeObs:
        self.x -= 8.0 * float(action[0])
        self.enc += 0.5
        self.steps += 1
        self.ok = self.ok + 1 if abs(self.x - 160) < 20 else 0
        return self._obs()

    @property
    def done(self) -> bool:
        return self.ok >= 10 or self.steps >= 100

    def verdict(self) -> tuple[int, float]:
        return int(self.ok >= 10), abs(self.x - 160) / 100


def arm_log(path: str | Path, episodes: int = 2, steps: int = 30, seed: int = 0,
            image_size: tuple[int, int] = (120, 160), cameras: tuple[str, ...] = ("front", "wrist"),
            privileged: bool = True) -> Path:
    """A sim log of the arm in the teach layout: the IK teacher in `ArmTaskEnv` for `steps`
    control ticks per episode (25 Hz), telemetry per tick, frames of `cameras`, privileged/.

    Small renders (`image_size`) keep it fast; the student resizes every frame anyway."""
    from realsim.logs import LogWriter
    from realsim.robots.arm.scene import ArmTaskEnv
    from teacher.arm_ik import ArmTeacher

    env = ArmTaskEnv(image_size=image_size)
    teacher = ArmTeacher(1.0 / env.control_hz)
    with LogWriter(path, robot="arm", source="sim") as w:
        for e in range(episodes):
            obs = env.reset(seed + e)
            teacher.reset()
            ep = w.begin_episode(driver="teacher", seed=seed + e)
            for i in range(steps):
                ep.add_sensors(obs.t, math.nan, **obs.telemetry)
                for name, f in obs.frames.items():
                    if name in cameras:
                        ep.add_frame(name, f.t, f.jpeg)
                a = np.asarray(teacher.act(env.privileged()), np.float64)
                ep.add_command(obs.t, i, a)
                obs = env.step(a)
            if privileged:
                ep.add_privileged("qpos", np.zeros((steps, 3)))
            ep.close(success=1, score=0.0)
    env.close()
    return Path(path)

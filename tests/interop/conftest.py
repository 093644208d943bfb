"""Small synthetic logs for the interop tests (written once per session)."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from realsim.logs import LogWriter

ARM_LO = np.array([-1.9, -1.7, -1.6, -1.7, -2.7, 0.0])
ARM_HI = np.array([1.9, 1.7, 1.6, 1.7, 2.7, 0.07])
CMD_HZ = 50.0
CAM_HZ = 30.0
SECONDS = 1.2


def jpeg(rgb: tuple[int, int, int], size: tuple[int, int] = (24, 32)) -> bytes:
    """A flat-colour JPEG, (h, w) = size; ``rgb`` in RGB order."""
    img = np.zeros((*size, 3), np.uint8)
    img[:] = rgb[::-1]  # OpenCV writes BGR
    ok, buf = cv2.imencode(".jpg", img)
    assert ok
    return buf.tobytes()


def _arm_motion(t: np.ndarray, phase: float) -> np.ndarray:
    mid, amp = (ARM_LO + ARM_HI) / 2, (ARM_HI - ARM_LO) / 4
    w = 2 * np.pi * np.array([0.5, 0.7, 0.9, 1.1, 1.3, 0.6])
    return mid + amp * np.sin(w * t[:, None] + phase)


def write_arm(path: Path, source: str = "real", episodes: int = 2) -> Path:
    """Arm episodes: commands 50 Hz, sensors 50 Hz 4 ms later, cameras front/wrist 30 Hz."""
    with LogWriter(path, robot="arm", source=source) as w:
        for e in range(episodes):
            ep = w.begin_episode(driver="excite:sine", seed=e)
            ct = np.arange(int(SECONDS * CMD_HZ)) / CMD_HZ + 0.0005
            goal = _arm_motion(ct + 0.1, e)
            ep.add_commands(ct, np.arange(len(ct)), 2 * (goal - ARM_LO) / (ARM_HI - ARM_LO) - 1)
            st = ct + 0.004
            q = _arm_motion(st, e)
            ep.add_sensor_block(st, None, qpos=q, qvel=np.gradient(q, st, axis=0),
                                load=0.1 * np.sin(q), voltage=7.4 - 0.01 * st,
                                temperature=30 + st[:, None] * np.ones(6))
            for cam, base in (("front", 40), ("wrist", 160)):
                for k, ft in enumerate(np.arange(int(SECONDS * CAM_HZ)) / CAM_HZ + 0.01):
                    ep.add_frame(cam, ft, jpeg((base, (8 * k) % 256, 100 + 50 * e)))
            if source == "sim":
                cube = np.c_[0.2 + 0.01 * st, np.zeros_like(st), 0.015 + 0 * st]
                ep.add_privileged("cube_pos", cube, t=st)
                ep.add_privileged("arm_qpos", q, t=st)
                ep.add_privileged("target_xy", np.array([0.25, 0.05]))
            ep.close(success=e % 2, score=0.1 * e)
    return path


def write_car(path: Path) -> Path:
    """One rc_car episode: commands 25 Hz, telemetry 50 Hz, one camera."""
    with LogWriter(path, robot="rc_car", source="real") as w:
        ep = w.begin_episode(driver="excite:chirp", seed=0)
        for i in range(60):
            t = i * 0.02
            if i % 2 == 0:
                ep.add_command(t, i // 2, [0.5 * np.sin(t), 0.3])
            ep.add_sensors(t + 0.003, 10.0 + t, enc_rad=i * 0.1, yaw_rate=0.2 * np.sin(t),
                           accel=(0.1, -0.2), vbat=7.4, ack=i // 2, flags=0)
            if i % 3 == 0:
                ep.add_frame("front", t, jpeg((200, 120, 30)))
        ep.close(success=1, score=0.2)
    return path


@pytest.fixture(scope="session")
def arm_log(tmp_path_factory) -> Path:
    return write_arm(tmp_path_factory.mktemp("interop") / "arm.h5")


@pytest.fixture(scope="session")
def arm_sim_log(tmp_path_factory) -> Path:
    return write_arm(tmp_path_factory.mktemp("interop") / "arm_sim.h5", source="sim", episodes=1)


@pytest.fixture(scope="session")
def car_log(tmp_path_factory) -> Path:
    return write_car(tmp_path_factory.mktemp("interop") / "car.h5")


@pytest.fixture(scope="session")
def arm_lerobot(tmp_path_factory, arm_log) -> Path:
    """arm_log exported as a LeRobotDataset at 50 fps."""
    from realsim.interop.lerobot import export_lerobot

    out = tmp_path_factory.mktemp("interop") / "arm_lerobot"
    export_lerobot([arm_log], out, fps=50)
    return out

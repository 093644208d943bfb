"""Preprocessing shared by training and deployment, so the policy sees the same thing in both.

- `preprocess_jpeg(jpeg, width, crop_rows, camera_size)`: JPEG bytes -> RGB uint8
  (h, w, 3) at the input size: the band of camera rows `crop_rows` (rows of the robot's
  `camera_size` frame; None: the whole frame), resized to `width` wide
  (`student.config.input_height` gives h).
- `telemetry_features(...)`: the robot-legal telemetry fields of the log format ->
  per-sample features. `TelemetryTracker` computes the same features one sample at a
  time, as they arrive on a robot; a test checks the two agree.

Features (names used in `StudentConfig.telemetry_fields`), per robot:

- rc_car: wheel_speed (rad/s, encoder difference over the device clock: the cumulative
  angle itself carries over between episodes), yaw_rate (rad/s), accel_x, accel_y
  (m/s^2), vbat (V); one column each.
- arm: qpos (rad, gripper m), qvel, load, temperature (6 columns each), voltage (V);
  the log's fields as they are (no state: a servo reading is absolute).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import cv2
import numpy as np

from student.config import CAMERA_H, CAMERA_W, TASK_COLOR_MODES, input_height

FEATURES = ("wheel_speed", "yaw_rate", "accel_x", "accel_y", "vbat")
"""The car's telemetry features."""
SENSOR_FIELDS = ("t_device", "enc_rad", "yaw_rate", "accel", "vbat")
"""The car's log sensors/ fields the student reads (all robot-legal)."""
ARM_FEATURES: dict[str, int] = {"qpos": 6, "qvel": 6, "load": 6, "voltage": 1, "temperature": 6}
"""The arm's telemetry features and their widths: its log sensors/ fields, as they are."""


def feature_names(robot: str) -> tuple[str, ...]:
    """The telemetry feature names `robot` offers."""
    return tuple(ARM_FEATURES) if robot == "arm" else FEATURES


def feature_width(names: Sequence[str]) -> int:
    """F: columns of the features `names` (an arm field is 6 wide, a car feature 1)."""
    return sum(ARM_FEATURES.get(n, 1) for n in names)


def sensor_fields(names: Sequence[str]) -> tuple[str, ...]:
    """The log's sensors/ fields the features `names` read (robot-legal only)."""
    if names and all(n in ARM_FEATURES for n in names):
        return tuple(names)
    return SENSOR_FIELDS
_MAX_SPEED = 200.0  # rad/s: clamp of the encoder speed (a clock glitch must not explode it)


def _decode_flag(width: int, camera_w: int) -> int:
    """libjpeg DCT scaling (fast): a quarter-size decode where it still leaves twice the
    input's columns of the nominal frame, a half-size one where it leaves them all."""
    if camera_w / 4 >= 2 * width:
        return cv2.IMREAD_REDUCED_COLOR_4
    return cv2.IMREAD_REDUCED_COLOR_2 if camera_w / 2 >= width else cv2.IMREAD_COLOR


JAW_SAT_MAX = 40  # below this saturation (0..255) a pixel is achromatic: grey, black, white
JAW_VAL_MIN = 50  # below this value a pixel is black whatever its (unreliable) hue


def task_color_masks(bgr: np.ndarray, jaws: bool = False) -> np.ndarray:
    """BGR uint8 (h, w, 3) -> uint8 (h, w, 3): 255 where a pixel is saturated red (channel
    0) or saturated green (channel 1), else 0; channel 2 is 0, or with `jaws` 255 where the
    pixel is achromatic (saturation < JAW_SAT_MAX or value < JAW_VAL_MIN). Hue bands are
    wide (red within 12 of 0/180, green 35..90 on OpenCV's 0..180 scale) so that shading,
    white balance and JPEG never split an object."""
    hsv = cv2.cvtColor(bgr, cv2.COLOR_BGR2HSV)
    h, sat, val = hsv[..., 0], hsv[..., 1], hsv[..., 2]
    vivid = (sat >= 90) & (val >= 40)
    out = np.zeros_like(bgr)
    out[..., 0] = 255 * (vivid & ((h <= 12) | (h >= 168)))
    out[..., 1] = 255 * (vivid & (h >= 35) & (h <= 90))
    if jaws:
        out[..., 2] = 255 * ((sat < JAW_SAT_MAX) | (val < JAW_VAL_MIN))
    return out


def preprocess_jpeg(jpeg: bytes | np.ndarray, width: int, crop_rows: Sequence[int] | None = None,
                    camera_size: tuple[int, int] = (CAMERA_W, CAMERA_H), mode: str = "rgb") -> np.ndarray:
    """Decode a camera JPEG and cut/resize it to the policy's input. Shape: (h, W, 3) RGB uint8
    (mode "rgb") or the task-colour masks (modes "task_colors", "task_colors_jaws", see
    `student.config.INPUT_MODES`).

    h = `input_height(width, crop_rows, camera_size)`. Decodes at a reduced size
    (`_decode_flag`), then crops and area-resizes (the masks are keyed before the resize,
    so an input pixel holds the fraction of it that is red or green).
    """
    buf = np.frombuffer(jpeg, np.uint8) if isinstance(jpeg, (bytes, bytearray, memoryview)) else jpeg
    img = cv2.imdecode(buf, _decode_flag(width, camera_size[0]))
    if img is None:
        raise ValueError("frame is not a decodable JPEG")
    if mode in TASK_COLOR_MODES:
        img = crop_band(task_color_masks(img, mode == "task_colors_jaws"), crop_rows, camera_size[1])
        h = input_height(width, crop_rows, camera_size)
        if img.shape[1] != width or img.shape[0] != h:
            img = cv2.resize(img, (width, h), interpolation=cv2.INTER_AREA)
        return img
    return preprocess_bgr(img, width, crop_rows, camera_size)


def crop_band(img: np.ndarray, crop_rows: Sequence[int] | None, frame_h: int = CAMERA_H) -> np.ndarray:
    """The band of rows `crop_rows` = (top, bottom) of the nominal `frame_h`-row frame,
    scaled to the image's own height (a half-size decode of the car's 240 rows has 120).
    Shape: (rows, W, ...)."""
    if crop_rows is None:
        return img
    s = img.shape[0] / frame_h
    top, bottom = int(round(crop_rows[0] * s)), int(round(crop_rows[1] * s))
    return img[top:bottom]


def preprocess_bgr(img: np.ndarray, width: int, crop_rows: Sequence[int] | None = None,
                   camera_size: tuple[int, int] = (CAMERA_W, CAMERA_H)) -> np.ndarray:
    """BGR uint8 camera image (any size, 4:3) -> RGB uint8 input. Shape: (h, width, 3)."""
    img = crop_band(img, crop_rows, camera_size[1])
    h = input_height(width, crop_rows, camera_size)
    if img.shape[1] != width or img.shape[0] != h:
        img = cv2.resize(img, (width, h), interpolation=cv2.INTER_AREA)
    return cv2.cvtColor(img, cv2.COLOR_BGR2RGB)


def _speed(enc: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Per-sample wheel speed from consecutive samples; 0 for the first. Shape: (M,)."""
    out = np.zeros(len(enc))
    if len(enc) > 1:
        dt = np.diff(t)
        de = np.diff(enc)
        ok = dt > 1e-6
        out[1:][ok] = de[ok] / dt[ok]
        # a sample with no usable dt holds the previous speed
        for i in np.flatnonzero(~ok) + 1:
            out[i] = out[i - 1]
    return np.clip(out, -_MAX_SPEED, _MAX_SPEED)


def telemetry_features(sensors: Mapping[str, np.ndarray], t_host: np.ndarray,
                       names: Sequence[str] = FEATURES) -> np.ndarray:
    """Features of every sensor sample of an episode. Shape: (M, len(names)) float32.

    sensors: the log's sensors/ fields (car: `t_device` (M,), `enc_rad` (M,), `yaw_rate`
    (M,), `accel` (M, 2), `vbat` (M,); arm: `qpos` (M, 6), ...); t_host (M,): sensors/t,
    used for the car's speed where the device clock is missing (NaN).
    Shape: (M, feature_width(names)).
    """
    if names and all(n in ARM_FEATURES for n in names):
        m = len(t_host)
        return np.concatenate([np.asarray(sensors[n], np.float64).reshape(m, ARM_FEATURES[n])
                               for n in names], axis=1).astype(np.float32)
    t_dev = np.asarray(sensors.get("t_device", np.full(len(t_host), np.nan)), np.float64)
    t = np.where(np.isfinite(t_dev), t_dev, np.asarray(t_host, np.float64))
    acc = np.asarray(sensors["accel"], np.float64).reshape(len(t), -1)
    cols = {
        "wheel_speed": _speed(np.asarray(sensors["enc_rad"], np.float64), t),
        "yaw_rate": np.asarray(sensors["yaw_rate"], np.float64),
        "accel_x": acc[:, 0],
        "accel_y": acc[:, 1],
        "vbat": np.asarray(sensors["vbat"], np.float64),
    }
    return np.stack([cols[n] for n in names], axis=1).astype(np.float32) if len(t) else \
        np.zeros((0, len(names)), np.float32)


def telemetry_dict(tlm: Any) -> dict[str, Any]:
    """A telemetry sample as a dict of log fields: from a dict, a `hardware.rc_car.Telemetry`
    or a `hardware.arm.ArmState`."""
    if isinstance(tlm, Mapping):
        return dict(tlm)
    return {k: getattr(tlm, k) for k in (*SENSOR_FIELDS, *ARM_FEATURES) if hasattr(tlm, k)}


class TelemetryTracker:
    """`telemetry_features` one sample at a time (a robot's telemetry as it arrives).

    `update(tlm, t_host)` takes a sample (dict of log fields, a Telemetry or an ArmState)
    and returns its features, Shape: (F,). Calling it again with the same sample
    (same device time and encoder) returns the same features: a control loop
    faster than the telemetry sees the latest sample repeatedly.
    """

    def __init__(self, names: Sequence[str] = FEATURES) -> None:
        self.names = tuple(names)
        self.reset()

    def reset(self) -> None:
        self._prev: tuple[float, float] | None = None  # (t, enc) of the previous distinct sample
        self._last: tuple[float, float] | None = None
        self._speed = 0.0
        self._out: np.ndarray | None = None

    def update(self, tlm: Any, t_host: float = math.nan) -> np.ndarray:
        d = telemetry_dict(tlm)
        if self.names and all(n in ARM_FEATURES for n in self.names):  # stateless fields
            self._out = np.concatenate([np.asarray(d[n], np.float64).reshape(ARM_FEATURES[n])
                                        for n in self.names]).astype(np.float32)
            return self._out
        t_dev = float(d.get("t_device", math.nan))
        t = t_dev if math.isfinite(t_dev) else float(t_host)
        enc = float(d["enc_rad"])
        if self._last is not None and self._out is not None and (t, enc) == self._last:
            return self._out
        if self._last is not None:
            dt = t - self._last[0]
            if dt > 1e-6:
                self._speed = float(np.clip((enc - self._last[1]) / dt, -_MAX_SPEED, _MAX_SPEED))
        self._last = (t, enc)
        acc = np.asarray(d["accel"], np.float64).reshape(-1)
        cols = {"wheel_speed": self._speed, "yaw_rate": float(d["yaw_rate"]),
                "accel_x": float(acc[0]), "accel_y": float(acc[1]), "vbat": float(d["vbat"])}
        self._out = np.array([cols[n] for n in self.names], np.float32)
        return self._out

"""Preprocessing shared by training and deployment, so the policy sees the same thing in both.

- `preprocess_jpeg(jpeg, width, crop_rows)`: JPEG bytes -> RGB uint8 (h, w, 3) at the
  input size: the band of camera rows `crop_rows` (rows of the 320x240 frame; None: the
  whole frame), resized to `width` wide (`student.config.input_height` gives h).
- `telemetry_features(...)`: the robot-legal telemetry fields of the log format
  (`enc_rad`, `yaw_rate`, `accel`, `vbat`, `t_device`) -> per-sample features.
  `TelemetryTracker` computes the same features one sample at a time, as they
  arrive on a robot; a test checks the two agree.

Features (names used in `StudentConfig.telemetry_fields`):
wheel_speed (rad/s, encoder difference over the device clock: the cumulative
angle itself carries over between episodes), yaw_rate (rad/s), accel_x,
accel_y (m/s^2), vbat (V).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import cv2
import numpy as np

from student.config import CAMERA_H, input_height

FEATURES = ("wheel_speed", "yaw_rate", "accel_x", "accel_y", "vbat")
SENSOR_FIELDS = ("t_device", "enc_rad", "yaw_rate", "accel", "vbat")
"""The log's sensors/ fields the student reads (all robot-legal)."""
_MAX_SPEED = 200.0  # rad/s: clamp of the encoder speed (a clock glitch must not explode it)


def preprocess_jpeg(jpeg: bytes | np.ndarray, width: int,
                    crop_rows: Sequence[int] | None = None) -> np.ndarray:
    """Decode a camera JPEG and cut/resize it to the policy's input. Shape: (h, W, 3) RGB uint8.

    h = `input_height(width, crop_rows)`. Decodes at half size (libjpeg's DCT scaling,
    fast) when that still leaves at least `width` columns, then crops and area-resizes.
    """
    buf = np.frombuffer(jpeg, np.uint8) if isinstance(jpeg, (bytes, bytearray, memoryview)) else jpeg
    flag = cv2.IMREAD_REDUCED_COLOR_2 if width <= 160 else cv2.IMREAD_COLOR
    img = cv2.imdecode(buf, flag)
    if img is None:
        raise ValueError("frame is not a decodable JPEG")
    return preprocess_bgr(img, width, crop_rows)


def crop_band(img: np.ndarray, crop_rows: Sequence[int] | None) -> np.ndarray:
    """The band of rows `crop_rows` = (top, bottom) of the nominal 240-row frame, scaled to
    the image's own height (a half-size decode has 120 rows). Shape: (rows, W, ...)."""
    if crop_rows is None:
        return img
    s = img.shape[0] / CAMERA_H
    top, bottom = int(round(crop_rows[0] * s)), int(round(crop_rows[1] * s))
    return img[top:bottom]


def preprocess_bgr(img: np.ndarray, width: int, crop_rows: Sequence[int] | None = None) -> np.ndarray:
    """BGR uint8 camera image (any size, 4:3) -> RGB uint8 input. Shape: (h, width, 3)."""
    img = crop_band(img, crop_rows)
    h = input_height(width, crop_rows)
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

    sensors: the log's sensors/ fields (`t_device` (M,), `enc_rad` (M,), `yaw_rate`
    (M,), `accel` (M, 2), `vbat` (M,)); t_host (M,): sensors/t, used for the speed
    where the device clock is missing (NaN).
    """
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
    """A telemetry sample as a dict of log fields: from a dict or `hardware.rc_car.Telemetry`."""
    if isinstance(tlm, Mapping):
        return dict(tlm)
    return {k: getattr(tlm, k) for k in ("t_device", "enc_rad", "yaw_rate", "accel", "vbat")
            if hasattr(tlm, k)}


class TelemetryTracker:
    """`telemetry_features` one sample at a time (a robot's telemetry as it arrives).

    `update(tlm, t_host)` takes a sample (dict of log fields or a Telemetry) and
    returns its features, Shape: (F,). Calling it again with the same sample
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

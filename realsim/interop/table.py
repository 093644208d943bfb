"""One episode of a realsim log as fixed-rate rows: what frame-based formats store.

realsim logs keep every stream on its own clock (log_format.md); LeRobot and
robomimic store one row per control tick. :func:`episode_rows` puts an episode
on the control timeline (:func:`realsim.logs.control_timeline`): commands held
(zero-order hold, as the robot saw them), sensors linearly interpolated (integer
fields held), each camera's latest frame at or before the tick, privileged
series (sim logs) linearly interpolated.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from realsim.errors import UserError
from realsim.logs import Episode, control_timeline, resample
from realsim.logs.reader import CameraStream

SKIP_FIELDS = frozenset({"t_device", "seq", "ack", "flags"})
"""Sensor fields that are bookkeeping, not robot state: left out of state vectors."""

STATE_FIELDS = {"rc_car": ("enc_rad", "yaw_rate", "accel", "vbat"), "arm": ("qpos",)}
"""Which sensor fields make a robot's ``observation.state``, in order."""


@dataclass
class Rows:
    """An episode on a uniform grid. Shapes: t (T,); each field (T,) or (T, k)."""

    name: str
    fps: int
    t: np.ndarray
    action: np.ndarray
    sensors: dict[str, np.ndarray]
    frames: dict[str, np.ndarray] = field(default_factory=dict)
    """Per camera, (T,) int64 index of the frame shown at each row (>= 0)."""
    cameras: dict[str, CameraStream] = field(default_factory=dict)
    env: dict[str, np.ndarray] = field(default_factory=dict)
    """Privileged series (sim logs only), each (T, k) float64."""
    attrs: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.t)


def warn(msg: str) -> None:
    """One warning line on stderr (the CLI's last stdout line stays the result)."""
    print(f"realsim: warning: {' '.join(str(msg).split())}", file=sys.stderr)


def open_logs(stack: contextlib.ExitStack, paths: Sequence[str | Path]) -> tuple[str, list[Any]]:
    """Open every log, check one robot; return it and the episodes to export."""
    from realsim.logs import LogReader

    robot: str | None = None
    episodes = []
    for p in paths:
        r = stack.enter_context(LogReader(p))
        if robot is not None and r.robot != robot:
            raise UserError(f"{p}: a log of {r.robot}, but {paths[0]} is a log of {robot}; "
                            "export one robot at a time")
        robot = r.robot
        for ep in r.episodes(privileged=True):
            if not ep.complete or ep.attrs.get("discarded", False):
                warn(f"{p}: episode {ep.name} skipped ({'discarded' if ep.complete else 'incomplete'})")
                continue
            episodes.append(ep)
    if robot is None or not episodes:
        raise UserError(f"{', '.join(map(str, paths))}: no complete episode to export")
    return robot, episodes


def guess_fps(episodes: Iterable[Episode]) -> int:
    """The control rate, Hz: 1 / median command period (sensors if no commands), rounded."""
    dts: list[np.ndarray] = []
    for ep in episodes:
        t = ep.command.t if len(ep.command) > 1 else ep.sensors.t
        if len(t) > 1:
            d = np.diff(np.asarray(t, float))
            dts.append(d[d > 0])
    d = np.concatenate(dts) if dts else np.zeros(0)
    if not len(d):
        raise UserError("cannot tell the control rate (no episode has two commands or sensor "
                        "samples); pass --fps")
    return max(int(round(1.0 / float(np.median(d)))), 1)


def episode_rows(ep: Episode, fps: int) -> Rows:
    """``ep`` on a grid at ``fps`` from its first to its last sensor sample.

    An episode without sensor samples spans its commands instead. Raises a one-line
    UserError for an episode with neither.
    """
    span = ep.sensors.t if len(ep.sensors) else ep.command.t
    if not len(span):
        raise UserError(f"episode {ep.name}: no sensor samples and no commands to export")
    t0, t1 = float(span[0]), float(span[-1])
    tl = control_timeline(ep, float(fps), t0=t0, t1=t1)
    t = tl["t"]
    if "action" in tl:
        action = np.asarray(tl["action"], np.float32)
    else:
        action = np.zeros((len(t), 0), np.float32)
    sensors = {k: np.asarray(v) for k, v in tl.items()
               if k not in ("t", "action", "seq") and not k.startswith("frame_")}
    frames, cams = {}, {}
    for cam, cs in ep.cameras.items():
        if len(cs):
            frames[cam] = np.clip(tl[f"frame_{cam}"], 0, None)
            cams[cam] = cs
    env: dict[str, np.ndarray] = {}
    priv = ep.privileged or {}
    for k in sorted(priv):
        if k.endswith("_t") or f"{k}_t" not in priv:
            continue  # a static array, or a time column
        ts, data = np.asarray(priv[f"{k}_t"], float), np.asarray(priv[k])
        if len(ts) and data.dtype.kind in "biuf":
            env[k] = resample(ts, data.astype(float), t, "linear").reshape(len(t), -1)
    return Rows(ep.name, fps, t, action, sensors, frames, cams, env, dict(ep.attrs))


def flatten(fields: dict[str, np.ndarray], order: Iterable[str], T: int) -> tuple[np.ndarray, list[str]]:
    """Concatenate fields (T,) or (T, k) into (T, sum k) with one name per column.

    A k-column field ``accel`` gives names ``accel_x, accel_y`` for k == 2 (planar
    vectors) and ``accel_0 ..`` otherwise.
    """
    cols, names = [], []
    for k in order:
        v = np.asarray(fields[k], float).reshape(T, -1)
        cols.append(v)
        w = v.shape[1]
        if w == 1:
            names.append(k)
        elif w == 2:
            names += [f"{k}_x", f"{k}_y"]
        else:
            names += [f"{k}_{i}" for i in range(w)]
    return (np.concatenate(cols, axis=1) if cols else np.zeros((T, 0))), names


def state_fields(robot: str, sensors: dict[str, np.ndarray]) -> list[str]:
    """The sensor fields that form ``observation.state`` for ``robot``, present ones only.

    Unknown layouts fall back to every numeric non-bookkeeping field, sorted.
    """
    want = [k for k in STATE_FIELDS.get(robot, ()) if k in sensors]
    if want:
        return want
    return sorted(k for k, v in sensors.items() if k not in SKIP_FIELDS and v.dtype.kind in "biuf")


def env_matrix(rows: Rows) -> tuple[np.ndarray, list[str]]:
    """Privileged series concatenated (T, E) with names ``<key>_<i>``; E = 0 for real logs."""
    return flatten(rows.env, sorted(rows.env), len(rows))


class FrameCache:
    """Decode each logged JPEG once while rows walk forward through a camera.

    ``size`` (w, h): frames of another size are resized to it (a camera whose
    resolution changed mid-log still makes one video).
    """

    def __init__(self, cam: CameraStream, size: tuple[int, int] | None = None) -> None:
        self.cam = cam
        self.size = size
        self._i = -1
        self._img: np.ndarray | None = None

    def rgb(self, i: int) -> np.ndarray:
        """Frame ``i`` as (H, W, 3) RGB uint8; an undecodable frame repeats the last good one."""
        if i != self._i:
            try:
                img = self.cam.decode(int(i))
            except ValueError:
                img = self._img if self._img is not None else np.zeros((8, 8, 3), np.uint8)
            if self.size is not None and (img.shape[1], img.shape[0]) != self.size:
                import cv2

                img = cv2.resize(img, self.size, interpolation=cv2.INTER_AREA)
            self._i, self._img = i, img
        assert self._img is not None
        return self._img


def summary_stats(x: np.ndarray) -> dict[str, list | int]:
    """LeRobot-style statistics of a (N, k) array over rows: min, max, mean, std,
    count, and the 1/10/50/90/99 % quantiles, each a list of k values."""
    x = np.asarray(x, np.float64).reshape(len(x), -1)
    if not len(x):
        z = [0.0] * x.shape[1]
        return {"min": z, "max": z, "mean": z, "std": z, "count": [0],
                **{q: z for q in ("q01", "q10", "q50", "q90", "q99")}}
    qs = np.quantile(x, [0.01, 0.10, 0.50, 0.90, 0.99], axis=0)
    out: dict[str, list | int] = {
        "min": x.min(0).tolist(), "max": x.max(0).tolist(), "mean": x.mean(0).tolist(),
        "std": x.std(0).tolist(), "count": [int(len(x))]}
    for name, q in zip(("q01", "q10", "q50", "q90", "q99"), qs, strict=True):
        out[name] = q.tolist()
    return out


def finite_or_zero(x: np.ndarray) -> np.ndarray:
    """NaN/inf -> 0 (frame-based formats have no missing values); the array copied."""
    x = np.array(x, dtype=float)
    x[~np.isfinite(x)] = 0.0
    return x


"""The student's data: logged, robot-legal streams only -> (frame, telemetry, history) -> action chunk.

The wall of the method lives here: the loader reads `command/`, `sensors/` and
`camera/<name>/` through `realsim.logs.LogReader` with ``privileged=False``
(the reader then never loads that group's data), and any request for a key
under ``privileged/`` raises `UserError` before a file is opened.

One sample per logged command i (time t_i), as the robot saw it then:
- the latest camera frame at or before t_i,
- telemetry features (`student.features`) of the latest sensor sample at or
  before t_i, and of the `history` commands before (clamped at the first),
- the `history` previous actions (zeros before the first command),
- target: actions i .. i+k-1 (past the episode's end: the last action, masked).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from realsim.errors import UserError
from realsim.logs import LogReader
from student.config import StudentConfig
from student.features import SENSOR_FIELDS, preprocess_jpeg, telemetry_features

PRIVILEGED = "privileged"


def required_keys(cfg: StudentConfig) -> list[str]:
    """The log keys a config needs, e.g. ['command/action', 'sensors/enc_rad', 'camera/front']."""
    return ["command/action", *(f"sensors/{f}" for f in SENSOR_FIELDS), f"camera/{cfg.camera}"]


def check_keys(keys: Iterable[str]) -> list[str]:
    """Refuse any key under privileged/ (UserError); return the keys, normalised."""
    out = []
    for k in keys:
        norm = "/".join(p for p in str(k).strip().split("/") if p)
        if norm.split("/")[0].lower() == PRIVILEGED or f"/{PRIVILEGED}/" in f"/{norm.lower()}/":
            raise UserError(f"the student may not read {k!r}: privileged/ is the teacher's "
                            "simulator state, never a robot's observation")
        out.append(norm)
    return out


@dataclass
class StudentData:
    """All samples in memory. N samples, Nf frames, F telemetry features, H history, k chunk.

    frames (Nf, h, w, 3) uint8 RGB; frame (N,) int64 index into frames;
    frame_lo (N,) int64 first frame of the sample's episode; tel (N, H+1, F) float32
    (row 0 = now, row j = j commands ago); past_actions (N, H, 2) float32 (row 0 = the
    previous command); chunk (N, k, 2) float32; mask (N, k) bool; episode (N,) int64.
    """

    frames: np.ndarray
    frame: np.ndarray
    frame_lo: np.ndarray
    tel: np.ndarray
    past_actions: np.ndarray
    chunk: np.ndarray
    mask: np.ndarray
    episode: np.ndarray
    n_episodes: int

    def __len__(self) -> int:
        return len(self.frame)

    def subset(self, idx: np.ndarray) -> StudentData:
        return StudentData(self.frames, self.frame[idx], self.frame_lo[idx], self.tel[idx],
                           self.past_actions[idx], self.chunk[idx], self.mask[idx],
                           self.episode[idx], self.n_episodes)

    def split(self, val_fraction: float, seed: int) -> tuple[StudentData, StudentData]:
        """By episode, so no validation frame has a near twin in training."""
        rng = np.random.default_rng(seed)
        eps = rng.permutation(self.n_episodes)
        n_val = int(round(val_fraction * self.n_episodes)) if val_fraction > 0 else 0
        if val_fraction > 0 and self.n_episodes > 1:
            n_val = max(1, min(n_val, self.n_episodes - 1))
        val = np.isin(self.episode, eps[:n_val])
        return self.subset(np.flatnonzero(~val)), self.subset(np.flatnonzero(val))

    def telemetry_stats(self) -> tuple[np.ndarray, np.ndarray]:
        """Mean and std of the current-tick features. Shape: (F,), (F,)."""
        cur = self.tel[:, 0].astype(np.float64)
        mean = cur.mean(0) if len(cur) else np.zeros(self.tel.shape[-1])
        std = cur.std(0) if len(cur) else np.ones(self.tel.shape[-1])
        return mean.astype(np.float32), np.maximum(std, 1e-3).astype(np.float32)


def _episode_samples(ep, cfg: StudentConfig, frame_base: int):  # noqa: ANN001, ANN202
    """Index arrays for one episode (see StudentData); None if it has nothing usable."""
    cmd, sens = ep.command, ep.sensors
    cam = ep.cameras.get(cfg.camera)
    if cam is None or len(cam) == 0 or len(cmd) == 0 or len(sens) == 0:
        return None
    t = np.asarray(cmd.t, np.float64)
    act = np.clip(np.asarray(cmd["action"], np.float32).reshape(len(t), -1)[:, :2], -1, 1)
    fi = np.searchsorted(cam.t, t, side="right") - 1
    use = np.flatnonzero(fi >= 0)
    if len(use) == 0:
        return None
    feats = telemetry_features({k: sens[k] for k in SENSOR_FIELDS if k in sens}, sens.t,
                               cfg.telemetry_fields)
    si = np.clip(np.searchsorted(sens.t, t, side="right") - 1, 0, len(sens) - 1)
    n, k, h = len(t), cfg.chunk_len, cfg.history
    lag = np.arange(h + 1)
    tel = feats[si[np.clip(use[:, None] - lag[None, :], 0, None)]]  # (N, H+1, F)
    pa_idx = use[:, None] - 1 - np.arange(h)[None, :]  # (N, H)
    past = np.where((pa_idx >= 0)[..., None], act[np.clip(pa_idx, 0, None)], 0.0).astype(np.float32)
    ci = use[:, None] + np.arange(k)[None, :]
    mask = ci < n
    chunk = act[np.clip(ci, 0, n - 1)]
    return (fi[use] + frame_base, tel, past, chunk, mask)


def _decode_all(jpegs: Sequence[bytes], cfg: StudentConfig) -> np.ndarray:
    """Every frame at the input size. Shape: (n, h, w, 3) uint8 RGB."""
    out = np.empty((len(jpegs), cfg.image_height, cfg.image_width, 3), np.uint8)

    def work(i: int) -> None:
        out[i] = preprocess_jpeg(jpegs[i], cfg.image_width, cfg.crop_rows)

    with ThreadPoolExecutor(max(1, min(4, os.cpu_count() or 1))) as pool:
        list(pool.map(work, range(len(jpegs))))
    return out


def load_dataset(paths: Sequence[str | Path], cfg: StudentConfig,
                 keys: Sequence[str] | None = None, *, only_successful: bool = True,
                 max_episodes: int | None = None, log=None) -> StudentData:  # noqa: ANN001
    """Read every complete, kept (and, if known, successful) episode of `paths`.

    keys: the log keys to read (default `required_keys(cfg)`); anything under
    privileged/ raises UserError before any file is opened.
    """
    keys = check_keys(required_keys(cfg) if keys is None else keys)
    check_keys([cfg.camera, *cfg.telemetry_fields])
    frames: list[np.ndarray] = []
    parts: list[tuple] = []
    n_frames = 0
    n_ep = 0
    skipped = 0
    for path in paths:
        with LogReader(path) as r:
            if r.robot != "rc_car":
                raise UserError(f"{path}: a log of {r.robot}, the student drives rc_car")
            for name in r.episode_names:
                if max_episodes is not None and n_ep >= max_episodes:
                    break
                ep = r.episode(name, privileged=False)
                if not ep.complete or ep.attrs.get("discarded", False) or \
                        (only_successful and ep.success == 0):
                    skipped += 1
                    continue
                s = _episode_samples(ep, cfg, n_frames)
                if s is None:
                    skipped += 1
                    continue
                cam = ep.cameras[cfg.camera]
                f = _decode_all(cam.jpeg, cfg)
                frames.append(f)
                parts.append((*s, np.full(len(s[0]), n_frames, np.int64), np.full(len(s[0]), n_ep)))
                n_frames += len(f)
                n_ep += 1
    if not parts:
        raise UserError(f"no usable episodes in {', '.join(map(str, paths))} "
                        f"({skipped} skipped: incomplete, discarded, failed or without camera)")
    if log:
        log(f"data: {n_ep} episodes ({skipped} skipped), {sum(len(p[0]) for p in parts)} samples, "
            f"{n_frames} frames at {cfg.image_width}x{cfg.image_height}")
    cat = [np.concatenate([p[j] for p in parts]) for j in range(7)]
    return StudentData(frames=np.concatenate(frames), frame=cat[0].astype(np.int64),
                       frame_lo=cat[5].astype(np.int64), tel=cat[1].astype(np.float32),
                       past_actions=cat[2].astype(np.float32), chunk=cat[3].astype(np.float32),
                       mask=cat[4], episode=cat[6].astype(np.int64), n_episodes=n_ep)

"""The student's data: logged, robot-legal streams only -> (frames, telemetry, history) -> action chunk.

The wall of the method lives here: the loader reads `command/`, `sensors/` and
`camera/<name>/` through `realsim.logs.LogReader` with ``privileged=False``
(the reader then never loads that group's data), and any request for a key
under ``privileged/`` raises `UserError` before a file is opened.

One sample per logged command i (time t_i), as the robot saw it then:
- the latest frame of each configured camera at or before t_i (samples before every
  camera has a frame are dropped),
- telemetry features (`student.features`) of the latest sensor sample at or
  before t_i, and of the `history` commands before (clamped at the first),
- the `history` previous actions (zeros before the first command),
- target: actions i .. i+k-1 (past the episode's end: the last action, masked, or with
  `cfg.tail == "hold"` and a successful episode, kept).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from realsim.errors import UserError
from realsim.logs import LogReader
from student.config import StudentConfig
from student.features import preprocess_jpeg, sensor_fields, telemetry_features

PRIVILEGED = "privileged"


def required_keys(cfg: StudentConfig) -> list[str]:
    """The log keys a config needs, e.g. ['command/action', 'sensors/enc_rad', 'camera/front']."""
    return ["command/action", *(f"sensors/{f}" for f in sensor_fields(cfg.telemetry_fields)),
            *(f"camera/{c}" for c in cfg.cameras)]


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
    """All samples in memory. N samples, Nf frames (all cameras), C cameras, F telemetry
    features, H history, k chunk, A action size.

    frames (Nf, h, w, 3) uint8 RGB; frame (N, C) int64 index into frames, one per camera
    in `cfg.cameras` order; frame_lo (N, C) int64 that camera's first frame in the
    sample's episode; tel (N, H+1, F) float32 (row 0 = now, row j = j commands ago);
    past_actions (N, H, A) float32 (row 0 = the previous command); chunk (N, k, A)
    float32; mask (N, k) bool; episode (N,) int64.
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
    frame_size: tuple[int, int] | None = None
    """(W, H) of the recorded camera frames (the first frame's): evaluation renders at it."""

    def __len__(self) -> int:
        return len(self.frame)

    def subset(self, idx: np.ndarray) -> StudentData:
        return StudentData(self.frames, self.frame[idx], self.frame_lo[idx], self.tel[idx],
                           self.past_actions[idx], self.chunk[idx], self.mask[idx],
                           self.episode[idx], self.n_episodes, self.frame_size)

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


def _episode_samples(ep, cfg: StudentConfig, frame_base: list[int], where: str):  # noqa: ANN001, ANN202
    """Index arrays for one episode (see StudentData); None if it has nothing usable.

    frame_base: per camera, the index its first frame will have in `frames`."""
    cmd, sens = ep.command, ep.sensors
    cams = []
    for c in cfg.cameras:
        cam = ep.cameras.get(c)
        if cam is None:
            have = ", ".join(sorted(ep.cameras)) or "none"
            raise UserError(f"{where}: no camera {c!r} in the data (cameras: {have}); "
                            "choose the config's cameras from those")
        cams.append(cam)
    if any(len(cam) == 0 for cam in cams) or len(cmd) == 0 or len(sens) == 0:
        return None
    t = np.asarray(cmd.t, np.float64)
    raw = np.asarray(cmd["action"], np.float32).reshape(len(t), -1)
    if raw.shape[1] < cfg.action_dim:
        raise UserError(f"{where}: actions are {raw.shape[1]} wide, {cfg.robot} needs {cfg.action_dim}")
    act = np.clip(raw[:, :cfg.action_dim], -1, 1)
    fi = np.stack([np.searchsorted(cam.t, t, side="right") - 1 for cam in cams], axis=1)  # (n, C)
    use = np.flatnonzero((fi >= 0).all(axis=1))
    if len(use) == 0:
        return None
    feats = telemetry_features({k: sens[k] for k in sensor_fields(cfg.telemetry_fields) if k in sens},
                               sens.t, cfg.telemetry_fields)
    si = np.clip(np.searchsorted(sens.t, t, side="right") - 1, 0, len(sens) - 1)
    n, k, h = len(t), cfg.chunk_len, cfg.history
    lag = np.arange(h + 1)
    tel = feats[si[np.clip(use[:, None] - lag[None, :], 0, None)]]  # (N, H+1, F)
    pa_idx = use[:, None] - 1 - np.arange(h)[None, :]  # (N, H)
    past = np.where((pa_idx >= 0)[..., None], act[np.clip(pa_idx, 0, None)], 0.0).astype(np.float32)
    ci = use[:, None] + np.arange(k)[None, :]
    mask = ci < n
    if cfg.tail == "hold" and ep.success == 1:
        mask = np.ones_like(mask)  # the judge ended it: the last action stands for what follows
    chunk = act[np.clip(ci, 0, n - 1)]
    base = np.asarray(frame_base, np.int64)[None, :]
    return (fi[use] + base, tel, past, chunk, mask, np.broadcast_to(base, (len(use), len(cams))))


def _decode_all(jpegs: Sequence[bytes], cfg: StudentConfig) -> np.ndarray:
    """Every frame at the input size. Shape: (n, h, w, 3) uint8 RGB."""
    out = np.empty((len(jpegs), cfg.image_height, cfg.image_width, 3), np.uint8)
    size = cfg.camera_size

    def work(i: int) -> None:
        out[i] = preprocess_jpeg(jpegs[i], cfg.image_width, cfg.crop_rows, size, cfg.input_mode)

    with ThreadPoolExecutor(max(1, min(4, os.cpu_count() or 1))) as pool:
        list(pool.map(work, range(len(jpegs))))
    return out


def _release_freed_memory() -> None:
    """Hand the C heap's free pages back to the OS (glibc's malloc_trim; nothing elsewhere).
    The per-episode frame blocks (a few MB each) live on the heap, and freeing them does
    not shrink the process: without this, `_stack` held 23.7 GB resident for 11.6 GB of
    frames (2000 arm episodes, measured) and left no room for the evaluation worker."""
    try:
        ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _stack(blocks: list[np.ndarray], trim_bytes: int = 256 << 20) -> np.ndarray:
    """np.concatenate(blocks), emptying `blocks` as it copies and returning the freed memory
    every `trim_bytes`: the peak is the frames once plus a little, not twice the frames
    (2000 arm episodes at 80x60 are 11.6 GB of frames on a 24 GB machine). Shape: (sum n_i, ...)."""
    out = np.empty((sum(len(b) for b in blocks), *blocks[0].shape[1:]), blocks[0].dtype)
    blocks.reverse()
    i = freed = 0
    while blocks:
        b = blocks.pop()
        out[i:i + len(b)] = b
        i += len(b)
        freed += b.nbytes
        del b
        if freed >= trim_bytes:
            _release_freed_memory()
            freed = 0
    _release_freed_memory()
    return out


def check_data(paths: Sequence[str | Path], cfg: StudentConfig) -> None:
    """Cheap checks before any work: every file exists, is a log of `cfg.robot`, and its
    first episode has every camera the config uses (UserError, one line, otherwise)."""
    for path in paths:
        if not Path(path).is_file():
            raise UserError(f"no such file: {path}")
        with LogReader(path) as r:  # a foreign or corrupt file stops here
            if r.robot != cfg.robot:
                raise UserError(f"{path}: a log of {r.robot}, not {cfg.robot}")
            if r.episode_names:
                name = r.episode_names[0]
                have = r.episode(name, privileged=False).cameras
                missing = [c for c in cfg.cameras if c not in have]
                if missing:
                    raise UserError(f"{path} {name}: no camera {missing[0]!r} in the data (cameras: "
                                    f"{', '.join(sorted(have)) or 'none'}); choose the config's "
                                    "cameras from those")


def load_dataset(paths: Sequence[str | Path], cfg: StudentConfig,
                 keys: Sequence[str] | None = None, *, only_successful: bool = True,
                 max_episodes: int | None = None, log=None) -> StudentData:  # noqa: ANN001
    """Read every complete, kept (and, if known, successful) episode of `paths`.

    keys: the log keys to read (default `required_keys(cfg)`); anything under
    privileged/ raises UserError before any file is opened.
    """
    keys = check_keys(required_keys(cfg) if keys is None else keys)
    check_keys([*cfg.cameras, *cfg.telemetry_fields])
    frames: list[np.ndarray] = []
    parts: list[tuple] = []
    n_frames = 0
    n_ep = 0
    skipped = 0
    frame_size: tuple[int, int] | None = None
    for path in paths:
        with LogReader(path) as r:
            if r.robot != cfg.robot:
                raise UserError(f"{path}: a log of {r.robot}, the student was asked to drive {cfg.robot}")
            for name in r.episode_names:
                if max_episodes is not None and n_ep >= max_episodes:
                    break
                ep = r.episode(name, privileged=False)
                if not ep.complete or ep.attrs.get("discarded", False) or \
                        (only_successful and ep.success == 0):
                    skipped += 1
                    continue
                base, n_cam = [], n_frames
                for c in cfg.cameras:
                    base.append(n_cam)
                    cam = ep.cameras.get(c)
                    n_cam += len(cam) if cam is not None else 0
                s = _episode_samples(ep, cfg, base, f"{path} {name}")
                if s is None:
                    skipped += 1
                    continue
                if frame_size is None:
                    first = cv2.imdecode(np.frombuffer(ep.cameras[cfg.cameras[0]].jpeg[0], np.uint8),
                                         cv2.IMREAD_COLOR)
                    frame_size = None if first is None else (first.shape[1], first.shape[0])
                for c in cfg.cameras:
                    f = _decode_all(ep.cameras[c].jpeg, cfg)
                    frames.append(f)
                    n_frames += len(f)
                parts.append((*s, np.full(len(s[0]), n_ep)))
                n_ep += 1
    if not parts:
        raise UserError(f"no usable episodes in {', '.join(map(str, paths))} "
                        f"({skipped} skipped: incomplete, discarded, failed or without camera)")
    if log:
        log(f"data: {n_ep} episodes ({skipped} skipped), {sum(len(p[0]) for p in parts)} samples, "
            f"{n_frames} frames ({', '.join(cfg.cameras)}) at {cfg.image_width}x{cfg.image_height}")
    cat = [np.concatenate([p[j] for p in parts]) for j in range(7)]
    return StudentData(frames=_stack(frames), frame=cat[0].astype(np.int64),
                       frame_lo=cat[5].astype(np.int64), tel=cat[1].astype(np.float32),
                       past_actions=cat[2].astype(np.float32), chunk=cat[3].astype(np.float32),
                       mask=cat[4], episode=cat[6].astype(np.int64), n_episodes=n_ep,
                       frame_size=frame_size)

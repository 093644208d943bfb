"""Checkpoints and the run-time policy shared by simulation evaluation and deployment.

A checkpoint is a plain dict saved with `torch.save`, loadable with
``torch.load(path, weights_only=True)``:

    {"format": "realsim-student", "version": 1,
     "state_dict": {...},                       # StudentPolicy weights + telemetry stats
     "config": {...},                           # StudentConfig.as_dict(), incl. execution
     "norm": {"tel_mean": [...], "tel_std": [...], "features": [...]},
     "meta": {...}}                             # epoch, sim success, val loss, data files

`PolicyRunner` turns what a robot shows at one control tick (telemetry, the
latest JPEG of each camera) into one action with exactly training's preprocessing
(`student.features`) and the configured execution strategy.
"""

from __future__ import annotations

import math
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np
import torch

from realsim.errors import UserError
from student.config import StudentConfig
from student.execution import Execution, make_execution
from student.features import TelemetryTracker, preprocess_jpeg, telemetry_dict
from student.model import StudentPolicy, frames_to_tensor, upgrade_state_dict
from student.robots import robot_spec

CKPT_FORMAT = "realsim-student"
CKPT_VERSION = 1


def save_checkpoint(path: str | Path, model: StudentPolicy, cfg: StudentConfig,
                    meta: dict[str, Any] | None = None) -> None:
    """Write a weights_only-loadable checkpoint (atomically: tmp file + rename)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    ck = checkpoint_dict(model, cfg, meta)
    tmp = p.with_name(p.name + ".tmp")
    torch.save(ck, tmp)
    tmp.replace(p)


def checkpoint_dict(model: StudentPolicy, cfg: StudentConfig,
                    meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """The checkpoint as a plain dict (what `save_checkpoint` writes)."""
    sd = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
    return {"format": CKPT_FORMAT, "version": CKPT_VERSION, "state_dict": sd,
            "config": cfg.as_dict(),
            "norm": {"tel_mean": model.tel_mean.tolist(), "tel_std": model.tel_std.tolist(),
                     "features": list(cfg.telemetry_fields)},
            "meta": _plain(meta or {})}


def _plain(x: Any) -> Any:
    """Only types torch's weights_only unpickler accepts."""
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, (np.floating, np.integer)):
        return x.item()
    if isinstance(x, (str, int, float, bool)) or x is None:
        return x
    return str(x)


def load_checkpoint(path: str | Path) -> tuple[StudentPolicy, StudentConfig, dict[str, Any]]:
    """(model in eval mode, config, meta). A file that is no student checkpoint is a UserError."""
    p = Path(path)
    if not p.is_file():
        raise UserError(f"no such checkpoint: {p}")
    try:
        ck = torch.load(p, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - pickle/zip errors of all kinds
        raise UserError(f"{p}: not a student checkpoint ({type(e).__name__})") from None
    if not isinstance(ck, dict) or ck.get("format") != CKPT_FORMAT:
        raise UserError(f"{p}: not a student checkpoint (format {ck.get('format') if isinstance(ck, dict) else '?'!r})")
    if ck.get("version") != CKPT_VERSION:
        raise UserError(f"{p}: student checkpoint version {ck.get('version')!r} is not supported")
    model = model_from_checkpoint(ck)
    return model, StudentConfig.from_dict(ck["config"]), ck.get("meta", {})


def _upgrade(ck: dict[str, Any]) -> dict[str, Any]:
    """Checkpoints written before `crop_rows` existed saw the whole frame: say so in their
    config (in place, so every later `StudentConfig.from_dict(ck["config"])` agrees)."""
    ck["config"].setdefault("crop_rows", None)
    if "camera" in ck["config"] and "cameras" not in ck["config"]:
        ck["config"]["cameras"] = [ck["config"].pop("camera")]
    ck["state_dict"] = upgrade_state_dict(ck["state_dict"])
    return ck


def model_from_checkpoint(ck: dict[str, Any]) -> StudentPolicy:
    """The policy of a checkpoint dict, in eval mode (upgrades an old config in place)."""
    cfg = StudentConfig.from_dict(_upgrade(ck)["config"])
    model = StudentPolicy(cfg)
    sd = dict(ck["state_dict"])
    for k, v in model.state_dict().items():  # blob moments from before their scaling: none
        if k.endswith((".moments.mean", ".moments.std")) and k not in sd:
            sd[k] = v
    model.load_state_dict(sd)
    model.eval()
    return model


class PolicyRunner:
    """One control tick in, one action out. Shape: action (A,) in [-1, 1].

    `act(telemetry, frames)`: telemetry is the latest sample (dict of log sensor fields,
    a `hardware.rc_car.Telemetry` or a `hardware.arm.ArmState`); frames the latest JPEG
    of each camera, as {name: bytes | (t, bytes) | None} or, for the first configured
    camera alone, bytes (None: no new frame; the last one is kept). Until every configured
    camera has delivered a frame it returns the robot's idle action (the car: [0, 0],
    centred and coasting; the arm: hold where it is). `reset()` at every episode start.
    """

    def __init__(self, model: StudentPolicy, cfg: StudentConfig,
                 execution: Execution | None = None) -> None:
        self.model, self.cfg = model.eval(), cfg
        self.robot = robot_spec(cfg.robot)
        self.execution = execution or make_execution(
            cfg.execution, chunk_len=cfg.chunk_len, execute_n=cfg.execute_n,
            ensemble_m=cfg.ensemble_m)
        self.tracker = TelemetryTracker(cfg.telemetry_fields)
        self.queries = 0
        self.reset()

    @classmethod
    def from_checkpoint(cls, path: str | Path, execution: Execution | None = None) -> PolicyRunner:
        model, cfg, _ = load_checkpoint(path)
        return cls(model, cfg, execution)

    def reset(self) -> None:
        self.execution.reset()
        self.tracker.reset()
        h, a = self.cfg.history, self.cfg.action_dim
        self._tel: deque[np.ndarray] = deque(maxlen=h + 1)
        self._past: deque[np.ndarray] = deque([np.zeros(a, np.float32)] * h, maxlen=max(h, 1))
        self._imgs: dict[str, torch.Tensor] = {}
        self._jpegs: dict[str, Any] = {}

    def preprocess(self, jpeg: bytes) -> np.ndarray:
        """One camera JPEG -> the model's input image, as training decodes it. Shape: (h, w, 3)."""
        return preprocess_jpeg(jpeg, self.cfg.image_width, self.cfg.crop_rows, self.cfg.camera_size,
                               self.cfg.input_mode)

    def set_frame(self, jpeg: Any, camera: str | None = None) -> None:
        """Take a camera's latest frame (bytes, or (t, bytes); None: nothing new)."""
        if isinstance(jpeg, tuple):
            jpeg = jpeg[1]
        camera = camera or self.cfg.cameras[0]
        if jpeg is None or camera not in self.cfg.cameras or jpeg is self._jpegs.get(camera):
            return
        self._jpegs[camera] = jpeg
        self._imgs[camera] = frames_to_tensor(self.preprocess(jpeg)[None])

    def act(self, telemetry: Any, frames: Any = None, t_host: float = math.nan) -> np.ndarray:
        if isinstance(frames, dict):
            for name, jpeg in frames.items():
                self.set_frame(getattr(jpeg, "jpeg", jpeg), name)
        else:
            self.set_frame(frames)
        f = self.tracker.update(telemetry, t_host) if telemetry is not None else \
            np.zeros(self.model.tel_mean.shape[0], np.float32)
        self._tel.appendleft(f)
        while len(self._tel) < self._tel.maxlen:  # type: ignore[operator]
            self._tel.append(self._tel[-1])  # clamp at the first sample, as in training
        if len(self._imgs) < len(self.cfg.cameras):
            a = self.robot.idle_action(None if telemetry is None else telemetry_dict(telemetry))
        else:
            a = np.clip(self.execution.step(self._predict), -1.0, 1.0)
        if self.cfg.history:
            self._past.appendleft(a.astype(np.float32))
        return a

    def _predict(self) -> np.ndarray:
        """The model's chunk for the current inputs. Shape: (k, A)."""
        self.queries += 1
        tel = torch.from_numpy(np.stack(self._tel))[None]
        past = torch.from_numpy(np.stack(self._past)[: self.cfg.history])[None] if self.cfg.history \
            else torch.zeros(1, 0, self.cfg.action_dim)
        img = torch.cat([self._imgs[c] for c in self.cfg.cameras], dim=1)
        with torch.inference_mode():
            return self.model(img, tel, past)[0].numpy().astype(np.float64)

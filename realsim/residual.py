"""The learned residual dynamics model: network, bounded output, normalisation, checkpoint.

A residual is a small MLP over a short history of the simulator's own state, the
commands acting on the car (after latency) and the battery voltage. Its output is
bounded (``tanh * max``) and is applied *inside* the MuJoCo step by the hybrid
simulator (`realsim.sim`) as a generalised force held over ``period`` physics steps:

- ``fx``, ``fy``: force (N) in the chassis frame, at the body origin, on the free joint;
- ``mz``: yaw moment (N m) on the free joint;
- ``tau``: torque (N m) on the rear differential tendon (half on each rear wheel).

Ablation only (never the product default): ``mode="state"`` outputs velocity
increments (``dvx``, ``dvy``, ``dr`` in m/s, m/s, rad/s; ``dw`` in rad/s of the mean
rear-wheel speed) that overwrite the state at each period boundary.

Features per history sample (`FEATURES`), all read from the simulator state at a
period boundary: body-frame velocities, yaw rate, mean rear-wheel speed, mean front
steering angle, the step's mean steering target, drive voltage, brake duty, battery
voltage. The checkpoint is a plain dict of tensors and built-in types, so
``torch.load(path, weights_only=True)`` reads it; this module lives in ``realsim/``
so the simulator entry point can run a residual without importing ``dynamics/``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from realsim.errors import UserError

FEATURES = ("vx", "vy", "yaw_rate", "wheel_speed", "steer", "steer_cmd", "drive", "brake", "vbat")
FORCE_OUTPUTS = ("fx", "fy", "mz", "tau")
STATE_OUTPUTS = ("dvx", "dvy", "dr", "dw")
# Bounds of each output (physical scale). 20 % of m g for the forces; that force at half
# the wheelbase for the moment; the drive's stall torque order for the tendon torque.
_MG = 1.05 * 9.81
DEFAULT_MAX: dict[str, float] = {
    "fx": 0.2 * _MG,
    "fy": 0.2 * _MG,
    "mz": 0.2 * _MG * 0.0925,
    "tau": 0.1,
    "dvx": 0.05,
    "dvy": 0.05,
    "dr": 0.1,
    "dw": 1.5,
}
CKPT_FORMAT = "realsim-residual"
CKPT_VERSION = 1


@dataclass
class ResidualConfig:
    """Structure of a residual model.

    history: samples of the feature history the network sees (1 = no history).
    period: physics steps the output is held for (10 at dt 2 ms = 50 Hz).
    mode: "force" (generalised force inside the step) or "state" (ablation: velocity
        increments written into the state at period boundaries).
    outputs: output channels, a subset of FORCE_OUTPUTS (or STATE_OUTPUTS for "state").
    """

    robot: str = "rc_car"
    history: int = 5
    period: int = 10
    hidden: tuple[int, ...] = (64, 64)
    mode: str = "force"
    outputs: tuple[str, ...] = FORCE_OUTPUTS
    max_out: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_MAX))

    def __post_init__(self) -> None:
        self.hidden = tuple(int(h) for h in self.hidden)
        self.outputs = tuple(self.outputs)
        allowed = FORCE_OUTPUTS if self.mode == "force" else STATE_OUTPUTS
        if self.mode not in ("force", "state"):
            raise ValueError(f"mode {self.mode!r}: expected 'force' or 'state'")
        if not self.outputs or any(o not in allowed for o in self.outputs):
            raise ValueError(f"outputs {self.outputs} must be a subset of {allowed}")
        if self.history < 1 or self.period < 1:
            raise ValueError("history and period must be >= 1")

    def bounds(self) -> list[float]:
        """Per-output bound, in `outputs` order."""
        return [float(self.max_out[o]) for o in self.outputs]


class ResidualNet(nn.Module):
    """MLP residual with input normalisation and a tanh-bounded output.

    forward: x Shape: (B, history, len(FEATURES)) raw features -> Shape: (B, len(outputs))
    in physical units, each within +-bound.
    """

    def __init__(self, cfg: ResidualConfig) -> None:
        super().__init__()
        self.cfg = cfg
        nf = len(FEATURES)
        self.register_buffer("x_mean", torch.zeros(nf, dtype=torch.float64))
        self.register_buffer("x_std", torch.ones(nf, dtype=torch.float64))
        self.register_buffer("bound", torch.tensor(cfg.bounds(), dtype=torch.float64))
        layers: list[nn.Module] = []
        width = cfg.history * nf
        for h in cfg.hidden:
            layers += [nn.Linear(width, h, dtype=torch.float64), nn.Tanh()]
            width = h
        self.head = nn.Linear(width, len(cfg.outputs), dtype=torch.float64)
        self.body = nn.Sequential(*layers)
        with torch.no_grad():  # start near zero: the fitted simulator, slightly perturbed
            self.head.weight.mul_(0.01)
            self.head.bias.zero_()

    def set_normalisation(self, mean: torch.Tensor, std: torch.Tensor) -> None:
        """Feature mean and std (Shape: (len(FEATURES),)); std floored at 1e-3."""
        self.x_mean.copy_(mean.to(torch.float64))
        self.x_std.copy_(torch.clamp(std.to(torch.float64), min=1e-3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = (x - self.x_mean) / self.x_std
        z = z.reshape(z.shape[0], -1)
        return torch.tanh(self.head(self.body(z))) * self.bound

    def zero_(self) -> ResidualNet:
        """Make the output exactly zero everywhere (tests: the fitted simulator)."""
        with torch.no_grad():
            self.head.weight.zero_()
            self.head.bias.zero_()
        return self


@dataclass
class Residual:
    """A loaded residual: the network in eval mode plus what was saved with it."""

    net: ResidualNet
    meta: dict[str, Any]

    @property
    def cfg(self) -> ResidualConfig:
        return self.net.cfg

    @torch.no_grad()
    def __call__(self, hist: Any) -> Any:
        """numpy history Shape: (B, history, F) -> numpy output Shape: (B, n_out)."""
        x = torch.as_tensor(hist, dtype=torch.float64)
        return self.net(x).numpy()


def save_residual(path: str | Path, net: ResidualNet, meta: Mapping[str, Any] | None = None) -> Path:
    """Write a checkpoint of plain dicts and tensors (loads with weights_only=True)."""
    cfg = asdict(net.cfg)
    cfg["hidden"] = list(cfg["hidden"])
    cfg["outputs"] = list(cfg["outputs"])
    blob = {
        "format": CKPT_FORMAT,
        "version": CKPT_VERSION,
        "config": cfg,
        "state_dict": {k: v.detach().clone() for k, v in net.state_dict().items()},
        "features": list(FEATURES),
        "meta": _plain(dict(meta or {})),
    }
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    torch.save(blob, p)
    return p


def _plain(v: Any) -> Any:
    """Built-in types only (weights_only=True accepts them)."""
    if isinstance(v, Mapping):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, (str, bool, int)) or v is None:
        return v
    try:
        return float(v)
    except (TypeError, ValueError):
        return str(v)


def residual_from_blob(blob: Mapping[str, Any], where: str = "checkpoint") -> Residual:
    """Build a Residual from a loaded checkpoint dict."""
    if not isinstance(blob, Mapping) or blob.get("format") != CKPT_FORMAT:
        raise UserError(f"{where}: not a realsim residual checkpoint")
    if int(blob.get("version", -1)) != CKPT_VERSION:
        raise UserError(f"{where}: residual checkpoint version {blob.get('version')} unknown")
    if list(blob.get("features", [])) != list(FEATURES):
        raise UserError(f"{where}: residual features {blob.get('features')} differ from {FEATURES}")
    c = dict(blob["config"])
    c["hidden"] = tuple(c["hidden"])
    c["outputs"] = tuple(c["outputs"])
    net = ResidualNet(ResidualConfig(**c))
    net.load_state_dict(blob["state_dict"])
    net.eval()
    return Residual(net, dict(blob.get("meta", {})))


def load_residual(path: str | Path, robot: str | None = None) -> Residual:
    """Load a residual checkpoint with ``torch.load(weights_only=True)``.

    One-line UserError for a missing or foreign file, or (given `robot`) a checkpoint
    trained for another robot.
    """
    p = Path(path)
    if not p.is_file():
        raise UserError(f"no such residual checkpoint: {p}")
    try:
        blob = torch.load(p, weights_only=True, map_location="cpu")
    except Exception as e:  # noqa: BLE001 - any unreadable file is the user's input
        raise UserError(f"{p}: cannot read as a residual checkpoint ({type(e).__name__})") from None
    res = residual_from_blob(blob, str(p))
    if robot is not None and res.cfg.robot != robot:
        raise UserError(f"{path}: residual checkpoint for {res.cfg.robot}, not {robot}")
    return res


def zero_residual(cfg: ResidualConfig | None = None) -> Residual:
    """A residual whose output is exactly zero (the fitted simulator)."""
    return Residual(ResidualNet(cfg or ResidualConfig()).zero_().eval(), {})


__all__ = [
    "FEATURES",
    "FORCE_OUTPUTS",
    "STATE_OUTPUTS",
    "Residual",
    "ResidualConfig",
    "ResidualNet",
    "load_residual",
    "residual_from_blob",
    "save_residual",
    "zero_residual",
]

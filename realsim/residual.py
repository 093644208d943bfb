"""The learned residual dynamics model: network, bounded output, normalisation, checkpoint.

A residual is a small MLP over a short history of the simulator's own state and the
commands acting on the robot (after latency). Its output is bounded (``tanh * max``)
and is applied *inside* the MuJoCo step by the hybrid simulator (`realsim.sim`) as a
generalised force held over ``period`` physics steps. What it sees and what it may
output depend on the robot (`ROBOT_IO`):

rc_car: features (`FEATURES`) body-frame velocities, yaw rate, mean rear-wheel speed,
mean front steering angle, the step's mean steering target, drive voltage, brake duty,
battery voltage; outputs

- ``fx``, ``fy``: force (N) in the chassis frame, at the body origin, on the free joint;
- ``mz``: yaw moment (N m) on the free joint;
- ``tau``: torque (N m) on the rear differential tendon (half on each rear wheel);
- ``tau_steer``: torque (N m) on each front steering knuckle's hinge, where the steering
  servo acts (an actuator-level correction: the real wheels may follow the servo more
  slowly through their linkage, or give under load, than the modelled knuckle).

Ablation only (never the product default): ``mode="state"`` outputs velocity
increments (``dvx``, ``dvy``, ``dr`` in m/s, m/s, rad/s; ``dw`` in rad/s of the mean
rear-wheel speed) that overwrite the state at each period boundary.

arm: features (`ARM_FEATURES`) the five revolute joints' output angles and speeds and
the goals acting on them; outputs ``tau_<joint>``: a torque (N m) on each joint's motor
hinge, where the servo's own torque acts (an actuator-level correction). No state
ablation.

The first `RobotIO.nstate` features are the robot's reduced state (residual training
perturbs and corrects exactly these). The checkpoint is a plain dict of tensors and built-in types, so
``torch.load(path, weights_only=True)`` reads it; this module lives in ``realsim/``
so the simulator entry point can run a residual without importing ``dynamics/``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from realsim.errors import UserError

FEATURES = ("vx", "vy", "yaw_rate", "wheel_speed", "steer", "steer_cmd", "drive", "brake", "vbat")
FORCE_OUTPUTS = ("fx", "fy", "mz", "tau", "tau_steer")
STATE_OUTPUTS = ("dvx", "dvy", "dr", "dw")
# Bounds of each output (physical scale). 20 % of m g for the longitudinal force; about
# 40 % of m g for the lateral one (the tyres' friction limit on a floor with mu ~ 0.4-0.5)
# and that force at ~0.15 m, front and rear axle pushing opposite ways, for the yaw moment;
# the drive's stall torque order for the tendon torque. The old 0.2 m g at half the
# wheelbase (0.19 N m) held mz at its bound in 15 % of training periods on held-out
# emulated logs; at 0.6 N m nothing saturates, and held-out yaw/wheel error against the
# fit alone went 0.69/0.71 -> 0.60/0.69 (experiments/residual_heldout.py --seed 3).
_MG = 1.05 * 9.81
DEFAULT_MAX: dict[str, float] = {
    "fx": 0.2 * _MG,
    "fy": 4.0,
    "mz": 0.6,
    "tau": 0.1,
    # ~40 % of the modelled servo's saturated torque at its mid-range speed (2.3 N m at
    # 0.115 s / 60 deg), enough to slow its slew by that much; off saturation, 1 N m
    # against its P gain moves the wheels' angle by 0.03 rad
    "tau_steer": 1.0,
    "dvx": 0.05,
    "dvy": 0.05,
    "dr": 0.1,
    "dw": 1.5,
}
"""The car's output bounds (kept under this name: the car's callers use it)."""

_ARM_JOINTS = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll")
ARM_FEATURES = (
    tuple(f"q_{j}" for j in _ARM_JOINTS)
    + tuple(f"v_{j}" for j in _ARM_JOINTS)
    + tuple(f"goal_{j}" for j in _ARM_JOINTS)
)
ARM_OUTPUTS = tuple(f"tau_{j}" for j in _ARM_JOINTS)
# Per-output inputs of the arm's "per_output" network: a joint's torque error depends on
# its own angle, speed and goal, and on the pose that sets the gravity load (the three
# pitch joints' angles); one network shared by the joints (plus which joint it is).
_GRAVITY_POSE = (1, 2, 3)  # q_shoulder_lift, q_elbow_flex, q_wrist_flex
ARM_GROUPS = tuple((i, 5 + i, 10 + i, *_GRAVITY_POSE) for i in range(5))
# 0.3 N m: a fifth of a servo's stall torque (1.2 .. 1.9 N m), several times the
# Coulomb friction and gravity-model errors a fitted arm still makes.
ARM_MAX: dict[str, float] = {o: 0.3 for o in ARM_OUTPUTS}


@dataclass(frozen=True)
class RobotIO:
    """What a residual of one robot reads and writes.

    features: names of the per-sample input features; the first `nstate` are the
    reduced state. force_outputs / state_outputs: allowed output channels per mode
    (no state outputs: the mode is not offered). default_max: bound per output.
    groups: for the "per_output" structure, the feature indices each force output sees
    (force_outputs order; equal sizes); None: the robot has only the plain MLP.
    structure: the default network structure.
    history: the default feature history (samples, one per residual period) training
        gives the network: long enough to span the robot's actuator latency and lag, so
        the network sees the commands that are still acting.
    max_radius: training's default contraction of each period's linearised state map
        (`dynamics.data.contract`); None: none.
    lr_schedule: training's default learning rate within a pass ("constant" or "cosine",
        `dynamics.lightning.ResidualModule`).
    """

    features: tuple[str, ...]
    nstate: int
    force_outputs: tuple[str, ...]
    state_outputs: tuple[str, ...]
    default_max: Mapping[str, float]
    groups: tuple[tuple[int, ...], ...] | None = None
    structure: str = "mlp"
    history: int = 5
    max_radius: float | None = None
    lr_schedule: str = "constant"


ROBOT_IO: dict[str, RobotIO] = {
    # the car: 10 periods (200 ms) of commands, several times its drive's and steering's
    # latency plus lag; held-out open loop, seed 3: 0.69 / 0.71 of fit alone (yaw rate /
    # wheel speed) against 0.83 / 0.80 with 5 (experiments/residual_heldout.py)
    # cosine within each pass: at a constant rate Adam ended two of five passes on a loss
    # spike (last epoch 3-10x the pass's minimum) and those residuals were the worst in the
    # true rollout. Training RMSE on an emulated car (144 episodes) after pass 5, seeds 0 / 1:
    # yaw rate constant 0.137 (a spike) / 0.050, cosine 0.048 / 0.048 rad/s; wheel speed
    # 3.28 / 0.57 against 0.38 / 0.38 rad/s, and every cosine pass improved on the last
    # tau_steer among the defaults: on the validation split of the fit's training episodes
    # (seed 7, 108 training / 36 validation, 5 cosine passes; the held-out 48 never seen)
    # yaw / wheel 0.542 / 0.379 of fit alone with it against 0.561 / 0.429 without, and
    # ahead after every pass (yaw 0.048 / 0.042 / 0.041 / 0.040 / 0.040 against
    # 0.052 / 0.051 / 0.048 / 0.043 / 0.041 rad/s): experiments/residual_heldout.py --validate
    "rc_car": RobotIO(FEATURES, 5, FORCE_OUTPUTS, STATE_OUTPUTS, DEFAULT_MAX, history=10, lr_schedule="cosine"),
    # the arm: finite differences across backlash and stick-slip gave one-period maps with
    # spectral radius up to 12 in about a fifth of the periods of an emulated arm's logs,
    # and training diverged on them (linear loss 0.16 -> 210 in one epoch); contracted to
    # 1, it converges (dynamics.data.contract). Constant rate: held-out joint error 0.95 /
    # 0.95 of the fit alone on two emulated arms, cosine 0.92 / 1.01
    "arm": RobotIO(ARM_FEATURES, 10, ARM_OUTPUTS, (), ARM_MAX, ARM_GROUPS, "per_output", max_radius=1.0),
}


def robot_io(robot: str) -> RobotIO:
    """The residual interface of `robot`; UserError for a robot without one."""
    if robot not in ROBOT_IO:
        raise UserError(f"residual: no residual dynamics for robot {robot!r}")
    return ROBOT_IO[robot]


CKPT_FORMAT = "realsim-residual"
CKPT_VERSION = 1


@dataclass
class ResidualConfig:
    """Structure of a residual model.

    robot: which robot's features and outputs (`ROBOT_IO`).
    history: samples of the feature history the network sees (1 = no history).
    period: physics steps the output is held for (10 at dt 2 ms = 50 Hz).
    mode: "force" (generalised force inside the step) or "state" (ablation: velocity
        increments written into the state at period boundaries).
    outputs: output channels, a subset of the robot's force outputs (or state outputs
        for "state"); None: all of them.
    max_out: bound per output; None (or missing names): the robot's defaults.
    structure: "mlp" (one MLP from the whole feature history to every output) or
        "per_output" (one MLP shared by the outputs, each seeing only its own feature
        group (`RobotIO.groups`) plus which output it is: fewer spurious couplings to
        learn from a few episodes); None: the robot's default (the car "mlp", the arm
        "per_output").
    members: 1 one network; K > 1 an ensemble of K networks of this structure, trained
        separately (different seeds), whose outputs are averaged (each bounded, so the
        mean is too).
    """

    robot: str = "rc_car"
    history: int = 5
    period: int = 10
    hidden: tuple[int, ...] = (64, 64)
    mode: str = "force"
    outputs: tuple[str, ...] | None = None
    max_out: dict[str, float] | None = None
    structure: str | None = None
    members: int = 1

    def __post_init__(self) -> None:
        io = robot_io(self.robot)
        self.members = int(self.members)
        if self.members < 1:
            raise ValueError("members must be >= 1")
        self.hidden = tuple(int(h) for h in self.hidden)
        if self.mode not in ("force", "state"):
            raise ValueError(f"mode {self.mode!r}: expected 'force' or 'state'")
        allowed = io.force_outputs if self.mode == "force" else io.state_outputs
        if not allowed:
            raise ValueError(f"{self.robot}: no residual mode {self.mode!r}")
        if self.outputs is not None:
            self.outputs = tuple(self.outputs)
        else:
            self.outputs = allowed
        self.max_out = {**io.default_max, **(self.max_out or {})}
        if self.structure is None:
            self.structure = io.structure if self.mode == "force" else "mlp"
        if self.structure not in ("mlp", "per_output"):
            raise ValueError(f"structure {self.structure!r}: expected 'mlp' or 'per_output'")
        if self.structure == "per_output" and (io.groups is None or self.mode != "force"):
            raise ValueError(f"{self.robot}: no per_output structure for mode {self.mode!r}")
        if not self.outputs or any(o not in allowed for o in self.outputs):
            raise ValueError(f"outputs {self.outputs} must be a subset of {allowed}")
        if self.history < 1 or self.period < 1:
            raise ValueError("history and period must be >= 1")

    def groups(self) -> list[tuple[int, ...]]:
        """Feature indices each output sees ("per_output"), in `outputs` order."""
        io = ROBOT_IO[self.robot]
        assert io.groups is not None
        return [io.groups[io.force_outputs.index(o)] for o in self.outputs]  # type: ignore[union-attr]

    def bounds(self) -> list[float]:
        """Per-output bound, in `outputs` order."""
        return [float(self.max_out[o]) for o in self.outputs]


class ResidualNet(nn.Module):
    """MLP residual with input normalisation and a tanh-bounded output.

    forward: x Shape: (B, history, F) raw features (F = len of the robot's features) ->
    Shape: (B, len(outputs)) in physical units, each within +-bound.
    Structure "mlp": one MLP on the flattened history (B, history F). "per_output": for
    output o the history of its feature group (B, history, G) flattened plus a one-hot of
    o, through one MLP shared by all outputs, one value each.
    """

    def __init__(self, cfg: ResidualConfig) -> None:
        super().__init__()
        self.cfg = cfg
        if cfg.members > 1:  # an ensemble: the mean of separately trained members
            self.register_buffer("bound", torch.tensor(cfg.bounds(), dtype=torch.float64))
            self.ens = nn.ModuleList(ResidualNet(replace(cfg, members=1)) for _ in range(cfg.members))
            return
        self.ens = None
        nf = len(ROBOT_IO[cfg.robot].features)
        nout = len(cfg.outputs)  # type: ignore[arg-type]
        self.register_buffer("x_mean", torch.zeros(nf, dtype=torch.float64))
        self.register_buffer("x_std", torch.ones(nf, dtype=torch.float64))
        self.register_buffer("bound", torch.tensor(cfg.bounds(), dtype=torch.float64))
        self.per_output = cfg.structure == "per_output"
        if self.per_output:
            groups = cfg.groups()
            self.register_buffer("group_idx", torch.tensor(groups, dtype=torch.long))  # (n, G)
            self.register_buffer("onehot", torch.eye(nout, dtype=torch.float64))
            width = cfg.history * len(groups[0]) + nout
        else:
            width = cfg.history * nf
        layers: list[nn.Module] = []
        for h in cfg.hidden:
            layers += [nn.Linear(width, h, dtype=torch.float64), nn.Tanh()]
            width = h
        self.head = nn.Linear(width, 1 if self.per_output else nout, dtype=torch.float64)
        self.body = nn.Sequential(*layers)
        with torch.no_grad():  # start near zero: the fitted simulator, slightly perturbed
            self.head.weight.mul_(0.01)
            self.head.bias.zero_()

    def set_normalisation(self, mean: torch.Tensor, std: torch.Tensor) -> None:
        """Feature mean and std (Shape: (F,)); std floored at 1e-3."""
        if self.ens is not None:
            for m in self.ens:
                m.set_normalisation(mean, std)
            return
        self.x_mean.copy_(mean.to(torch.float64))
        self.x_std.copy_(torch.clamp(std.to(torch.float64), min=1e-3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.ens is not None:
            return torch.stack([m(x) for m in self.ens]).mean(0)
        z = (x - self.x_mean) / self.x_std
        B = z.shape[0]
        if self.per_output:
            n = self.group_idx.shape[0]
            g = z[:, :, self.group_idx]  # (B, H, n, G)
            g = g.permute(0, 2, 1, 3).reshape(B, n, -1)  # (B, n, H G)
            inp = torch.cat([g, self.onehot.expand(B, n, n)], dim=-1)
            return torch.tanh(self.head(self.body(inp))[..., 0]) * self.bound
        z = z.reshape(B, -1)
        return torch.tanh(self.head(self.body(z))) * self.bound

    def zero_(self) -> ResidualNet:
        """Make the output exactly zero everywhere (tests: the fitted simulator)."""
        if self.ens is not None:
            for m in self.ens:
                m.zero_()
            return self
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

    @property
    def io(self) -> RobotIO:
        """The robot interface (features, outputs) the residual was made for."""
        return ROBOT_IO[self.cfg.robot]

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
    if cfg.get("members", 1) == 1:  # a single network: the format older readers know
        cfg.pop("members", None)
    blob = {
        "format": CKPT_FORMAT,
        "version": CKPT_VERSION,
        "config": cfg,
        "state_dict": {k: v.detach().clone() for k, v in net.state_dict().items()},
        "features": list(ROBOT_IO[net.cfg.robot].features),
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
    c = dict(blob["config"])
    robot = str(c.get("robot", ""))
    if robot not in ROBOT_IO:
        raise UserError(f"{where}: residual checkpoint for unknown robot {robot!r}")
    feats = ROBOT_IO[robot].features
    if list(blob.get("features", [])) != list(feats):
        raise UserError(f"{where}: residual features {blob.get('features')} differ from {feats}")
    c["hidden"] = tuple(c["hidden"])
    c["outputs"] = tuple(c["outputs"])
    try:
        net = ResidualNet(ResidualConfig(**c))
        net.load_state_dict(blob["state_dict"])
    except (TypeError, ValueError, RuntimeError, KeyError) as e:
        raise UserError(f"{where}: inconsistent residual checkpoint ({type(e).__name__})") from None
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


def ensemble_of(nets: Sequence[ResidualNet]) -> ResidualNet:
    """One ensemble network (``members`` = len(nets)) whose output is the mean of `nets`
    (one configuration, members 1 each). A single net is returned as it is."""
    if len(nets) == 1:
        return nets[0]
    cfg = replace(nets[0].cfg, members=len(nets))
    out = ResidualNet(cfg)
    assert out.ens is not None
    for m, n in zip(out.ens, nets, strict=True):
        if n.cfg != nets[0].cfg:
            raise ValueError("ensemble members differ in configuration")
        m.load_state_dict(n.state_dict())
    return out.eval()


def zero_residual(cfg: ResidualConfig | None = None) -> Residual:
    """A residual whose output is exactly zero (the fitted simulator)."""
    return Residual(ResidualNet(cfg or ResidualConfig()).zero_().eval(), {})


__all__ = [
    "ARM_FEATURES",
    "ARM_OUTPUTS",
    "FEATURES",
    "ROBOT_IO",
    "RobotIO",
    "robot_io",
    "FORCE_OUTPUTS",
    "STATE_OUTPUTS",
    "Residual",
    "ResidualConfig",
    "ResidualNet",
    "ensemble_of",
    "load_residual",
    "residual_from_blob",
    "save_residual",
    "zero_residual",
]

"""Training a residual: passes of (linearise around the current hybrid rollout, fit with
Lightning), open-loop evaluation, checkpoint.

`train_residual(cfg)` is what `realsim train-residual` runs. Each pass:

1. `dynamics.data.linearise`: hybrid rollouts of the training episodes with the current
   residual, finite-difference sensitivities per period, logged targets;
2. `lightning.Trainer.fit` of `ResidualModule` (multi-step rollout loss over whole
   segments: episodes from rest, or anchors) for ``epochs`` epochs;
3. true open-loop rollouts (the real hybrid simulator, not the linear model) of the
   training and held-out episodes: RMSE of yaw rate and wheel speed to TensorBoard.

The pass with the lowest *training* rollout error is kept (held-out episodes are only
reported, never used to choose). The checkpoint is `realsim.residual.save_residual`'s
plain dict (``torch.load(weights_only=True)``).
"""

from __future__ import annotations

import copy
import logging
import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dynamics.data import feature_stats, linearise, load_episodes, replay_input, scales
from realsim.distributed import DistConfig, is_global_zero, rank_zero_writer, trainer_kwargs
from realsim.residual import FORCE_OUTPUTS, Residual, ResidualConfig, ResidualNet, save_residual
from realsim.robots.rc_car.params import CarParams
from realsim.sim import HybridSim, diverged, load_params, split_state
from sysid.data import LogEpisode, signals_of, split_holdout
from sysid.robot_adapter import get_adapter


@dataclass
class TrainConfig:
    """`realsim train-residual` options plus the ablation switches.

    horizon: periods the loss's gradient flows through before it is truncated (0 = the
    whole segment; the deltas are always carried); anchor: periods between restarts from
    a state estimate (0 = whole episodes from rest; the one-step ablation uses anchor 1,
    horizon 1); passes: linearise-and-fit rounds; epochs: Lightning epochs per pass;
    batch: segments per optimiser step.
    """

    robot: str = "rc_car"
    params: str | None = None
    logs: Sequence[str] = ()
    out: str = "residual.pt"
    holdout: str | None = "0.25"
    history: int = 5
    period: int = 10
    hidden: tuple[int, ...] = (64, 64)
    mode: str = "force"
    outputs: tuple[str, ...] = FORCE_OUTPUTS
    # Lightning strategy/devices/nodes (realsim.distributed); default: one CPU process
    dist: DistConfig = field(default_factory=DistConfig)
    horizon: int = 0
    anchor: int = 0
    passes: int = 3
    epochs: int = 40
    batch: int = 4
    lr: float = 3e-3
    out_penalty: float = 1e-3
    seed: int = 0
    logdir: str | None = None
    max_out: dict[str, float] | None = None


@dataclass
class TrainResult:
    """Where the checkpoint went and the open-loop figures of the kept pass."""

    path: Path
    residual: Residual
    metrics: dict[str, Any] = field(default_factory=dict)


def evaluate(sim: HybridSim, episodes: Sequence[LogEpisode], residual: Residual | None) -> dict[str, Any]:
    """Open-loop RMSE (whole episodes from rest) of yaw rate and wheel speed, pooled over
    the episodes, on sysid's smoothed signals; `diverged`: episodes that blew up."""
    if not episodes:
        return {}
    inputs = [replay_input(e) for e in episodes]
    trajs = sim.rollout(inputs, residual=residual)
    se = {"yaw_rate": 0.0, "wheel_speed": 0.0}
    n = 0
    div = []
    per: list[dict[str, float]] = []
    for e, inp, tr in zip(episodes, inputs, trajs, strict=True):
        q, v = split_state(sim.model, tr.state)
        if diverged(sim.layout.reduced(q, v)):
            div.append(e.key)
            continue
        sig = signals_of(e.sensor_t, sim.sensors(inp, tr))
        row = {}
        for k in se:
            d = sig[k] - e.signals[k]
            se[k] += float(np.sum(d**2))
            row[k] = float(np.sqrt(np.mean(d**2)))
        per.append(row)
        n += len(e.sensor_t)
    out: dict[str, Any] = {f"rmse_{k}": math.sqrt(s / max(n, 1)) for k, s in se.items()}
    out["diverged"] = div
    out["episodes"] = len(episodes)
    out["per_episode"] = per
    return out


def _score(m: Mapping[str, Any], sig: np.ndarray) -> float:
    if m.get("diverged"):
        return math.inf
    return m["rmse_yaw_rate"] / sig[0] + m["rmse_wheel_speed"] / sig[1]


def train_residual(
    cfg: TrainConfig,
    episodes: Sequence[LogEpisode] | None = None,
    log: Callable[[str], None] = print,
) -> TrainResult:
    """Train, evaluate and save a residual (module doc). `episodes` skips loading logs."""
    import lightning as L
    from lightning.pytorch.loggers import TensorBoardLogger

    from dynamics.lightning import ResidualDataModule, ResidualModule

    torch.manual_seed(cfg.seed)
    get_adapter(cfg.robot)  # one-line error for a robot without sysid
    params: CarParams = load_params(cfg.robot, cfg.params)
    eps = list(episodes) if episodes is not None else load_episodes(list(cfg.logs), cfg.robot)
    train, held = split_holdout(eps, cfg.holdout)
    rcfg = ResidualConfig(
        robot=cfg.robot, history=cfg.history, period=cfg.period, hidden=tuple(cfg.hidden),
        mode=cfg.mode, outputs=tuple(cfg.outputs),
        **({"max_out": {**ResidualConfig().max_out, **cfg.max_out}} if cfg.max_out else {}),
    )
    sim = HybridSim(cfg.robot, params, None)
    sim.period = rcfg.period
    sig = scales(train)
    net = ResidualNet(rcfg)
    module = ResidualModule(net, sig, lr=cfg.lr, out_penalty=cfg.out_penalty, truncate=cfg.horizon)
    dm = ResidualDataModule(rcfg.history, batch_size=cfg.batch if cfg.anchor != 1 else 64 * cfg.batch, seed=cfg.seed)
    logdir = Path(cfg.logdir) if cfg.logdir else Path(cfg.out).with_suffix("").parent / (Path(cfg.out).stem + "_tb")
    writer = rank_zero_writer(logdir / "rollout")  # one writer, on rank 0, under DDP
    log(f"{len(train)} training, {len(held)} held-out episodes; logs to {logdir}")

    base_train = evaluate(sim, train, None)
    base_held = evaluate(sim, held, None)
    for k in ("rmse_yaw_rate", "rmse_wheel_speed"):
        writer.add_scalar(f"fit_alone/train_{k}", base_train[k], 0)
        if base_held:
            writer.add_scalar(f"fit_alone/held_{k}", base_held[k], 0)
    log(f"fit alone: train yaw {base_train['rmse_yaw_rate']:.4f} wheel {base_train['rmse_wheel_speed']:.3f}"
        + (f"; held-out yaw {base_held['rmse_yaw_rate']:.4f} wheel {base_held['rmse_wheel_speed']:.3f}" if base_held else ""))
    best: tuple[float, Residual | None, dict[str, Any], dict[str, Any], int] = (
        _score(base_train, sig), None, base_train, base_held, -1)
    current: Residual | None = None
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    for p in range(cfg.passes):
        lin, _ = linearise(sim, train, current, rcfg, window=cfg.anchor)
        if p == 0:
            mean, std = feature_stats(lin)
            net.set_normalisation(torch.as_tensor(mean), torch.as_tensor(std))
        dm.set_pass(lin, None)
        trainer = L.Trainer(
            max_epochs=cfg.epochs, logger=TensorBoardLogger(str(logdir), name="fit", version=f"pass{p}"),
            enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
            log_every_n_steps=1, num_sanity_val_steps=0, **trainer_kwargs(cfg.dist),
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            net.train()
            trainer.fit(module, datamodule=dm)
        net.eval()
        current = Residual(copy.deepcopy(net).eval(), {})
        mt = evaluate(sim, train, current)
        mh = evaluate(sim, held, current)
        for k in ("rmse_yaw_rate", "rmse_wheel_speed"):
            writer.add_scalar(f"rollout/train_{k}", mt.get(k, math.nan), p)
            if mh:
                writer.add_scalar(f"rollout/held_{k}", mh.get(k, math.nan), p)
        loss = float(trainer.callback_metrics.get("train/loss", torch.tensor(math.nan)))
        log(f"pass {p}: loss {loss:.4f}; train yaw {mt.get('rmse_yaw_rate', math.nan):.4f} "
            f"wheel {mt.get('rmse_wheel_speed', math.nan):.3f} diverged {len(mt['diverged'])}"
            + (f"; held-out yaw {mh.get('rmse_yaw_rate', math.nan):.4f} wheel {mh.get('rmse_wheel_speed', math.nan):.3f} "
               f"diverged {len(mh['diverged'])}" if mh else ""))
        s = _score(mt, sig)
        if s < best[0]:
            best = (s, current, mt, mh, p)
    writer.close()
    _, kept, mt, mh, p = best
    if kept is None:  # no pass beat the fitted simulator on the training episodes
        log("no pass improved on the fitted simulator; saving the last one")
        kept, mt, mh, p = current, *(evaluate(sim, train, current), evaluate(sim, held, current)), cfg.passes - 1
    assert kept is not None
    metrics = {
        "pass": p,
        "fit_alone": {"train": _brief(base_train), "held": _brief(base_held)},
        "fit_plus_residual": {"train": _brief(mt), "held": _brief(mh)},
    }
    meta = {"params": str(cfg.params or "nominal"), "logs": [str(x) for x in cfg.logs],
            "train_episodes": [e.key for e in train], "held_episodes": [e.key for e in held],
            "config": {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(cfg).items()},
            "metrics": metrics}
    kept.meta = meta
    path = save_residual(cfg.out, kept.net, meta) if is_global_zero() else Path(cfg.out)
    log(f"residual: {path} (pass {p})")
    return TrainResult(path, kept, metrics)


def _brief(m: Mapping[str, Any]) -> dict[str, Any]:
    return {k: m[k] for k in ("rmse_yaw_rate", "rmse_wheel_speed", "diverged", "episodes") if k in m}

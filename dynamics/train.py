"""Training a residual: passes of (linearise around the current hybrid rollout, fit with
Lightning), open-loop evaluation, checkpoint.

`train_residual(cfg)` is what `realsim train-residual` runs. Each pass:

1. `dynamics.data.linearise`: hybrid rollouts of the training episodes with the current
   residual, finite-difference sensitivities per period, logged targets;
2. `lightning.Trainer.fit` of `ResidualModule` (multi-step rollout loss over whole
   segments: episodes from rest, or anchors) for ``epochs`` epochs;
3. true open-loop rollouts (the real hybrid simulator, not the linear model) of the
   training and held-out episodes: RMSE of the observed signals (the car's yaw rate and
   wheel speed; the arm's joint angles, per joint and pooled as ``rmse_q``) to
   TensorBoard.

Opt-in (not defaults): ``ensemble`` K > 1 trains K residuals with seeds seed .. seed+K-1
and saves the mean of their outputs (one checkpoint, `realsim.residual.ensemble_of`);
``line_search`` backtracks each pass's step on the true training rollout; ``chunk``
trains on chunks started from the model's own rollout (`dynamics.lightning.chunk_batch`);
``loss_scale="fit"`` scales each signal's error by the fit's own RMSE.

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
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dynamics.data import OBSERVED, feature_stats, linearise, load_episodes, replay_input, scales
from realsim.distributed import DistConfig, is_global_zero, rank_zero_writer, trainer_kwargs
from realsim.errors import UserError
from realsim.residual import Residual, ResidualConfig, ResidualNet, robot_io, save_residual
from realsim.sim import HybridSim, load_params, split_state
from sysid.data import LogEpisode, split_holdout
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
    history: int | None = None  # feature history, periods; None: the robot's (RobotIO.history)
    period: int = 10
    hidden: tuple[int, ...] = (64, 64)
    mode: str = "force"
    outputs: tuple[str, ...] | None = None  # None: all of the robot's outputs for the mode
    structure: str | None = None  # network structure (ResidualConfig); None: the robot's default
    # Lightning strategy/devices/nodes (realsim.distributed); default: one CPU process
    dist: DistConfig = field(default_factory=DistConfig)
    horizon: int = 0
    anchor: int = 0
    passes: int = 3
    epochs: int = 40
    batch: int = 4
    lr: float = 3e-3
    # the learning rate within each pass (dynamics.lightning.ResidualModule): "constant"
    # or "cosine" (down to lr / 100 by the pass's end); None: the robot's default
    # (RobotIO.lr_schedule, with the measurements that chose it)
    lr_schedule: str | None = None
    # contract each period's linearised state map to this spectral radius
    # (dynamics.data.contract): maps that expand, from finite differences across
    # non-smooth events, blow the unrolled linear model up; None: the robot's default
    # (RobotIO.max_radius: the arm 1.0, the car none); <= 0: never
    max_radius: float | None = None
    # AdamW's decoupled weight decay: a few episodes of one car leave many weights
    # unconstrained; decay pulls those to zero (a smoother residual that extrapolates less)
    weight_decay: float = 1e-5
    out_penalty: float = 1e-3
    # chunked training (dynamics.lightning.ResidualModule): 0 = one optimiser step per
    # batch through whole segments; > 0 = chunks of that many periods, `inner` optimiser
    # steps per batch; clip: gradient-norm clip (0: none)
    chunk: int = 0
    inner: int = 1
    # backtracking step lengths tried after each pass (the pass's change of
    # the weights scaled; the best true training rollout is kept); (): none
    line_search: tuple[float, ...] = ()
    # loss (and pass-choice) scale of each observed signal: "std" its spread over the
    # training episodes; "fit" the fitted simulator's own open-loop RMSE on them (each
    # signal's error counted relative to what the fit leaves)
    loss_scale: str = "std"
    # K > 1: train K residuals (seeds seed .. seed + K - 1, each every pass) and keep the
    # mean of their outputs (realsim.residual.ensemble_of); K times the training time
    ensemble: int = 1
    clip: float = 0.0
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
    """Open-loop RMSE (whole episodes from rest) of the observed signals (`OBSERVED`: the
    car's yaw rate and wheel speed, the arm's joint angles), pooled over the episodes, on
    sysid's signals, as ``rmse_<signal>``; the arm also ``rmse_q``, pooled over its
    joints; `diverged`: episodes that blew up."""
    if not episodes:
        return {}
    ad = get_adapter(sim.robot)
    inputs = [replay_input(e) for e in episodes]
    trajs = sim.rollout(inputs, residual=residual)
    se = {k: 0.0 for k in OBSERVED[sim.robot].signals}
    n = 0
    div = []
    per: list[dict[str, float]] = []
    for e, inp, tr in zip(episodes, inputs, trajs, strict=True):
        q, v = split_state(sim.model, tr.state)
        if sim.layout.diverged(sim.layout.reduced(q, v)):
            div.append(e.key)
            continue
        sig = ad.signals_of(e.sensor_t, sim.sensors(inp, tr))
        row = {}
        for k in se:
            d = sig[k] - e.signals[k]
            se[k] += float(np.sum(d**2))
            row[k] = float(np.sqrt(np.mean(d**2)))
        per.append(row)
        n += len(e.sensor_t)
    out: dict[str, Any] = {f"rmse_{k}": math.sqrt(s / max(n, 1)) for k, s in se.items()}
    if sim.robot == "arm":
        qs = [k for k in se if k.startswith("q_")]
        out["rmse_q"] = math.sqrt(sum(se[k] for k in qs) / max(n * len(qs), 1))
    out["diverged"] = div
    out["episodes"] = len(episodes)
    out["per_episode"] = per
    return out


def _score(m: Mapping[str, Any], sig: np.ndarray, robot: str = "rc_car") -> float:
    """Sum of the observed signals' RMSE / scale (inf if any episode diverged)."""
    if m.get("diverged"):
        return math.inf
    return float(sum(m[f"rmse_{k}"] / s for k, s in zip(OBSERVED[robot].signals, sig, strict=True)))


def _brief_line(m: Mapping[str, Any]) -> str:
    """The headline RMSEs of an `evaluate` result, for the log."""
    keys = ["rmse_q"] if "rmse_q" in m else [k for k in m if k.startswith("rmse_")]
    return " ".join(f"{k.removeprefix('rmse_')} {m.get(k, math.nan):.4f}" for k in keys)


def train_residual(
    cfg: TrainConfig,
    episodes: Sequence[LogEpisode] | None = None,
    log: Callable[[str], None] = print,
) -> TrainResult:
    """Train, evaluate and save a residual (module doc). `episodes` skips loading logs."""
    import lightning as L
    from lightning.pytorch.loggers import TensorBoardLogger

    from dynamics.lightning import ResidualDataModule, ResidualModule

    if cfg.ensemble > 1:
        return _train_ensemble(cfg, episodes, log)
    if cfg.ensemble < 1:
        raise UserError("train-residual: --ensemble must be >= 1")
    torch.manual_seed(cfg.seed)
    get_adapter(cfg.robot)  # one-line error for a robot without sysid
    params = load_params(cfg.robot, cfg.params)
    eps = list(episodes) if episodes is not None else load_episodes(list(cfg.logs), cfg.robot)
    train, held = split_holdout(eps, cfg.holdout)
    if not train:
        raise UserError("train-residual: no training episodes (all held out?)")
    try:
        history = cfg.history if cfg.history is not None else robot_io(cfg.robot).history
        rcfg = ResidualConfig(
            robot=cfg.robot, history=history, period=cfg.period, hidden=tuple(cfg.hidden),
            mode=cfg.mode, outputs=tuple(cfg.outputs) if cfg.outputs is not None else None,
            max_out=dict(cfg.max_out) if cfg.max_out else None, structure=cfg.structure,
        )
    except ValueError as e:
        raise UserError(f"train-residual: {e}") from None
    sim = HybridSim(cfg.robot, params, None)
    sim.period = rcfg.period
    io = robot_io(cfg.robot)  # the robot's defaults for what the config leaves None
    schedule = cfg.lr_schedule or io.lr_schedule
    max_radius = cfg.max_radius if cfg.max_radius is not None else io.max_radius
    if max_radius is not None and max_radius <= 0:
        max_radius = None
    sig = scales(train)
    base_train = evaluate(sim, train, None)
    if cfg.loss_scale == "fit":  # each signal's error relative to the fitted simulator's own
        fit_err = np.array([base_train[f"rmse_{k}"] for k in OBSERVED[cfg.robot].signals])
        sig = np.maximum(fit_err, 1e-3 * sig) if not base_train.get("diverged") else sig
    elif cfg.loss_scale != "std":
        raise UserError(f"train-residual: loss scale {cfg.loss_scale!r}: expected 'std' or 'fit'")
    net = ResidualNet(rcfg)
    module = ResidualModule(net, sig, lr=cfg.lr, weight_decay=cfg.weight_decay, out_penalty=cfg.out_penalty,
                            truncate=cfg.horizon, observed=OBSERVED[cfg.robot].index,
                            chunk=cfg.chunk, inner=cfg.inner, clip=cfg.clip,
                            schedule=schedule)
    dm = ResidualDataModule(rcfg.history, batch_size=cfg.batch if cfg.anchor != 1 else 64 * cfg.batch, seed=cfg.seed)
    logdir = Path(cfg.logdir) if cfg.logdir else Path(cfg.out).with_suffix("").parent / (Path(cfg.out).stem + "_tb")
    writer = rank_zero_writer(logdir / "rollout")  # one writer, on rank 0, under DDP
    log(f"{len(train)} training, {len(held)} held-out episodes; logs to {logdir}")

    base_held = evaluate(sim, held, None)
    rkeys = [k for k in base_train if k.startswith("rmse_")]
    for k in rkeys:
        writer.add_scalar(f"fit_alone/train_{k}", base_train[k], 0)
        if base_held:
            writer.add_scalar(f"fit_alone/held_{k}", base_held[k], 0)
    log(f"fit alone: train {_brief_line(base_train)}"
        + (f"; held-out {_brief_line(base_held)}" if base_held else ""))
    best: tuple[float, Residual | None, dict[str, Any], dict[str, Any], int] = (
        _score(base_train, sig, cfg.robot), None, base_train, base_held, -1)
    current: Residual | None = None
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    for p in range(cfg.passes):
        lin, _ = linearise(sim, train, current, rcfg, window=cfg.anchor, max_radius=max_radius)
        if lin.contracted > 0:
            log(f"pass {p}: {100 * lin.contracted:.0f} % of periods' linearised maps contracted to radius {max_radius:g}")
        if p == 0:
            mean, std = feature_stats(lin)
            net.set_normalisation(torch.as_tensor(mean), torch.as_tensor(std))
        dm.set_pass(lin, None)
        start_state = {k: v.detach().clone() for k, v in net.state_dict().items()}
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
        if cfg.line_search:
            # Gauss-Newton with backtracking: the pass's step is taken on the linear model
            # around the previous residual; if the true rollout gains less than a shorter
            # step would, take the shorter one (training episodes only)
            new_state = {k: v.detach().clone() for k, v in net.state_dict().items()}
            best_a, best_s = 1.0, _score(mt, sig, cfg.robot)
            for a in cfg.line_search:
                with torch.no_grad():
                    for k, v in net.state_dict().items():
                        if v.dtype.is_floating_point:
                            v.copy_(start_state[k] + a * (new_state[k] - start_state[k]))
                cand = Residual(copy.deepcopy(net).eval(), {})
                mc = evaluate(sim, train, cand)
                sc = _score(mc, sig, cfg.robot)
                if sc < best_s:
                    best_a, best_s, current, mt = a, sc, cand, mc
            with torch.no_grad():
                for k, v in net.state_dict().items():
                    if v.dtype.is_floating_point:
                        v.copy_(start_state[k] + best_a * (new_state[k] - start_state[k]))
            log(f"pass {p}: step {best_a:g}")
        mh = evaluate(sim, held, current)
        for k in rkeys:
            writer.add_scalar(f"rollout/train_{k}", mt.get(k, math.nan), p)
            if mh:
                writer.add_scalar(f"rollout/held_{k}", mh.get(k, math.nan), p)
        loss = float(trainer.callback_metrics.get("train/loss", torch.tensor(math.nan)))
        log(f"pass {p}: loss {loss:.4f}; train {_brief_line(mt)} diverged {len(mt['diverged'])}"
            + (f"; held-out {_brief_line(mh)} diverged {len(mh['diverged'])}" if mh else ""))
        s = _score(mt, sig, cfg.robot)
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
    meta = _checkpoint_meta(cfg, train, held, metrics)
    kept.meta = meta
    path = save_residual(cfg.out, kept.net, meta) if is_global_zero() else Path(cfg.out)
    log(f"residual: {path} (pass {p})")
    return TrainResult(path, kept, metrics)


def _train_ensemble(cfg: TrainConfig, episodes: Sequence[LogEpisode] | None,
                    log: Callable[[str], None]) -> TrainResult:
    """`cfg.ensemble` members trained one after another (seeds cfg.seed + i; each its own
    pass choice on the training episodes), averaged into one checkpoint."""
    import tempfile

    from realsim.residual import ensemble_of

    params = load_params(cfg.robot, cfg.params)
    eps = list(episodes) if episodes is not None else load_episodes(list(cfg.logs), cfg.robot)
    train, held = split_holdout(eps, cfg.holdout)
    logdir = Path(cfg.logdir) if cfg.logdir else Path(cfg.out).with_suffix("").parent / (Path(cfg.out).stem + "_tb")
    nets = []
    fit_alone: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(cfg.ensemble):
            sub = replace(cfg, ensemble=1, seed=cfg.seed + i, out=str(Path(tmp) / f"member{i}.pt"),
                          logdir=str(logdir / f"member{i}"))
            r = train_residual(sub, episodes=eps, log=lambda s, i=i: log(f"member {i}: {s}"))
            nets.append(r.residual.net)
            fit_alone = r.metrics["fit_alone"]
    net = ensemble_of(nets)
    sim = HybridSim(cfg.robot, params, None)
    sim.period = net.cfg.period
    kept = Residual(net, {})
    mt, mh = evaluate(sim, train, kept), evaluate(sim, held, kept)
    log(f"ensemble of {cfg.ensemble}: train {_brief_line(mt)} diverged {len(mt['diverged'])}"
        + (f"; held-out {_brief_line(mh)} diverged {len(mh['diverged'])}" if mh else ""))
    metrics = {
        "pass": -1, "members": cfg.ensemble,
        # the fitted simulator alone on the same split: every member measured it already
        "fit_alone": fit_alone,
        "fit_plus_residual": {"train": _brief(mt), "held": _brief(mh)},
    }
    meta = _checkpoint_meta(cfg, train, held, metrics)
    kept.meta = meta
    path = save_residual(cfg.out, net, meta) if is_global_zero() else Path(cfg.out)
    log(f"residual: {path} (ensemble of {cfg.ensemble})")
    return TrainResult(path, kept, metrics)


def _checkpoint_meta(cfg: TrainConfig, train: Sequence[LogEpisode], held: Sequence[LogEpisode],
                     metrics: dict[str, Any]) -> dict[str, Any]:
    """What a residual checkpoint records of its training: params, logs, split, config, figures."""
    return {"params": str(cfg.params or "nominal"), "logs": [str(x) for x in cfg.logs],
            "train_episodes": [e.key for e in train], "held_episodes": [e.key for e in held],
            "config": {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(cfg).items()},
            "metrics": metrics}


def _brief(m: Mapping[str, Any]) -> dict[str, Any]:
    return {k: m[k] for k in m if k.startswith("rmse_") or k in ("diverged", "episodes")}

"""Behaviour cloning of action chunks with Lightning; checkpoints chosen by closed-loop success.

- `ChunkDataModule`: in-memory `StudentData`, split by episode; batches are
  gathered by fancy indexing (no worker processes: 2 CPU cores are better
  spent on the network).
- `StudentModule`: colour jitter FIRST (brightness, contrast, saturation, hue,
  white balance: the sim-to-room gap is mostly light and colour), then shift,
  blur and noise; masked L1 loss on the chunk (as ACT); AdamW, cosine decay.
- `ClosedLoopSelection`: every `eval_every` epochs runs the robust closed-loop
  evaluation (`student.evaluate`) and keeps the checkpoint with the highest
  success. The validation loss is logged to TensorBoard next to it, and never
  picks a model: it once picked the wrong ones.
- `EmaWeights`: with `ema_decay` > 0, an exponential moving average of the weights
  (torch's `AveragedModel`) is what validation, selection and the checkpoint see.
- `train_student(...)`: the whole of `realsim train-student`.
"""

from __future__ import annotations

import math
import os
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
import torch.nn.functional as F
from torch.optim.swa_utils import AveragedModel
from torch.utils.data import DataLoader, Dataset

from realsim.distributed import DistConfig, trainer_kwargs
from student.config import TASK_COLOR_MODES, StudentConfig
from student.dataset import StudentData, load_dataset
from student.evaluate import EvalResult, Evaluator
from student.model import StudentPolicy, frames_to_tensor
from student.policy import checkpoint_dict, save_checkpoint
from student.robots import robot_spec

Log = Callable[[str], None]


# ---------------------------------------------------------------- data
class _Index(Dataset):
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        return i


class _Collate:
    """Indices -> batch dict: img (B,3C,h,w) [0,1], tel (B,H+1,F), past (B,H,A), chunk (B,k,A), mask (B,k).

    Each camera's frame is delayed (the previous one shown) independently."""

    def __init__(self, data: StudentData, delay_prob: float, seed: int) -> None:
        self.data, self.delay_prob = data, delay_prob
        self.rng = np.random.default_rng(seed)

    def __call__(self, idx: list[int]) -> dict[str, torch.Tensor]:
        d, i = self.data, np.asarray(idx)
        f = d.frame[i]  # (B, C)
        if self.delay_prob > 0:
            late = (self.rng.random(f.shape) < self.delay_prob) & (f > d.frame_lo[i])
            f = f - late
        return {"img": frames_to_tensor(d.frames[f]), "tel": torch.from_numpy(d.tel[i]),
                "past": torch.from_numpy(d.past_actions[i]), "chunk": torch.from_numpy(d.chunk[i]),
                "mask": torch.from_numpy(d.mask[i])}


class ChunkDataModule(L.LightningDataModule):
    def __init__(self, train: StudentData, val: StudentData, cfg: StudentConfig) -> None:
        super().__init__()
        self.train_data, self.val_data, self.cfg = train, val, cfg

    def train_dataloader(self) -> DataLoader:
        g = torch.Generator().manual_seed(self.cfg.seed)
        return DataLoader(_Index(len(self.train_data)), batch_size=self.cfg.batch_size, shuffle=True,
                          generator=g, drop_last=len(self.train_data) > self.cfg.batch_size,
                          collate_fn=_Collate(self.train_data, self.cfg.frame_delay_prob, self.cfg.seed))

    def val_dataloader(self) -> DataLoader:
        return DataLoader(_Index(len(self.val_data)), batch_size=512, shuffle=False,
                          collate_fn=_Collate(self.val_data, 0.0, 0))


# ---------------------------------------------------------------- augmentation
_YIQ = torch.tensor([[0.299, 0.587, 0.114], [0.596, -0.274, -0.322], [0.211, -0.523, 0.312]])
_RGB = torch.linalg.inv(_YIQ)


def _colour_jitter(x: torch.Tensor, cfg: StudentConfig, u: Any, b: int) -> torch.Tensor:
    """Brightness, contrast, saturation, hue (rotation of the YIQ chroma), white balance of
    (B, 3, h, w) images."""
    x = x * u(1 - cfg.brightness, 1 + cfg.brightness, 1, 1, 1)
    gray = (x * _YIQ[0].view(1, 3, 1, 1)).sum(1, keepdim=True)
    x = (x - gray.mean((2, 3), keepdim=True)) * u(1 - cfg.contrast, 1 + cfg.contrast, 1, 1, 1) \
        + gray.mean((2, 3), keepdim=True)
    gray = (x * _YIQ[0].view(1, 3, 1, 1)).sum(1, keepdim=True)
    x = (x - gray) * u(1 - cfg.saturation, 1 + cfg.saturation, 1, 1, 1) + gray
    if cfg.hue > 0:
        th = u(-cfg.hue, cfg.hue) * 2 * math.pi
        c, s = torch.cos(th), torch.sin(th)
        rot = torch.zeros(b, 3, 3)
        rot[:, 0, 0] = 1
        rot[:, 1, 1], rot[:, 1, 2], rot[:, 2, 1], rot[:, 2, 2] = c, -s, s, c
        m = _RGB @ rot @ _YIQ  # (B, 3, 3)
        x = torch.bmm(m, x.reshape(b, 3, -1)).view_as(x)
    return x * u(1 - cfg.channel_gain, 1 + cfg.channel_gain, 3, 1, 1)


def augment(img: torch.Tensor, cfg: StudentConfig, g: torch.Generator | None = None) -> torch.Tensor:
    """Training augmentation of (B, 3C, h, w) images in [0, 1] (C cameras, each jittered on
    its own: cameras differ in white balance and mounting); colour jitter first."""
    if img.shape[1] > 3:
        b0, c3, h0, w0 = img.shape
        out = augment(img.contiguous().view(b0 * (c3 // 3), 3, h0, w0), cfg, g)
        return out.contiguous().view(b0, c3, h0, w0).contiguous(memory_format=torch.channels_last)
    b = img.shape[0]

    def u(lo: float, hi: float, *shape: int) -> torch.Tensor:
        return lo + (hi - lo) * torch.rand(b, *shape, generator=g)

    x = img.contiguous()  # channels_last is slower for these elementwise/pool ops
    if cfg.input_mode in TASK_COLOR_MODES:  # colour masks: no colours left to jitter, only gains
        x = x * u(1 - cfg.brightness, 1, 3, 1, 1)
    else:
        x = _colour_jitter(x, cfg, u, b)
    x = x.clamp(0, 1)
    # geometry: a small random shift, roll and scale (camera mounting, pitch, field of view)
    if cfg.shift_px > 0 or cfg.rotate_deg > 0 or cfg.zoom > 0:
        h, w = x.shape[2:]
        # drawn only when on: the car's (shift-only) random stream stays as it was
        ang = u(-1, 1) * math.radians(cfg.rotate_deg) if cfg.rotate_deg > 0 else torch.zeros(b)
        # the grid samples the source: zooming in samples a smaller area
        inv = 1.0 / u(1 - cfg.zoom, 1 + cfg.zoom) if cfg.zoom > 0 else torch.ones(b)
        c, s = torch.cos(ang) * inv, torch.sin(ang) * inv
        theta = torch.zeros(b, 2, 3)
        # a rotation in pixels, in affine_grid's [-1, 1] x [-1, 1] coordinates (w != h)
        theta[:, 0, 0], theta[:, 0, 1] = c, -s * h / w
        theta[:, 1, 0], theta[:, 1, 1] = s * w / h, c
        theta[:, 0, 2] = u(-1, 1) * 2 * cfg.shift_px / w
        theta[:, 1, 2] = u(-1, 1) * 2 * cfg.shift_px / h
        grid = F.affine_grid(theta, list(x.shape), align_corners=False)
        x = F.grid_sample(x, grid, padding_mode="border", align_corners=False)
    if cfg.blur_prob > 0:
        pick = torch.flatten(torch.nonzero(torch.rand(b, generator=g) < cfg.blur_prob))
        if len(pick):
            x = x.clone()
            x[pick] = F.avg_pool2d(x[pick], 3, stride=1, padding=1, count_include_pad=False)
    if cfg.noise_std > 0:
        x = x + cfg.noise_std * torch.rand(b, 1, 1, 1, generator=g) * torch.randn(x.shape, generator=g)
    return x.clamp(0, 1).contiguous(memory_format=torch.channels_last)


# ---------------------------------------------------------------- module
def chunk_loss(pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor,
               weights: torch.Tensor | None = None) -> torch.Tensor:
    """Masked L1 over (B, k, A) chunks; `weights` (A,) per action dim (None: 1), normalised
    to mean 1 so the loss keeps its scale."""
    m = mask.unsqueeze(-1).float()
    err = (pred - target).abs() * m
    if weights is not None:
        err = err * (weights / weights.mean())
    return err.sum() / (m.sum() * pred.shape[-1]).clamp_min(1.0)


class StudentModule(L.LightningModule):
    def __init__(self, cfg: StudentConfig, tel_mean: np.ndarray, tel_std: np.ndarray,
                 steps_per_epoch: int = 1) -> None:
        super().__init__()
        self.cfg = cfg
        self.policy = StudentPolicy(cfg).to(memory_format=torch.channels_last)
        self.policy.set_stats(tel_mean, tel_std)
        self.steps_per_epoch = steps_per_epoch
        self.gen = torch.Generator().manual_seed(cfg.seed + 1)
        self.weights = torch.tensor(cfg.action_weights) if cfg.action_weights else None
        self.ema: EmaWeights | None = None  # set by the EmaWeights callback

    @property
    def eval_policy(self) -> StudentPolicy:
        """The weights validation, selection and the checkpoint use: the moving average
        when `EmaWeights` keeps one, else the trained weights."""
        return self.ema.policy if self.ema is not None else self.policy

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.policy(batch["img"], batch["tel"], batch["past"])

    def training_step(self, batch: dict[str, torch.Tensor], _: int) -> torch.Tensor:
        batch = {**batch, "img": augment(batch["img"], self.cfg, self.gen)}
        loss = chunk_loss(self(batch), batch["chunk"], batch["mask"], self.weights)
        self.log("train_loss", loss, prog_bar=True, on_step=True, on_epoch=True,
                 batch_size=len(batch["chunk"]))
        return loss

    def validation_step(self, batch: dict[str, torch.Tensor], _: int) -> None:
        pred = self.eval_policy(batch["img"], batch["tel"], batch["past"])
        loss = chunk_loss(pred, batch["chunk"], batch["mask"], self.weights)
        self.log("val_loss", loss, prog_bar=True, batch_size=len(batch["chunk"]))
        self.log("val_loss_first", (pred[:, 0] - batch["chunk"][:, 0]).abs().mean(),
                 batch_size=len(batch["chunk"]))

    def configure_optimizers(self) -> Any:
        opt = torch.optim.AdamW(self.parameters(), lr=self.cfg.lr, weight_decay=self.cfg.weight_decay)
        total = max(1, self.cfg.epochs * self.steps_per_epoch)
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=self.cfg.lr, total_steps=total + 1,
                                                    pct_start=0.1)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


# ---------------------------------------------------------------- weight averaging
def ema_weight(decay: float, n: int) -> float:
    """Weight of the newest weights in the average after `n` earlier updates: 1 - the
    warmed-up decay min(decay, (1 + n) / (4 + n)). The average then reaches back about a
    third of the steps taken (1 / (1 - decay) steps at most), so the first steps' weights
    fade instead of lingering."""
    return 1.0 - min(decay, (1.0 + n) / (4.0 + n))


class EmaWeights(L.Callback):
    """An exponential moving average of the policy's weights, updated after every optimizer
    step (torch.optim.swa_utils.AveragedModel; buffers, i.e. the telemetry statistics,
    are copied, not averaged). `StudentModule.eval_policy` is then the average."""

    def __init__(self, decay: float) -> None:
        self.decay = float(decay)
        self.avg: AveragedModel | None = None
        self._step = -1

    def _update(self, avg: list[torch.Tensor], new: list[torch.Tensor], n: torch.Tensor) -> None:
        w = ema_weight(self.decay, int(n))
        for a, b in zip(avg, new, strict=True):
            a.lerp_(b, w)

    @property
    def policy(self) -> StudentPolicy:
        assert self.avg is not None, "EmaWeights: used before setup"
        return self.avg.module  # type: ignore[return-value]

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        assert isinstance(pl_module, StudentModule)
        self.avg = AveragedModel(pl_module.policy, multi_avg_fn=self._update, use_buffers=False)
        self.avg.module.eval()
        pl_module.ema = self

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *_: Any) -> None:
        if trainer.global_step > self._step:  # once per optimizer step
            assert isinstance(pl_module, StudentModule) and self.avg is not None
            self.avg.update_parameters(pl_module.policy)
            self._step = trainer.global_step


# ---------------------------------------------------------------- selection
class ClosedLoopSelection(L.Callback):
    """Every `cfg.eval_every` epochs (and at the last): closed-loop sim success; keep the best.

    The best checkpoint (highest success; a tie goes to the later epoch) is
    written to `out`. `history` holds every evaluation: epoch, val_loss,
    success, and the checkpoint path when `cfg.keep_all`.
    """

    def __init__(self, evaluator: Evaluator, cfg: StudentConfig, out: Path,
                 meta: dict[str, Any], log: Log, t_start: float) -> None:
        self.ev, self.cfg, self.out, self.meta, self.say = evaluator, cfg, out, meta, log
        self.best = -1.0
        self.best_epoch = -1
        self.history: list[dict[str, Any]] = []
        self.t_start = t_start

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        epoch = trainer.current_epoch
        out_of_time = self.cfg.max_train_seconds > 0 and \
            time.monotonic() - self.t_start > self.cfg.max_train_seconds
        # under DDP every rank must stop at the same epoch: rank 0's clock decides
        out_of_time = bool(trainer.strategy.broadcast(out_of_time, src=0))
        last = epoch + 1 >= self.cfg.epochs or out_of_time
        if out_of_time:
            trainer.should_stop = True
        if (epoch + 1) % self.cfg.eval_every and not last:
            return
        if not trainer.is_global_zero:  # one closed-loop evaluation, on rank 0 (the others wait)
            return
        assert isinstance(pl_module, StudentModule)
        m = trainer.callback_metrics
        val = float(m["val_loss"]) if "val_loss" in m else math.nan
        tr = float(m["train_loss_epoch"]) if "train_loss_epoch" in m else math.nan
        meta = {**self.meta, "epoch": epoch, "val_loss": val, "train_loss": tr}
        policy = pl_module.eval_policy
        ck = checkpoint_dict(policy, self.cfg, meta)
        t0 = time.monotonic()
        res = self.ev.evaluate(ck, self.cfg.eval_episodes, self.cfg.eval_seed,
                               action_noise=self.cfg.eval_action_noise, seconds=self.cfg.eval_seconds)
        pl_module.log("sim_success", res.success_rate, rank_zero_only=True)
        if trainer.logger is not None:
            trainer.logger.log_metrics({"sim_success": res.success_rate, "val_loss_at_eval": val},
                                       step=trainer.global_step)
        rec = {"epoch": epoch, "val_loss": val, "train_loss": tr, "success": res.success_rate,
               "episodes": len(res.episodes)}
        if self.cfg.keep_all:
            p = self.out.with_name(f"{self.out.stem}_epoch{epoch:03d}{self.out.suffix}")
            save_checkpoint(p, policy, self.cfg, {**meta, "sim_success": res.success_rate})
            rec["checkpoint"] = str(p)
        self.history.append(rec)
        better = res.success_rate >= self.best
        self.say(f"epoch {epoch + 1}: train_loss {tr:.4f} val_loss {val:.4f}  {res.summary()} "
                 f"[{time.monotonic() - t0:.0f} s]{'  <- best' if better else ''}")
        if better:
            self.best, self.best_epoch = res.success_rate, epoch
            save_checkpoint(self.out, policy, self.cfg,
                            {**meta, "sim_success": res.success_rate,
                             "selection_episodes": len(res.episodes)})


def check_input_resolution(cfg: StudentConfig, log: Log) -> None:
    """Warn when the input is too coarse for the task's object (`realsim.footprint`: the
    car's cone, the arm's red cube in the front camera), before training.

    Halving the input resolution once took success to zero: the cone, 1 to 3 m
    away at the start, is only a few input pixels. A warning, not an error: the
    closed-loop evaluation is the judge.
    """
    if cfg.footprint_samples <= 0:
        log("note: footprint check skipped (footprint_samples = 0)")
        return
    try:
        from realsim.footprint import check_footprint
    except ImportError:
        log("note: realsim.footprint is not available; input resolution not checked")
        return
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rep = check_footprint(cfg.image_width, cfg.footprint_floor_px, n=cfg.footprint_samples,
                              crop_rows=cfg.crop_rows, robot=cfg.robot)
    thing = "cube" if cfg.robot == "arm" else "cone"
    for w in caught:
        log(f"warning: {w.message}")
    if getattr(rep, "warn", False):
        warnings.warn(f"input {cfg.image_width} px: the {thing} is below {cfg.footprint_floor_px} px "
                      "in more than 5 % of starts", stacklevel=2)
    else:
        log(f"input {cfg.image_width} px: {thing} footprint median {getattr(rep, 'median', float('nan')):.0f} px, "
            f"5th percentile {getattr(rep, 'p5', float('nan')):.0f} px (floor {cfg.footprint_floor_px} px)")


def load_init_weights(policy: StudentPolicy, init: str | Path) -> None:
    """Copy a student checkpoint's weights (and telemetry stats) into `policy`, in place.

    UserError, one line, for a file that is no student checkpoint or whose network
    shapes differ from `policy`'s (a --set that changes them)."""
    from realsim.errors import UserError
    from student.policy import load_checkpoint

    model, _, _ = load_checkpoint(init)  # weights_only=True; UserError for a foreign file
    try:
        policy.load_state_dict(model.state_dict())
    except RuntimeError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UserError(f"--init: its network does not match the config ({first})") from None


def set_moment_stats(policy: StudentPolicy, data: StudentData, n: int = 4096) -> None:
    """Standardise each camera's blob moments (`cfg.blob_moments`) by their statistics over
    up to `n` of the training frames of that camera (unaugmented); nothing otherwise."""
    for c, enc in enumerate(policy.encoders):
        if enc.moments is None:
            continue
        idx = np.unique(data.frame[:, c])
        if len(idx) > n:
            idx = np.random.default_rng(0).choice(idx, n, replace=False)
        with torch.no_grad():
            raw = torch.cat([enc.moments.raw_moments(frames_to_tensor(data.frames[idx[b:b + 512]]))
                             for b in range(0, len(idx), 512)])
        enc.moments.set_stats(raw)


def _running_tasks() -> int | None:
    """Runnable tasks on the machine now, this one included (/proc/loadavg's 4th field,
    "running/total"); None where there is no /proc (macOS)."""
    try:
        return int(Path("/proc/loadavg").read_text().split()[3].split("/")[0])
    except (OSError, ValueError, IndexError):
        return None


def _own_running_threads() -> int:
    """This process's runnable threads (at least 1: the one asking), from
    /proc/self/task/*/stat; 1 where there is no /proc. Mid-training, torch's own OpenMP
    threads may still be spinning when the machine is read: they are not other work."""
    n = 0
    for stat in Path("/proc/self/task").glob("*/stat"):
        try:
            s = stat.read_text()
        except OSError:  # the thread ended between the listing and the read
            continue
        i = s.rfind(")")  # the state follows the command name, which may hold ")"
        n += s[i + 2:i + 3] == "R"
    return max(n, 1)


def busy_cores(samples: int = 5, interval: float = 0.2) -> float:
    """Cores other processes keep busy now: the median over `samples` readings `interval` s
    apart of the runnable tasks other than this process's threads; the 1-minute load
    average where /proc is missing. Not the load average itself: it still reads a job that
    has just finished (a `realsim teach` right before `train-student`) for a minute or more."""
    counts = []
    for i in range(samples):
        n = _running_tasks()
        if n is None:
            break
        counts.append(max(0, n - _own_running_threads()))
        if i + 1 < samples:
            time.sleep(interval)
    if counts:
        return float(np.median(counts))
    try:
        return os.getloadavg()[0]
    except OSError:
        return 0.0


def training_threads(asked: int) -> int:
    """`asked`, or for 0: all cores if other processes leave at least half of them free
    (`busy_cores`), else 1. Judged by the 1-minute load average, a training started right
    after `realsim teach` ran single-threaded on an idle machine: 11 min an epoch of
    148k arm samples instead of ~5.5 (2 cores, measured)."""
    if asked > 0:
        return asked
    n = os.cpu_count() or 1
    return n if busy_cores() < 0.5 * n else 1


class EpochThreads(L.Callback):
    """For `cfg.threads` 0: re-read the machine (`training_threads`) at every epoch start,
    not once. A single reading at the start pinned a whole 2000-episode arm run to one
    thread because a test run happened to hold a core then: 0.43 s a step against 0.18 s
    with both cores, for the hour the run would have taken."""

    def __init__(self, asked: int, log: Log) -> None:
        self.asked = asked
        self.say = log

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.asked > 0 or trainer.world_size > 1:  # DDP ranks would read each other as load
            return
        n = training_threads(0)
        if n != torch.get_num_threads():
            self.say(f"epoch {trainer.current_epoch + 1}: {n} training thread(s) "
                     f"(was {torch.get_num_threads()}; other processes' load changed)")
            torch.set_num_threads(n)


# ---------------------------------------------------------------- entry point
def train_student(data: Sequence[str | Path], out: str | Path, cfg: StudentConfig, *,
                  env_spec: str | None = None, env_kwargs: dict[str, Any] | None = None,
                  log: Log = print, tb_dir: str | Path | None = None,
                  final_eval: bool = True, init: str | Path | None = None,
                  dist: DistConfig | None = None) -> dict[str, Any]:
    """Train, select by closed-loop success, re-evaluate the selected checkpoint on fresh seeds.

    env_spec: the evaluation environment ('module:callable'; None: the robot's task env).
    env_kwargs: the evaluation environment's arguments (`params`, `residual` of the
    corrected simulator; see `student.evaluate.corrected_sim_kwargs`). The arm's env
    renders at the training data's frame size unless `image_size` is given.
    init: a student checkpoint file to fine-tune from: its weights and telemetry
    normalisation replace the fresh ones (its network must match `cfg`'s; the CLI starts
    `cfg` from the checkpoint's own config); None trains from scratch.
    dist: Lightning strategy/devices/nodes (`realsim.distributed`; None: one CPU process).
    Under DDP every rank trains; rank 0 alone evaluates, selects, writes and re-evaluates
    (the other ranks return {"rank": R}).

    Returns {"checkpoint", "selected_epoch", "selection_success", "success", "episodes", "history"}.
    """
    t_start = time.monotonic()
    out = Path(out)
    L.seed_everything(cfg.seed, workers=True, verbose=False)
    torch.set_num_threads(training_threads(cfg.threads))
    check_input_resolution(cfg, log)
    all_data = load_dataset(data, cfg, log=log)
    train, val = all_data.split(cfg.val_fraction, cfg.seed)
    if len(val) == 0:
        val = train.subset(np.arange(min(len(train), 512)))
    mean, std = train.telemetry_stats()
    env_spec = env_spec or robot_spec(cfg.robot).env_spec
    env_kwargs = dict(env_kwargs or {})
    if cfg.robot == "arm" and all_data.frame_size and env_spec == robot_spec("arm").env_spec:
        env_kwargs.setdefault("image_size", (all_data.frame_size[1], all_data.frame_size[0]))
    log(f"train {len(train)} samples / val {len(val)} samples; loaded in {time.monotonic() - t_start:.0f} s")
    dm = ChunkDataModule(train, val, cfg)
    steps = max(1, len(train) // cfg.batch_size)
    module = StudentModule(cfg, mean, std, steps)
    meta = {"data": [str(p) for p in data], "train_samples": len(train), "val_samples": len(val),
            "frame_size": list(all_data.frame_size) if all_data.frame_size else None}
    set_moment_stats(module.policy, train)
    if init is not None:
        load_init_weights(module.policy, init)
        meta["init"] = str(init)
        log(f"fine-tuning from {init} (its weights and telemetry normalisation)")
    from lightning.pytorch.loggers import TensorBoardLogger

    tb = TensorBoardLogger(str(tb_dir or out.parent / f"{out.stem}_tb"), name="", version="")
    with Evaluator(cfg.eval_workers, env_spec, env_kwargs) as ev:
        sel = ClosedLoopSelection(ev, cfg, out, meta, log, t_start)
        callbacks: list[L.Callback] = [EpochThreads(cfg.threads, log), sel]
        if cfg.ema_decay > 0:
            callbacks.insert(0, EmaWeights(cfg.ema_decay))  # updated before selection reads it
        trainer = L.Trainer(max_epochs=cfg.epochs, logger=tb, **trainer_kwargs(dist),
                            callbacks=callbacks, enable_checkpointing=False, enable_progress_bar=False,
                            enable_model_summary=False, log_every_n_steps=20,
                            num_sanity_val_steps=0, deterministic=False)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", ".*does not have many workers.*")
            warnings.filterwarnings("ignore", ".*LeafSpec.*")
            trainer.fit(module, datamodule=dm)
        if not trainer.is_global_zero:
            return {"rank": trainer.global_rank}
        result: dict[str, Any] = {"checkpoint": str(out), "selected_epoch": sel.best_epoch,
                                  "selection_success": sel.best, "history": sel.history}
        if final_eval and cfg.final_eval_episodes > 0:
            ck = torch.load(out, weights_only=True)
            res: EvalResult = ev.evaluate(ck, cfg.final_eval_episodes, cfg.eval_seed + 100_000,
                                          action_noise=cfg.eval_action_noise, seconds=cfg.eval_seconds)
            ck["meta"]["sim_success_final"] = res.success_rate
            ck["meta"]["final_episodes"] = len(res.episodes)
            torch.save(ck, out)
            log(f"selected epoch {sel.best_epoch + 1}; fresh seeds: {res.summary()}")
            result.update(success=res.success_rate, episodes=len(res.episodes))
        else:
            result.update(success=sel.best, episodes=cfg.eval_episodes)
    result["seconds"] = time.monotonic() - t_start
    return result

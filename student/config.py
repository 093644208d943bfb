"""The student's configuration: one typed dataclass, each field with the reason for its default.

`StudentConfig.load(path)` reads a YAML file whose keys are a subset of the
fields (unknown keys are a `UserError`, so a typo never silently falls back to
a default). `as_dict()` is the plain dict stored inside a checkpoint, so a
checkpoint carries everything deploy needs to preprocess and execute exactly
as training did.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from realsim.errors import UserError

EXECUTIONS = ("single_step", "chunk_open_loop", "receding_horizon", "temporal_ensemble")
CAMERA_W, CAMERA_H = 320, 240
"""The car's camera frame (spec/rc_car.md); `crop_rows` are rows of this frame."""


def input_height(width: int, crop_rows: Sequence[int] | None = None) -> int:
    """Input height (px) for an input `width` px wide showing the camera rows `crop_rows`
    (None: the whole 4:3 frame): the band keeps its aspect ratio, e.g. 160 wide, rows
    32..152 -> 60 high."""
    rows = CAMERA_H if crop_rows is None else int(crop_rows[1]) - int(crop_rows[0])
    return max(1, int(round(width * rows / CAMERA_W)))


@dataclass
class StudentConfig:
    # ---- inputs ------------------------------------------------------------------------
    image_width: int = 160
    """Input width (px); the height follows from `crop_rows` at the camera's aspect. At
    160 px the cone at the start covers min 8 / p5 11 / median 21 input px over 400
    randomized starts (experiments/footprint_table.py); the old 80 px whole frame gave
    p5 ~1.5 px and plateaued at 82 % sim success."""
    crop_rows: tuple[int, int] | None = (32, 152)
    """Band of camera rows (of the 320x240 frame, top..bottom) the policy sees; None: the
    whole frame. The cone stands 1-3 m away at the start, where its image lies in rows
    53-108 (over the randomized pitch, roll, FOV and bearing; its top stays above row 90
    down to 0.3 m): rows 32..152 keep it and drop the ceiling and the floor under the
    bumper, so 160 px of width cost what 80 px of the whole frame cost."""
    footprint_floor_px: float = 8.0
    """Least cone area (input pixels at least half covered) at the start that we accept
    without a warning; `realsim.footprint.check_footprint` checks its 5th percentile over
    randomized starts before training. Set from data (`realsim.footprint.DEFAULT_FLOOR_PX`)."""
    footprint_samples: int = 60
    """Randomized starts the footprint check renders (each costs CPU time in the budget;
    0 skips the check)."""
    camera: str = "front"
    """Camera stream the policy sees (the car has one)."""
    telemetry_fields: tuple[str, ...] = ("wheel_speed", "yaw_rate", "accel_x", "accel_y", "vbat")
    """Per-tick telemetry features (see `student.features`). The cumulative encoder is fed
    as a speed: its absolute value carries over between episodes on a real car."""
    history: int = 0
    """Ticks of telemetry history and past actions given to the policy (0: current
    telemetry only). A short history lets it adapt online to the car (battery, grip);
    off by default because past actions invite the copycat failure of behaviour cloning."""
    frame_delay_prob: float = 0.3
    """Training only: probability of showing the previous camera frame instead of the
    latest, so the policy tolerates a real camera's extra latency."""

    # ---- model ---------------------------------------------------------------------------
    channels: tuple[int, ...] = (16, 32, 48, 64)
    """CNN widths, one stride-2 conv each: small enough for CPU training at 50 Hz data."""
    feature_dim: int = 128
    """Image embedding size."""
    hidden_dim: int = 256
    """Width of the MLP head mixing image, telemetry and history."""
    chunk_len: int = 10
    """Actions predicted per query (k), 0.2 s at 50 Hz: long enough to smooth the
    teacher's per-tick jitter, short enough to react to the cone."""

    # ---- execution -------------------------------------------------------------------------
    execution: str = "temporal_ensemble"
    """How predicted chunks become actions: single_step, chunk_open_loop,
    receding_horizon (execute n of k, replan) or temporal_ensemble (ACT). Execution
    matters as much as the model: chunking alone once scored 28.5 % where chunking with
    the right execution scored 99.25 %."""
    execute_n: int = 5
    """receding_horizon: actions executed from each chunk before replanning."""
    ensemble_m: float = 0.01
    """temporal_ensemble: weight exp(-m i), i = 0 the OLDEST prediction (ACT's
    convention); a larger m trusts OLD predictions more (the weight falls with recency),
    m = 0 averages equally. ACT's 0.01: m = 0.1 lags most; it scored lowest of the five
    strategies on an early checkpoint (86.7 % vs 93.3 %, 30 episodes) and tied with
    m = 0.01 on the final one (96.7 %): experiments/execution_ablation.py."""

    # ---- training ------------------------------------------------------------------------
    epochs: int = 12
    """Passes over the data; the closed-loop evaluation, not this, picks the model."""
    batch_size: int = 128
    lr: float = 1e-3
    weight_decay: float = 1e-4
    val_fraction: float = 0.1
    """Episodes held out for the validation loss (logged only; it never picks a model)."""
    seed: int = 0
    """Seeds the split, the initialisation, augmentation and the evaluation scenes."""
    threads: int = 0
    """torch intra-op threads for training; 0: all cores when the machine is idle, 1 when
    others load it (oversubscribed OpenMP threads made training 6x slower, measured)."""
    max_train_seconds: float = 0.0
    """Wall-clock cap on training (0: none); checked at epoch ends."""

    # ---- augmentation (colour first: the emulator's and a real room's light differ) -------
    brightness: float = 0.4
    """Multiplicative brightness jitter, +-."""
    contrast: float = 0.4
    saturation: float = 0.4
    hue: float = 0.03
    """Hue jitter in turns; kept small so orange never turns into blue."""
    channel_gain: float = 0.15
    """Per-channel gain jitter (white balance), +-."""
    shift_px: int = 3
    """Random translation (px at input size): pitch, mounting, barrel distortion."""
    noise_std: float = 0.03
    """Pixel noise, on 0..1 images."""
    blur_prob: float = 0.2

    # ---- closed-loop evaluation and selection ---------------------------------------------------
    eval_every: int = 2
    """Evaluate in closed loop every this many epochs (and after the last)."""
    eval_episodes: int = 24
    """Episodes per selection evaluation, half with the distractor."""
    final_eval_episodes: int = 50
    """Episodes of the final evaluation of the selected checkpoint (the printed figure)."""
    eval_action_noise: float = 0.05
    """Std of Gaussian noise added to every executed action during evaluation."""
    eval_seed: int = 10_000
    """First scene seed of the evaluation (disjoint from teach's seeds)."""
    eval_workers: int = 2
    """Processes for closed-loop evaluation (0: in the training process)."""
    eval_seconds: float = 10.0
    """Episode length in evaluation (the task's judged window)."""
    keep_all: bool = False
    """Also keep every evaluated checkpoint next to the output (for experiments)."""

    extra: dict[str, Any] = field(default_factory=dict)
    """Free-form notes carried into the checkpoint (e.g. the data files)."""

    def __post_init__(self) -> None:
        self.telemetry_fields = tuple(self.telemetry_fields)
        self.channels = tuple(int(c) for c in self.channels)
        if self.crop_rows is not None:
            self.crop_rows = (int(self.crop_rows[0]), int(self.crop_rows[1]))
        self.validate()

    @property
    def image_height(self) -> int:
        """Input height (px): `input_height(image_width, crop_rows)`."""
        return input_height(self.image_width, self.crop_rows)

    def validate(self) -> None:
        if self.execution not in EXECUTIONS:
            raise UserError(f"config: execution {self.execution!r} is not one of {', '.join(EXECUTIONS)}")
        if self.chunk_len < 1:
            raise UserError("config: chunk_len must be >= 1")
        if not 1 <= self.execute_n <= self.chunk_len:
            raise UserError(f"config: execute_n must lie in 1..chunk_len ({self.chunk_len})")
        if self.ensemble_m < 0:
            raise UserError("config: ensemble_m must be >= 0")
        if self.image_width < 16 or self.image_width % 4:
            raise UserError("config: image_width must be a multiple of 4, >= 16")
        if self.crop_rows is not None and not 0 <= self.crop_rows[0] < self.crop_rows[1] <= CAMERA_H:
            raise UserError(f"config: crop_rows must be (top, bottom) with 0 <= top < bottom <= {CAMERA_H}")
        if self.image_height < 8:
            raise UserError("config: the input is less than 8 px high (image_width, crop_rows)")
        if self.history < 0:
            raise UserError("config: history must be >= 0")
        if self.epochs < 1 or self.batch_size < 1:
            raise UserError("config: epochs and batch_size must be >= 1")
        if not 0.0 <= self.val_fraction < 1.0:
            raise UserError("config: val_fraction must lie in [0, 1)")

    def as_dict(self) -> dict[str, Any]:
        """Plain, `torch.load(weights_only=True)`-safe dict (lists, not tuples)."""
        d = dataclasses.asdict(self)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StudentConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise UserError(f"config: unknown key(s) {', '.join(unknown)}")
        return cls(**d)

    @classmethod
    def load(cls, path: str | Path | None) -> StudentConfig:
        """Defaults, overridden by the YAML mapping at `path` (if given)."""
        if path is None:
            return cls()
        import yaml

        p = Path(path)
        if not p.is_file():
            raise UserError(f"no such config file: {p}")
        try:
            d = yaml.safe_load(p.read_text()) or {}
        except yaml.YAMLError as e:
            raise UserError(f"{p}: not valid YAML ({str(e).splitlines()[0]})") from None
        if not isinstance(d, dict):
            raise UserError(f"{p}: expected a mapping of config keys")
        d = d.get("student", d)  # allow a `student:` section in a larger file
        try:
            return cls.from_dict(d)
        except TypeError as e:
            raise UserError(f"{p}: {e}") from None

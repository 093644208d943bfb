"""Domain randomization: what the training simulator varies between episodes, and how much.

`Randomization` is the *configuration* (ranges; a typed dataclass that round-trips to
YAML, so `realsim teach --config randomization.yaml` can override any field). `sample`
draws one episode's concrete values (`Draw`) from a seed; same config + same seed ->
same draw. Every field carries a comment saying why it is randomized and why this much.

Physics is drawn around a centre `CarParams`: before any fit (nominal centre, no ci95)
over each parameter's datasheet range; after a fit (`--params`) around the fitted value,
within its ci95 (widened by `fitted_ci_scale`) when sysid gave one, else within
`fitted_spread` of the range. Draws are always clipped to the datasheet range.

Robot-agnostic in form; the visual fields describe the reach-the-cone scene of the car
(rc_car.md) and are read by `realsim.robots.rc_car.scene`.
"""

from __future__ import annotations

import os

# headless offscreen rendering; must be set before mujoco is first imported
os.environ.setdefault("MUJOCO_GL", "egl")

import colorsys
import math
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from realsim.errors import UserError
from realsim.robots.rc_car.params import PARAMS, CarParams

Range = tuple[float, float]
FLOOR_KINDS = ("flat", "checker", "planks", "noise")


@dataclass(frozen=True)
class Randomization:
    """How much each episode's world varies (uniform draws within each (lo, hi) range)."""

    # --- physics -------------------------------------------------------------------------
    physics: bool = True
    """Draw the car's uncertain parameters at all (False: use the centre exactly)."""
    fitted_spread: float = 0.15
    """After a fit without ci95: half-width of the draw as a fraction of the datasheet range.
    A fit is never exact; a policy robust to +-15 % of the prior box covers its error."""
    fitted_ci_scale: float = 1.5
    """After a fit with ci95: draw within the ci95 widened by this factor (ci95 are
    optimistic: they ignore model-structure error)."""
    soc: Range = (0.35, 1.0)
    """Battery state of charge at episode start: the real pack is used over a whole
    session, and its voltage (7.4..8.4 V) sets the top speed."""
    action_noise: Range = (0.0, 0.10)
    """Std of Gaussian noise added to every command (on the [-1, 1] scale), drawn per
    episode: servo/ESC jitter and unmodelled actuator error ("up to 10 %", issue 5)."""

    # --- camera --------------------------------------------------------------------------
    camera_pitch_deg: Range = (17.0, 23.0)
    """Downward pitch: datasheet 20 +-3 degrees (mounting tolerance)."""
    camera_hfov_deg: Range = (95.0, 105.0)
    """Horizontal field of view edge to edge: datasheet 100 +-5 degrees."""
    camera_roll_deg: Range = (-2.0, 2.0)
    """Mounting roll: not in the datasheet; a hand-mounted camera is never level."""
    camera_offset_m: float = 0.005
    """Lens position error per axis (+- m): ruler measurement of the mount."""
    distortion: Range = (0.0, 0.2)
    """Barrel distortion (0 = pinhole; x_u = x_d (1 + k (r_d / half_width)^2)): the
    datasheet's wide-angle lens has "some barrel distortion", amount unknown."""
    camera_latency: Range = (0.03, 0.10)
    """Exposure to frame arrival at the host (s): ESP32-CAM JPEG + Wi-Fi, unmeasured."""
    blur_sigma: Range = (0.0, 1.2)
    """Gaussian blur (px at 320x240): focus, motion and cheap-lens softness."""
    pixel_noise: Range = (0.0, 6.0)
    """Sensor noise std (8-bit levels) before JPEG: small sensor, indoor light."""
    jpeg_quality: tuple[int, int] = (45, 90)
    """JPEG quality: the camera board's setting is unknown; artefacts vary with it."""
    white_balance: Range = (0.85, 1.15)
    """Per-channel (R, B) gain: auto white balance of an unknown camera under unknown light."""
    exposure: Range = (0.75, 1.25)
    """Overall image gain: auto exposure."""

    # --- world ---------------------------------------------------------------------------
    floor_kinds: tuple[str, ...] = FLOOR_KINDS
    """Floor textures to choose from: "whatever the room has" (rc_car.md)."""
    floor_value: Range = (0.25, 0.85)
    """Floor brightness (HSV value): dark wood to pale linoleum."""
    floor_saturation: Range = (0.0, 0.55)
    """Floor colour saturation (HSV): grey to warm wood. The hue is drawn anywhere."""
    floor_contrast: Range = (0.05, 0.35)
    """Texture contrast (second colour's brightness difference): grout, planks, grain."""
    floor_scale_m: Range = (0.1, 0.6)
    """Size of the texture's pattern (tile or plank width, m)."""
    wall_value: Range = (0.45, 0.95)
    """Wall brightness: the room's walls are in the camera's view (rc_car.md)."""
    wall_distance_m: Range = (3.5, 5.5)
    """Distance of each of the four walls from the start pose (m): floor >= 6 x 6 m."""
    light_diffuse: Range = (0.35, 0.9)
    """Directional light strength (ceiling lamps, windows)."""
    light_ambient: Range = (0.15, 0.45)
    """Ambient light level."""
    light_tilt_deg: Range = (0.0, 50.0)
    """Angle of the main light away from vertical (window light comes in sideways)."""
    cone_hue_deg: Range = (-5.0, 5.0)
    """Orange cone hue offset from RGB 255/100/0 (hue 23.5 deg): "near" that colour; kept
    small so orange never turns red or yellow-green."""
    cone_saturation: Range = (0.85, 1.0)
    """Orange cone saturation (HSV)."""
    cone_value: Range = (0.8, 1.0)
    """Orange cone brightness (HSV): plastic under varying light."""
    distractor_hue_deg: Range = (-15.0, 15.0)
    """Blue cone hue offset: "blue" is all the spec says."""
    distractor_prob: float = 0.5
    """Episodes with the blue distractor (rc_car.md: half of them)."""

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (lists for ranges) for YAML."""
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(self).items()}

    def to_yaml(self, path: str | Path | None = None) -> str:
        """YAML text; also written to `path` if given."""
        text = yaml.safe_dump(self.to_dict(), sort_keys=False)
        if path is not None:
            Path(path).write_text(text)
        return text

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Randomization:
        """Defaults overridden by `data`; unknown keys and bad ranges raise UserError."""
        known = {f.name: f for f in fields(cls)}
        kw: dict[str, Any] = {}
        for k, v in (data or {}).items():
            if k not in known:
                raise UserError(f"randomization: unknown field {k!r}")
            default = getattr(cls(), k)
            if isinstance(default, tuple):
                if not isinstance(v, (list, tuple)):
                    raise UserError(f"randomization: {k} must be a list")
                v = tuple(v)
                if k != "floor_kinds" and (len(v) != 2 or float(v[0]) > float(v[1])):
                    raise UserError(f"randomization: {k} must be [lo, hi] with lo <= hi")
                if k == "floor_kinds" and (not v or any(x not in FLOOR_KINDS for x in v)):
                    raise UserError(f"randomization: floor_kinds must be among {FLOOR_KINDS}")
            kw[k] = v
        return cls(**kw)

    @classmethod
    def from_yaml(cls, path: str | Path) -> Randomization:
        """Read a randomization config file (errors name the file)."""
        p = Path(path)
        if not p.is_file():
            raise UserError(f"no such file: {p}")
        try:
            return cls.from_dict(yaml.safe_load(p.read_text()) or {})
        except yaml.YAMLError as e:
            raise UserError(f"{p}: not valid YAML: {e}") from None
        except UserError as e:
            raise UserError(f"{p}: {e}") from None

    @classmethod
    def none(cls) -> Randomization:
        """Nothing randomized: centre physics, nominal camera, fixed look, no noise."""
        z = (0.0, 0.0)
        return cls(
            physics=False,
            soc=(1.0, 1.0),
            action_noise=z,
            camera_pitch_deg=(20.0, 20.0),
            camera_hfov_deg=(100.0, 100.0),
            camera_roll_deg=z,
            camera_offset_m=0.0,
            distortion=(0.1, 0.1),
            camera_latency=(0.06, 0.06),
            blur_sigma=z,
            pixel_noise=z,
            jpeg_quality=(80, 80),
            white_balance=(1.0, 1.0),
            exposure=(1.0, 1.0),
            floor_kinds=("flat",),
            floor_value=(0.55, 0.55),
            floor_saturation=(0.2, 0.2),
            floor_contrast=(0.1, 0.1),
            floor_scale_m=(0.3, 0.3),
            wall_value=(0.8, 0.8),
            wall_distance_m=(4.5, 4.5),
            light_diffuse=(0.6, 0.6),
            light_ambient=(0.3, 0.3),
            light_tilt_deg=z,
            cone_hue_deg=z,
            cone_saturation=(1.0, 1.0),
            cone_value=(1.0, 1.0),
            distractor_hue_deg=z,
        )

    # ------------------------------------------------------------------------- sampling
    def sample(
        self,
        rng: np.random.Generator,
        center: CarParams | None = None,
        fitted: bool | None = None,
    ) -> Draw:
        """One episode's concrete values. `center`: the physics centre (nominal if None).
        fitted: draw around `center` (True) or over the datasheet ranges (False); None
        guesses from the centre (a sysid result carries ci95 or extra keys)."""
        center = center or CarParams()
        u = rng.uniform
        if fitted is None:
            fitted = bool(center.ci95) or bool(center.extra)
        params = self._sample_params(rng, center, fitted)
        hfov = u(*self.camera_hfov_deg)
        hue = (23.5 + u(*self.cone_hue_deg)) / 360.0
        cone_rgb = colorsys.hsv_to_rgb(hue % 1.0, u(*self.cone_saturation), u(*self.cone_value))
        bh, bs, bv = colorsys.rgb_to_hsv(20 / 255, 70 / 255, 230 / 255)
        blue = colorsys.hsv_to_rgb((bh + u(*self.distractor_hue_deg) / 360) % 1.0, bs, bv)
        fh = u(0.0, 1.0)
        fs, fv = u(*self.floor_saturation), u(*self.floor_value)
        floor1 = colorsys.hsv_to_rgb(fh, fs, fv)
        dv = u(*self.floor_contrast) * (1 if rng.uniform() < 0.5 else -1)
        floor2 = colorsys.hsv_to_rgb(fh, fs, float(np.clip(fv + dv, 0.05, 1.0)))
        wv = u(*self.wall_value)
        wall = colorsys.hsv_to_rgb(u(0.0, 1.0), u(0.0, 0.25), wv)
        tilt, azim = math.radians(u(*self.light_tilt_deg)), u(-math.pi, math.pi)
        off = self.camera_offset_m
        return Draw(
            params=params,
            soc=u(*self.soc),
            action_noise=u(*self.action_noise),
            camera_pitch_deg=u(*self.camera_pitch_deg),
            camera_hfov_deg=hfov,
            camera_roll_deg=u(*self.camera_roll_deg),
            camera_offset=tuple(u(-off, off, size=3)) if off > 0 else (0.0, 0.0, 0.0),
            distortion=u(*self.distortion),
            camera_latency=u(*self.camera_latency),
            blur_sigma=u(*self.blur_sigma),
            pixel_noise=u(*self.pixel_noise),
            jpeg_quality=int(rng.integers(self.jpeg_quality[0], self.jpeg_quality[1] + 1)),
            white_balance=(u(*self.white_balance), u(*self.white_balance)),
            exposure=u(*self.exposure),
            floor_kind=str(self.floor_kinds[int(rng.integers(len(self.floor_kinds)))]),
            floor_rgb1=tuple(floor1),
            floor_rgb2=tuple(floor2),
            floor_scale_m=u(*self.floor_scale_m),
            floor_seed=int(rng.integers(2**31)),
            wall_rgb=tuple(wall),
            walls_m=tuple(u(*self.wall_distance_m, size=4)),
            light_diffuse=u(*self.light_diffuse),
            light_ambient=u(*self.light_ambient),
            light_dir=(
                math.sin(tilt) * math.cos(azim),
                math.sin(tilt) * math.sin(azim),
                -math.cos(tilt),
            ),
            cone_rgb=tuple(cone_rgb),
            distractor_rgb=tuple(blue),
        )

    def _sample_params(
        self, rng: np.random.Generator, center: CarParams, fitted: bool
    ) -> CarParams:
        vals: dict[str, float] = {}
        for p in PARAMS:
            c = center[p.name]
            if not self.physics:
                lo = hi = c
            elif p.name in center.ci95:
                a, b = center.ci95[p.name]
                half = 0.5 * (b - a) * self.fitted_ci_scale
                lo, hi = c - half, c + half
            elif fitted:
                half = 0.5 * (p.high - p.low) * self.fitted_spread
                lo, hi = c - half, c + half
            else:
                lo, hi = p.low, p.high
            x = rng.uniform(lo, hi) if hi > lo else lo
            vals[p.name] = float(np.clip(x, p.low, p.high))
        return CarParams(vals)


@dataclass(frozen=True)
class Draw:
    """One episode's concrete randomized values (see `Randomization` for meanings/units).

    Colours are RGB in 0..1; `light_dir` is a unit vector (world frame);
    `walls_m` = distances of the walls at +x, -x, +y, -y (m); `camera_offset` (3,) m in
    the body frame.
    """

    params: CarParams
    soc: float
    action_noise: float
    camera_pitch_deg: float
    camera_hfov_deg: float
    camera_roll_deg: float
    camera_offset: tuple[float, ...]
    distortion: float
    camera_latency: float
    blur_sigma: float
    pixel_noise: float
    jpeg_quality: int
    white_balance: tuple[float, float]
    exposure: float
    floor_kind: str
    floor_rgb1: tuple[float, ...]
    floor_rgb2: tuple[float, ...]
    floor_scale_m: float
    floor_seed: int
    wall_rgb: tuple[float, ...]
    walls_m: tuple[float, ...]
    light_diffuse: float
    light_ambient: float
    light_dir: tuple[float, float, float]
    cone_rgb: tuple[float, ...]
    distractor_rgb: tuple[float, ...]
    extra: dict[str, Any] = field(default_factory=dict)

    def flat(self) -> dict[str, float]:
        """Every value as name -> float (params as ``param.<name>``; the floor kind as its
        index in FLOOR_KINDS): for the log's privileged group."""
        out: dict[str, float] = {f"param.{k}": float(v) for k, v in self.params.items()}
        for f in fields(self):
            if f.name in ("params", "extra"):
                continue
            v = getattr(self, f.name)
            if f.name == "floor_kind":
                out[f.name] = float(FLOOR_KINDS.index(v))
            elif isinstance(v, tuple):
                for i, x in enumerate(v):
                    out[f"{f.name}.{i}"] = float(x)
            else:
                out[f.name] = float(v)
        return out

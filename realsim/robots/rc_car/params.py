"""The car's uncertain quantities as named parameters (nominal value, range, how applied).

Every quantity rc_car.md marks *uncertain* is one `ParamSpec` in `PARAMS`. `applies` says
where it acts:

- ``"spec"``: an MjSpec edit when the model is built (`model.apply_params`); changing it
  needs a new MjModel (cheap: a compile is ~ms).
- ``"actuation"``: the command path ahead of MuJoCo (latency, ESC deadband, steering
  angle map), computed in numpy per simulation step (`actuation.py`).
- ``"sensor"``: added to the simulated sensor streams (IMU biases).

Ranges are the datasheet's where it gives one, physically sensible otherwise; they are the
prior box that system identification searches. `CarParams` holds one value per name; it is
an immutable mapping, round-trips to YAML, and keeps the ``ci95`` / ``identifiable``
annotations that sysid adds.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import yaml

from realsim.errors import UserError

Applies = Literal["spec", "actuation", "sensor"]


@dataclass(frozen=True)
class ParamSpec:
    """One uncertain quantity: name, nominal value, search range, unit and where it acts."""

    name: str
    nominal: float
    low: float
    high: float
    unit: str
    applies: Applies
    doc: str


PARAMS: tuple[ParamSpec, ...] = (
    ParamSpec(
        "com_x",
        0.095,
        0.07,
        0.12,
        "m",
        "spec",
        "centre of mass ahead of the rear axle (datasheet range); moves the chassis "
        "inertial frame so the whole car's COM lands there",
    ),
    ParamSpec(
        "yaw_inertia",
        0.008,
        0.004,
        0.012,
        "kg m^2",
        "spec",
        "whole car's yaw inertia about its COM (datasheet range); the chassis izz is "
        "this minus the wheels' and knuckles' share",
    ),
    ParamSpec(
        "tyre_mu",
        0.8,
        0.4,
        1.2,
        "1",
        "spec",
        "tyre-floor Coulomb friction, both directions (rear tyres; front = "
        "FRONT_GRIP_RATIO x this); geom friction[0], tyre priority wins over the floor",
    ),
    ParamSpec(
        "motor_gain",
        0.05,
        0.02,
        0.12,
        "N m/V",
        "spec",
        "Kg = gear * kt / R: rear-axle torque per volt across the motor; drive actuator gainprm[0]",
    ),
    ParamSpec(
        "back_emf",
        0.075,
        0.06,
        0.095,
        "V s/rad",
        "spec",
        "ke referred to the mean rear-wheel speed (= torque constant at the wheel); "
        "no-load wheel speed = V / ke; drive biasprm[2] = -Kg ke, brake gainprm[2]",
    ),
    ParamSpec(
        "rolling_resistance",
        0.03,
        0.005,
        0.08,
        "1",
        "spec",
        "rolling-resistance coefficient c_rr: Coulomb friction torque "
        "c_rr * m g r / 4 on each wheel hinge (joint frictionloss)",
    ),
    ParamSpec(
        "drag",
        0.006,
        0.0,
        0.03,
        "N s^2/m^2",
        "spec",
        "aerodynamic drag F = drag * v^2 (= rho CdA / 2), chassis geom fluidcoef "
        "(ellipsoid fluid model, blunt drag only)",
    ),
    ParamSpec(
        "tyre_slip_damping",
        5.0,
        2.0,
        100.0,
        "1/s",
        "spec",
        "tyre contact friction reference a_ref = -this * slip speed (solreffriction "
        "(0, -this)): how fast tyre force builds with slip below the grip limit, i.e. "
        "cornering and longitudinal stiffness (soft: understeer and scrub in turns)",
    ),
    ParamSpec(
        "brake_gain",
        1.0,
        0.5,
        8.0,
        "1",
        "spec",
        "ESC brake strength relative to shorted motor terminals (F = -gain * Kg * ke * v "
        "at full brake); an ESC's active brake is stronger than a short",
    ),
    ParamSpec(
        "deadband",
        0.07,
        0.04,
        0.10,
        "1",
        "actuation",
        "ESC deadband as a fraction of full throttle (datasheet range); outside it the "
        "duty is (|t| - deadband) / (1 - deadband)",
    ),
    ParamSpec(
        "steer_max",
        0.40,
        0.35,
        0.45,
        "rad",
        "actuation",
        "mean front-wheel angle at full steering command (datasheet range)",
    ),
    ParamSpec(
        "steer_trim",
        0.0,
        -0.05,
        0.05,
        "rad",
        "actuation",
        "mean front-wheel angle at command 0 (datasheet range)",
    ),
    ParamSpec(
        "servo_time_60",
        0.115,
        0.08,
        0.15,
        "s",
        "spec",
        "servo seconds per 60 degrees (datasheet range): steering actuator "
        "forcerange = STEER_DAMPING * (pi/3) / servo_time_60",
    ),
    ParamSpec(
        "latency",
        0.045,
        0.01,
        0.08,
        "s",
        "actuation",
        "host send to wheels reacting (datasheet range): recorded commands take "
        "effect this long after their timestamps",
    ),
    ParamSpec(
        "gyro_bias", 0.0, -0.1, 0.1, "rad/s", "sensor", "gyro z zero-rate offset, added to yaw_rate"
    ),
    ParamSpec(
        "accel_bias_x",
        0.0,
        -0.5,
        0.5,
        "m/s^2",
        "sensor",
        "accelerometer x offset (MPU-6050 class: +-50 mg)",
    ),
    ParamSpec("accel_bias_y", 0.0, -0.5, 0.5, "m/s^2", "sensor", "accelerometer y offset"),
)

PARAM_NAMES: tuple[str, ...] = tuple(p.name for p in PARAMS)
PARAM_BY_NAME: dict[str, ParamSpec] = {p.name: p for p in PARAMS}
SPEC_PARAMS: tuple[str, ...] = tuple(p.name for p in PARAMS if p.applies == "spec")


def _check_name(name: str) -> ParamSpec:
    if name not in PARAM_BY_NAME:
        raise UserError(f"unknown parameter {name!r} (known: {', '.join(PARAM_NAMES)})")
    return PARAM_BY_NAME[name]


class CarParams(Mapping[str, float]):
    """A complete, validated set of the car's uncertain parameters (immutable mapping).

    Missing names take their nominal value. Unknown names, non-numbers and non-finite
    values raise `UserError`; so do values outside [low, high] unless ``strict=False``
    (for experiments with deliberately impossible cars).

    ``ci95`` (name -> (lo, hi)), ``identifiable`` (name -> bool) and ``extra`` (any other
    top-level YAML keys) are carried along untouched, for sysid's reports.
    """

    __slots__ = ("_values", "ci95", "identifiable", "extra")

    def __init__(
        self,
        values: Mapping[str, float] | None = None,
        *,
        strict: bool = True,
        ci95: Mapping[str, tuple[float, float]] | None = None,
        identifiable: Mapping[str, bool] | None = None,
        extra: Mapping[str, Any] | None = None,
        **kwargs: float,
    ) -> None:
        given = dict(values or {})
        given.update(kwargs)
        vals = {p.name: p.nominal for p in PARAMS}
        for name, value in given.items():
            spec = _check_name(name)
            try:
                v = float(value)
            except (TypeError, ValueError):
                raise UserError(f"parameter {name!r}: not a number: {value!r}") from None
            if not np.isfinite(v):
                raise UserError(f"parameter {name!r}: not finite: {v}")
            if strict and not (spec.low <= v <= spec.high):
                raise UserError(
                    f"parameter {name!r} = {v:g} {spec.unit} outside its range "
                    f"[{spec.low:g}, {spec.high:g}]"
                )
            vals[name] = v
        for name in list(ci95 or {}) + list(identifiable or {}):
            _check_name(name)
        self._values = vals
        self.ci95: dict[str, tuple[float, float]] = {
            k: (float(v[0]), float(v[1])) for k, v in (ci95 or {}).items()
        }
        self.identifiable: dict[str, bool] = {k: bool(v) for k, v in (identifiable or {}).items()}
        self.extra: dict[str, Any] = dict(extra or {})

    # --- mapping protocol ------------------------------------------------------------------
    def __getitem__(self, name: str) -> float:
        if name not in self._values:
            _check_name(name)
        return self._values[name]

    def __iter__(self) -> Iterator[str]:
        return iter(PARAM_NAMES)

    def __len__(self) -> int:
        return len(PARAM_NAMES)

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v:.6g}" for k, v in self._values.items())
        return f"CarParams({inner})"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, CarParams):
            return self._values == other._values
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self._values[k] for k in PARAM_NAMES))

    # --- constructors / conversions --------------------------------------------------------
    @classmethod
    def nominal(cls) -> CarParams:
        """All parameters at their nominal values."""
        return cls()

    def replace(self, **changes: float) -> CarParams:
        """A copy with some values changed (annotations dropped: they described the old fit)."""
        return CarParams({**self._values, **changes})

    def to_vector(self, names: tuple[str, ...] = PARAM_NAMES) -> np.ndarray:
        """Values in `names` order. Shape: (len(names),)."""
        return np.array([self._values[_check_name(n).name] for n in names], dtype=np.float64)

    @classmethod
    def from_vector(
        cls, x: np.ndarray, names: tuple[str, ...] = PARAM_NAMES, base: CarParams | None = None
    ) -> CarParams:
        """Params with `names` set from `x` (Shape: (len(names),)), the rest from `base`."""
        vals = dict(base._values) if base is not None else {}
        vals.update({n: float(v) for n, v in zip(names, np.asarray(x, dtype=float), strict=True)})
        return cls(vals)

    def spec_key(self) -> tuple[float, ...]:
        """The values that change the compiled model (cache key for built models)."""
        return tuple(self._values[n] for n in SPEC_PARAMS)

    # --- YAML ------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Plain dict: {robot, params, [ci95], [identifiable], **extra}."""
        out: dict[str, Any] = dict(self.extra)
        out["robot"] = "rc_car"
        out["params"] = {k: float(v) for k, v in self._values.items()}
        if self.ci95:
            out["ci95"] = {k: [float(a), float(b)] for k, (a, b) in self.ci95.items()}
        if self.identifiable:
            out["identifiable"] = dict(self.identifiable)
        return out

    def to_yaml(self, path: str | Path | None = None) -> str:
        """YAML text of `to_dict()`; also written to `path` if given."""
        text = yaml.safe_dump(self.to_dict(), sort_keys=False)
        if path is not None:
            Path(path).write_text(text)
        return text

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, strict: bool = True) -> CarParams:
        """Inverse of `to_dict`. Also accepts a flat {name: value} mapping and per-name
        dicts {name: {value, ci95, identifiable}} inside ``params``."""
        if not isinstance(data, Mapping):
            raise UserError(f"parameter file: expected a mapping, got {type(data).__name__}")
        data = dict(data)
        robot = data.pop("robot", "rc_car")
        if robot != "rc_car":
            raise UserError(f"parameter file is for robot {robot!r}, not 'rc_car'")
        if "params" in data:
            raw = data.pop("params")
            ci95 = dict(data.pop("ci95", None) or {})
            ident = dict(data.pop("identifiable", None) or {})
            extra = data
        else:  # flat form
            raw, ci95, ident, extra = data, {}, {}, {}
        if not isinstance(raw, Mapping):
            raise UserError("parameter file: 'params' must be a mapping of name: value")
        values: dict[str, float] = {}
        for name, v in raw.items():
            if isinstance(v, Mapping):
                if "value" not in v:
                    raise UserError(f"parameter {name!r}: entry has no 'value'")
                values[name] = v["value"]
                if "ci95" in v:
                    ci95[name] = v["ci95"]
                if "identifiable" in v:
                    ident[name] = v["identifiable"]
            else:
                values[name] = v
        return cls(values, strict=strict, ci95=ci95, identifiable=ident, extra=extra)

    @classmethod
    def from_yaml(cls, source: str | Path, *, strict: bool = True) -> CarParams:
        """Read a parameter file (path) or YAML text. Errors name the file."""
        p = Path(source) if not (isinstance(source, str) and "\n" in source) else None
        if p is not None and p.exists():
            text, where = p.read_text(), str(p)
        elif p is not None and p.suffix in (".yaml", ".yml"):
            raise UserError(f"parameter file not found: {p}")
        else:
            text, where = str(source), "<text>"
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise UserError(f"{where}: not valid YAML: {e}") from None
        try:
            return cls.from_dict(data or {}, strict=strict)
        except UserError as e:
            raise UserError(f"{where}: {e}") from None


def param_table() -> str:
    """The parameter table as Markdown (for docs and reports)."""
    rows = ["| name | nominal | range | unit | applied |", "|---|---|---|---|---|"]
    for p in PARAMS:
        rows.append(
            f"| {p.name} | {p.nominal:g} | {p.low:g} .. {p.high:g} | {p.unit} | {p.applies} |"
        )
    return "\n".join(rows)

"""Named uncertain parameters of a robot: specs, a validated immutable set, YAML I/O.

Shared by the robot folders: each declares its `ParamSpec` tuple and a subclass of
`ParamSet` naming it (``SPECS``, ``ROBOT``); everything else lives here::

    class CarParams(ParamSet):
        SPECS = PARAMS
        ROBOT = "rc_car"

`ParamSpec.applies` says where a quantity acts: ``"spec"`` (an MjSpec edit when the
model is built; changing it needs a new MjModel), ``"actuation"`` (the command path
ahead of MuJoCo, numpy) or ``"sensor"`` (added to simulated sensor streams).

A `ParamSet` holds one value per name; missing names take their nominal value. It is an
immutable mapping, round-trips to YAML as ``{robot, params, [ci95], [identifiable],
**extra}``, and keeps sysid's ``ci95`` / ``identifiable`` annotations. It reads both
that form and the per-name entries ``{value, ci95, identifiable, ...}`` that
`realsim fit` writes to params.yaml.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar

import numpy as np
import yaml

from realsim.errors import UserError

Applies = Literal["spec", "actuation", "sensor"]
P = TypeVar("P", bound="ParamSet")


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


class ParamSet(Mapping[str, float]):
    """A complete, validated set of a robot's uncertain parameters (immutable mapping).

    Subclasses set ``SPECS`` (the robot's ParamSpec tuple) and ``ROBOT`` (its name in
    parameter files). Unknown names, non-numbers and non-finite values raise `UserError`;
    so do values outside [low, high] unless ``strict=False``.
    """

    SPECS: ClassVar[tuple[ParamSpec, ...]] = ()
    ROBOT: ClassVar[str] = ""
    # SPECS by name, made once per subclass (name checks are on every construction)
    _BY_NAME: ClassVar[dict[str, ParamSpec]] = {}

    __slots__ = ("_values", "ci95", "identifiable", "extra")

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        cls._BY_NAME = {p.name: p for p in cls.SPECS}
        if len(cls._BY_NAME) != len(cls.SPECS):
            raise ValueError(f"{cls.__name__}.SPECS: duplicate parameter names")

    # --- class-level views of SPECS ---------------------------------------------------------
    @classmethod
    def names(cls) -> tuple[str, ...]:
        """Parameter names in SPECS order."""
        return tuple(cls._BY_NAME)

    @classmethod
    def by_name(cls) -> dict[str, ParamSpec]:
        """{name: ParamSpec} in SPECS order (a copy)."""
        return dict(cls._BY_NAME)

    @classmethod
    def spec_of(cls, name: str) -> ParamSpec:
        """The ParamSpec called `name` (UserError if unknown)."""
        try:
            return cls._BY_NAME[name]
        except (KeyError, TypeError):
            raise UserError(f"unknown parameter {name!r} (known: {', '.join(cls.names())})") from None

    @classmethod
    def spec_names(cls) -> tuple[str, ...]:
        """Names of the parameters that change the compiled model."""
        return tuple(p.name for p in cls.SPECS if p.applies == "spec")

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
        vals = {p.name: p.nominal for p in self.SPECS}
        for name, value in given.items():
            spec = self.spec_of(name)
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
            self.spec_of(name)
        self._values = vals
        self.ci95: dict[str, tuple[float, float]] = {
            k: (float(v[0]), float(v[1])) for k, v in (ci95 or {}).items()
        }
        self.identifiable: dict[str, bool] = {k: bool(v) for k, v in (identifiable or {}).items()}
        self.extra: dict[str, Any] = dict(extra or {})

    # --- mapping protocol ------------------------------------------------------------------
    def __getitem__(self, name: str) -> float:
        if name not in self._values:
            self.spec_of(name)
        return self._values[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.SPECS)

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v:.6g}" for k, v in self._values.items())
        return f"{type(self).__name__}({inner})"

    def __eq__(self, other: object) -> bool:
        if type(other) is type(self):
            return self._values == other._values  # type: ignore[attr-defined]
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self._values[k] for k in self.names()))

    # --- constructors / conversions --------------------------------------------------------
    @classmethod
    def nominal(cls: type[P]) -> P:
        """All parameters at their nominal values."""
        return cls()

    def replace(self: P, **changes: float) -> P:
        """A copy with some values changed (annotations dropped: they described the old fit)."""
        return type(self)({**self._values, **changes})

    def to_vector(self, names: tuple[str, ...] | None = None) -> np.ndarray:
        """Values in `names` order (default: all). Shape: (len(names),)."""
        names = self.names() if names is None else names
        return np.array([self._values[self.spec_of(n).name] for n in names], dtype=np.float64)

    @classmethod
    def from_vector(
        cls: type[P], x: np.ndarray, names: tuple[str, ...] | None = None, base: P | None = None
    ) -> P:
        """Params with `names` set from `x` (Shape: (len(names),)), the rest from `base`."""
        names = cls.names() if names is None else names
        vals = dict(base._values) if base is not None else {}
        vals.update({n: float(v) for n, v in zip(names, np.asarray(x, dtype=float), strict=True)})
        return cls(vals)

    def spec_key(self) -> tuple[float, ...]:
        """The values that change the compiled model (cache key for built models)."""
        return tuple(self._values[n] for n in self.spec_names())

    # --- YAML ------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Plain dict: {robot, params, [ci95], [identifiable], **extra}."""
        out: dict[str, Any] = dict(self.extra)
        out["robot"] = self.ROBOT
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
    def from_dict(cls: type[P], data: Mapping[str, Any], *, strict: bool = True) -> P:
        """Inverse of `to_dict`. Also accepts a flat {name: value} mapping and per-name
        dicts {name: {value, ci95, identifiable}} inside ``params``."""
        if not isinstance(data, Mapping):
            raise UserError(f"parameter file: expected a mapping, got {type(data).__name__}")
        data = dict(data)
        robot = data.pop("robot", cls.ROBOT)
        if robot != cls.ROBOT:
            raise UserError(f"parameter file is for robot {robot!r}, not {cls.ROBOT!r}")
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
    def from_yaml(cls: type[P], source: str | Path, *, strict: bool = True) -> P:
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

    @classmethod
    def table(cls) -> str:
        """The parameter table as Markdown (for docs and reports)."""
        rows = ["| name | nominal | range | unit | applied |", "|---|---|---|---|---|"]
        for p in cls.SPECS:
            rows.append(
                f"| {p.name} | {p.nominal:g} | {p.low:g} .. {p.high:g} | {p.unit} | {p.applies} |"
            )
        return "\n".join(rows)

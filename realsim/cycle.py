"""`realsim cycle CONFIG.yaml`: sim -> real -> sim, with the gap measured at every turn.

Read this file top to bottom to see the whole method. Each stage is one public
`realsim` verb run as a child process, exactly as a user's script would run it
(spec/cli.md), writing into its own folder of the iteration:

    iteration 0   record  excitation episodes (fit data) + held-out episodes (never fitted)
                  teach   the privileged teacher in the datasheet-randomised simulator
                  train   the student on robot-legal streams; select by closed-loop success
                  deploy  the student on the robot; success from the judge's verdicts
    iteration i   record  new excitation episodes (the deploy episodes are real data too)
                  fit     system identification on every excitation recording so far
                          (iterations 0..i), warm-started from the params in use; the new
                          fit is adopted only if it is no worse than those on the fit's own
                          validation episodes (`fit_decision`), else they stay in use
                  residual learned dynamics on what the fitted simulator still gets wrong,
                          from the fit's excitation recordings (deploy episodes too only
                          with `residual_deploy_logs: true`), except the episodes that
                          judge it (`residual_judge`: the fit's validation episodes, or
                          every episode of one driver); used only if fitted+residual beats
                          fitted alone on those (`residual_decision`)
                  gap     open-loop error on the held-out episodes: nominal, fitted, +residual
                          (reported, never selecting)
                  simulator  the new simulator (fit, + residual when used) replaces the one
                          in use only if no worse on this iteration's fresh validation
                          episodes, which neither was built from (`simulator_decision`)
                  teach   in the corrected simulator, randomisation centred on the fit
                  train   the student, fine-tuned from the previous one
                  deploy  and measure again

Robot-generic: what differs between the car and the arm (excitation signals, the
held-out signal, the gap metric) is one `RobotCycle` row in `ROBOT_CYCLE`; every stage
is the same verb with the robot's name. The residual is trained from iteration 1 on
but teach and train use it only when it helps on the fit's validation episodes (those
`realsim fit` held out of fitting, named in its params.yaml; the residual is trained
without them too): fitted+residual beats fitted alone there (`residual_decision`, run
inside the residual stage, so a killed stage reruns it from scratch; the report says
which was used and why). With `candidate_episodes` > 0, train-student keeps every checkpoint
it evaluated and each is deployed too, for the sim-vs-real rank correlation over
candidates (the report's Spearman over the iterations' students is always there).

Why the fit leaves the deploy episodes out (`fit_deploy_logs: false`, the default): they
are closed loop, so the commands follow the state and excite little (the car's student
cruises near top speed), they outnumber the excitation episodes (e.g. 8 to 3 an
iteration) and crowd them out of the fit's data budget, and a student may drive the
robot where the parametric model cannot follow an open-loop replay (the car spinning at
7 rad/s on slippery tyres): one such episode dominated a least-squares fit and made
iteration 2's fit worse on every excitation log and on the held-out set.

The residual leaves them out too (`residual_deploy_logs: false`, the default), for the
same reasons measured on runs/cycle2b: the student cruises at ~45 rad/s wheel speed
where the excitation reaches ~20 (max 34) and some episodes spin a wheel to 90-150
rad/s, so the fitted simulator's wheel-speed error is ~3 rad/s on every deploy episode
(5.7-6.3 on the wheel-spin ones) against ~1 on the excitation logs. 8 such episodes an
iteration outweigh 3 excitation ones in the residual's loss and in its choice of pass
(lowest training rollout error), and what it learns there does not carry to the
excitation driving the decision judges it on: iteration 1's residual, same budget, on
the fit's validation episode, mean ratio to fitted alone 1.67 with the deploy logs
against 1.16 without.

Which episodes judge the residual (`residual_judge`): the held-out signal is one the
fit data never contain (`RobotCycle.heldout_driver`), but the fit's validation episodes
are every 4th excitation episode, of drivers the residual also trains on. On
runs/cycle2b's iteration 2 (offline) the residual beat fitted alone there (mean ratio
0.62, one steps episode) and yet did worse on both held-out episodes; judged instead on
every episode of one driver left out of its training (`residual_judge: driver`: chirp,
3 episodes) it did not beat fitted alone (ratio 1.005, and 1.18 with steps left out),
the same verdict as the held-out episodes. One left-out driver is still one draw: in
runs/cycle3, cycle3e and cycle2b (offline) iteration 2's residual beat fitted alone on
the chirp driver and was worse on the held-out driver all three times. `residual_judge:
drivers` asks more, as cross-validation does: a residual trained without each driver in
turn must beat fitted alone on that driver, every time, before the one trained on every
driver is used (`_residual_every_driver`; drivers + 1 trainings). The held-out episodes never enter
the fit, the residual, or either decision (fit adopted? residual used?): they only
measure, and the report's gap table is their measurement.

It stops at the target success or after N iterations. A stage that finished
left `stage.json` in its folder and is never run again; a stage that was killed
is rerun from scratch with the same seeds (recordings are resumed instead, as
real data is never thrown away). The last line printed is `student=<path>`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Collection
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from realsim.errors import UserError
from realsim.yamlfile import load_mapping

# ----------------------------------------------------------------------------- config


@dataclass
class RecordConfig:
    episodes: int = 6  # excitation episodes per iteration: enough to identify ~15 parameters
    heldout_episodes: int = 3  # recorded once, never fitted: the honest yardstick of the gap
    seconds: float = 10.0  # per episode; the task's own time limit
    drivers: list[str] | None = None  # excitation signals, cycled; None: the robot's own
    # (ROBOT_CYCLE), since the car's and the arm's signals differ


# ----------------------------------------------------------------------------- robots


@dataclass(frozen=True)
class RobotCycle:
    """What the cycle does differently per robot (everything else is the same verbs)."""

    drivers: tuple[str, ...]  # excitation for fit data (spec/cli.md lists each robot's)
    heldout_driver: str  # the held-out signal: unlike the fit data, so the gap is honest
    metrics: dict[str, str]  # gap metric name -> its label and unit, for the report


ROBOT_CYCLE: dict[str, RobotCycle] = {
    "rc_car": RobotCycle(
        drivers=("excite:steps", "excite:chirp", "excite:prbs"),
        heldout_driver="excite:smooth",
        metrics={"yaw_rate": "yaw-rate RMSE|rad/s", "wheel_speed": "wheel-speed RMSE|rad/s"},
    ),
    "arm": RobotCycle(
        drivers=("excite:sine", "excite:steps"),
        heldout_driver="excite:smooth",
        metrics={"joint_pos": "joint-position RMSE (5 joints)|rad",
                 "gripper": "gripper-opening RMSE|m"},
    ),
}


@dataclass
class CycleConfig:
    """What `realsim cycle` runs. Keys `robot` and `connection` are fixed by cli.md."""

    robot: str = "rc_car"
    # port/camera[/control] exactly as `record` takes them; None: start `realsim emulate` here
    connection: dict[str, str] | None = None
    emulator_seed: int = 1  # which emulated robot (its true parameters) when we start one
    emulator_reality: str | None = None  # a --reality YAML, e.g. a car at the edges of the datasheet
    iterations: int = 2  # iteration 0 plus this many corrections, at most
    # stop once the robot succeeds this often; None: run every iteration (to measure how the
    # gap moves from one correction to the next even after the robot succeeds)
    target_success: float | None = 0.9
    seed: int = 0  # every stage derives its seed from this and the iteration
    record: RecordConfig = field(default_factory=RecordConfig)
    fit_args: list[str] = field(default_factory=list)  # extra `realsim fit` options
    # also fit the parameters on the deploy episodes (closed loop, poorly exciting, and
    # possibly outside what the model can replay open loop: see the module note)
    fit_deploy_logs: bool = False
    residual: bool = True  # train and use the learned residual from iteration 1 on
    residual_args: list[str] = field(default_factory=list)
    # also train the residual on the deploy episodes (cruising and wheel-spin far outside
    # the excitation, they outweigh it and made the residual worse on the fit's
    # validation episodes: see the module note)
    residual_deploy_logs: bool = False
    # which episodes judge the residual (and are held out of its training): "fit": the
    # fit's validation episodes (every 4th excitation episode, all drivers mixed);
    # "driver": every episode of one excitation driver so far (record.drivers in turn,
    # iteration i: the (i-1)-th), so the residual is judged as the held-out gap measures
    # it, on a signal it never trained on (module note); "drivers": every driver in turn
    # (one residual trained without each), used only if it wins on every one, since one
    # left-out driver passed a residual the held-out driver then rejected (module note)
    residual_judge: str = "fit"
    teach_episodes: int = 200  # teacher episodes per iteration
    teach_args: list[str] = field(default_factory=list)
    student_config: str | None = None  # YAML for `train-student --config`
    student_args: list[str] = field(default_factory=list)  # extra train-student options (--set K=V)
    # fine-tuning from the previous student needs fewer epochs than training afresh
    finetune_args: list[str] = field(default_factory=lambda: ["--set", "epochs=6"])
    deploy_args: list[str] = field(default_factory=list)  # extra deploy options
    deploy_episodes: int = 20  # judged episodes per iteration (sim-vs-real success)
    # > 0: train-student keeps every checkpoint it evaluates (--set keep_all=true) and each
    # is deployed for this many episodes, for the sim-vs-real rank correlation over
    # candidates (costly on a real robot: off by default)
    candidate_episodes: int = 0

    def __post_init__(self) -> None:
        if self.robot in ROBOT_CYCLE and self.record.drivers is None:
            self.record.drivers = list(ROBOT_CYCLE[self.robot].drivers)

    @classmethod
    def from_yaml(cls, path: str | Path) -> CycleConfig:
        p = Path(path)
        raw = load_mapping(p, "a mapping at the top level")
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(raw) - known)
        if unknown:
            raise UserError(f"{p}: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})")
        if raw.get("robot") not in ("rc_car", "arm"):
            raise UserError(f"{p}: robot must be rc_car or arm, not {raw.get('robot')!r}")
        rec = raw.pop("record", None) or {}
        bad = sorted(set(rec) - set(RecordConfig.__dataclass_fields__))
        if bad:
            raise UserError(f"{p}: unknown record key(s) {', '.join(bad)}")
        conn = raw.get("connection")
        if conn is not None:
            need = ("port", "camera", "control") if raw["robot"] == "arm" else ("port", "camera")
            if not isinstance(conn, dict) or any(not conn.get(k) for k in need):
                raise UserError(f"{p}: connection needs {', '.join(need)} for {raw['robot']}")
        cfg = cls(**raw, record=RecordConfig(**rec))
        if not cfg.record.drivers:
            raise UserError(f"{p}: record.drivers is empty")
        if cfg.residual_judge not in ("fit", "driver", "drivers"):
            raise UserError(f"{p}: residual_judge must be fit, driver or drivers, "
                            f"not {cfg.residual_judge!r}")
        if cfg.residual_judge != "fit" and len(set(cfg.record.drivers)) < 2:
            raise UserError(f"{p}: residual_judge: {cfg.residual_judge} needs 2 or more record.drivers")
        if cfg.target_success is not None and not isinstance(cfg.target_success, (int, float)):
            raise UserError(f"{p}: target_success must be a rate in 0..1 or null, "
                            f"not {cfg.target_success!r}")
        if cfg.student_config and not Path(cfg.student_config).is_file():
            raise UserError(f"{p}: student_config {cfg.student_config} does not exist")
        return cfg


# ----------------------------------------------------------------------------- stages


class Stage:
    """A folder that is either done (`stage.json` holds its results) or to be (re)run."""

    def __init__(self, folder: Path, log: Callable[[str], None]) -> None:
        self.dir, self.log = folder, log

    @property
    def done(self) -> bool:
        return (self.dir / "stage.json").is_file()

    def result(self) -> dict[str, Any]:
        return json.loads((self.dir / "stage.json").read_text())

    def run(self, fn: Callable[[Path], dict[str, Any]], keep_partial: bool = False) -> dict[str, Any]:
        if self.done:
            self.log(f"  {self.dir.parent.name}/{self.dir.name}: done earlier, kept")
            return self.result()
        if self.dir.exists() and not keep_partial:
            shutil.rmtree(self.dir)  # killed midway: rerun from scratch, same seeds
        self.dir.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        self.log(f"  {self.dir.parent.name}/{self.dir.name} ...")
        res = fn(self.dir)
        res["seconds"] = round(time.monotonic() - t0, 1)
        tmp = self.dir / "stage.json.tmp"
        tmp.write_text(json.dumps(res, indent=1))
        os.replace(tmp, self.dir / "stage.json")  # atomic: done means done
        return res


# Verbs whose torch work is many tiny ops (the residual's MLP, step by step): one intra-op
# thread. With torch's default (one per core) on 2 shared cores the threads spin and wait:
# the iteration-1 residual of runs/cycle2b took 258 s that way against 27 s with one thread
# (same figures), and the cycle's residual stages took 600 and 720 s.
ONE_THREAD_VERBS = ("train-residual", "replay")


def realsim(*args: str, log_to: Path) -> str:
    """Run one `realsim` verb; return its last stdout line. Its output goes to `log_to`."""
    cmd = [sys.executable, "-m", "realsim", *map(str, args)]
    env = None
    if args and str(args[0]) in ONE_THREAD_VERBS:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    with open(log_to, "a") as f:
        f.write("$ " + " ".join(cmd[2:]) + "\n")
        f.flush()
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=f, text=True, env=env)
        f.write(p.stdout)
    if p.returncode != 0:
        tail = (log_to.read_text().strip().splitlines() or ["?"])[-1]
        raise UserError(f"cycle: `realsim {args[0]}` failed ({tail}); see {log_to}")
    lines = [ln for ln in p.stdout.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def last_rate(line: str) -> float:
    """The success rate a verb printed last: 'success 0.93 ...' or 'success=93%'."""
    import re

    m = re.search(r"success\D*?([0-9.]+)\s*(%?)", line)
    if not m:
        raise UserError(f"cycle: no success rate in {line!r}")
    v = float(m.group(1))
    return v / 100 if m.group(2) == "%" or v > 1 else v


# ----------------------------------------------------------------------------- the gap


def dynamics_error(real: Path, pred: Path, episodes: Collection[str] | None = None
                   ) -> dict[str, float]:
    """Open-loop RMSE of a replay (`realsim replay`) against its log, the robot's gap
    metrics (ROBOT_CYCLE[robot].metrics), over all its episodes (or only those named in
    `episodes`); the robot is the log's.

    rc_car: yaw rate (rad/s) and wheel speed (rad/s). arm: joint position of the five
    revolute joints (rad) and gripper opening (m)."""
    from realsim.logs import LogReader

    with LogReader(real) as r:
        robot = r.robot
    if robot == "arm":
        return _arm_error(real, pred, episodes)
    return _car_error(real, pred, episodes)


def _names(pred: Path, episodes: Collection[str] | None) -> list[str]:
    """The replay's episode names, restricted to `episodes` when given."""
    from realsim.logs import LogReader

    with LogReader(pred) as q:
        return [n for n in q.episode_names if episodes is None or n in episodes]


def _car_error(real: Path, pred: Path, episodes: Collection[str] | None = None) -> dict[str, float]:
    """The car's gap: RMSE of yaw rate and wheel speed (rad/s)."""
    from realsim.logs import LogReader
    from sysid.data import signals_of

    err: dict[str, list[float]] = {"yaw_rate": [], "wheel_speed": []}
    with LogReader(real) as r, LogReader(pred) as q:
        for name in _names(pred, episodes):
            a, b = r.episode(name), q.episode(name)
            fa = {k: a.sensors[k] for k in ("enc_rad", "yaw_rate", "accel")}
            fb = {k: b.sensors[k] for k in ("enc_rad", "yaw_rate", "accel")}
            sa, sb = signals_of(a.sensors.t, fa), signals_of(b.sensors.t, fb)
            for k in err:
                err[k].append(float(np.mean((sa[k] - sb[k]) ** 2)))
    return {k: float(np.sqrt(np.mean(v))) for k, v in err.items()}


def _arm_error(real: Path, pred: Path, episodes: Collection[str] | None = None) -> dict[str, float]:
    """The arm's gap: RMSE of the measured joint positions, the five revolute joints
    together (rad), and of the gripper opening (m). The replay is on the log's sensor
    times (spec/cli.md); any other times are interpolated onto the log's.

    Shape: qpos (M, 6) per episode -> two scalars."""
    from realsim.logs import LogReader

    sq: dict[str, list[np.ndarray]] = {"joint_pos": [], "gripper": []}
    with LogReader(real) as r, LogReader(pred) as q:
        for name in _names(pred, episodes):
            a, b = r.episode(name), q.episode(name)
            ta, qa = np.asarray(a.sensors.t), np.asarray(a.sensors["qpos"], dtype=np.float64)
            tb, qb = np.asarray(b.sensors.t), np.asarray(b.sensors["qpos"], dtype=np.float64)
            if len(tb) != len(ta) or not np.allclose(ta, tb):
                qb = np.stack([np.interp(ta, tb, qb[:, j]) for j in range(qb.shape[1])], axis=1)
            d = qa - qb
            sq["joint_pos"].append((d[:, :5] ** 2).ravel())
            sq["gripper"].append(d[:, 5] ** 2)
    return {k: float(np.sqrt(np.mean(np.concatenate(v)))) if v else float("nan")
            for k, v in sq.items()}


def error_ratio(base: dict[str, float], new: dict[str, float]) -> tuple[float | None, str]:
    """How `new` errors compare with `base` ({metric: RMSE} each): the mean over metrics of
    new / base (a ratio, so metrics of different units weigh alike; None when no metric
    is comparable), and one line "metric base -> new, ..." for the report."""
    ratios = {k: new[k] / base[k] for k in base
              if k in new and base[k] > 0 and np.isfinite(base[k]) and np.isfinite(new[k])}
    if not ratios:
        return None, ""
    return float(np.mean(list(ratios.values()))), ", ".join(
        f"{k} {base[k]:.4g} -> {new[k]:.4g}" for k in ratios)


def validation_episodes(params: Path) -> dict[str, list[str]]:
    """The fit's own validation split, from its params.yaml (`fit.logs`): log file ->
    the episodes `realsim fit` held out of fitting. Never the cycle's held-out episodes
    (those are not given to the fit). The split is stable as logs are appended (every
    4th episode of the logs in order), so the params in use before this fit never saw
    these episodes either."""
    raw = yaml.safe_load(Path(params).read_text()) or {}
    logs = ((raw.get("fit") or {}).get("logs") or {})
    return {f: list(v.get("heldout") or []) for f, v in logs.items() if v.get("heldout")}


def _validation_rmse(robot: str, val: dict[str, list[str]], variants: dict[str, list[str]],
                     d: Path, log_to: Path) -> tuple[dict[str, dict[str, float]], int]:
    """Each variant's gap metric on the fit's validation episodes (`val`: log -> names).

    Every variant (name -> its `realsim replay` options: --params, --residual) is replayed
    on each validation log into `d` (`{name}_{k}.h5`) and scored with `dynamics_error` on
    the named episodes only; the per-log RMSEs are pooled by episode count.
    Shape: per log {metric: RMSE} -> {variant: {metric: RMSE}}; also the episode count."""
    d.mkdir(parents=True, exist_ok=True)
    sums: dict[str, dict[str, float]] = {v: {} for v in variants}
    n_total = 0
    for k, (logf, names) in enumerate(sorted(val.items())):
        for name, extra in variants.items():
            pred = d / f"{name}_{k}.h5"
            realsim("replay", robot, "--log", logf, "--out", pred, *extra, log_to=log_to)
            for m, e in dynamics_error(Path(logf), pred, episodes=names).items():
                sums[name][m] = sums[name].get(m, 0.0) + len(names) * e ** 2
        n_total += len(names)
    return {v: {m: float(np.sqrt(x / n_total)) for m, x in e.items()} for v, e in sums.items()}, n_total


def fit_decision(robot: str, candidate: Path, incumbent: Path | None, d: Path,
                 log_to: Path) -> dict[str, Any]:
    """Adopt the new fit only if it is no worse than the params in use (`incumbent`;
    None: nominal) on the fit's validation episodes (`validation_episodes`).

    Both are replayed (`realsim replay`) on each validation log and scored with the gap
    metric (`dynamics_error`) on the held-out-of-fitting episodes only, pooled over the
    logs by episode count (`_validation_rmse`). Adopted when the mean ratio over metrics
    candidate / incumbent (`error_ratio`) is <= 1, or when there is no validation episode
    to judge by. Returns {"adopt": bool, "ratio", "validation": {"candidate": ..,
    "incumbent": ..}, "why": one line for the report}."""
    val = validation_episodes(candidate)
    base = "nominal" if incumbent is None else str(incumbent)
    if not val:
        return {"adopt": True, "ratio": None, "validation": {},
                "why": "adopted (no validation episodes to compare with the params in use)"}
    pooled, n_total = _validation_rmse(
        robot, val, {"candidate": ["--params", str(candidate)],
                     "incumbent": ["--params", str(incumbent)] if incumbent is not None else []},
        d, log_to)
    ratio, per = error_ratio(pooled["incumbent"], pooled["candidate"])
    where = f"{n_total} validation episode(s) of the fit"
    if ratio is None or ratio <= 1.0:
        return {"adopt": True, "ratio": ratio, "validation": pooled,
                "why": f"new fit adopted: no worse than {base} on {where} ({per}; mean ratio "
                       f"{ratio if ratio is not None else float('nan'):.3f})"}
    return {"adopt": False, "ratio": ratio, "validation": pooled,
            "why": f"new fit rejected: worse than {base} on {where} ({per}; mean ratio "
                   f"{ratio:.3f}); {base} kept"}


def residual_holdout(params: Path, val: dict[str, list[str]] | None = None) -> list[str]:
    """What `train-residual --holdout` must leave out: the episodes the residual decision
    judges it on (`val`: log -> names; None: the fit's validation episodes,
    `validation_episodes(params)`), so they were not trained on. Each is named with its
    log's full path (`dir/file.h5:ep_NNNNNN`): every iteration's record folder holds logs
    of the same base names, and a base name would leave out that episode of each of them."""
    val = validation_episodes(params) if val is None else val
    return sorted({f"{Path(f).resolve()}:{n}" for f, names in val.items() for n in names})


def driver_episodes(logs: Collection[Path], driver: str, counts: dict[str, int]) -> dict[str, list[str]]:
    """`residual_judge: driver`: every recorded episode of one excitation `driver`
    ("excite:chirp") in `logs` (the record stages' files, named after their driver),
    log -> names; `counts`: episodes per file name (`_per_driver`)."""
    from realsim.logs import LogReader

    def names(f: Path) -> list[str]:
        if Path(f).is_file():  # what was recorded (the count is what was asked for)
            with LogReader(f) as r:
                return list(r.episode_names)
        return [f"ep_{j:06d}" for j in range(counts.get(Path(f).name, 0))]

    val = {str(f): names(f) for f in logs if Path(f).name == _driver_file(driver)}
    return {f: v for f, v in val.items() if v}


def _driver_file(driver: str) -> str:
    return f"{driver.split(':')[-1]}.h5"


def _per_driver(R: RecordConfig) -> dict[str, int]:
    """Episodes per iteration of each excitation driver's file: R.episodes dealt out over
    R.drivers in order (the first ones get one more when it does not divide)."""
    drivers = R.drivers or []
    return {_driver_file(drv): R.episodes // len(drivers) + (k < R.episodes % len(drivers))
            for k, drv in enumerate(drivers)}


def residual_decision(robot: str, params: Path, residual: Path, d: Path,
                      log_to: Path, val: dict[str, list[str]] | None = None,
                      what: str = "validation episode(s) of the fit") -> dict[str, Any]:
    """Use the residual for teach/train only if fitted+residual beats fitted alone on the
    fit's validation episodes (`validation_episodes(params)`, the episodes `realsim fit`
    held out of fitting, which the cycle also holds out of the residual's training:
    `residual_holdout`). Never the cycle's held-out episodes: those only report the gap.

    Both are replayed into `d` and scored as in `fit_decision` (`_validation_rmse`); the
    residual is used when the mean ratio over metrics RMSE(fitted+residual) /
    RMSE(fitted) (`error_ratio`) is below 1. No validation episode to judge by: not used.
    `val` (log -> names) judges on other episodes instead (`residual_judge: driver`: one
    whole excitation driver, `driver_episodes`), `what` names them in the report line.
    Returns {"use": bool, "ratio": float or None, "validation": {"fitted": ..,
    "fitted+residual": ..}, "why": one line for the report}."""
    val = validation_episodes(params) if val is None else val
    if not val:
        return {"use": False, "ratio": None, "validation": {},
                "why": f"no {what} to judge the residual by: fitted only"}
    pooled, n_total = _validation_rmse(
        robot, val, {"fitted": ["--params", str(params)],
                     "fitted_residual": ["--params", str(params), "--residual", str(residual)]},
        d, log_to)
    pooled = {"fitted": pooled["fitted"], "fitted+residual": pooled["fitted_residual"]}
    ratio, per = error_ratio(pooled["fitted"], pooled["fitted+residual"])
    where = f"{n_total} {what}"
    if ratio is None:
        return {"use": False, "ratio": None, "validation": pooled,
                "why": f"no comparable error on {where}: fitted only"}
    if ratio < 1.0:
        return {"use": True, "ratio": ratio, "validation": pooled,
                "why": f"fitted+residual beats fitted alone on {where} ({per}; mean ratio "
                       f"{ratio:.3f})"}
    return {"use": False, "ratio": ratio, "validation": pooled,
            "why": f"residual does not beat fitted alone on {where} ({per}; mean ratio "
                   f"{ratio:.3f}): fitted only"}


def _residual_every_driver(cfg: CycleConfig, d: Path, fitted: Path, logs: list[Path],
                           fresh: dict[str, list[str]] | None = None) -> dict[str, Any]:
    """`residual_judge: drivers`: leave one driver out, for every driver in turn.

    For each excitation driver a residual is trained without every episode of it
    (`driver_episodes`, `residual_holdout`) and judged on them (`residual_decision`); the
    residual is used only if it beats fitted alone on every left-out driver, i.e. if the
    training recipe carries to a kind of signal it never saw, which is what the held-out
    driver asks of it. The residual used (and reported on held-out) is then trained on
    every excitation episode, as cross-validation estimates a recipe and refits on all.
    Costs (drivers + 1) trainings. Returns the stage's record, with one "folds" entry
    per driver. `fresh` (log -> names): episodes left out of every training here (the
    simulator decision's, `fresh_episodes`)."""
    robot, R = cfg.robot, cfg.record
    fresh_hold = residual_holdout(fitted, fresh or {}) if fresh else []
    folds = []
    for drv in dict.fromkeys(R.drivers or []):
        val = driver_episodes(logs, drv, _per_driver(R))
        f = d / f"without_{drv.split(':')[-1]}"
        ckpt = f / "residual.ckpt"
        hold = sorted({*residual_holdout(fitted, val), *fresh_hold})
        realsim("train-residual", robot, "--params", fitted, "--logs", *logs, "--out", ckpt,
                *cfg.residual_args, *(["--holdout", ",".join(hold)] if hold else []),
                log_to=d / "log.txt")
        dec = residual_decision(robot, fitted, ckpt, f / "decision", d / "log.txt", val=val,
                                what=f"episode(s) of {drv}")
        folds.append({"driver": drv, "use": dec["use"], "ratio": dec["ratio"],
                      "validation": dec["validation"]})
    ckpt = d / "residual.ckpt"
    realsim("train-residual", robot, "--params", fitted, "--logs", *logs, "--out", ckpt,
            *cfg.residual_args, *(["--holdout", ",".join(fresh_hold)] if fresh_hold else []),
            log_to=d / "log.txt")
    use = bool(folds) and all(f["use"] for f in folds)
    ratios = [f["ratio"] for f in folds if f["ratio"] is not None]
    per = ", ".join(f"without {f['driver']}: "
                    + ("n/a" if f["ratio"] is None else f"{f['ratio']:.3f}") for f in folds)
    why = (f"fitted+residual beats fitted alone on every driver left out of its training ({per})"
           if use else f"residual does not beat fitted alone on every driver left out of its "
                       f"training ({per}; mean ratio over metrics, below 1 helps): fitted only")
    return {"residual": str(ckpt), "use": use, "ratio": max(ratios) if ratios else None,
            "folds": folds, "why": why}


def fresh_episodes(candidate: Path, new_logs: Collection[str | Path]) -> dict[str, list[str]]:
    """The fit's validation episodes (`validation_episodes(candidate)`) that lie in this
    iteration's new recordings `new_logs`: recorded after every simulator of earlier
    iterations was built, and held out of this iteration's fit and residual, so no
    candidate simulator has seen them. log -> names."""
    new = {Path(f).resolve() for f in new_logs}
    return {f: v for f, v in validation_episodes(candidate).items() if Path(f).resolve() in new}


def sim_options(sim: dict[str, Path | None]) -> list[str]:
    """`replay`/`teach`/`train-student` options of a simulator {"params", "residual"}."""
    return [*(["--params", str(sim["params"])] if sim.get("params") else []),
            *(["--residual", str(sim["residual"])] if sim.get("residual") else [])]


def simulator_decision(robot: str, candidate: dict[str, Path | None],
                       incumbent: dict[str, Path | None], fresh: dict[str, list[str]],
                       d: Path, log_to: Path) -> dict[str, Any]:
    """Replace the simulator in use (`incumbent`: the params and residual teach and train
    ran in last iteration; None values: nominal, no residual) with this iteration's
    (`candidate`: the adopted params, plus the residual when it was judged to help) only
    if the candidate is no worse on `fresh` (`fresh_episodes`: episodes neither was built
    from). The fit and residual decisions each compare one piece against its own
    predecessor; this compares the whole simulators, so a new fit that beats the old
    params alone but lost the old residual's correction cannot make the simulator in use
    worse (runs/cycle4: iteration 1's fitted+residual, then iteration 2's fit alone, 1.75x
    the held-out error). No fresh episode to judge by: the candidate is adopted.
    Returns {"adopt", "ratio", "validation", "why"}."""
    name = " + ".join(f"{k} {Path(v).parent.parent.name}/{Path(v).parent.name}"
                      for k, v in incumbent.items() if v) or "nominal"
    if not fresh:
        return {"adopt": True, "ratio": None, "validation": {},
                "why": "new simulator adopted (no fresh validation episodes to compare)"}
    pooled, n_total = _validation_rmse(
        robot, fresh, {"candidate": sim_options(candidate), "incumbent": sim_options(incumbent)},
        d, log_to)
    ratio, per = error_ratio(pooled["incumbent"], pooled["candidate"])
    where = f"{n_total} fresh validation episode(s)"
    if ratio is None or ratio <= 1.0:
        return {"adopt": True, "ratio": ratio, "validation": pooled,
                "why": f"new simulator adopted: no worse than the one in use ({name}) on "
                       f"{where} ({per}; mean ratio "
                       f"{ratio if ratio is not None else float('nan'):.3f})"}
    return {"adopt": False, "ratio": ratio, "validation": pooled,
            "why": f"new simulator rejected: worse than the one in use ({name}) on {where} "
                   f"({per}; mean ratio {ratio:.3f}); that one stays in use"}


# ----------------------------------------------------------------------------- the cycle


def run_cycle(cfg: CycleConfig, out: Path, log: Callable[[str], None] = print) -> Path:
    """Run (or resume) the cycle in `out`; return the final student checkpoint."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(asdict(cfg), indent=1))
    emulator = None
    conn = cfg.connection
    if conn is None:
        from hardware.emulators.launch import EmulatorProcess

        emulator = EmulatorProcess(cfg.robot, seed=cfg.emulator_seed, reality=cfg.emulator_reality,
                                   log=out / "emulator.log").start()
        conn = dict(emulator.ready)
        conn.pop("control", None) if cfg.robot == "rc_car" else None
        log(f"emulated {cfg.robot}: {emulator.ready}")
    wire = ["--port", conn["port"], "--camera", conn["camera"]]
    if conn.get("control"):
        wire += ["--control", conn["control"]]
    try:
        return _iterate(cfg, out, wire, log)
    finally:
        if emulator is not None:
            emulator.stop()


def _iterate(cfg: CycleConfig, out: Path, wire: list[str], log: Callable[[str], None]) -> Path:
    robot, R = cfg.robot, cfg.record
    rc = ROBOT_CYCLE[robot]
    assert R.drivers
    fit_logs: list[Path] = []  # the fit's: every excitation recording so far (module note)
    residual_logs: list[Path] = []  # the residual's: the same (deploy logs: an option)
    heldout = out / "heldout" / "heldout.h5"
    params: Path | None = None
    residual: Path | None = None
    student: Path | None = None
    # the simulator teach and train ran in last ({"params", "residual"}; None: nominal)
    in_use: dict[str, Path | None] = {"params": None, "residual": None}
    history: list[dict[str, Any]] = []

    def record(folder: Path, name: str, episodes: int, driver: str, seed: int) -> Path:
        f = folder / name
        realsim("record", robot, *wire, "--episodes", episodes, "--seconds", R.seconds,
                "--driver", driver, "--seed", seed, "--out", f, "--resume", log_to=folder / "log.txt")
        return f

    def record_stage(d: Path, i: int) -> dict[str, Any]:
        files = []
        per = _per_driver(R)
        for k, drv in enumerate(R.drivers):
            n = per[_driver_file(drv)]
            if n:
                files.append(str(record(d, f"{drv.split(':')[-1]}.h5", n, drv,
                                        1000 * (cfg.seed + i) + 100 * k)))
        return {"logs": files}

    # the held-out episodes: recorded once, before anything is fitted, never fitted
    Stage(heldout.parent, log).run(
        lambda d: {"log": str(record(d, heldout.name, R.heldout_episodes, rc.heldout_driver,
                                     900_000 + cfg.seed))}, keep_partial=True)

    for i in range(cfg.iterations + 1):
        it = out / f"iter_{i:02d}"
        log(f"iteration {i}")
        row: dict[str, Any] = {"iteration": i}
        decision: dict[str, Any] = {"use": False, "why": "no residual trained (or no fit yet)"}
        fresh: dict[str, list[str]] = {}

        # -- reality: new excitation data
        rec = Stage(it / "record", log).run(lambda d, i=i: record_stage(d, i), keep_partial=True)
        fit_logs += [Path(f) for f in rec["logs"]]
        residual_logs += [Path(f) for f in rec["logs"]]

        # -- real to sim: fit, then the residual on what the fit still misses
        if i > 0:
            def fit_stage(d: Path, incumbent: Path | None = params, i: int = i) -> dict[str, Any]:
                cand = Path(realsim("fit", robot, "--logs", *fit_logs, "--out", d, "--seed",
                                    cfg.seed + i, *(["--init", str(incumbent)] if incumbent else []),
                                    *cfg.fit_args, log_to=d / "log.txt"))
                dec = fit_decision(robot, cand, incumbent, d / "decision", d / "log.txt")
                kept = cand if dec["adopt"] else incumbent
                return {"params": str(kept) if kept else None, "candidate": str(cand), **dec}

            fit = Stage(it / "fit", log).run(fit_stage)
            params = Path(fit["params"]) if fit["params"] else None
            # this iteration's new episodes the fit held out: no simulator has seen them
            fresh = fresh_episodes(Path(fit["candidate"]), rec["logs"])
            row["fit_why"] = fit.get("why", "new fit adopted (no decision recorded)")
            log(f"  fit: {row['fit_why']}")
            if params:
                row["params"] = _param_table(params)
            if cfg.residual and params:
                def residual_stage(d: Path, fitted: Path = params, i: int = i,
                                   fresh: dict[str, list[str]] = fresh) -> dict[str, Any]:
                    if cfg.residual_judge == "drivers":
                        return _residual_every_driver(cfg, d, fitted, residual_logs, fresh)
                    # trained without the episodes that judge it (appended last, so a
                    # --holdout in residual_args cannot put them back), then judged on them
                    val, what = None, "validation episode(s) of the fit"
                    if cfg.residual_judge == "driver":
                        drv = R.drivers[(i - 1) % len(R.drivers)]
                        val = driver_episodes(residual_logs, drv, _per_driver(R))
                        what = f"episode(s) of {drv}, a driver it did not train on"
                    hold = sorted({*residual_holdout(fitted, val), *residual_holdout(fitted, fresh)}) \
                        if fresh else residual_holdout(fitted, val)
                    ckpt = d / "residual.ckpt"
                    realsim("train-residual", robot, "--params", fitted, "--logs", *residual_logs,
                            "--out", ckpt, *cfg.residual_args,
                            *(["--holdout", ",".join(hold)] if hold else []), log_to=d / "log.txt")
                    dec = residual_decision(robot, fitted, ckpt, d / "decision", d / "log.txt",
                                            val=val, what=what)
                    return {"residual": str(ckpt), **dec}

                res = Stage(it / "residual", log).run(residual_stage)
                residual = Path(res["residual"])
                decision = {"use": bool(res.get("use", False)), "why": res.get(
                    "why", "no decision on the fit's validation episodes recorded: fitted only")}

        # -- the gap on held-out episodes: nominal, fitted, fitted + residual
        def gap(d: Path) -> dict[str, Any]:
            res: dict[str, Any] = {}
            variants = {"nominal": []}
            if params:
                variants["fitted"] = ["--params", str(params)]
                if residual:
                    variants["fitted+residual"] = ["--params", str(params), "--residual", str(residual)]
            for name, extra in variants.items():
                pred = d / f"{name.replace('+', '_')}.h5"
                realsim("replay", robot, "--log", heldout, "--out", pred, *extra, log_to=d / "log.txt")
                res[name] = dynamics_error(heldout, pred)
            return res

        # reported only: the residual decision was taken on the fit's validation episodes
        row["heldout_rmse"] = Stage(it / "gap", log).run(gap)
        use_residual = residual is not None and decision["use"]
        row["residual_used"], row["residual_why"] = use_residual, decision["why"]
        if residual is not None:
            log(f"  residual {'used' if use_residual else 'not used'}: {decision['why']}")

        # -- the simulator in use: this iteration's replaces last iteration's only if it is
        #    no worse on fresh episodes (`simulator_decision`)
        candidate = {"params": params, "residual": residual if use_residual else None}
        row["sim_kept"] = False
        if i > 0 and candidate != in_use:
            sim = Stage(it / "simulator", log).run(
                lambda d, c=candidate, old=dict(in_use), fr=fresh: simulator_decision(
                    robot, c, old, fr, d / "decision", d / "log.txt"))
            row["sim_why"] = sim["why"]
            log(f"  simulator: {sim['why']}")
            if sim["adopt"]:
                in_use = candidate
            else:
                row["sim_kept"] = True
        else:
            in_use = candidate

        # -- sim: teacher data in the (corrected) simulator, then the student
        corrected = sim_options(in_use)
        teach = Stage(it / "teach", log).run(lambda d: (realsim(
            "teach", robot, "--episodes", cfg.teach_episodes, "--out", d / "data.h5",
            "--seed", cfg.seed + 7919 * i, *corrected, *cfg.teach_args, log_to=d / "log.txt"),
            {"data": str(d / "data.h5")})[1])
        train = Stage(it / "student", log).run(lambda d: _train(cfg, d, Path(teach["data"]), student,
                                                                corrected))
        student = Path(train["student"])
        row["sim_success"] = train["sim_success"]
        row["pixel_check"] = _pixel_line(it / "student" / "log.txt")

        # -- deploy on the robot; the judge's verdicts give the real success
        dep = Stage(it / "deploy", log).run(lambda d: {"success": last_rate(realsim(
            "deploy", robot, "--policy", student, *wire, "--episodes", cfg.deploy_episodes,
            "--out", d / "deploy.h5", *cfg.deploy_args, log_to=d / "log.txt")), "log": str(d / "deploy.h5")},
            keep_partial=True)
        if cfg.residual_deploy_logs:
            residual_logs.append(Path(dep["log"]))
        if cfg.fit_deploy_logs:
            fit_logs.append(Path(dep["log"]))
        row["real_success"] = dep["success"]

        # -- optional: every evaluated candidate checkpoint on the robot too
        if cfg.candidate_episodes > 0:
            cands = Stage(it / "candidates", log).run(
                lambda d: _deploy_candidates(cfg, d, it / "student", wire), keep_partial=True)
            row["candidates"] = cands["candidates"]
        history.append(row)
        _report(out, history, log, robot)
        if cfg.target_success is not None and dep["success"] >= cfg.target_success:
            log(f"target reached: real success {dep['success']:.0%} >= {cfg.target_success:.0%}")
            break
    assert student is not None
    return student


def _train(cfg: CycleConfig, d: Path, data: Path, previous: Path | None,
           corrected: list[str]) -> dict[str, Any]:
    """Train the student on this iteration's teacher data; from iteration 1 on it starts
    from the previous student (`--init`) and is selected in the corrected simulator
    (`corrected`: --params/--residual), the one its data came from."""
    args = ["train-student", cfg.robot, "--data", str(data), "--out", str(d / "student.ckpt"),
            *corrected]
    if cfg.student_config:
        args += ["--config", cfg.student_config]
    args += cfg.student_args
    if cfg.candidate_episodes > 0:  # keep every evaluated checkpoint for the candidates stage
        args += ["--set", "keep_all=true"]
    if previous is not None:
        args += ["--init", str(previous), *cfg.finetune_args]
    line = realsim(*args, log_to=d / "log.txt")
    return {"student": str(d / "student.ckpt"), "sim_success": last_rate(line)}


def _deploy_candidates(cfg: CycleConfig, d: Path, student_dir: Path,
                       wire: list[str]) -> dict[str, Any]:
    """Deploy every candidate checkpoint train-student kept (``student_epochNNN.ckpt``,
    its selection-time sim success in the checkpoint's meta) for `candidate_episodes`
    episodes each; [] when train-student kept none."""
    import torch

    rows = []
    for ck in sorted(student_dir.glob("student_epoch*.ckpt")):
        meta = torch.load(ck, map_location="cpu", weights_only=True).get("meta", {})
        out = d / f"{ck.stem}.h5"
        real = last_rate(realsim("deploy", cfg.robot, "--policy", ck, *wire, "--episodes",
                                 cfg.candidate_episodes, "--out", out, *cfg.deploy_args,
                                 log_to=d / "log.txt"))
        rows.append({"checkpoint": str(ck), "epoch": meta.get("epoch"),
                     "sim_success": meta.get("sim_success"), "real_success": real})
    return {"candidates": rows}


def _pixel_line(log_txt: Path) -> str:
    """The footprint verdict `train-student` printed before training (one line), if any."""
    if not log_txt.is_file():
        return ""
    hits = [ln.strip() for ln in log_txt.read_text(errors="replace").splitlines()
            if "footprint" in ln or "below" in ln and " px" in ln]
    return hits[-1] if hits else ""


def _param_table(path: Path) -> dict[str, Any]:
    raw = yaml.safe_load(path.read_text())
    ps = raw.get("params", raw)
    return {k: v for k, v in ps.items() if isinstance(v, dict) and "value" in v}


# ----------------------------------------------------------------------------- report


def _spearman(pairs: list[tuple[float, float]]) -> float | None:
    """Spearman rank correlation of (sim, real) pairs; None under 3 pairs or no spread."""
    if len(pairs) < 3:
        return None
    from scipy.stats import spearmanr

    sims, reals = zip(*pairs, strict=True)
    if len(set(sims)) < 2 or len(set(reals)) < 2:
        return None  # a constant column has no ranks to correlate
    return float(spearmanr(sims, reals).statistic)


def in_use_error(row: dict[str, Any], previous: dict[str, float] | None = None
                 ) -> dict[str, float] | None:
    """Held-out error ({metric: RMSE}) of the simulator an iteration's teach and train ran
    in: `previous` (the last iteration's, same simulator) when the simulator decision
    kept it, else fitted+residual when the residual was used, else fitted, else nominal."""
    if row.get("sim_kept"):
        return previous
    g = row.get("heldout_rmse") or {}
    name = ("fitted+residual" if row.get("residual_used") else "fitted" if "fitted" in g
            else "nominal")
    e = g.get(name)
    return {k: float(v) for k, v in e.items()} if isinstance(e, dict) else None


def _report(out: Path, history: list[dict[str, Any]], log: Callable[[str], None],
            robot: str = "rc_car") -> None:
    """summary.md + summary.png + TensorBoard scalars across iterations so far."""
    metrics = ROBOT_CYCLE[robot].metrics
    head = " | ".join(f"held-out {lab.split('|')[0]} nominal / fitted / +residual "
                      f"({lab.split('|')[1]})" for lab in metrics.values())
    lines = ["# realsim cycle", "", f"robot: {robot}", "",
             f"| iteration | {head} | residual used | simulator in use: held-out error / "
             "previous iteration's | sim success | real success |",
             "|---|" + "---|" * len(metrics) + "---|---|---|---|"]
    prev: dict[str, float] | None = None
    for r in history:
        g = r["heldout_rmse"]
        now = in_use_error(r, prev)
        step, _ = error_ratio(prev, now) if prev and now else (None, "")
        prev = now

        def cell(sig: str, g: dict = g) -> str:
            return " / ".join(f"{g[v][sig]:.4g}" if v in g and sig in g[v] else "-"
                              for v in ("nominal", "fitted", "fitted+residual"))
        used = "yes" if r.get("residual_used") else ("no" if "fitted+residual" in g else "-")
        if r.get("sim_kept"):
            used += " (last iteration's simulator kept)"
        lines.append(f"| {r['iteration']} | " + " | ".join(cell(m) for m in metrics)
                     + f" | {used} | " + ("-" if step is None else f"{step:.3f}")
                     + f" | {r['sim_success']:.0%} | {r['real_success']:.0%} |")
    lines += ["", "The held-out figures above are reported only: they decide nothing. The "
              "simulator in use is the one teach and train ran in (nominal, fitted, or "
              "fitted+residual when the residual was used); its column is the mean over "
              "metrics of its held-out error over the previous iteration's (below 1: the gap "
              "fell).", "",
              "Residual decision (teach and train use the residual only if fitted+residual "
              "beats fitted alone on episodes it is not trained on: the fit's own validation "
              "episodes, or with `residual_judge: driver` every episode of one excitation "
              "driver, or with `residual_judge: drivers` each driver in turn, left out of "
              "one residual's training; the held-out episodes play no part):", ""]
    lines += [f"- iteration {r['iteration']}: {r.get('residual_why', '-')}" for r in history]
    lines += ["", "Fit decision (a new fit replaces the params in use only if it is no worse on "
              "the fit's own validation episodes; the held-out episodes play no part):", ""]
    lines += [f"- iteration {r['iteration']}: {r.get('fit_why', 'no fit')}" for r in history]
    lines += ["", "Simulator decision (the fitted params, with the residual when it was used, "
              "replace the simulator in use only if no worse on this iteration's fresh "
              "validation episodes, which no candidate was built from):", ""]
    lines += [f"- iteration {r['iteration']}: {r.get('sim_why', '-')}" for r in history]
    def fmt(x: float | None) -> str:
        return "n/a" if x is None else f"{x:.2f}"

    rho = _spearman([(r["sim_success"], r["real_success"]) for r in history])
    lines += ["", "Rank correlation (Spearman) of checkpoint success, sim vs real, over the "
              f"iterations' students: {fmt(rho)} "
              f"(n={len(history)}; needs 3 or more with differing successes)."]
    cands = [c for r in history for c in r.get("candidates", [])
             if c.get("sim_success") is not None]
    if any("candidates" in r for r in history):
        crho = _spearman([(c["sim_success"], c["real_success"]) for c in cands])
        lines += [f"Over the candidate checkpoints train-student evaluated: "
                  f"{fmt(crho)} (n={len(cands)})."]
    else:
        lines += ["Over the per-epoch candidate checkpoints: not measured "
                  "(candidate_episodes: 0)."]
    lines += ["", "Pixel check (the task object's footprint at the student's input, before "
              "training):", ""]
    lines += [f"- iteration {r['iteration']}: {r.get('pixel_check') or 'not recorded'}" for r in history]
    last = next((r for r in reversed(history) if "params" in r), history[-1])
    if "params" in last:
        lines += ["", f"## Parameters after iteration {last['iteration']}", "",
                  "| parameter | value | 95 % interval | identifiable |", "|---|---|---|---|"]
        for k, v in last["params"].items():
            ci = v.get("ci95") or ["-", "-"]
            ci_s = f"[{ci[0]:.4g}, {ci[1]:.4g}]" if isinstance(ci[0], int | float) else "-"
            lines.append(f"| {k} | {v['value']:.4g} | {ci_s} | {v.get('identifiable', '-')} |")
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    (out / "summary.json").write_text(json.dumps(history, indent=1, default=float))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        first = next(iter(metrics))
        its = [r["iteration"] for r in history]
        fig, ax = plt.subplots(1, 2, figsize=(9, 3.2))
        for v in ("nominal", "fitted", "fitted+residual"):
            ys = [r["heldout_rmse"].get(v, {}).get(first, np.nan) for r in history]
            ax[0].plot(its, ys, "o-", label=v)
        lab, unit = metrics[first].split("|")
        ax[0].set(xlabel="iteration", ylabel=f"held-out {lab} ({unit})")
        ax[0].legend()
        ax[1].plot(its, [r["sim_success"] for r in history], "o-", label="sim")
        ax[1].plot(its, [r["real_success"] for r in history], "s-", label="real")
        ax[1].set(xlabel="iteration", ylabel="success", ylim=(0, 1.05))
        ax[1].legend()
        fig.tight_layout()
        fig.savefig(out / "summary.png", dpi=90)
        plt.close(fig)
        from torch.utils.tensorboard import SummaryWriter

        with SummaryWriter(str(out / "tensorboard")) as tb:
            for r in history:
                tb.add_scalar("success/sim", r["sim_success"], r["iteration"])
                tb.add_scalar("success/real", r["real_success"], r["iteration"])
                for v, e in r["heldout_rmse"].items():
                    if not isinstance(e, dict):  # the stage's own "seconds"
                        continue
                    for sig, x in e.items():
                        tb.add_scalar(f"heldout_rmse/{sig}/{v}", x, r["iteration"])
    except Exception as e:  # plots are a convenience; the tables above are the record
        log(f"  (plots skipped: {e})")
    log(f"  summary: {out / 'summary.md'}")

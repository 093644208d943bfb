"""`realsim cycle CONFIG.yaml`: sim -> real -> sim, with the gap measured at every turn.

Read this file top to bottom to see the whole method. Each stage is one public
`realsim` verb run as a child process, exactly as a user's script would run it
(spec/cli.md), writing into its own folder of the iteration:

    iteration 0   record  excitation episodes (fit data) + held-out episodes (never fitted)
                  teach   the privileged teacher in the datasheet-randomised simulator
                  train   the student on robot-legal streams; select by closed-loop success
                  deploy  the student on the robot; success from the judge's verdicts
    iteration i   record  new excitation episodes (the deploy episodes are real data too)
                  fit     system identification on every real log so far, warm-started
                  residual learned dynamics on what the fitted simulator still gets wrong
                  gap     open-loop error on the held-out episodes: nominal, fitted, +residual
                  teach   in the corrected simulator, randomisation centred on the fit
                  train   the student, fine-tuned from the previous one
                  deploy  and measure again

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
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from realsim.errors import UserError

# ----------------------------------------------------------------------------- config


@dataclass
class RecordConfig:
    episodes: int = 6  # excitation episodes per iteration: enough to identify ~15 parameters
    heldout_episodes: int = 3  # recorded once, never fitted: the honest yardstick of the gap
    seconds: float = 10.0  # per episode; the task's own time limit
    drivers: list[str] = field(default_factory=lambda: ["excite:steps", "excite:chirp", "excite:prbs"])


@dataclass
class CycleConfig:
    """What `realsim cycle` runs. Keys `robot` and `connection` are fixed by cli.md."""

    robot: str = "rc_car"
    # port/camera[/control] exactly as `record` takes them; None: start `realsim emulate` here
    connection: dict[str, str] | None = None
    emulator_seed: int = 1  # which emulated robot (its true parameters) when we start one
    emulator_reality: str | None = None  # a --reality YAML, e.g. a car at the edges of the datasheet
    iterations: int = 2  # iteration 0 plus this many corrections, at most
    target_success: float = 0.9  # stop once the robot succeeds this often
    seed: int = 0  # every stage derives its seed from this and the iteration
    record: RecordConfig = field(default_factory=RecordConfig)
    fit_args: list[str] = field(default_factory=list)  # extra `realsim fit` options
    residual: bool = True  # train and use the learned residual from iteration 1 on
    residual_args: list[str] = field(default_factory=list)
    teach_episodes: int = 200  # teacher episodes per iteration
    teach_args: list[str] = field(default_factory=list)
    student_config: str | None = None  # YAML for `train-student --config`
    student_args: list[str] = field(default_factory=list)  # extra train-student options (--set K=V)
    # fine-tuning from the previous student needs fewer epochs than training afresh
    finetune_args: list[str] = field(default_factory=lambda: ["--set", "epochs=6"])
    deploy_args: list[str] = field(default_factory=list)  # extra deploy options
    deploy_episodes: int = 20  # judged episodes per iteration (sim-vs-real success)

    @classmethod
    def from_yaml(cls, path: str | Path) -> CycleConfig:
        p = Path(path)
        if not p.is_file():
            raise UserError(f"no such file: {p}")
        try:
            raw = yaml.safe_load(p.read_text()) or {}
        except yaml.YAMLError as e:
            raise UserError(f"{p}: not valid YAML ({str(e).splitlines()[0]})") from None
        if not isinstance(raw, dict):
            raise UserError(f"{p}: expected a mapping at the top level")
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
        cfg = cls(**raw, record=RecordConfig(**rec))
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


def realsim(*args: str, log_to: Path) -> str:
    """Run one `realsim` verb; return its last stdout line. Its output goes to `log_to`."""
    cmd = [sys.executable, "-m", "realsim", *map(str, args)]
    with open(log_to, "a") as f:
        f.write("$ " + " ".join(cmd[2:]) + "\n")
        f.flush()
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=f, text=True)
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


def dynamics_error(real: Path, pred: Path) -> dict[str, float]:
    """Open-loop RMSE of yaw rate (rad/s) and wheel speed (rad/s) of a replay vs its log."""
    from realsim.logs import LogReader
    from sysid.data import signals_of

    err: dict[str, list[float]] = {"yaw_rate": [], "wheel_speed": []}
    with LogReader(real) as r, LogReader(pred) as q:
        for name in q.episode_names:
            a, b = r.episode(name), q.episode(name)
            fa = {k: a.sensors[k] for k in ("enc_rad", "yaw_rate", "accel")}
            fb = {k: b.sensors[k] for k in ("enc_rad", "yaw_rate", "accel")}
            sa, sb = signals_of(a.sensors.t, fa), signals_of(b.sensors.t, fb)
            for k in err:
                err[k].append(float(np.mean((sa[k] - sb[k]) ** 2)))
    return {k: float(np.sqrt(np.mean(v))) for k, v in err.items()}


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
    real_logs: list[Path] = []  # every real log recorded so far (fit data)
    heldout = out / "heldout" / "heldout.h5"
    params: Path | None = None
    residual: Path | None = None
    student: Path | None = None
    history: list[dict[str, Any]] = []

    def record(folder: Path, name: str, episodes: int, driver: str, seed: int) -> Path:
        f = folder / name
        realsim("record", robot, *wire, "--episodes", episodes, "--seconds", R.seconds,
                "--driver", driver, "--seed", seed, "--out", f, "--resume", log_to=folder / "log.txt")
        return f

    def record_stage(d: Path, i: int) -> dict[str, Any]:
        files = []
        for k, drv in enumerate(R.drivers):
            n = R.episodes // len(R.drivers) + (k < R.episodes % len(R.drivers))
            if n:
                files.append(str(record(d, f"{drv.split(':')[-1]}.h5", n, drv,
                                        1000 * (cfg.seed + i) + 100 * k)))
        return {"logs": files}

    # the held-out episodes: recorded once, before anything is fitted, never fitted
    Stage(heldout.parent, log).run(
        lambda d: {"log": str(record(d, heldout.name, R.heldout_episodes, "excite:smooth",
                                     900_000 + cfg.seed))}, keep_partial=True)

    for i in range(cfg.iterations + 1):
        it = out / f"iter_{i:02d}"
        log(f"iteration {i}")
        row: dict[str, Any] = {"iteration": i}

        # -- reality: new excitation data
        rec = Stage(it / "record", log).run(lambda d, i=i: record_stage(d, i), keep_partial=True)
        real_logs += [Path(f) for f in rec["logs"]]

        # -- real to sim: fit, then the residual on what the fit still misses
        if i > 0:
            fit = Stage(it / "fit", log).run(lambda d: {"params": realsim(
                "fit", robot, "--logs", *real_logs, "--out", d, "--seed", cfg.seed + i,
                *(["--init", str(params)] if params else []), *cfg.fit_args, log_to=d / "log.txt")})
            params = Path(fit["params"])
            row["params"] = _param_table(params)
            if cfg.residual:
                res = Stage(it / "residual", log).run(lambda d: (realsim(
                    "train-residual", robot, "--params", params, "--logs", *real_logs,
                    "--out", d / "residual.ckpt", *cfg.residual_args, log_to=d / "log.txt"),
                    {"residual": str(d / "residual.ckpt")})[1])
                residual = Path(res["residual"])

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

        row["heldout_rmse"] = Stage(it / "gap", log).run(gap)

        # -- sim: teacher data in the (corrected) simulator, then the student
        corrected = [*(["--params", str(params)] if params else []),
                     *(["--residual", str(residual)] if residual else [])]
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
        real_logs.append(Path(dep["log"]))
        row["real_success"] = dep["success"]
        history.append(row)
        _report(out, history, log)
        if dep["success"] >= cfg.target_success:
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
    if previous is not None:
        args += ["--init", str(previous), *cfg.finetune_args]
    line = realsim(*args, log_to=d / "log.txt")
    return {"student": str(d / "student.ckpt"), "sim_success": last_rate(line)}


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


def _report(out: Path, history: list[dict[str, Any]], log: Callable[[str], None]) -> None:
    """summary.md + summary.png + TensorBoard scalars across iterations so far."""
    lines = ["# realsim cycle", "", "| iteration | held-out yaw-rate RMSE nominal / fitted / +residual (rad/s) "
             "| wheel-speed RMSE nominal / fitted / +residual (rad/s) | sim success | real success |",
             "|---|---|---|---|---|"]
    for r in history:
        g = r["heldout_rmse"]

        def cell(sig: str, g: dict = g) -> str:
            return " / ".join(f"{g[v][sig]:.3f}" if v in g else "-"
                              for v in ("nominal", "fitted", "fitted+residual"))
        lines.append(f"| {r['iteration']} | {cell('yaw_rate')} | {cell('wheel_speed')} | "
                     f"{r['sim_success']:.0%} | {r['real_success']:.0%} |")
    sims = [r["sim_success"] for r in history]
    reals = [r["real_success"] for r in history]
    if len(history) >= 3:
        from scipy.stats import spearmanr

        rho = spearmanr(sims, reals).statistic
        lines += ["", f"Rank correlation of the iterations' students, sim vs real success: "
                  f"Spearman {rho:.2f} over {len(history)} students."]
    else:
        lines += ["", "Rank correlation of sim vs real success: needs 3 or more students "
                  f"(have {len(history)})."]
    lines += ["", "Pixel check (cone footprint at the student's input, before training):", ""]
    lines += [f"- iteration {r['iteration']}: {r.get('pixel_check') or 'not recorded'}" for r in history]
    last = history[-1]
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

        its = [r["iteration"] for r in history]
        fig, ax = plt.subplots(1, 2, figsize=(9, 3.2))
        for v in ("nominal", "fitted", "fitted+residual"):
            ys = [r["heldout_rmse"].get(v, {}).get("yaw_rate", np.nan) for r in history]
            ax[0].plot(its, ys, "o-", label=v)
        ax[0].set(xlabel="iteration", ylabel="held-out yaw-rate RMSE (rad/s)")
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
    log("  " + lines[-1] if len(history) == 1 else f"  summary: {out / 'summary.md'}")

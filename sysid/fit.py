"""`realsim fit`: logs in, DIR/params.yaml (values, 95 % intervals, identifiability) out.

Pipeline: load and validate logs -> deterministic held-out split -> global
Optuna search (CMA-ES or TPE) on the training episodes, candidates evaluated
in batched rollouts -> local least squares (batched Levenberg-Marquardt,
``sysid.refine``) -> Jacobian intervals (``mujoco.sysid.calculate_intervals``,
widened for correlated residuals); parameters the logs do not determine go back
to their prior value and are flagged (the others keep their values: one
evaluation checks that this costs little, the sensor offsets are re-solved
exactly) -> held-out RMSE of nominal vs fitted -> params.yaml and report.md.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from realsim.errors import UserError
from sysid import refine as rf
from sysid import search as sr
from sysid.data import LogEpisode, load_logs, make_segments, signal_scales, split_holdout
from sysid.objective import Objective, rmse
from sysid.robot_adapter import RobotAdapter, get_adapter

REVERT_TOLERANCE = 1.05  # putting undetermined parameters back to prior may cost this much error


@dataclass
class FitConfig:
    """What `realsim fit` was asked to do (cli.md options plus sysid's own)."""

    robot: str
    logs: Sequence[str]
    out: str
    trials: int = 64
    storage: str | None = None
    sampler: str = "cmaes"
    holdout: str | None = None
    seed: int = 0
    jobs: int = 2
    batch: int = 16
    # processes asking from this study at once (--workers): one CMA-ES generation is
    # batch x workers trials, which they fill together (sysid.search)
    workers: int = 1
    window: float = 2.5  # s; 0 = whole episodes from rest
    search_seconds: float = 20.0  # seconds of training data the global search replays per candidate
    refine_seconds: float = 60.0  # seconds of training data the least squares and intervals use
    refine_iters: int = 9  # LM iterations; with JAC_EVERY = 3 the last Jacobian is the final one
    init: str | None = None
    free: Sequence[str] | None = None


@dataclass
class FitResult:
    """Everything params.yaml and the report are written from."""

    adapter: RobotAdapter
    names: list[str]
    prior: dict[str, float]
    fitted: dict[str, float]
    half: dict[str, float]  # 95 % half-width (physical units; inf when unidentifiable)
    identifiable: dict[str, bool]
    train: list[LogEpisode]
    held: list[LogEpisode]
    rmse: dict[str, dict[str, dict[str, float]]]  # split -> nominal|fitted -> signal -> value
    meta: dict[str, Any] = field(default_factory=dict)


def subset(segs: list, seconds: float) -> list:
    """Evenly spread segments totalling about ``seconds`` of data (all if <= 0)."""
    if seconds <= 0:
        return segs
    dur = [float(s.inp.sensor_t[-1] - s.inp.sensor_t[0]) for s in segs]
    if sum(dur) <= seconds:
        return segs
    k = max(1, int(round(len(segs) * seconds / sum(dur))))
    return [segs[i] for i in np.linspace(0, len(segs) - 1, k).round().astype(int)]


def _resolve_offsets(obj: Objective, u: np.ndarray, r: np.ndarray, J: np.ndarray,
                     among: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """Re-solve the pure signal offsets (sensor biases) among free indices ``among`` at
    ``u`` (n,) with residual ``r`` (R,): the residual is linear in them with the exact
    columns of J (R, n), so one clipped least-squares step is their optimum; no simulation."""
    off = [i for i in among if obj.offset_column(i) is not None]
    if not off:
        return u, r
    du = -np.linalg.lstsq(J[:, off], r, rcond=None)[0]
    u2 = u.copy()
    u2[off] = np.clip(u[off] + du, 0.0, 1.0)
    return u2, r + J[:, off] @ (u2[off] - u[off])


def run_fit(cfg: FitConfig, log: Callable[[str], None] = print) -> FitResult:
    """Fit, write DIR/params.yaml and DIR/report.md; return the result."""
    t_start, cpu_start, main_start = time.perf_counter(), time.process_time(), time.thread_time()
    ad = get_adapter(cfg.robot)
    if cfg.trials < 0 or cfg.jobs < 1 or cfg.batch < 1:
        raise UserError("fit: --trials must be >= 0, --jobs and --batch >= 1")
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    prior = {**ad.nominal, **(ad.load_params(cfg.init) if cfg.init else {})}
    names = list(cfg.free) if cfg.free else ad.names
    for n in names:
        if n not in ad.nominal:
            raise UserError(f"fit: unknown parameter {n!r} (known: {', '.join(ad.names)})")
    episodes = load_logs(cfg.logs, ad)
    train, held = split_holdout(episodes, cfg.holdout)
    log(f"{len(train)} training, {len(held)} held-out episodes ({sum(e.seconds for e in train):.0f} s to fit)")
    scales = signal_scales(train)
    segs = make_segments(train, ad, cfg.window)
    fixed = {k: v for k, v in prior.items() if k not in names}
    full = Objective(ad, subset(segs, cfg.refine_seconds), scales, names, fixed, cfg.jobs)
    quick = Objective(ad, subset(segs, cfg.search_seconds), scales, names, fixed, cfg.jobs)
    u0 = np.clip(full.to_u(prior), 0, 1)

    # ---- global search (resumable Optuna study)
    key = hashlib.sha1(repr((cfg.robot, sorted(e.key for e in train), names, cfg.window,
                             cfg.search_seconds, prior)).encode()).hexdigest()[:10]
    storage = cfg.storage or f"sqlite:///{(out / 'study.db').resolve()}"
    sampler = sr.make_sampler(cfg.sampler, cfg.seed, dict(zip(names, u0, strict=True)), cfg.batch,
                              cfg.workers)
    study = sr.open_study(storage, f"fit-{cfg.robot}-{key}", sampler)
    if not study.trials:
        study.enqueue_trial(dict(zip(names, u0, strict=True)))
    t0 = time.perf_counter()
    sr.run_search(study, names, quick.losses, cfg.trials, cfg.batch, log)
    t_search = time.perf_counter() - t0
    found = sr.best_u(study, names)
    u_best = found[0] if found else u0

    # ---- local refinement (batched LM), intervals, identifiability
    t0 = time.perf_counter()
    u, r, J = rf.lm(full, u_best, cfg.refine_iters, log=log)
    iv = rf.intervals(full, u, r, J)
    fitted = full.to_params(u)
    half = {n: float(iv.half_u[i] * (full.hi[i] - full.lo[i])) for i, n in enumerate(names)}
    ident = {n: bool(ok) for n, ok in zip(names, iv.identifiable, strict=True)}
    log(f"refined: {', '.join(f'{n}={fitted[n]:.4g}' for n in names)}; variance inflation "
        f"{iv.inflation:.1f}")
    if not iv.identifiable.all():  # keep the prior for what the logs cannot tell
        keep = [n for n in names if ident[n]]
        log(f"unidentifiable from these logs: {', '.join(n for n in names if n not in keep)}")
        # a parameter on a bound that the logs push beyond is not undetermined: the logs
        # want it there (the model needs it at least that far); it stays at the bound.
        # Only the ones the logs hardly depend on go back to their prior.
        pinned = {n for n, p in zip(names, iv.pinned, strict=True) if p and n not in keep}
        to_prior = {n: prior[n] for n in names if n not in keep and n not in pinned}
        fixed2 = {**fixed, **{n: fitted[n] for n in pinned}, **to_prior}
        cost_full = float(r @ r)
        half = {n: (half[n] if n in keep else float("inf")) for n in names}
        if pinned:
            log(f"at a bound the logs push against (kept there): {', '.join(sorted(pinned))}")
        if keep:  # the others at prior (or bound) cost one evaluation, not another fit
            u_rev = np.clip(full.to_u({**fitted, **fixed2}), 0, 1)
            r_rev = full.residuals(u_rev[None])[0]
            kidx = [names.index(n) for n in keep]
            u_rev, r_rev = _resolve_offsets(full, u_rev, r_rev, J, kidx)
            cost_rev = float(r_rev @ r_rev)
            if cost_rev <= REVERT_TOLERANCE * cost_full:
                sub = Objective(ad, full.segments, scales, keep, fixed2, cfg.jobs)
                iv2 = rf.intervals(sub, u_rev[kidx], r_rev, J[:, kidx])
                fitted = full.to_params(u_rev)
                for i, n in enumerate(keep):  # intervals without the dropped ones; flags stand
                    half[n] = float(iv2.half_u[i] * (sub.hi[i] - sub.lo[i]))
            else:  # the "undetermined" ones mattered after all (coupled): keep the full fit
                log(f"prior values cost {cost_rev / cost_full:.2f}x the full fit's error: "
                    "keeping the full fit's values (flags stand)")
        else:
            fitted = {**fitted, **fixed2}
    t_refine = time.perf_counter() - t0

    # ---- open-loop RMSE of whole episodes, nominal vs fitted
    table: dict[str, dict[str, dict[str, float]]] = {}
    replays: dict[str, tuple[dict[str, np.ndarray], dict[str, np.ndarray]]] = {}
    for split, eps in (("train", train), ("heldout", held)):
        if eps:
            (nom, fit), sims = rmse(ad, make_segments(eps, ad, 0.0), [ad.nominal, fitted], cfg.jobs)
            table[split] = {"nominal": nom, "fitted": fit}
            replays.update({e.uid: (sims[0][i], sims[1][i]) for i, e in enumerate(eps)})
    meta = {"trials": len(sr.completed(study)), "sampler": cfg.sampler, "seed": cfg.seed,
            "storage": storage, "study": study.study_name, "backend": ad.backend,
            "evaluations": full.n_evals + quick.n_evals,
            "wall_s": {"search": round(t_search, 2), "refine": round(t_refine, 2),
                       "total": round(time.perf_counter() - t_start, 2)},
            # CPU seconds (load-independent): the whole process, and its main thread (the
            # serial part; the rest ran in the rollout threads)
            "cpu_s": {"process": round(time.process_time() - cpu_start, 2),
                      "main_thread": round(time.thread_time() - main_start, 2)},
            "search_seconds_of_data": round(sum(float(s.inp.sensor_t[-1] - s.inp.sensor_t[0])
                                                for s in quick.segments), 1),
            "signal_scales": {k: round(v, 5) for k, v in scales.items()}}
    res = FitResult(ad, names, prior, fitted, half, ident, train, held, table, meta)
    write_params(res, out / "params.yaml", cfg)
    from sysid.report import write_report

    write_report(res, out, cfg.jobs, replays)
    return res


def write_params(res: FitResult, path: Path, cfg: FitConfig) -> None:
    """params.yaml: readable by the robot's parameter loader (e.g. CarParams.from_yaml)."""
    params: dict[str, Any] = {}
    for p in res.adapter.parameters:
        v = float(res.fitted.get(p.name, res.prior[p.name]))
        entry: dict[str, Any] = {"value": v}
        if p.name in res.names:
            h = res.half[p.name]
            ok = res.identifiable[p.name]
            entry["ci95"] = [v - h, v + h] if ok else [float(p.low), float(p.high)]
            entry["identifiable"] = bool(ok)
        else:
            entry["fitted"] = False
        entry.update(nominal=float(p.nominal), range=[float(p.low), float(p.high)], unit=p.unit)
        params[p.name] = entry
    logs = {}
    for e in res.train + res.held:
        d = logs.setdefault(str(e.file), {"train": [], "heldout": []})
        d["heldout" if e in res.held else "train"].append(e.name)
    doc = {"robot": res.adapter.robot, "params": params,
           "fit": {**res.meta, "rmse": res.rmse, "logs": logs, "holdout": cfg.holdout or "0.25",
                   "window_s": cfg.window}}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))

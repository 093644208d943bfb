"""Local refinement: batched Levenberg-Marquardt, and honest confidence intervals.

The LM loop is ours because its cost is all Jacobians: a finite-difference Jacobian
simulates the P perturbations in ONE batched rollout (``Objective.residuals`` on a
(P, n) block; offset parameters such as sensor biases get their exact column without
simulating), and is only computed every JAC_EVERY steps, rank-one (Broyden) updates
carrying it in between; every iteration tries four damping values as one batch.
(``mujoco.sysid.optimize`` rolls out one trajectory per call, its finite-difference
columns batched, and differentiates at every iteration; experiments/vs_mujoco_sysid.py
compares the two on the same data.)

Intervals: ``mujoco.sysid.calculate_intervals`` (Gauss-Newton covariance, white
residuals) widened by the residuals' correlation: consecutive samples of an
open-loop error are far from independent, so the sample count is replaced by an
effective one from the residual autocorrelation (Bartlett sum per segment and
signal). A parameter is identifiable when its widened 95 % half-width is small
(MAX_REL_RANGE of its range and MAX_REL_VALUE of its value) and it does not sit on
a bound it is pushed against.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from mujoco import sysid

from sysid.objective import Objective

FD_STEP = 5e-3  # finite-difference step in the normalised box (simulations are not smooth at 1e-8)
MAX_REL_RANGE = 0.1  # identifiable: 95 % half-width <= this share of the parameter's range ...
MAX_REL_VALUE = 0.2  # ... and <= this share of |value| (half-range for zero-centred ones)
MAX_LAG = 50  # samples of autocorrelation summed at most (1 s at 50 Hz)
LAMBDAS = (0.0, 0.1, 1.0, 10.0)  # damping multipliers tried together (0: Gauss-Newton)
MIN_OWN_EFFECT = 0.05  # pinned needs this share of a column the other columns cannot reproduce
JAC_EVERY = 3  # accepted LM steps per finite-difference Jacobian (Broyden updates between)


@dataclass
class Intervals:
    """95 % half-widths in the normalised box (inf: not identifiable) and the flags."""

    half_u: np.ndarray  # (n,) widened for correlated residuals
    identifiable: np.ndarray  # (n,) bool
    jac: np.ndarray  # (R, n)
    inflation: float  # variance factor N / N_eff applied to the white-noise covariance
    pinned: np.ndarray | None = None  # (n,) bool: on a bound, the logs pushing beyond it


def jacobian(obj: Objective, u: np.ndarray, r0: np.ndarray, step: float = FD_STEP) -> np.ndarray:
    """Forward-difference Jacobian (R, n) at ``u`` (n,) with residual ``r0`` (R,), one batch.

    Steps point away from the nearer bound, so every perturbation stays in [0, 1]."""
    n = len(u)
    J = np.zeros((len(r0), n))
    sim, hs = [], []
    for i in range(n):
        col = obj.offset_column(i)
        if col is not None:
            J[:, i] = col
            continue
        h = step if u[i] + step <= 1.0 else -step
        v = u.copy()
        v[i] += h
        sim.append((i, v))
        hs.append(h)
    if sim:
        R = obj.residuals(np.array([v for _, v in sim]))
        for (i, _), h, r in zip(sim, hs, R, strict=True):
            J[:, i] = (r - r0) / h
    return J


def _broyden(obj: Objective, J: np.ndarray, du: np.ndarray, dr: np.ndarray) -> np.ndarray:
    """Rank-one (Broyden) update of the simulated columns of J (R, n) after a step du (n,)
    that changed the residuals by dr (R,). Offset columns are exact and stay as they are."""
    sim = np.array([obj.offset_column(i) is None for i in range(J.shape[1])])
    d = np.where(sim, du, 0.0)
    dd = float(d @ d)
    if dd <= 1e-30:
        return J
    J = J.copy()
    J[:, sim] += np.outer(dr - J @ du, d[sim] / dd)
    return J


def lm(obj: Objective, u0: np.ndarray, max_iters: int = 10, ftol: float = 1e-4,
       log: Callable[[str], None] = lambda s: None,
       jac_every: int = JAC_EVERY) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Bounded Levenberg-Marquardt from ``u0`` (n,) in [0, 1]^n.

    The finite-difference Jacobian (one batch of the simulated columns) is computed at the
    start and then every ``jac_every`` accepted steps; in between it is carried by rank-one
    Broyden updates from the step just taken (no simulation). A step that fails on a
    carried Jacobian first refreshes it rather than damping harder.

    Returns (u (n,), r (R,), J (R, n)) at the optimum; J is a fresh finite-difference
    Jacobian there (the intervals need it)."""
    u = np.clip(np.asarray(u0, float), 0.0, 1.0)
    r = obj.residuals(u[None])[0]
    cost = float(r @ r)
    lam = 1e-3
    J = jacobian(obj, u, r)
    age = 0  # accepted steps since J was last computed by finite differences
    for it in range(max_iters):
        g = J.T @ r
        H = J.T @ J
        # parameters on a bound and pushed outwards take no part in the step
        free = ~(((u <= 0.0) & (g > 0)) | ((u >= 1.0) & (g < 0)))
        if not free.any():
            break
        Hf, gf = H[np.ix_(free, free)], g[free]
        d = np.maximum(np.diag(Hf), 1e-12 * max(float(np.trace(Hf)), 1e-30))
        cands = []
        for m in LAMBDAS:
            step = np.zeros_like(u)
            step[free] = -np.linalg.lstsq(Hf + lam * m * np.diag(d), gf, rcond=1e-12)[0]
            cands.append(np.clip(u + step, 0.0, 1.0))
        Rc = obj.residuals(np.array(cands))
        costs = np.sum(Rc * Rc, axis=1)
        k = int(np.argmin(costs))
        if costs[k] >= cost:
            if age > 0:  # the carried Jacobian may be what failed: refresh it first
                J, age = jacobian(obj, u, r), 0
                log(f"lm {it}: cost {cost:.5g}, no step improved, Jacobian refreshed")
                continue
            lam *= 100.0  # no improvement on a fresh Jacobian: damp harder
            log(f"lm {it}: cost {cost:.5g}, no step improved, lambda {lam:.2g}")
            if lam > 1e8:
                break
            continue
        gain = (cost - costs[k]) / max(cost, 1e-30)
        du = cands[k] - u
        moved = float(np.max(np.abs(du)))
        J = _broyden(obj, J, du, Rc[k] - r)
        u, r, cost = cands[k], Rc[k], float(costs[k])
        age += 1
        lam = min(max(lam * LAMBDAS[k], 1e-6), 1e8)
        log(f"lm {it}: cost {cost:.5g} (-{100 * gain:.2f} %), max |du| {moved:.2g}")
        if gain < ftol or moved < 1e-4:
            break
        if age >= jac_every:
            J, age = jacobian(obj, u, r), 0
    if age > 0:
        J = jacobian(obj, u, r)
    return u, r, J


def inflation(obj: Objective, r: np.ndarray) -> float:
    """Variance inflation N / N_eff (>= 1) of residuals ``r`` (R,) from their autocorrelation.

    Per (segment, signal) run (not centred: a persistent offset counts as correlation):
    tau = 1 + 2 sum_k rho_k over lags up to the first
    non-positive one (at most MAX_LAG); the factor is the R-weighted mean of tau."""
    taus, weights = [], []
    for j in range(len(obj.segments)):
        for i in range(int(obj.row_signal.max(initial=0)) + 1):
            x = r[(obj.row_segment == j) & (obj.row_signal == i)]
            if len(x) < 4 or not np.any(x):
                continue
            c0 = float(x @ x)
            tau = 1.0
            for k in range(1, min(MAX_LAG, len(x) - 1)):
                rho = float(x[:-k] @ x[k:]) / c0
                if rho <= 0:
                    break
                tau += 2 * rho
            taus.append(tau)
            weights.append(len(x))
    return float(max(1.0, np.average(taus, weights=weights))) if taus else 1.0


def intervals(obj: Objective, u: np.ndarray, r: np.ndarray, J: np.ndarray) -> Intervals:
    """Widened 95 % half-widths and identifiability at ``u`` (n,) from r (R,), J (R, n).

    Unidentifiable: the logs do not depend on it (zero column), its interval is wide,
    or it sits on a bound with the gradient pushing out of the box."""
    n = len(u)
    col = np.linalg.norm(J, axis=0)
    dead = col <= 1e-9 * max(float(np.linalg.norm(r)), 1e-12) + 1e-14
    half = np.full(n, np.inf)
    live = ~dead
    f = inflation(obj, r)
    if live.any():
        with np.errstate(all="ignore"):
            _, h = sysid.calculate_intervals([r], J[:, live])
        half[live] = np.where(np.isfinite(h), h * np.sqrt(f), np.inf)
    g = J.T @ r
    pinned = ((u <= 1e-6) & (g > 0)) | ((u >= 1 - 1e-6) & (g < 0))
    # the logs push a parameter against its bound only if its effect is its own: one whose
    # Jacobian column the other parameters reproduce (e.g. the centre of mass tilting the
    # resting accelerometer exactly like the accelerometer bias) is confounded, not pinned
    for i in np.flatnonzero(pinned):
        others = np.flatnonzero(live & (np.arange(n) != i))
        if others.size and col[i] > 0:
            c = np.linalg.lstsq(J[:, others], J[:, i], rcond=None)[0]
            if np.linalg.norm(J[:, i] - J[:, others] @ c) < MIN_OWN_EFFECT * col[i]:
                pinned[i] = False
    rng = obj.hi - obj.lo
    x = obj.lo + u * rng
    zero_c = (obj.lo < 0) & (obj.hi > 0)
    ref = np.where(zero_c, rng / 2, np.abs(x))
    ok = np.isfinite(half) & (half <= MAX_REL_RANGE) & (half * rng <= MAX_REL_VALUE * ref) & ~pinned
    return Intervals(half, ok, J, f, pinned)

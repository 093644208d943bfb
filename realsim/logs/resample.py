"""Put streams that never tick together onto one time grid."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from realsim.logs.reader import Episode

METHODS = ("linear", "previous", "nearest")


def _prev_index(t_src: np.ndarray, t_new: np.ndarray) -> np.ndarray:
    """Index of the last source sample at or before each new time (-1 if none)."""
    return np.searchsorted(t_src, t_new, side="right") - 1


def resample(t_src: np.ndarray, x_src: np.ndarray, t_new: np.ndarray,
             method: str = "linear") -> np.ndarray:
    """Resample ``x_src`` sampled at ``t_src`` onto ``t_new``.

    Shape: t_src (N,), x_src (N,) or (N, k), t_new (T,) -> (T,) or (T, k).
    ``t_src`` must be non-decreasing.  Outside ``[t_src[0], t_src[-1]]`` the end
    values are held.  ``"linear"`` interpolates (float64 result), ``"previous"``
    is a zero-order hold (what a command does until the next one), ``"nearest"``
    takes the closest sample; the last two keep ``x_src``'s dtype.
    """
    if method not in METHODS:
        raise ValueError(f"unknown resample method {method!r} (expected one of {METHODS})")
    t_src = np.asarray(t_src, dtype=np.float64).reshape(-1)
    t_new = np.asarray(t_new, dtype=np.float64).reshape(-1)
    x = np.asarray(x_src)
    if x.shape[:1] != t_src.shape:
        raise ValueError(f"x_src has {x.shape[0] if x.ndim else 0} rows but t_src has {len(t_src)}")
    if len(t_src) == 0:
        raise ValueError("cannot resample an empty stream")
    if method == "linear":
        xf = x.astype(np.float64).reshape(len(t_src), -1)
        out = np.empty((len(t_new), xf.shape[1]), dtype=np.float64)
        for j in range(xf.shape[1]):
            out[:, j] = np.interp(t_new, t_src, xf[:, j])
        return out.reshape((len(t_new), *x.shape[1:]))
    if method == "previous":
        idx = np.clip(_prev_index(t_src, t_new), 0, len(t_src) - 1)
        return x[idx]
    hi = np.clip(np.searchsorted(t_src, t_new, side="left"), 0, len(t_src) - 1)
    lo = np.clip(hi - 1, 0, len(t_src) - 1)
    pick_lo = np.abs(t_new - t_src[lo]) <= np.abs(t_src[hi] - t_new)
    return x[np.where(pick_lo, lo, hi)]


def control_timeline(ep: Episode, rate_hz: float, t0: float | None = None,
                     t1: float | None = None) -> dict[str, np.ndarray]:
    """All of an episode's streams on one uniform grid at ``rate_hz``.

    Grid: ``t = t0 + i / rate_hz`` for every tick ``<= t1`` (t0 defaults to 0,
    the episode start; t1 to ``ep.duration``).  Returns ``"t"`` (T,);
    ``"action"`` (T, A): zero-order hold of the commands, zeros before the
    first one; ``"seq"`` (T,): the held command's seq, -1 before the first;
    every sensor field (incl. ``t_device``): float fields linear, int fields
    (ack, flags) zero-order hold; ``"frame_<cam>"`` (T,) int64: index of the
    latest frame at or before each tick, -1 if none yet.
    """
    if rate_hz <= 0:
        raise ValueError(f"rate_hz must be positive, got {rate_hz}")
    t0 = 0.0 if t0 is None else float(t0)
    t1 = ep.duration if t1 is None else float(t1)
    n = max(int(math.floor((t1 - t0) * rate_hz + 1e-9)) + 1, 0)
    t = t0 + np.arange(n, dtype=np.float64) / rate_hz
    out: dict[str, np.ndarray] = {"t": t}
    cmd = ep.command
    if len(cmd):
        idx = _prev_index(cmd.t, t)
        before = idx < 0
        act = np.asarray(cmd["action"])[np.clip(idx, 0, None)].astype(np.float32)
        act[before] = 0.0
        out["action"] = act
        if "seq" in cmd:
            seq = np.asarray(cmd["seq"])[np.clip(idx, 0, None)].astype(np.int64)
            seq[before] = -1
            out["seq"] = seq
    sens = ep.sensors
    if len(sens):
        for k, v in sens.fields.items():
            v = np.asarray(v)
            if v.dtype.kind not in "biuf":
                continue
            method = "previous" if v.dtype.kind in "biu" else "linear"
            out[k] = resample(sens.t, v, t, method)
    for cam, cs in ep.cameras.items():
        out[f"frame_{cam}"] = _prev_index(cs.t, t).astype(np.int64)
    return out


def device_timeline(t_host: np.ndarray, t_device: np.ndarray, quantile: float = 2.0,
                    chunks: int = 8) -> np.ndarray:
    """De-jittered sample times on the host clock from the device's own clock.

    The host stamps a sample when it arrives; a late reader gives several samples
    (nearly) the same stamp. The device clock knows the true spacing but has its own
    origin and drifts by tens of ppm. Fit ``t_host ~ a + b * t_device``: transport delay
    is only ever positive, so the fit follows the lower envelope of ``t_host - t_device``
    (the least-delayed samples): ``b`` from a line through the per-chunk minima (kept
    within 1000 ppm of 1), ``a`` from a low percentile (``quantile``, in %) of the
    remaining offsets.

    Shape: t_host (M,), t_device (M,) -> (M,). Samples whose t_device is NaN keep their
    host stamp (all of them when fewer than two have a device time); the result never
    decreases.
    """
    th = np.asarray(t_host, dtype=np.float64).reshape(-1)
    td = np.asarray(t_device, dtype=np.float64).reshape(-1)
    if th.shape != td.shape:
        raise ValueError(f"t_host {th.shape} vs t_device {td.shape}")
    ok = np.isfinite(td) & np.isfinite(th)
    if ok.sum() < 2:
        return th.copy()
    x, y = td[ok], th[ok]
    off = y - x
    b = 1.0
    k = int(min(chunks, ok.sum() // 4))
    if k >= 2 and x[-1] > x[0]:
        parts = np.array_split(np.arange(len(x)), k)
        mx = np.array([x[p[np.argmin(off[p])]] for p in parts])
        my = np.array([off[p].min() for p in parts])
        if np.ptp(mx) > 0:
            slope = float(np.polyfit(mx, my, 1)[0])  # drift of the offset = b - 1
            b = 1.0 + float(np.clip(slope, -1e-3, 1e-3))
    a = float(np.percentile(y - b * x, quantile))
    out = th.copy()
    out[ok] = a + b * x
    return np.maximum.accumulate(out)


def step_average(
    ev_t: np.ndarray, ev_v: np.ndarray, before: np.ndarray, grid: np.ndarray
) -> np.ndarray:
    """Exact mean of a piecewise-constant signal over each [grid[k], grid[k+1]].

    From ev_t[j] on the signal is ev_v[j]; before ev_t[0] it is `before`. Used to
    turn logged commands into per-physics-step controls.

    ev_t (J,), ev_v (J, c), before (c,), grid (K+1,) increasing -> Shape: (K, c).
    """
    grid = np.asarray(grid, dtype=np.float64)
    if len(ev_t) == 0:
        return np.tile(before, (len(grid) - 1, 1))
    # integral F(s) from a reference time, piecewise linear with kinks at the events
    ref = min(ev_t[0], grid[0]) - 1.0
    seg_t = np.r_[ref, ev_t]
    seg_v = np.vstack([before, ev_v])
    cum = np.vstack(
        [np.zeros((1, seg_v.shape[1])), np.cumsum(seg_v[:-1] * np.diff(seg_t)[:, None], axis=0)]
    )
    j = np.searchsorted(seg_t, grid, side="right") - 1
    F = cum[j] + seg_v[j] * (grid - seg_t[j])[:, None]
    return np.diff(F, axis=0) / np.diff(grid)[:, None]

"""The open-loop error of replayed segments as a function of the free parameters.

Free parameters live in a normalised box: ``u`` in [0, 1]^n maps linearly onto
each parameter's [low, high]. One call to :meth:`Objective.residuals` replays
every candidate on every segment in ONE batched ``mujoco.rollout`` (through the
robot adapter), which is what makes candidates cheap to evaluate in groups.
Residual = weight * (sim - real) / scale per signal and sample, divided by
sqrt(count), so the objective (sum of squares) is the mean squared weighted error.
Signals, weights and how they are computed are the robot adapter's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from sysid.data import Segment, sim_signals
from sysid.robot_adapter import RobotAdapter

BAD_LOSS = 1e6  # a candidate whose simulation blew up


class Objective:
    """Residuals/losses of candidate parameter vectors on a set of segments."""

    def __init__(self, adapter: RobotAdapter, segments: Sequence[Segment], scales: Mapping[str, float],
                 free: Sequence[str], fixed: Mapping[str, float], nthread: int = 2) -> None:
        self.adapter, self.segments = adapter, list(segments)
        self.signals = tuple(adapter.signals)
        # weighted: residual = d / scale
        self.scales = {s: scales[s] / adapter.weight[s] for s in self.signals}
        self.free, self.fixed, self.nthread = list(free), dict(fixed), nthread
        self.lo = np.array([adapter.spec(n).low for n in self.free], float)
        self.hi = np.array([adapter.spec(n).high for n in self.free], float)
        self.count = int(sum(s.mask.sum() for s in self.segments)) * len(self.signals)
        # row layout of a residual vector: per segment, per signal, its masked samples
        sig, seg = [], []
        for j, s in enumerate(self.segments):
            m = int(s.mask.sum())
            for i in range(len(self.signals)):
                sig.append(np.full(m, i))
                seg.append(np.full(m, j))
        self.row_signal = np.concatenate(sig) if sig else np.zeros(0, int)  # (R,) index into self.signals
        self.row_segment = np.concatenate(seg) if seg else np.zeros(0, int)  # (R,) segment index
        self.n_evals = 0  # candidate parameter sets simulated so far

    def offset_column(self, i: int) -> np.ndarray | None:
        """Exact Jacobian column (R,) of free parameter i in u if it is a pure signal offset
        (adapter.offsets), else None."""
        sig = self.adapter.offsets.get(self.free[i])
        if sig is None:
            return None
        k = self.signals.index(sig)
        d = (self.hi[i] - self.lo[i]) / self.scales[sig] / np.sqrt(self.count)
        return np.where(self.row_signal == k, d, 0.0)

    # ---------------------------------------------------------------- mapping
    def to_params(self, u: np.ndarray) -> dict[str, float]:
        """u (n,) in [0, 1] -> full parameter mapping (free + fixed)."""
        x = self.lo + np.clip(np.asarray(u, float), 0, 1) * (self.hi - self.lo)
        return {**self.fixed, **{n: float(v) for n, v in zip(self.free, x, strict=True)}}

    def to_u(self, params: Mapping[str, float]) -> np.ndarray:
        """Full parameter mapping -> u (n,) of the free ones."""
        x = np.array([params[n] for n in self.free], float)
        return (x - self.lo) / (self.hi - self.lo)

    # ------------------------------------------------------------- evaluation
    def simulate(self, params_list: Sequence[Mapping[str, float]]) -> list[list[dict[str, np.ndarray]] | None]:
        """Raw replay of every segment for every parameter set (one rollout batch).

        A parameter set the model cannot be built with (e.g. physically inconsistent
        inertia) gives None instead of failing the whole batch."""
        self.n_evals += len(params_list)
        inputs = [s.inp for s in self.segments]
        try:
            return list(self.adapter.replay_batch(list(params_list), inputs, self.nthread))
        except ValueError:
            out: list[list[dict[str, np.ndarray]] | None] = []
            for p in params_list:
                try:
                    out.append(self.adapter.replay_batch([p], inputs, self.nthread)[0])
                except ValueError:
                    out.append(None)
            return out

    def residuals(self, U: np.ndarray) -> np.ndarray:
        """U (k, n) -> residuals (k, R), R = ``self.count``."""
        U = np.atleast_2d(U)
        sims = self.simulate([self.to_params(u) for u in U])
        out = np.empty((len(U), self.count))
        for k, per_seg in enumerate(sims):
            if per_seg is None:
                out[k] = np.sqrt(BAD_LOSS / self.count)
                continue
            parts = []
            for seg, sim in zip(self.segments, per_seg, strict=True):
                ssig = sim_signals(self.adapter, seg, sim)
                for s in self.signals:
                    d = (ssig[s] - seg.episode.signals[s][seg.idx]) / self.scales[s]
                    parts.append(d[seg.mask])
            r = np.concatenate(parts) / np.sqrt(self.count)
            out[k] = np.where(np.isfinite(r), r, np.sqrt(BAD_LOSS / self.count))
        return out

    def losses(self, U: np.ndarray) -> np.ndarray:
        """U (k, n) -> mean squared normalised error (k,)."""
        r = self.residuals(U)
        return np.minimum(np.sum(r * r, axis=1), BAD_LOSS)

    def residual_fn(self, x: np.ndarray) -> np.ndarray:
        """mujoco.minimize convention: x (n,) -> (R,), or x (n, k) -> (R, k) batched."""
        if x.ndim == 1:
            return self.residuals(x[None])[0]
        return self.residuals(x.T).T


def rmse(adapter: RobotAdapter, segments: Sequence[Segment], params_list: Sequence[Mapping[str, float]],
         nthread: int = 2) -> tuple[list[dict[str, float]], list[list[dict[str, np.ndarray]]]]:
    """Per parameter set: RMSE per signal (physical units) over ``segments``; plus the sims."""
    sims = adapter.replay_batch(list(params_list), [s.inp for s in segments], nthread)
    out = []
    for per_seg in sims:
        sq: dict[str, list[np.ndarray]] = {s: [] for s in adapter.signals}
        for seg, sim in zip(segments, per_seg, strict=True):
            ssig = sim_signals(adapter, seg, sim)
            for s in adapter.signals:
                sq[s].append(((ssig[s] - seg.episode.signals[s][seg.idx])[seg.mask]) ** 2)
        out.append({s: float(np.sqrt(np.mean(np.concatenate(v)))) for s, v in sq.items()})
    return out, sims

"""How predicted action chunks become the action sent at each control tick (pure numpy).

A policy predicts a chunk: Shape (k, A), the actions for this tick and the
k - 1 ticks after it. Executing such chunks is a choice as important as the
model (action chunking alone once scored 28.5 % where chunking with the right
execution scored 99.25 %), so it is configurable and tested:

- `SingleStep`: query every tick, execute the chunk's first action.
- `ChunkOpenLoop`: query, execute all k actions blind, query again.
- `RecedingHorizon(n)`: query, execute the first n of k, query again
  (n = 1 is `SingleStep`, n = k is `ChunkOpenLoop`).
- `TemporalEnsemble(m)`: query every tick; the action for tick t averages every
  live chunk's prediction for t with weights w_i = exp(-m i), normalised, where
  i = 0 is the OLDEST prediction. This is ACT's convention (Zhao et al. 2023,
  "Learning Fine-Grained Bimanual Manipulation with Low-Cost Hardware",
  Sec. 3.3: "w_0 is the weight for the oldest action"; in their code the live
  predictions are stacked in query order and weighted by exp(-k * arange)). A
  larger m makes old predictions dominate MORE (the weight falls with
  recency), m = 0 is a plain mean; ACT uses m = 0.01.

Every strategy has `reset()` (start of an episode) and `step(predict)`:
`predict()` returns a chunk (k, A) and is called only when the strategy needs
a new one, so a caller never pays for a query it does not use.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Protocol

import numpy as np

Predict = Callable[[], np.ndarray]


class Execution(Protocol):
    name: str

    def reset(self) -> None: ...

    def step(self, predict: Predict) -> np.ndarray:
        """The action for this tick. Shape: (A,)."""
        ...


def _chunk(predict: Predict) -> np.ndarray:
    c = np.asarray(predict(), dtype=np.float64)
    if c.ndim != 2 or len(c) < 1:
        raise ValueError(f"predict() must return a chunk of shape (k, A), got {c.shape}")
    return c


class RecedingHorizon:
    """Execute the first `n` actions of each chunk, then query again."""

    def __init__(self, n: int) -> None:
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        self.n = int(n)
        self.name = f"receding_horizon(n={self.n})"
        self.reset()

    def reset(self) -> None:
        self._chunk: np.ndarray | None = None
        self._i = 0

    def step(self, predict: Predict) -> np.ndarray:
        if self._chunk is None or self._i >= min(self.n, len(self._chunk)):
            self._chunk, self._i = _chunk(predict), 0
        a = self._chunk[self._i]
        self._i += 1
        return a.copy()


class SingleStep(RecedingHorizon):
    """Query every tick, execute the first action."""

    def __init__(self) -> None:
        super().__init__(1)
        self.name = "single_step"


class ChunkOpenLoop(RecedingHorizon):
    """Execute whole chunks open loop (n = k: the chunk's own length)."""

    def __init__(self) -> None:
        super().__init__(1 << 30)
        self.name = "chunk_open_loop"


class TemporalEnsemble:
    """ACT's temporal ensembling: query every tick, weight overlapping predictions.

    At tick t the live chunks are those queried at t - j for j = 0..k-1; chunk
    queried at t - j predicts tick t in its row j. Ordered oldest first
    (i = 0 = the largest j), the weights are exp(-m i) / sum.
    """

    def __init__(self, m: float) -> None:
        if m < 0:
            raise ValueError(f"m must be >= 0, got {m}")
        self.m = float(m)
        self.name = f"temporal_ensemble(m={self.m:g})"
        self.reset()

    def reset(self) -> None:
        self._live: deque[tuple[int, np.ndarray]] = deque()  # (query tick, chunk), oldest first
        self._t = 0

    def step(self, predict: Predict) -> np.ndarray:
        t = self._t
        self._live.append((t, _chunk(predict)))
        while self._live and t - self._live[0][0] >= len(self._live[0][1]):
            self._live.popleft()
        preds = np.stack([c[t - tq] for tq, c in self._live])  # oldest first
        w = np.exp(-self.m * np.arange(len(preds)))
        self._t += 1
        return (w / w.sum()) @ preds


def make_execution(name: str, *, chunk_len: int, execute_n: int = 1,
                   ensemble_m: float = 0.01) -> Execution:
    """Build a strategy by its config name."""
    if name == "single_step":
        return SingleStep()
    if name == "chunk_open_loop":
        return RecedingHorizon(chunk_len) if chunk_len else ChunkOpenLoop()
    if name == "receding_horizon":
        return RecedingHorizon(min(execute_n, chunk_len))
    if name == "temporal_ensemble":
        return TemporalEnsemble(ensemble_m)
    raise ValueError(f"unknown execution strategy {name!r}")


def parse_execution(spec: str, chunk_len: int) -> Execution:
    """A strategy from a command-line spec: "single_step", "chunk_open_loop",
    "receding_horizon:N" or "temporal_ensemble:M" (M defaults to 0.01). UserError (one
    line) for anything else, so `deploy --execution` with a typo exits 2."""
    from realsim.errors import UserError

    name, _, arg = spec.strip().partition(":")
    try:
        if name in ("single_step", "chunk_open_loop") and not arg:
            return make_execution(name, chunk_len=chunk_len)
        if name == "receding_horizon" and arg:
            n = int(arg)
            if not 1 <= n <= chunk_len:
                raise ValueError(f"n must lie in 1..{chunk_len} (the chunk's length)")
            return make_execution(name, chunk_len=chunk_len, execute_n=n)
        if name == "temporal_ensemble":
            return make_execution(name, chunk_len=chunk_len, ensemble_m=float(arg) if arg else 0.01)
    except ValueError as e:
        raise UserError(f"--execution {spec!r}: {e}") from None
    raise UserError(f"--execution {spec!r}: expected single_step, chunk_open_loop, "
                    "receding_horizon:N or temporal_ensemble[:M]")

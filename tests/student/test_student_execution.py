"""Execution strategies on synthetic chunk streams."""

from __future__ import annotations

import numpy as np
import pytest

from student.execution import (
    ChunkOpenLoop,
    RecedingHorizon,
    SingleStep,
    TemporalEnsemble,
    make_execution,
)


class Chunks:
    """predict() returns chunk q: row j = [100 q + j, -(100 q + j)]; counts queries."""

    def __init__(self, k: int = 5) -> None:
        self.k, self.q = k, 0

    def __call__(self) -> np.ndarray:
        c = np.stack([100 * self.q + np.arange(self.k), -(100 * self.q + np.arange(self.k))], 1)
        self.q += 1
        return c.astype(float)


def run(ex, steps: int, k: int = 5) -> tuple[np.ndarray, Chunks]:
    p = Chunks(k)
    ex.reset()
    return np.array([ex.step(p) for _ in range(steps)]), p


def test_single_step_queries_every_tick_and_takes_row_0() -> None:
    a, p = run(SingleStep(), 7)
    assert p.q == 7
    assert a[:, 0].tolist() == [100 * q for q in range(7)]


def test_chunk_open_loop_replays_the_whole_chunk() -> None:
    a, p = run(ChunkOpenLoop(), 12, k=5)
    assert p.q == 3
    assert a[:, 0].tolist() == [0, 1, 2, 3, 4, 100, 101, 102, 103, 104, 200, 201]
    assert a[:, 1].tolist() == (-a[:, 0]).tolist()


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_receding_horizon_executes_exactly_n_then_replans(n: int) -> None:
    a, p = run(RecedingHorizon(n), 15, k=5)
    expect = [100 * (i // n) + i % n for i in range(15)]
    assert a[:, 0].tolist() == expect
    assert p.q == -(-15 // n)


def test_receding_horizon_never_runs_past_a_short_chunk() -> None:
    a, p = run(RecedingHorizon(8), 6, k=3)
    assert a[:, 0].tolist() == [0, 1, 2, 100, 101, 102]


@pytest.mark.parametrize("m", [0.0, 0.01, 0.1, 1.0])
def test_temporal_ensemble_matches_hand_computation(m: float) -> None:
    k = 4
    a, p = run(TemporalEnsemble(m), 7, k=k)
    assert p.q == 7
    for t in range(7):
        # live chunks queried at tq = max(0, t-k+1) .. t, oldest first; chunk tq predicts t in row t - tq
        tqs = list(range(max(0, t - k + 1), t + 1))
        preds = np.array([100 * tq + (t - tq) for tq in tqs], float)
        w = np.exp(-m * np.arange(len(tqs)))  # i = 0 is the OLDEST (ACT)
        assert a[t, 0] == pytest.approx((w * preds).sum() / w.sum())


def test_temporal_ensemble_oldest_weighs_most() -> None:
    # at t = 3 with k = 4: predictions 3 (q0), 102 (q1), 201 (q2), 300 (q3); large m -> the oldest
    a, _ = run(TemporalEnsemble(50.0), 4, k=4)
    assert a[3, 0] == pytest.approx(3.0)
    a, _ = run(TemporalEnsemble(0.0), 4, k=4)
    assert a[3, 0] == pytest.approx((3 + 102 + 201 + 300) / 4)


def test_reset_starts_over() -> None:
    ex = RecedingHorizon(3)
    p = Chunks()
    ex.step(p)
    ex.reset()
    assert ex.step(p)[0] == 100  # a fresh query, row 0


def test_factory_names() -> None:
    assert make_execution("single_step", chunk_len=10).name == "single_step"
    assert make_execution("chunk_open_loop", chunk_len=10).n == 10
    assert make_execution("receding_horizon", chunk_len=10, execute_n=4).n == 4
    assert make_execution("temporal_ensemble", chunk_len=10, ensemble_m=0.1).m == 0.1
    with pytest.raises(ValueError):
        make_execution("nope", chunk_len=10)

"""device_timeline: host stamps that bunch, a drifting device clock -> true spacing."""

from __future__ import annotations

import numpy as np

from realsim.logs.resample import device_timeline


def _bunched(seed: int = 0, n: int = 500, ppm: float = 30.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    t_true = 0.02 * np.arange(n) + 1.0  # host-clock times the samples were taken
    t_dev = 4000.0 + (t_true - 1.0) * (1 + ppm * 1e-6)  # own origin, drifting clock
    t_dev = np.round(t_dev * 1e6) / 1e6  # microsecond resolution
    delay = 0.002 + rng.exponential(0.004, n)
    t_host = t_true + delay
    # a late reader: every 10th sample waits, and the next few are read in the same burst
    for i in range(0, n - 4, 10):
        t_host[i:i + 4] = t_host[i + 3] + 1e-5 * np.arange(4)
    return t_true, t_dev, np.maximum.accumulate(t_host)


def test_recovers_spacing_and_offset() -> None:
    t_true, t_dev, t_host = _bunched()
    t = device_timeline(t_host, t_dev)
    assert np.abs(np.diff(t) - np.diff(t_true)).max() < 1e-5  # spacing from the device clock
    assert np.median(np.diff(t_host)) < 0.02 and np.diff(t_host).min() < 1e-4  # input bunched
    err = t - t_true
    assert 0.0 <= err.min() and err.max() < 0.004  # only the least transport delay remains


def test_nan_device_time_falls_back_to_host() -> None:
    t_true, t_dev, t_host = _bunched(1, n=50)
    t_dev[[5, 6]] = np.nan
    t = device_timeline(t_host, t_dev)
    assert np.all(np.diff(t) >= 0) and np.all(np.isfinite(t))
    none = device_timeline(t_host, np.full_like(t_dev, np.nan))
    assert np.array_equal(none, t_host)
    assert np.array_equal(device_timeline(t_host[:1], t_dev[:1]), t_host[:1])

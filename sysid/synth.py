"""Synthetic logs from the simulator with known parameters (tests and benchmarks).

Excitation commands at 50 Hz are replayed through the robot's own replay with
the given (true) parameters; sensor noise, encoder quantisation, a small
timestamp jitter and a slowly sagging battery are added, and the result is
written in the log format exactly as a recording would be.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from realsim.logs import LogWriter
from sysid.robot_adapter import get_adapter

RATE = 50.0
GYRO_NOISE, ACCEL_NOISE = 0.005, 0.08  # rad/s, m/s^2 (1 sigma)
RAD_PER_COUNT = 2 * np.pi / 116.4


def car_commands(signal: str, seconds: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Excitation commands. Shapes: t (N,), action (N, 2). ``signal="still"``: all zero."""
    t = np.arange(0.0, seconds, 1 / RATE)
    if signal == "still":
        return t, np.zeros((len(t), 2))
    from realsim.robots.rc_car.excite import car_excitation

    f = car_excitation(signal, seconds, seed)
    return t, np.array([f(x) for x in t])


def write_synthetic(path: str | Path, params: Mapping[str, float], episodes: int = 4,
                    seconds: float = 10.0, seed: int = 0, signals: tuple[str, ...] = ("steps", "chirp", "prbs", "smooth"),
                    noise: bool = True, robot: str = "rc_car", nthread: int = 2) -> Path:
    """Write ``episodes`` synthetic episodes of ``robot`` simulated with ``params`` to ``path``."""
    ad = get_adapter(robot)
    rng = np.random.default_rng(seed)
    eps = []
    for k in range(episodes):
        sig = signals[k % len(signals)]
        ct, ca = car_commands(sig, seconds, seed + k)
        ct = ct + rng.uniform(0, 0.002, len(ct)) if noise else ct
        st = np.arange(0.01, seconds, 1 / RATE) + (rng.uniform(0, 0.003, int(np.ceil((seconds - 0.01) * RATE))) if noise else 0)
        st = np.sort(st[: len(np.arange(0.01, seconds, 1 / RATE))])
        vbat = 8.2 - 0.02 * k - 0.01 * st / seconds
        enc0 = float(rng.uniform(-100, 100)) if noise else 0.0
        inp = ad.make_input(ct, ca, st, {"vbat": vbat, "enc_rad": np.array([enc0])})
        eps.append((sig, seed + k, ct, ca, st, vbat, inp))
    sims = ad.replay_batch([dict(params)], [e[-1] for e in eps], nthread)[0]
    with LogWriter(path, robot=robot, source="sim", attrs={"notes": "synthetic, sysid.synth"}) as w:
        for (sig, sd, ct, ca, st, vbat, _), out in zip(eps, sims, strict=True):
            m = len(st)
            enc, yaw, acc = out["enc_rad"], out["yaw_rate"], np.asarray(out["accel"])
            if noise:
                enc = np.round(enc / RAD_PER_COUNT) * RAD_PER_COUNT
                yaw = yaw + rng.normal(0, GYRO_NOISE, m)
                acc = acc + rng.normal(0, ACCEL_NOISE, acc.shape)
            ep = w.begin_episode(driver=f"excite:{sig}", seed=sd)
            ep.add_commands(ct, np.arange(len(ct)), ca)
            ep.add_sensor_block(st, st * 1.00002 + 12.0, enc_rad=enc, yaw_rate=yaw, accel=acc,
                                vbat=vbat, ack=np.searchsorted(ct, st) - 1, flags=np.full(m, 4))
            ep.close()
    return Path(path)

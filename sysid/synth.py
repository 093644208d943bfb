"""Synthetic logs from the simulator with known parameters (tests and benchmarks).

Excitation commands at 50 Hz are replayed through the robot's own replay with
the given (true) parameters; sensor noise, encoder quantisation, a small
timestamp jitter and a slowly sagging battery are added, and the result is
written in the log format exactly as a recording would be.

The arm (``robot="arm"``): `realsim.robots.arm.excite` signals (inside the joint
limits, clear of the table), every episode starting at rest at home as
`realsim record arm` leaves it; each 20 ms tick sends a goal and reads the state a
few ms later (no device clock); readings quantised to the servo's counts
(4096 per turn, the gripper 952 counts over 0.07 m, speed in counts/s), load with
reading noise.
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


def arm_commands(signal: str, seconds: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The arm's excitation commands at RATE. Shapes: t (N,), action (N, 6) normalised
    goals. ``signal="still"``: home held."""
    from realsim.robots.arm import constants as AC
    from realsim.robots.arm.excite import arm_excitation
    from realsim.robots.arm.sim import goal_to_action

    t = np.arange(0.0, seconds, 1 / RATE)
    if signal == "still":
        return t, np.tile(goal_to_action(np.array(AC.HOME)), (len(t), 1))
    f = arm_excitation(signal, seconds, seed)
    return t, np.array([f(x) for x in t])


def write_synthetic(path: str | Path, params: Mapping[str, float], episodes: int = 4,
                    seconds: float = 10.0, seed: int = 0, signals: tuple[str, ...] | None = None,
                    noise: bool = True, robot: str = "rc_car", nthread: int = 2) -> Path:
    """Write ``episodes`` synthetic episodes of ``robot`` simulated with ``params`` to ``path``.

    ``signals``: excitation per episode, cycled (default: the car's steps, chirp, prbs,
    smooth; the arm's sine, steps, smooth)."""
    if robot == "arm":
        return _write_arm(path, params, episodes, seconds, seed, signals or ("sine", "steps", "smooth"),
                          noise, nthread)
    signals = signals or ("steps", "chirp", "prbs", "smooth")
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


ARM_RAD_PER_COUNT = 2 * np.pi / 4096
ARM_GRIP_M_PER_COUNT = 0.07 / 952
ARM_LOAD_NOISE = 0.01  # fraction of max (1 sigma)


def _write_arm(path: str | Path, params: Mapping[str, float], episodes: int, seconds: float,
               seed: int, signals: tuple[str, ...], noise: bool, nthread: int) -> Path:
    """Synthetic arm episodes (module doc). Per episode: command t (N,), action (N, 6);
    sensors t (M,), qpos/qvel/load/temperature (M, 6), voltage (M,)."""
    from realsim.robots.arm import constants as AC

    ad = get_adapter("arm")
    rng = np.random.default_rng(seed)
    home = np.array(AC.HOME)
    eps = []
    for k in range(episodes):
        sig = signals[k % len(signals)]
        ct, ca = arm_commands(sig, seconds, seed + k)
        ca = ca.astype(np.float32).astype(float)  # as the log stores it: replays match exactly
        ct = ct + (rng.uniform(0, 0.002, len(ct)) if noise else 0.0)
        st = ct + 0.004 + (rng.uniform(0, 0.003, len(ct)) if noise else 0.0)  # the read after the write
        volt = 7.4 - 0.05 * k - 0.02 * st / seconds
        temp0 = np.full(AC.NJ, 30.0 + 0.5 * k)
        inp = ad.make_input(ct, ca, st, {"qpos": home[None], "voltage": volt, "temperature": temp0[None]})
        eps.append((sig, seed + k, ct, ca, st, inp))
    sims = ad.replay_batch([dict(params)], [e[-1] for e in eps], nthread)[0]
    step = np.r_[np.full(5, ARM_RAD_PER_COUNT), ARM_GRIP_M_PER_COUNT]
    with LogWriter(path, robot="arm", source="sim", attrs={"notes": "synthetic, sysid.synth"}) as w:
        for (sig, sd, ct, ca, st, _), out in zip(eps, sims, strict=True):
            q, v, load = (np.asarray(out[f], float) for f in ("qpos", "qvel", "load"))
            if noise:
                q = np.round(q / step) * step
                v = np.round(v / step) * step
                load = np.clip(load + rng.normal(0, ARM_LOAD_NOISE, load.shape), -1, 1)
            ep = w.begin_episode(driver=f"excite:{sig}", seed=sd)
            ep.add_commands(ct, np.arange(len(ct)), ca)
            ep.add_sensor_block(st, None, qpos=q, qvel=v, load=load, voltage=out["voltage"],
                                temperature=np.round(out["temperature"]))
            ep.close()
    return Path(path)

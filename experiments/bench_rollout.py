"""Throughput of the RC car's batched replay against raw `mujoco.rollout`.

Objective evaluations in system identification are `replay_batch` calls: numpy command
preprocessing + model compile/settle for new parameter sets + `mujoco.rollout` + sampling
onto sensor times. This prints simulated physics steps per second for

- raw `mujoco.rollout` on the same batch (controls and initial states precomputed),
- `replay_batch` with fresh parameter sets (cold: compiles and settles every model) and
  with repeated ones (warm: models cached),
- the plain Python `mj_step` loop (`replay_reference`), for contrast,

and the ratio replay_batch / raw (target >= 0.8).

    python experiments/bench_rollout.py --params 16 --minutes 5
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from realsim.robots.rc_car import constants as C
from realsim.robots.rc_car.actuation import control_sequence
from realsim.robots.rc_car.model import cached_model
from realsim.robots.rc_car.params import PARAMS, CarParams
from realsim.robots.rc_car.sim import (
    ReplayInput,
    _full_state,
    initial_qpos_qvel,
    replay_batch,
    replay_reference,
    rollout_controls,
    sensors_on_times,
)


def synthetic_episode(duration: float, seed: int) -> ReplayInput:
    """An excitation-like episode: commands ~33 Hz, telemetry ~50 Hz, sagging battery."""
    rng = np.random.default_rng(seed)
    ct = np.cumsum(rng.uniform(0.025, 0.035, int(duration / 0.025) + 2))
    ct = ct[ct < duration]
    steer = np.sin(2 * np.pi * rng.uniform(0.2, 0.8) * ct)
    thr = np.where((ct % 3) < 2, rng.uniform(0.3, 1.0), -0.6)
    st = 0.005 + np.cumsum(rng.uniform(0.019, 0.021, int(duration / 0.019) + 2))
    st = st[st < duration]
    return ReplayInput(ct, np.stack([steer, thr], 1), st, 8.3 - 0.2 * st / duration)


def random_params(n: int, seed: int) -> list[CarParams]:
    rng = np.random.default_rng(seed)
    return [CarParams({p.name: rng.uniform(p.low, p.high) for p in PARAMS}) for _ in range(n)]


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--params", type=int, default=16, help="parameter sets per batch")
    ap.add_argument("--minutes", type=float, default=5.0, help="minutes of logs")
    ap.add_argument("--episode-s", type=float, default=10.0, help="episode length (s)")
    ap.add_argument("--nthread", type=int, default=2)
    ap.add_argument("--python-episodes", type=int, default=2, help="episodes for the Python loop")
    ap.add_argument("--repeat", type=int, default=2, help="best of this many timings")
    a = ap.parse_args()

    n_ep = max(1, int(round(a.minutes * 60 / a.episode_s)))
    eps = [synthetic_episode(a.episode_s, i) for i in range(n_ep)]
    steps = a.params * sum(e.nstep for e in eps)
    print(
        f"batch: {a.params} parameter sets x {n_ep} episodes x {a.episode_s:g} s "
        f"= {steps} physics steps (dt {C.TIMESTEP} s), nthread {a.nthread}"
    )

    # raw rollout: everything precomputed, one call per episode length (all equal here)
    plist = random_params(a.params, 1)
    models = [cached_model(p) for p in plist]
    import mujoco

    data = mujoco.MjData(models[0])
    k = eps[0].nstep
    t_pre = time.perf_counter()
    ctrl = np.stack(
        [
            control_sequence(e.command_t, e.action, p, float(e.sensor_t[0]), k, e.sensor_t, e.vbat)
            for p in plist
            for e in eps
        ]
    )
    init = np.stack(
        [
            _full_state(m, data, *initial_qpos_qvel(m, p, e), float(e.sensor_t[0]))
            for m, p in zip(models, plist, strict=True)
            for e in eps
        ]
    )
    t_pre = time.perf_counter() - t_pre
    batch_models = [m for m in models for _ in eps]
    rollout_controls(batch_models[:2], init[:2], ctrl[:2, :10], a.nthread)  # warm the pool

    def timed(fn) -> float:
        t = time.perf_counter()
        fn()
        return steps / (time.perf_counter() - t)

    # alternate the measurements and keep the best of `repeat` (the machine may be shared)
    raw = cold = warm = 0.0
    for r in range(a.repeat):
        raw = max(raw, timed(lambda: rollout_controls(batch_models, init, ctrl, a.nthread)))
        fresh = random_params(a.params, 100 + r)  # never seen: compile + settle inside
        cold = max(cold, timed(lambda fresh=fresh: replay_batch(fresh, eps, nthread=a.nthread)))
        warm = max(warm, timed(lambda: replay_batch(plist, eps, nthread=a.nthread)))
    print(f"raw mujoco.rollout          {raw:12.0f} steps/s")
    sens = rollout_controls(batch_models, init, ctrl, a.nthread)
    t_post = time.perf_counter()
    for b, (p, e) in enumerate((p, e) for p in plist for e in eps):
        sensors_on_times(sens[b], float(e.sensor_t[0]), e, p)
    t_post = time.perf_counter() - t_post
    overhead = t_pre + t_post
    print(
        f"numpy pre+post-processing   {overhead:12.3f} s per batch = "
        f"{100 * overhead * raw / steps:.1f} % of the raw rollout time "
        f"(bound on the ratio: {1 / (1 + overhead * raw / steps):.2f})"
    )
    print(f"replay_batch (new params)   {cold:12.0f} steps/s   ratio {cold / raw:.2f}")
    print(f"replay_batch (cached)       {warm:12.0f} steps/s   ratio {warm / raw:.2f}")

    n = min(a.python_episodes, n_ep)
    t = time.perf_counter()
    for e in eps[:n]:
        replay_reference(plist[0], e)
    py = sum(e.nstep for e in eps[:n]) / (time.perf_counter() - t)
    print(f"python step loop (1 thread) {py:12.0f} steps/s   ratio {py / raw:.2f}")
    print(
        f"objective evaluations/s (one batch = one evaluation per parameter set): "
        f"{a.params * cold / steps:.3f} vs raw {a.params * raw / steps:.3f}"
    )


if __name__ == "__main__":
    main()

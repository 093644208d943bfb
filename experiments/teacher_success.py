"""Success rate of the privileged teacher in the randomized simulator, and teach throughput.

    python experiments/teacher_success.py --episodes 200 [--seed 10000] [--params P.yaml]
    python experiments/teacher_success.py --bench 8      # teach episodes/s, 1 and 2 workers

Episodes run without rendering (the teacher reads exact poses; the camera does not
change its actions). Prints every failure and, last, ``success=<k>/<n> (<rate>)``.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")

import numpy as np  # noqa: E402

from realsim.robots.rc_car.params import CarParams  # noqa: E402
from realsim.robots.rc_car.scene import CarTaskEnv  # noqa: E402
from teacher.generate import TeachConfig, teach  # noqa: E402
from teacher.pure_pursuit import PurePursuitTeacher, run_teacher_episode  # noqa: E402


def success_rate(n: int, seed: int, params: CarParams | None) -> tuple[int, list[float]]:
    env = CarTaskEnv(params=params, render=False)
    teacher = PurePursuitTeacher()
    ok, times = 0, []
    for s in range(seed, seed + n):
        env.reset(s)
        success, score = run_teacher_episode(env, teacher)
        ok += success
        times.append(env.t)
        if not success:
            p = env.draw.params
            print(
                f"FAIL seed={s} scene={env.scene} score={score:.2f} t={env.t:.2f} "
                f"touched={env.judge.touched_distractor} mu={p['tyre_mu']:.2f} "
                f"latency={p['latency']:.3f} noise={env.draw.action_noise:.3f}"
            )
    return ok, times


def bench(n: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        for workers in (1, 2):
            t0 = time.monotonic()
            s = teach(Path(d) / f"w{workers}.h5", n, TeachConfig(seed=1), workers, progress=False)
            dt = time.monotonic() - t0
            print(
                f"workers={workers}: {s.written} episodes in {dt:.1f} s = {s.written / dt:.2f} episodes/s"
            )
    env = CarTaskEnv()
    env.reset(0)
    t0, k = time.monotonic(), 0
    while time.monotonic() - t0 < 3.0:
        env.camera.capture(env.sim.data, np.random.default_rng(0))
        k += 1
    print(
        f"camera: {k / (time.monotonic() - t0):.0f} frames/s (render + lens + noise + JPEG, 320x240)"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=200)
    ap.add_argument("--seed", type=int, default=10_000)
    ap.add_argument("--params", help="fitted params.yaml to centre the randomization on")
    ap.add_argument("--bench", type=int, default=0, help="also time teach with N episodes")
    a = ap.parse_args()
    if a.bench:
        bench(a.bench)
    params = CarParams.from_yaml(a.params) if a.params else None
    t0 = time.monotonic()
    ok, times = success_rate(a.episodes, a.seed, params)
    print(
        f"episode length: mean {np.mean(times):.2f} s, max {np.max(times):.2f} s; "
        f"wall {time.monotonic() - t0:.0f} s"
    )
    print(f"success={ok}/{a.episodes} ({ok / a.episodes:.3f})")


if __name__ == "__main__":
    main()

"""Can the privileged teacher recover from a missed close, the students' main failure?

    python experiments/arm_miss_recovery.py [--episodes 50] [--seed 0] [--miss 0.015 0.025]
        [--action-noise 0.01]

The arm students' failures are mostly a first close 1.5-2.5 cm off across the jaws, after
which they close again and again without re-aligning (experiments/arm_student_failures.py).
Before any teacher data demonstrates a recovery from there, the teacher must be shown to
recover from there (the DAgger lesson: the privileged solver may be undefined off its own
solution manifold). Here the teacher's own option does it in every episode
(`TeacherConfig.miss_rate=1`): its first descent is aimed `--miss` m (uniform, either side)
across the jaws (the gripper frame's x axis at the grasp pose); it closes there, lifts, sees
(privileged contacts) whether it holds the cube, and retries from scratch as it does after
any drop (`ArmTeacher._retry`, up to `max_attempts`).

Prints one line per episode and, last, `success=<rate> missed=<rate of first attempts that
did not hold the cube> recovered=<success rate among those> n=<N> mean_seconds_to_done=<s>`.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from realsim.robots.arm.scene import ArmTaskEnv, episode_seed
from teacher.arm_ik import ArmTeacher, TeacherConfig


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--miss", type=float, nargs=2, default=(0.015, 0.025), metavar=("LO", "HI"))
    ap.add_argument("--action-noise", type=float, default=0.01)
    a = ap.parse_args()
    env = ArmTaskEnv(render=False)
    tc = TeacherConfig(aim_error_m=0.02, aim_error_yaw=0.2,  # as `realsim teach arm`
                       miss_rate=1.0, miss_min_m=a.miss[0], miss_max_m=a.miss[1])
    tc.check()
    teacher = ArmTeacher(1.0 / env.control_hz, tc)
    wins, missed, recovered, t_done = 0, 0, 0, []
    t0 = time.time()
    for k in range(a.episodes):
        seed = episode_seed(a.seed, k)
        env.reset(seed)
        teacher.reset(seed)
        rng = np.random.default_rng([seed, 77])  # as student.evaluate.run_episode
        done_at, first_held = None, None
        while not env.done:
            before = (teacher.phase, teacher.attempts)
            act = teacher.act(env.privileged())
            if before == ("lift", 0) and first_held is None and teacher.phase != "lift":
                first_held = teacher.phase == "move"
            if a.action_noise > 0:
                act = act + a.action_noise * rng.standard_normal(act.shape)
            env.step(np.clip(act, -1.0, 1.0))
            if done_at is None and teacher.finished:
                done_at = env.t
        ok, score = env.verdict()
        miss = first_held is False
        wins += ok
        missed += miss
        recovered += bool(ok and miss)
        t_done.append(done_at if done_at is not None else env.t)
        print(f"k={k} seed={seed} success={int(ok)} first_missed={int(miss)} "
              f"attempts={teacher.attempts} score={score:.4f} phase={teacher.phase}", flush=True)
    n = a.episodes
    print(f"success={wins / n:.3f} missed={missed / n:.3f} "
          f"recovered={(recovered / missed) if missed else float('nan'):.3f} n={n} "
          f"miss={a.miss[0]}-{a.miss[1]} action_noise={a.action_noise} "
          f"mean_seconds_to_done={np.mean(t_done):.1f} wall_s={time.time() - t0:.0f}")


if __name__ == "__main__":
    main()

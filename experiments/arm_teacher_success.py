"""Success rate of the privileged IK pick-and-place teacher in the randomized arm sim.

    python experiments/arm_teacher_success.py --episodes 200 [--seed 0] [--fixed] [--action-noise S]
        [--aim-error M]

Each episode: `ArmTaskEnv` (physics drawn over the datasheet ranges unless --fixed,
cameras off), a fresh `ArmTeacher`, seed `episode_seed(seed, k)`. --action-noise adds
Gaussian noise of std S to every executed goal (the [-1, 1] scale), drawn as the student's
robust evaluation draws it: the evaluation's noise must be one the teacher itself survives,
or the closed-loop success it reports measures the noise, not the student. --aim-error M sets
the teacher's aimed-hover offset (m; TeacherConfig.aim_error_m, 0 flies straight). Prints one line per
failure and, last, `success=<rate> n=<N> mean_score=<m> sim_time_per_episode=<s>`.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from realsim.robots.arm.scene import ArmRandomization, ArmTaskEnv, episode_seed
from teacher.arm_ik import ArmTeacher, TeacherConfig


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--fixed", action="store_true", help="nominal physics, no randomization")
    ap.add_argument("--action-noise", type=float, default=0.0, help="std of noise on every goal")
    ap.add_argument("--aim-error", type=float, default=TeacherConfig.aim_error_m,
                    help="aimed-hover offset, m per axis (0: no aimed hovers, no align phases)")
    a = ap.parse_args()
    env = ArmTaskEnv(render=False, randomization=ArmRandomization.none() if a.fixed else None)
    tc = TeacherConfig(aim_error_m=a.aim_error, aim_error_yaw=10 * a.aim_error)  # 0.025 m, 0.25 rad
    teacher = ArmTeacher(1.0 / env.control_hz, tc)
    wins, scores, sim_t = 0, [], []
    t0 = time.time()
    for k in range(a.episodes):
        seed = episode_seed(a.seed, k)
        env.reset(seed)
        teacher.reset(seed)
        rng = np.random.default_rng([seed, 77])  # as student.evaluate.run_episode
        while not env.done:
            act = teacher.act(env.privileged())
            if a.action_noise > 0:
                act = act + a.action_noise * rng.standard_normal(act.shape)
            env.step(np.clip(act, -1.0, 1.0))
        ok, score = env.verdict()
        wins += ok
        scores.append(score)
        sim_t.append(env.t)
        if not ok:
            print(
                f"fail k={k} seed={seed} score={score:.4f} phase={teacher.phase} "
                f"attempts={teacher.attempts} scene={env.scene}",
                flush=True,
            )
    wall = time.time() - t0
    print(
        f"success={wins / a.episodes:.4f} n={a.episodes} action_noise={a.action_noise} "
        f"aim_error={a.aim_error} mean_score={np.mean(scores):.4f} "
        f"sim_time_per_episode={np.mean(sim_t):.2f} wall_s={wall:.0f}"
    )


if __name__ == "__main__":
    main()

"""How far off can the arm's grasp be planned and still hold the cube on the first try?

    python experiments/arm_grasp_tolerance.py [--offsets 0.01 0.015 0.02] [--episodes 40]
        [--open-width W] [--action-noise 0.01] [--seed 1000]

A camera student locates the cube only as well as its cameras' poses are known (spec/arm.md:
+-2 cm, +-3 degrees), so its grasps land off the cube by up to that much. This runs the
privileged teacher (`teacher.arm_ik.ArmTeacher`, cameras off, physics randomized as for
teacher data) with its *first* grasp planned from a cube position shifted by a fixed
offset of length r in a random horizontal direction per episode; later attempts see the
exact pose. The figure is the first-try success (the episode succeeds with no retry),
split by whether the offset lies mostly along the jaws' closing axis or across it. It
measures the grasp's tolerance to localisation error, which a teacher setting (the jaw
opening on the approach, `TeacherConfig.open_width`) can widen for every student at once.

Prints one line per offset:
`r=<m> open=<m> first_try=<rate> along_jaw=<rate> (n) across_jaw=<rate> (n) success=<rate> n=<N>`.
"""

from __future__ import annotations

import argparse
import math

import numpy as np

from realsim.robots.arm.scene import ArmTaskEnv, episode_seed
from teacher.arm_ik import ArmTeacher, TeacherConfig


def run(env: ArmTaskEnv, seed: int, offset: np.ndarray, cfg: TeacherConfig,
        action_noise: float) -> tuple[bool, bool, float, float]:
    """One episode: (success, success on the first try, offset along the jaw axis m,
    offset across it m)."""
    env.reset(seed)
    teacher = ArmTeacher(1.0 / env.control_hz, cfg)
    teacher.reset(seed)
    rng = np.random.default_rng([seed, 77])  # as student.evaluate.run_episode
    jaw = None
    while not env.done:
        priv = env.privileged()
        if teacher.phase == "approach" and teacher.attempts == 0:
            priv = dict(priv)
            cube = np.array(priv["cube_pose"], dtype=np.float64)
            cube[:2] += offset
            priv["cube_pose"] = cube
        act = teacher.act(priv)
        if jaw is None and "grasp" in teacher._plan:
            jaw = np.asarray(teacher._plan["grasp"]["rot"])[:2, 1]  # the jaws close along body y
        if action_noise > 0:
            act = act + action_noise * rng.standard_normal(act.shape)
        env.step(np.clip(act, -1.0, 1.0))
    ok, _ = env.verdict()
    j = np.array([1.0, 0.0]) if jaw is None else jaw / max(float(np.linalg.norm(jaw)), 1e-9)
    return bool(ok), bool(ok) and teacher.attempts == 0, float(offset @ j), float(offset @ [-j[1], j[0]])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--offsets", type=float, nargs="+", default=[0.01, 0.015, 0.02])
    ap.add_argument("--episodes", type=int, default=40)
    ap.add_argument("--open-width", type=float, default=TeacherConfig.open_width)
    ap.add_argument("--action-noise", type=float, default=0.01,
                    help="std of noise on every goal (the student's selection noise)")
    ap.add_argument("--seed", type=int, default=1000)
    a = ap.parse_args()
    env = ArmTaskEnv(render=False)
    cfg = TeacherConfig(open_width=a.open_width)
    for r in a.offsets:
        rows = []
        for k in range(a.episodes):
            seed = episode_seed(a.seed, k)
            th = np.random.default_rng([seed, 5]).uniform(0.0, 2 * math.pi)
            rows.append(run(env, seed, r * np.array([math.cos(th), math.sin(th)]), cfg, a.action_noise))
        ok, first, along, across = (np.array(c) for c in zip(*rows, strict=True))
        m = np.abs(along) >= np.abs(across)
        print(f"r={r:.3f} open={a.open_width:.3f} first_try={first.mean():.2f} "
              f"along_jaw={first[m].mean() if m.any() else math.nan:.2f} ({m.sum()}) "
              f"across_jaw={first[~m].mean() if (~m).any() else math.nan:.2f} ({(~m).sum()}) "
              f"success={ok.mean():.2f} n={len(ok)}", flush=True)


if __name__ == "__main__":
    main()

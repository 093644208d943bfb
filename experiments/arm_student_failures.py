"""Where does an arm student fail in the simulator: the grasp, the carry or the release?

    python experiments/arm_student_failures.py CKPT [--episodes 40] [--camera-pos 0.02]
        [--camera-rot 3] [--camera-fov 5] [--jitter-only front|wrist] [--action-noise 0.01]
        [--seed 20000]

Runs the student closed loop (as `student.evaluate.run_episode`: the checkpoint's own
execution, Gaussian noise on every goal) in `ArmTaskEnv` with the camera randomization
given here (0 0 0: the datasheet's nominal poses, which asks how much of the failure the
cameras' pose uncertainty explains; --jitter-only CAM keeps the other camera nominal, with
the same draws for CAM as when both are jittered). The student sees only `Obs`; this
script reads the simulator's privileged state, for diagnosis only, at the tick the student
first commands the jaws shut (the gripper goal crossing mid-range downwards): the grasp site's offset
from the cube centre in the gripper frame (cm; y is the jaws' closing axis, z along the
fingers, x across the jaws), and whether the cube is ever lifted (centre above 5 cm).

Prints one line per episode, then
`success=<rate> lifted=<rate> success|lifted=<rate> never_lifted=<n>` and the mean
absolute first-close offset (cm) per gripper axis, over failures and successes apart,
then `by_reach`: the same by the cube's start x (in quarters of the area) and by its distance
from the base (`cube r`, 5 cm bins).
"""

from __future__ import annotations

import argparse
import math
from multiprocessing import Pool
from typing import Any

import numpy as np

LIFT_Z = 0.05  # m: cube centre above this = lifted (it rests at 0.015)


def _only(camera: str) -> type:
    """An ArmRandomization that draws as usual and then zeroes every camera's jitter but
    `camera`'s (the rng sequence, hence `camera`'s draw, is unchanged)."""
    import dataclasses

    from realsim.robots.arm.scene import ArmRandomization

    class Only(ArmRandomization):
        def sample(self, rng, center, fitted):  # type: ignore[no-untyped-def]
            d = super().sample(rng, center, fitted)
            zero = ((0.0, 0.0, 0.0), (0.0, 0.0, 0.0), 0.0)
            return dataclasses.replace(d, camera_jitter={
                k: (v if k == camera else zero) for k, v in d.camera_jitter.items()})

    return Only


def _run(args: tuple[str, list[int], tuple[float, float, float], float, str | None]
         ) -> list[dict[str, Any]]:
    ck_path, seeds, cams, noise, only = args
    import torch

    from realsim.robots.arm.scene import ArmRandomization, ArmTaskEnv
    from student.evaluate import _cfg, eval_env_kwargs, obs_frames
    from student.policy import PolicyRunner, model_from_checkpoint

    torch.set_num_threads(1)
    ck = torch.load(ck_path, map_location="cpu", weights_only=True)
    cls = ArmRandomization if only is None else _only(only)
    rnd = cls(camera_pos_m=cams[0], camera_rot_deg=cams[1], camera_fov_deg=cams[2])
    env = ArmTaskEnv(randomization=rnd, **eval_env_kwargs(ck))
    runner = PolicyRunner(model_from_checkpoint(ck), _cfg(ck), None)
    out = []
    for seed in seeds:
        rng = np.random.default_rng([seed, 77])  # as student.evaluate.run_episode
        obs = env.reset(seed)
        runner.reset()
        lifted, closes, first = False, 0, None
        prev = None
        while not env.done:
            a = runner.act(obs.telemetry, obs_frames(obs), t_host=float(obs.t))
            if noise > 0:
                a = a + noise * rng.standard_normal(a.shape)
            p = env.privileged()
            if prev is not None and prev > 0 >= a[5]:
                closes += 1
                if first is None:
                    first = p["gripper_rot"].T @ (p["grasp_pos"] - p["cube_pose"][:3])
            prev = float(a[5])
            lifted |= bool(p["cube_pose"][2] > LIFT_Z)
            obs = env.step(np.clip(a, -1.0, 1.0))
        success, score = env.verdict()
        out.append({"seed": seed, "success": int(success), "score_cm": 100 * score,
                    "cube_xy": [round(float(v), 4) for v in env.scene.cube_xy],
                    "lifted": lifted, "closes": closes,
                    "first_close_cm": None if first is None else (100 * first).round(1).tolist()})
    env.close()
    return out


REACH_BINS = (0.15, 0.1875, 0.225, 0.2625, 0.30)
"""Cube start x (m, forward from the base) bins of `by_reach`: the task area's 0.15-0.30 in
quarters (spec/arm.md). The far quarter needs the tilted grasps (`teacher.arm_ik`)."""
RADIUS_BINS = (0.15, 0.20, 0.25, 0.30, 0.33)
"""Cube start distance from the base (m) bins of `by_reach(key="radius")`: the reach the
teacher's grasp tilt depends on (the area's far corners lie at up to 0.323 m)."""


def by_reach(res: list[dict[str, Any]], edges: tuple[float, ...] = REACH_BINS,
             key: str = "x") -> list[str]:
    """One line per bin of the cube's start x (key "x") or distance from the base (key
    "radius"): episodes, success, lifted, never closed (the jaws never commanded shut).
    Why: the 2000-episode students lose the far reach most."""
    def value(r: dict[str, Any]) -> float:
        return float(r["cube_xy"][0]) if key == "x" else math.hypot(*r["cube_xy"])

    label = "cube x" if key == "x" else "cube r"
    out = []
    for i, (lo, hi) in enumerate(zip(edges[:-1], edges[1:], strict=True)):
        last = i == len(edges) - 2
        rs = [r for r in res if lo <= value(r) < hi or (last and value(r) == hi)]
        if not rs:
            out.append(f"{label} {lo:.3f}-{hi:.3f} m: n=0")
            continue
        n = len(rs)
        succ = sum(r["success"] for r in rs) / n
        lift = sum(bool(r["lifted"]) for r in rs) / n
        never = sum(r["closes"] == 0 for r in rs)
        out.append(f"{label} {lo:.3f}-{hi:.3f} m: n={n} success={succ:.2f} lifted={lift:.2f} "
                   f"never_closed={never}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkpoint")
    ap.add_argument("--episodes", type=int, default=40)
    ap.add_argument("--camera-pos", type=float, default=0.02, help="m, uniform +-")
    ap.add_argument("--camera-rot", type=float, default=3.0, help="deg, uniform +- per axis")
    ap.add_argument("--camera-fov", type=float, default=5.0, help="deg, uniform +-")
    ap.add_argument("--jitter-only", choices=("front", "wrist"), default=None,
                    help="jitter this camera only, the other at its nominal pose")
    ap.add_argument("--action-noise", type=float, default=0.01)
    ap.add_argument("--seed", type=int, default=20_000)
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args()
    seeds = list(range(a.seed, a.seed + a.episodes))
    cams = (a.camera_pos, a.camera_rot, a.camera_fov)
    jobs = [(a.checkpoint, seeds[i::a.workers], cams, a.action_noise, a.jitter_only)
            for i in range(a.workers)]
    with Pool(a.workers) as pool:
        res = sorted((r for part in pool.map(_run, jobs) for r in part), key=lambda r: r["seed"])
    for r in res:
        print(r)
    s = np.array([r["success"] for r in res], bool)
    lifted = np.array([r["lifted"] for r in res], bool)
    cond = f"{s[lifted].mean():.2f}" if lifted.any() else "nan"
    print(f"success={s.mean():.2f} lifted={lifted.mean():.2f} success|lifted={cond} "
          f"never_lifted={int((~lifted).sum())} n={len(res)}")
    for name, m in (("failures", ~s), ("successes", s)):
        e = np.array([r["first_close_cm"] for r, k in zip(res, m, strict=True)
                      if k and r["first_close_cm"]])
        if len(e):
            x, y, z = np.abs(e).mean(0)
            print(f"{name}: mean |first-close offset| x (across jaws) {x:.1f} cm, "
                  f"y (closing axis) {y:.1f} cm, z (along fingers) {z:.1f} cm, n={len(e)}")
    for line in by_reach(res) + by_reach(res, RADIUS_BINS, key="radius"):
        print(line)


if __name__ == "__main__":
    main()

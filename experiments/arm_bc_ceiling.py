"""The arm's behaviour-cloning ceiling: clone the teacher from PRIVILEGED inputs.

    python experiments/arm_bc_ceiling.py --data teach_200.h5 [more.h5 ...] \
        [--epochs 30] [--episodes 24] [--action-noise 0.01] [--past-action] [--pose-error M] [--wrist M]

Not a student (it reads privileged/, which the student's loader refuses): a diagnostic
that separates perception from imitation. It clones the same teacher actions, with the
student's chunking (10 goals), relative revolute goals, held tail and ACT temporal
ensembling, from the exact cube pose, the square's position and the joint states instead
of the cameras. If this ceiling is far above the camera student, work on perception; if
it is itself low, the imitation (data, phase inference, compounding error) is the limit
and no encoder will fix it. --past-action adds the previous goal sent (relative to the
joints, as the chunk) to the input: does hidden teacher state (its integral sag correction,
the time within a phase) limit a memoryless clone? --pose-error M shifts the cube and square
positions the clone sees by one offset per episode, uniform in +-M m on x and y (training and
evaluation alike): what a camera-pose error does to a student that locates them from a camera
whose pose is randomized (spec/arm.md: +-2 cm, +-3 degrees). --wrist M adds what an ideal
wrist camera tells: the exact horizontal offset of the cube from the grasp site, when it is
within M m (else zeros and a flag): can the clone correct a pose error from it, with these
data (a teacher that always flies to the exact pose never shows a correction)?
Prints `ceiling success=<rate> n=<N> action_noise=<S>`.
"""

from __future__ import annotations

import argparse
import math

import numpy as np
import torch
from torch import nn

from realsim.logs import LogReader
from realsim.robots.arm.scene import ArmTaskEnv
from student.execution import TemporalEnsemble
from student.robots import robot_spec

SPEC = robot_spec("arm")
LO, HI = np.array(SPEC.joint_lo), np.array(SPEC.joint_hi)
K = 10  # the arm student's chunk_len


def normalise(q: np.ndarray) -> np.ndarray:
    """Joint positions (6,) -> the action scale [-1, 1]."""
    return 2 * (q - LO) / (HI - LO) - 1


def features(qpos: np.ndarray, qvel: np.ndarray, cube: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Privileged input: joints, cube position and yaw (4-fold symmetric), the square. (23,)"""
    w, x, y, z = cube[3:7]
    yaw = math.atan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z))
    return np.concatenate([normalise(qpos), 0.2 * qvel, 5 * cube[:3], [20 * cube[2]],
                           [math.sin(4 * yaw), math.cos(4 * yaw)], 5 * target])


def relative(goal: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Goals (..., 6) on the action scale with the revolute dims relative to joints q (6,)."""
    g = np.array(goal, dtype=np.float64)
    g[..., list(SPEC.relative_dims)] -= normalise(q)[list(SPEC.relative_dims)]
    return g


def shifted(cube: np.ndarray, target: np.ndarray, off: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Cube poses (..., 7) and the square (2,) as seen with a position error `off` (2,) m."""
    cube = np.array(cube, dtype=np.float64)
    cube[..., :2] += off
    return cube, np.asarray(target, np.float64) + off


def wrist(cube: np.ndarray, grasp: np.ndarray, reach: float) -> np.ndarray:
    """An ideal wrist camera: (seen, 20 x the cube's horizontal offset from the grasp
    site) when within `reach` m, else zeros. (3,)"""
    d = np.asarray(cube[:2]) - np.asarray(grasp[:2])
    if reach <= 0 or np.linalg.norm(d) > reach:
        return np.zeros(3)
    return np.r_[1.0, 20 * d]


def load(paths: list[str], past: bool, pose_error: float = 0.0,
         seed: int = 0, reach: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """(X (N, 23 [+6]), Y (N, K*6)): successful teacher episodes, chunks with the tail held."""
    xs, ys = [], []
    rng = np.random.default_rng([seed, 13])
    for path in paths:
        for ep in LogReader(path).episodes(privileged=True):
            if int(ep.attrs.get("success", 0)) != 1:
                continue
            a = np.asarray(ep.command["action"])
            qp, qv = np.asarray(ep.sensors["qpos"]), np.asarray(ep.sensors["qvel"])
            true_cube = np.asarray(ep.privileged["cube_pose"])
            grasp = np.asarray(ep.privileged["grasp_pos"])
            cube, target = shifted(true_cube, ep.privileged["target_xy"],
                                   rng.uniform(-pose_error, pose_error, 2))
            n = len(a)
            for i in range(n):
                chunk = relative(a[[min(i + j, n - 1) for j in range(K)]], qp[i])
                f = features(qp[i], qv[i], cube[i], target)
                if reach > 0:
                    f = np.concatenate([f, wrist(true_cube[i], grasp[i], reach)])
                if past:
                    f = np.concatenate([f, relative(a[i - 1] if i else normalise(qp[0]), qp[i])])
                xs.append(f)
                ys.append(chunk.reshape(-1))
    return torch.tensor(np.array(xs), dtype=torch.float32), torch.tensor(np.array(ys), dtype=torch.float32)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", nargs="+", required=True)
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--episodes", type=int, default=24)
    ap.add_argument("--action-noise", type=float, default=0.01)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--past-action", action="store_true")
    ap.add_argument("--pose-error", type=float, default=0.0)
    ap.add_argument("--wrist", type=float, default=0.0, help="ideal wrist camera's reach (m); 0: none")
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    torch.set_num_threads(1)
    x, y = load(a.data, a.past_action, a.pose_error, a.seed, a.wrist)
    print(f"samples {len(x)} from {', '.join(a.data)}", flush=True)
    net = nn.Sequential(nn.Linear(x.shape[1], 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                        nn.Linear(512, y.shape[1]))
    opt = torch.optim.AdamW(net.parameters(), 1e-3, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, a.epochs)
    for _ in range(a.epochs):
        perm = torch.randperm(len(x))
        for b in range(0, len(x), 256):
            i = perm[b:b + 256]
            loss = (net(x[i]) - y[i]).abs().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        sched.step()
    print(f"final train L1 {loss.item():.4f}", flush=True)
    env, wins = ArmTaskEnv(render=False), 0
    rel = list(SPEC.relative_dims)
    for k in range(a.episodes):
        seed = 10_000 + k  # the student's evaluation scenes (student.config eval_seed)
        rng = np.random.default_rng([seed, 77])
        obs = env.reset(seed)
        off = np.random.default_rng([seed, 78]).uniform(-a.pose_error, a.pose_error, 2)
        ex = TemporalEnsemble(0.01)
        ex.reset()
        last = normalise(np.asarray(obs.telemetry["qpos"]))
        while not env.done:
            p, q = env.privileged(), np.asarray(obs.telemetry["qpos"])
            f_np = features(q, np.asarray(obs.telemetry["qvel"]), *shifted(p["cube_pose"], p["target_xy"], off))
            if a.wrist > 0:
                f_np = np.concatenate([f_np, wrist(p["cube_pose"], p["grasp_pos"], a.wrist)])
            if a.past_action:
                f_np = np.concatenate([f_np, relative(last, q)])
            f = torch.tensor(f_np, dtype=torch.float32)

            def predict(f: torch.Tensor = f, q: np.ndarray = q) -> np.ndarray:
                with torch.no_grad():
                    c = net(f[None])[0].view(K, 6).numpy().astype(np.float64)
                c[:, rel] += normalise(q)[rel]
                return np.clip(c, -1, 1)

            act = last = ex.step(predict)
            obs = env.step(np.clip(act + a.action_noise * rng.standard_normal(6), -1, 1))
        wins += env.verdict()[0]
    print(f"ceiling success={wins / a.episodes:.3f} n={a.episodes} action_noise={a.action_noise} "
          f"past_action={a.past_action} pose_error={a.pose_error} wrist={a.wrist} data={len(a.data)} files")


if __name__ == "__main__":
    main()

"""Robust closed-loop evaluation of a student in the simulator: what picks checkpoints.

Robust means: Gaussian noise on every executed action, many scene seeds (each
with the simulator's randomization: physics, cameras), and for the car the blue
distractor cone forced on in half of the episodes and off in the other half.
The student sees only what a robot shows (`Obs.telemetry` and the camera frames:
the car's `Obs.frame_jpeg`, the arm's `Obs.frames`); this module never calls the
environment's privileged state, only its verdict (the judge), as a real lab's
judge would give it.

Episodes run in worker processes when `workers > 0` (spawned once and reused:
each keeps its simulator; the policy travels as checkpoint bytes).
"""

from __future__ import annotations

import importlib
import io
import math
import os
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from student.execution import Execution
from student.robots import robot_spec

DEFAULT_ENV = "realsim.robots.rc_car.scene:CarTaskEnv"


@dataclass
class EvalResult:
    """Success rate over `episodes` (list of dicts: seed, distractor, success, score, steps)."""

    success_rate: float
    episodes: list[dict[str, Any]] = field(default_factory=list)

    def by_distractor(self) -> dict[bool, float]:
        out = {}
        for d in (False, True):
            e = [x["success"] for x in self.episodes if x["distractor"] == d]
            out[d] = float(np.mean(e)) if e else math.nan
        return out

    def summary(self) -> str:
        head = f"sim success {self.success_rate:.1%} over {len(self.episodes)} episodes"
        if not any(x["distractor"] for x in self.episodes):
            return head
        bd = self.by_distractor()
        return f"{head} (distractor off {bd[False]:.1%}, on {bd[True]:.1%})"


def corrected_sim_kwargs(params: str | os.PathLike[str] | None = None,
                         residual: str | os.PathLike[str] | None = None,
                         robot: str = "rc_car") -> dict[str, Any]:
    """Keyword arguments of the robot's task env (`CarTaskEnv`, `ArmTaskEnv`) for the
    corrected simulator (empty: nominal).

    params: a fitted params.yaml: randomization centred on the fit. residual: a residual
    checkpoint: hybrid physics (each evaluation worker loads it once, weights_only=True).
    Both files are read here, so a bad one is a one-line UserError before any episode
    runs; the kwargs carry the loaded params (`CarParams`, `ArmParams`) and the residual's absolute path.
    """
    from pathlib import Path

    from realsim.errors import UserError

    kw: dict[str, Any] = {}
    if params is not None:
        if not Path(params).is_file():
            raise UserError(f"no such parameter file: {params}")
        if robot == "arm":
            from realsim.robots.arm.params import ArmParams as Params
        else:
            from realsim.robots.rc_car.params import CarParams as Params
        kw["params"] = Params.from_yaml(Path(params))
    if residual is not None:
        from realsim.residual import load_residual

        load_residual(residual, robot)  # UserError: missing, corrupt, another robot's
        kw["residual"] = str(Path(residual).resolve())
    return kw


def episode_plan(n: int, seed0: int, variants: bool = True) -> list[tuple[int, bool]]:
    """(seed, distractor) for n episodes: consecutive seeds, distractor on every other one
    (`variants`; never without)."""
    return [(seed0 + i, bool(i % 2) and variants) for i in range(n)]


def make_env(spec: str = DEFAULT_ENV, kwargs: dict[str, Any] | None = None) -> Any:
    """Build an environment from 'module:callable' (picklable across processes)."""
    mod, _, name = spec.partition(":")
    return getattr(importlib.import_module(mod), name)(**(kwargs or {}))


def obs_frames(obs: Any) -> dict[str, bytes]:
    """The camera JPEGs that arrived with an env observation: the arm's `obs.frames`
    ({name: Frame}) or the car's `obs.frame_jpeg` (the front camera)."""
    frames = getattr(obs, "frames", None)
    if isinstance(frames, dict):
        return {n: getattr(f, "jpeg", f) for n, f in frames.items()}
    jpeg = getattr(obs, "frame_jpeg", None)
    return {} if jpeg is None else {"front": jpeg}


def run_episode(runner: Any, env: Any, seed: int, distractor: bool, *, action_noise: float = 0.0,
                seconds: float = 10.0, control_hz: float = 50.0) -> dict[str, Any]:
    """One closed-loop episode; the verdict is the environment's judge. `distractor` is the
    car's scene variant (an env whose robot has none is reset by seed alone)."""
    rng = np.random.default_rng([seed, 77])
    variants = robot_spec(runner.cfg.robot).variants if hasattr(runner, "cfg") else True
    obs = env.reset(seed, distractor=distractor) if variants else env.reset(seed)
    runner.reset()
    steps = 0
    max_steps = int(math.ceil(seconds * control_hz)) + 5
    while not getattr(env, "done", False) and steps < max_steps:
        a = runner.act(obs.telemetry, obs_frames(obs), t_host=float(obs.t))
        if action_noise > 0:
            a = a + action_noise * rng.standard_normal(a.shape)
        obs = env.step(np.clip(a, -1.0, 1.0))
        steps += 1
    success, score = env.verdict()
    return {"seed": int(seed), "distractor": bool(distractor), "success": int(success),
            "score": float(score), "steps": steps}


# ---------------------------------------------------------------- worker side
_ENV: Any = None
_ENV_KEY: Any = None


def _worker_init() -> None:
    torch.set_num_threads(1)


def _work(ck_bytes: bytes, env_spec: str, env_kwargs: dict[str, Any], plan: list[tuple[int, bool]],
          noise: float, seconds: float, execution: Execution | None) -> list[dict[str, Any]]:
    global _ENV, _ENV_KEY
    from student.policy import PolicyRunner, model_from_checkpoint

    key = (env_spec, repr(sorted(env_kwargs.items())))
    if _ENV is None or _ENV_KEY != key:
        _ENV, _ENV_KEY = make_env(env_spec, env_kwargs), key
    ck = torch.load(io.BytesIO(ck_bytes), weights_only=True)
    runner = PolicyRunner(model_from_checkpoint(ck), _cfg(ck), execution)
    hz = float(getattr(_ENV, "control_hz", 50.0))
    return [run_episode(runner, _ENV, s, d, action_noise=noise, seconds=seconds, control_hz=hz)
            for s, d in plan]


def _cfg(ck: dict[str, Any]):  # noqa: ANN202
    from student.config import StudentConfig

    return StudentConfig.from_dict(ck["config"])


class Evaluator:
    """Closed-loop evaluation of checkpoints (dicts as `student.policy` writes them).

    workers: processes (0: run here). env_spec/env_kwargs: the environment
    ('module:callable'), the rc_car task scene by default. backend: "local" (spawned
    processes) or "ray" (`realsim.distributed.make_executor`; same episodes per seed).
    """

    def __init__(self, workers: int = 2, env_spec: str = DEFAULT_ENV,
                 env_kwargs: dict[str, Any] | None = None, backend: str = "local") -> None:
        self.workers = max(0, int(workers))
        self.env_spec, self.env_kwargs = env_spec, dict(env_kwargs or {})
        self.backend = backend
        self._pool: Executor | None = None

    def _get_pool(self) -> Executor:
        if self._pool is None:
            from realsim.distributed import make_executor

            self._pool = make_executor(self.backend, self.workers, initializer=_worker_init)
        return self._pool

    def evaluate(self, checkpoint: dict[str, Any], episodes: int, seed0: int, *,
                 action_noise: float = 0.05, seconds: float = 10.0,
                 execution: Execution | None = None,
                 progress: Callable[[str], None] | None = None) -> EvalResult:
        """Run `episodes` episodes (seeds seed0.., the car's distractor every other one)."""
        robot = checkpoint.get("config", {}).get("robot", "rc_car")
        plan = episode_plan(episodes, seed0, robot_spec(robot).variants)
        buf = io.BytesIO()
        torch.save(checkpoint, buf)
        b = buf.getvalue()
        if self.workers == 0 or episodes < 2:
            res = _work(b, self.env_spec, self.env_kwargs, plan, action_noise, seconds, execution)
        else:
            shards = [plan[i::self.workers] for i in range(self.workers)]
            futs = [self._get_pool().submit(_work, b, self.env_spec, self.env_kwargs, s,
                                            action_noise, seconds, execution) for s in shards if s]
            res = [r for f in futs for r in f.result()]
            res.sort(key=lambda r: r["seed"])
        rate = float(np.mean([r["success"] for r in res])) if res else math.nan
        out = EvalResult(rate, res)
        if progress:
            progress(out.summary())
        return out

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None

    def __enter__(self) -> Evaluator:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def evaluate_checkpoint(path: str, episodes: int = 50, seed0: int = 10_000, *,
                        action_noise: float = 0.05, workers: int | None = None,
                        execution: Execution | None = None, env_spec: str | None = None,
                        env_kwargs: dict[str, Any] | None = None,
                        seconds: float | None = None) -> EvalResult:
    """Evaluate a checkpoint file (convenience for experiments); the robot's env, its
    recorded evaluation env kwargs and episode length unless given."""
    ck = torch.load(path, map_location="cpu", weights_only=True)
    cfg = ck.get("config", {})
    spec = robot_spec(cfg.get("robot", "rc_car"))
    w = min(2, os.cpu_count() or 1) if workers is None else workers
    kw = env_kwargs if env_kwargs is not None else eval_env_kwargs(ck)
    with Evaluator(w, env_spec or spec.env_spec, kw) as ev:
        return ev.evaluate(ck, episodes, seed0, action_noise=action_noise, execution=execution,
                           seconds=seconds or float(cfg.get("eval_seconds", spec.seconds)))


def eval_env_kwargs(ck: dict[str, Any]) -> dict[str, Any]:
    """The env kwargs a checkpoint was selected in, as far as they are plain data (the
    camera frame size of its training data); {} for the car's nominal simulator."""
    size = ck.get("meta", {}).get("frame_size")
    if ck.get("config", {}).get("robot") == "arm" and size:
        return {"image_size": (int(size[1]), int(size[0]))}
    return {}

"""Teacher data generation (`realsim teach`): the privileged teacher in the randomized sim,
written in the log format (spec/log_format.md) with source="sim" and the privileged/ group.

- Episode k of a run seeded S uses the seed `scene.episode_seed(S, k)`: the same (S, k)
  gives the same episode (actions, sensors, JPEG bytes) whatever the worker count.
- Worker processes (a spawn-context process pool) each run whole episodes and return
  them as plain arrays; the parent is the only writer and writes them in episode order.
- With a residual checkpoint (`TeachConfig.residual`), each worker loads it once and
  runs its episodes through the hybrid simulator (`realsim.sim.HybridCarSim`); the
  randomized world is drawn exactly as without it.
- Resumable: every teacher episode carries attrs ``teach_index``, ``teach_seed`` and
  ``teach_config`` (a hash of everything that shapes an episode); a rerun with the same
  arguments skips the indices already complete in the file and goes on to N. An episode
  interrupted mid-write stays in the file with complete=False and is redone.

Per episode (times in s since the episode start):
command/ t, seq, action (N, 2) at control_hz (the teacher's action, before the
simulated actuator noise); sensors/ t, t_device and the rc_car fields at control_hz
(the first sample at t=0); camera/front t (frame arrival), jpeg at camera_fps;
privileged/ pose (x, y, yaw), velocity (v_forward, v_left, yaw_rate), qpos, qvel as
time series on the sensor times; cone_xy (2,), distractor_xy (2,) (NaN if none),
randomization (K,) with randomization_names (K,) (params as "param.<name>"), attrs
success and score from the task judge.
"""

from __future__ import annotations

import functools
import hashlib
import json
import multiprocessing as mp
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from realsim.errors import UserError
from realsim.randomization import Randomization
from realsim.robots.rc_car.params import CarParams

DRIVER = "teacher"


@dataclass(frozen=True)
class TeachConfig:
    """Everything that shapes a generated episode (picklable; sent to the workers)."""

    seed: int = 0
    params: dict[str, Any] | None = None  # CarParams.to_dict() of the centre (None: nominal)
    randomization: dict[str, Any] | None = None  # Randomization.to_dict() (None: defaults)
    image_size: tuple[int, int] = (240, 320)
    control_hz: float = 50.0
    camera_fps: float = 20.0
    residual: str | None = None  # residual checkpoint path (None: no residual); each worker
    # loads it once (weights_only=True) and runs its episodes through the hybrid simulator

    def digest(self) -> str:
        """Short hash of everything but the seed (stored per episode, checked on resume).

        With a residual, the hash covers the checkpoint's bytes (not its path): the same
        model under another name resumes, a retrained one does not."""
        d: dict[str, Any] = {
            "params": self.params,
            "randomization": Randomization.from_dict(self.randomization).to_dict(),
            "image_size": list(self.image_size),
            "control_hz": self.control_hz,
            "camera_fps": self.camera_fps,
        }
        if self.residual is not None:  # absent without one: older files still resume
            d["residual"] = _file_sha1(self.residual)
        return hashlib.sha1(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]


def _file_sha1(path: str) -> str:
    """SHA-1 of a file's bytes (cached per path, size and mtime). Missing: UserError."""
    p = Path(path)
    try:
        st = p.stat()
    except OSError:
        raise UserError(f"no such residual checkpoint: {p}") from None
    return _sha1_cached(str(p.resolve()), st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=8)
def _sha1_cached(path: str, size: int, mtime_ns: int) -> str:
    """SHA-1 of `path`'s bytes; size and mtime_ns only key the cache."""
    return hashlib.sha1(Path(path).read_bytes()).hexdigest()


@dataclass
class EpisodeRecord:
    """One generated episode as plain arrays (what a worker returns)."""

    index: int
    seed: int
    command_t: np.ndarray
    command_seq: np.ndarray
    action: np.ndarray
    sensors: dict[str, np.ndarray]
    frames: list[tuple[float, bytes]]
    privileged_static: dict[str, np.ndarray]
    privileged_series: dict[str, np.ndarray]
    success: int
    score: float
    extra: dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------
# one episode
# ---------------------------------------------------------------------------------------
_ENV_CACHE: dict[str, Any] = {}


def _env(cfg: TeachConfig) -> Any:
    from realsim.robots.rc_car.scene import CarTaskEnv

    key = cfg.digest()
    env = _ENV_CACHE.get(key)
    if env is None:
        for old in _ENV_CACHE.values():
            old.close()
        _ENV_CACHE.clear()
        params = CarParams.from_dict(cfg.params) if cfg.params is not None else None
        env = CarTaskEnv(
            params=params,
            randomization=Randomization.from_dict(cfg.randomization),
            image_size=cfg.image_size,
            control_hz=cfg.control_hz,
            camera_fps=cfg.camera_fps,
            residual=cfg.residual,  # loaded here, once per worker process
        )
        _ENV_CACHE[key] = env
    return env


def generate_episode(cfg: TeachConfig, index: int) -> EpisodeRecord:
    """Run the teacher for episode `index` of the run `cfg` and return it as arrays."""
    from realsim.robots.rc_car import constants as C
    from realsim.robots.rc_car.scene import episode_seed
    from teacher.pure_pursuit import PurePursuitTeacher

    env = _env(cfg)
    seed = episode_seed(cfg.seed, index)
    obs = env.reset(seed)
    teacher = PurePursuitTeacher()
    cmd_t: list[float] = []
    actions: list[np.ndarray] = []
    sens: dict[str, list[Any]] = {k: [] for k in ("t", *C.SENSOR_FIELDS)}
    series: dict[str, list[np.ndarray]] = {k: [] for k in ("pose", "velocity", "qpos", "qvel")}
    frames: list[tuple[float, bytes]] = []

    def record(o: Any) -> None:
        sens["t"].append(o.t)
        for k in C.SENSOR_FIELDS:
            sens[k].append(o.telemetry[k])
        p = env.privileged()
        for k in series:
            series[k].append(np.asarray(p[k], dtype=np.float64))
        if o.frame_jpeg is not None:
            frames.append((o.frame_t, o.frame_jpeg))

    record(obs)
    while not env.done:
        a = teacher.act(env.privileged())
        cmd_t.append(env.t)
        actions.append(a)
        record(env.step(a))
    success, score = env.verdict()
    draw = env.draw
    flat = draw.flat()
    scene = env.scene
    dxy = scene.distractor_xy if scene.distractor_xy is not None else (np.nan, np.nan)
    sensors = {k: np.asarray(v) for k, v in sens.items()}
    sensors["t_device"] = sensors["t"].copy()  # the simulated device clock = sim time
    return EpisodeRecord(
        index=index,
        seed=seed,
        command_t=np.asarray(cmd_t, dtype=np.float64),
        command_seq=np.arange(len(cmd_t), dtype=np.int64),
        action=np.asarray(actions, dtype=np.float32).reshape(-1, 2),
        sensors=sensors,
        frames=frames,
        privileged_static={
            "cone_xy": np.asarray(scene.cone_xy, dtype=np.float64),
            "distractor_xy": np.asarray(dxy, dtype=np.float64),
            "randomization": np.array(list(flat.values()), dtype=np.float64),
            "randomization_names": np.array(list(flat.keys()), dtype="S"),
        },
        privileged_series={k: np.stack(v) for k, v in series.items()},
        success=int(success),
        score=float(score),
    )


def _worker(job: tuple[TeachConfig, int]) -> EpisodeRecord:
    return generate_episode(*job)


def _init_worker() -> None:
    os.environ.setdefault("MUJOCO_GL", "egl")
    os.environ.setdefault("OMP_NUM_THREADS", "1")


# ---------------------------------------------------------------------------------------
# the file
# ---------------------------------------------------------------------------------------
def write_episode(writer: Any, rec: EpisodeRecord, cfg: TeachConfig) -> None:
    """Append `rec` to an open LogWriter (source="sim") as one complete episode."""
    ep = writer.begin_episode(
        driver=DRIVER,
        seed=rec.seed,
        attrs={"teach_index": rec.index, "teach_seed": cfg.seed, "teach_config": cfg.digest()},
    )
    ep.add_commands(rec.command_t, rec.command_seq, rec.action)
    s = dict(rec.sensors)
    t, td = s.pop("t"), s.pop("t_device")
    ep.add_sensor_block(t, td, **s)
    for ft, jpeg in rec.frames:
        ep.add_frame("front", ft, jpeg)
    for k, v in rec.privileged_static.items():
        ep.add_privileged(k, v)
    for k, v in rec.privileged_series.items():
        ep.add_privileged(k, v, t=t)
    ep.close(success=rec.success, score=rec.score)


def completed_indices(path: Path, cfg: TeachConfig) -> set[int]:
    """Teacher episode indices already complete in `path` (empty if no file). Raises
    UserError if the file holds teacher episodes of another seed or configuration."""
    if not path.exists() or path.stat().st_size == 0:
        return set()
    from realsim.logs import LogReader

    done: set[int] = set()
    with LogReader(path) as r:
        for name in r.episode_names:
            ep = r.episode(name)
            if ep.driver != DRIVER or "teach_index" not in ep.attrs:
                continue
            if (
                int(ep.attrs.get("teach_seed", -1)) != cfg.seed
                or str(ep.attrs.get("teach_config", "")) != cfg.digest()
            ):
                raise UserError(
                    f"{path}: holds teacher episodes of another --seed or configuration; "
                    "use a new --out file"
                )
            if ep.complete:
                done.add(int(ep.attrs["teach_index"]))
    return done


def _records(cfg: TeachConfig, todo: list[int], workers: int) -> Iterator[EpisodeRecord]:
    if workers <= 1:
        for k in todo:
            yield generate_episode(cfg, k)
        return
    ctx = mp.get_context("spawn")
    with ctx.Pool(workers, initializer=_init_worker) as pool:
        try:
            yield from pool.imap(_worker, [(cfg, k) for k in todo], chunksize=1)
        except BaseException:
            pool.terminate()
            raise


@dataclass
class TeachSummary:
    """What a `teach` run did: episodes written now, total complete, successes among the
    episodes written now, wall time (s)."""

    written: int
    total: int
    successes: int
    seconds: float

    @property
    def success_rate(self) -> float:
        """Successes / episodes written in this run (NaN if none)."""
        return self.successes / self.written if self.written else float("nan")


def teach(
    out: str | os.PathLike[str],
    episodes: int,
    cfg: TeachConfig | None = None,
    workers: int = 2,
    progress: bool = True,
    on_episode: Callable[[EpisodeRecord], None] | None = None,
    records: Callable[[TeachConfig, list[int], int], Iterator[EpisodeRecord]] | None = None,
) -> TeachSummary:
    """Generate teacher episodes 0..episodes-1 into `out` (appending, resuming).

    records: where episodes are computed (default: the local process pool, `_records`;
    `teacher.ray_backend.ray_records` runs them on Ray with the same results)."""
    import time

    from realsim.logs import LogWriter

    cfg = cfg or TeachConfig()
    if episodes < 0:
        raise UserError("--episodes must be >= 0")
    path = Path(out)
    if path.parent and not path.parent.exists():
        raise UserError(f"no such directory: {path.parent}")
    done = completed_indices(path, cfg)
    todo = [k for k in range(episodes) if k not in done]
    t0 = time.monotonic()
    written = successes = 0
    attrs = {"generator": "realsim teach", "teach_seed": cfg.seed, "teach_config": cfg.digest()}
    with LogWriter(path, robot="rc_car", source="sim", attrs=attrs) as writer:
        bar = _progress(progress, len(todo), len(done))
        try:
            for rec in (records or _records)(cfg, todo, workers):
                write_episode(writer, rec, cfg)
                written += 1
                successes += rec.success
                if on_episode is not None:
                    on_episode(rec)
                bar.advance(successes, written)
        finally:
            bar.stop()
    return TeachSummary(written, len(done) + written, successes, time.monotonic() - t0)


class _progress:
    """A rich progress bar on stderr (silent when disabled or nothing to do)."""

    def __init__(self, enabled: bool, total: int, already: int) -> None:
        self.p = None
        if not enabled or total == 0:
            return
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
        )

        self.p = Progress(
            TextColumn("teach"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[info]}"),
            TimeRemainingColumn(),
            console=Console(stderr=True),
            transient=False,
        )
        self.p.start()
        info = f"(resumed after {already})" if already else ""
        self.task = self.p.add_task("teach", total=total, info=info)

    def advance(self, successes: int, written: int) -> None:
        if self.p is not None:
            self.p.update(self.task, advance=1, info=f"success {successes}/{written}")

    def stop(self) -> None:
        if self.p is not None:
            self.p.stop()

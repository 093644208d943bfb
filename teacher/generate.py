"""Teacher data generation (`realsim teach ROBOT`): the robot's privileged teacher in its
randomized sim, written in the log format (spec/log_format.md) with source="sim" and the
privileged/ group. One generic episode loop and writer serve every robot; what differs
per robot (its environment, teacher, cameras, privileged state, randomization) is a
small `RobotTeach` adapter: `teacher.car_generate.CAR`, `teacher.arm_generate.ARM`.

- Episode k of a run seeded S uses the seed `episode_seed(S, k)`: the same (S, k)
  gives the same episode (actions, sensors, JPEG bytes) whatever the worker count.
- Worker processes (a spawn-context process pool) each run whole episodes and return
  them as plain arrays; the parent is the only writer and writes them in episode order.
- With a residual checkpoint (`TeachConfig.residual`), each worker builds its
  environment with it once and runs its episodes through the robot's hybrid simulator;
  the randomized world is drawn exactly as without it.
- Resumable: every teacher episode carries attrs ``teach_index``, ``teach_seed`` and
  ``teach_config`` (a hash of everything that shapes an episode); a rerun with the same
  arguments skips the indices already complete in the file and goes on to N. An episode
  interrupted mid-write stays in the file with complete=False and is redone.

Per episode (times in s since the episode start): command/ t, seq, action (N, A) at
control_hz (the teacher's action, before the simulated actuator noise); sensors/ t,
t_device and the robot's fields at control_hz (the first sample at t=0, so M = N + 1);
camera/<name>/ t (frame arrival), jpeg at up to camera_fps; privileged/ the robot's
state series on the sensor times, its static scene arrays, randomization (K,) with
randomization_names (K,) (params as "param.<name>"); attrs success and score from the
task judge. The per-robot contents are listed in each adapter's docstring.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import json
import multiprocessing as mp
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from realsim.errors import UserError

DRIVER = "teacher"

# robot -> "module:attribute" of its `RobotTeach` adapter (imported on first use, so
# `--help` and the car's workers never import the arm's simulator, nor the reverse)
ADAPTERS: dict[str, str] = {
    "rc_car": "teacher.car_generate:CAR",
    "arm": "teacher.arm_generate:ARM",
}


class RobotTeach(Protocol):
    """What `generate_episode` needs to know about one robot (one instance per robot).

    robot: the log's robot name. cameras: camera names, in the order written.
    action_dim: A, the width of command/action. sensor_fields: the telemetry fields
    written to sensors/ (keys of the env's Obs.telemetry). control_hz / camera_fps:
    the default rates (the env's control step; frames at most once per step).
    """

    robot: str
    cameras: tuple[str, ...]
    action_dim: int
    sensor_fields: tuple[str, ...]
    control_hz: float
    camera_fps: float

    def randomization(self, data: dict[str, Any] | None) -> dict[str, Any]:
        """The complete randomization dict for `data` (None: the teach defaults); what
        the config digest hashes and `make_env` reads. UserError for unknown keys."""
        ...

    def load_params(self, path: str) -> dict[str, Any]:
        """A fitted params.yaml as the plain dict `make_env` reads (UserError if bad)."""
        ...

    def load_randomization(self, path: str) -> dict[str, Any]:
        """A randomization YAML (--config) as a complete randomization dict."""
        ...

    def check_residual(self, path: str) -> str:
        """Load/validate a residual checkpoint once, in the parent; its absolute path."""
        ...

    def make_env(self, cfg: TeachConfig) -> Any:
        """The task environment for the run `cfg` (reset(seed), step(a), done, t,
        privileged(), verdict(), close())."""
        ...

    def make_teacher(self, env: Any, seed: int = 0,
                     options: Sequence[tuple[str, Any]] = ()) -> Any:
        """A fresh privileged teacher for one episode (act(privileged) -> action (A,));
        `seed` (the episode's) seeds whatever the teacher draws itself; `options`
        (TeachConfig.teacher) set its configuration (UserError for an unknown one). A
        teacher that executes a deliberately perturbed action may expose `label` (A,),
        the action to log for the last act (its unperturbed plan, DART-style)."""
        ...

    def teacher_options(self, pairs: Sequence[str]) -> tuple[tuple[str, Any], ...]:
        """`--teacher KEY=VALUE` strings as typed (name, value) options for make_teacher,
        over the robot's default teacher-data options (kept in the options, so the config
        digest changes with them); UserError, in the parent, for a malformed pair, an
        unknown name or a bad value."""
        ...

    def frames(self, obs: Any) -> Iterable[tuple[str, float, bytes]]:
        """(camera, arrival time s, JPEG bytes) of the frames that arrived with `obs`."""
        ...

    def series(self, priv: dict[str, Any]) -> dict[str, Any]:
        """Privileged state written as time series on the sensor times."""
        ...

    def static(self, env: Any) -> dict[str, np.ndarray]:
        """Per-episode privileged arrays (scene layout), without the randomization."""
        ...

    def draw_flat(self, env: Any) -> dict[str, float]:
        """The episode's randomization draw as name -> float (params as param.<name>)."""
        ...


def robot_teach(robot: str) -> RobotTeach:
    """The `RobotTeach` adapter of `robot`; UserError if it has no teacher."""
    try:
        mod, attr = ADAPTERS[robot].split(":")
    except KeyError:
        raise UserError(
            f"teach: no teacher for robot {robot!r} (expected one of {', '.join(ADAPTERS)})"
        ) from None
    return getattr(importlib.import_module(mod), attr)


def episode_seed(seed: int, index: int) -> int:
    """Seed of episode `index` of a run seeded `seed`: independent of worker count."""
    return int(np.random.SeedSequence([int(seed), int(index)]).generate_state(1)[0])


@dataclass(frozen=True)
class TeachConfig:
    """Everything that shapes a generated episode (picklable; sent to the workers)."""

    seed: int = 0
    params: dict[str, Any] | None = None  # the robot's ParamSet.to_dict() of the centre
    # (None: nominal, drawn over the datasheet ranges)
    randomization: dict[str, Any] | None = None  # the robot's randomization dict
    # (None: the adapter's teach defaults)
    image_size: tuple[int, int] = (240, 320)  # (H, W) of every recorded camera. Half the
    # real cameras' 480x640 (same 4:3 aspect, so a student resizes real frames exactly
    # as these): a quarter of the render/JPEG cost and file size of full size, and still
    # above what a student's encoder reads (it downsamples further); full size on CPU
    # roughly triples teach time for no gain in the student's input
    control_hz: float | None = None  # control rate (None: the robot's, 50 car / 25 arm)
    camera_fps: float | None = None  # camera rate (None: the robot's, 20 car / 30 arm)
    residual: str | None = None  # residual checkpoint path (None: no residual); each worker
    # loads it once with its environment and runs its episodes through the hybrid sim
    robot: str = "rc_car"  # which robot's teacher (the default keeps car configs as they were)
    teacher: tuple[tuple[str, Any], ...] = ()  # teacher options (name, value), e.g. the arm's
    # TeacherConfig fields (`realsim teach --teacher KEY=VALUE`); empty: the teacher's defaults

    def __post_init__(self) -> None:
        rt = robot_teach(self.robot)
        if self.control_hz is None:
            object.__setattr__(self, "control_hz", float(rt.control_hz))
        if self.camera_fps is None:
            object.__setattr__(self, "camera_fps", float(rt.camera_fps))
        object.__setattr__(self, "image_size", tuple(int(x) for x in self.image_size))

    def digest(self) -> str:
        """Short hash of everything but the seed (stored per episode, checked on resume).

        With a residual, the hash covers the checkpoint's bytes (not its path): the same
        model under another name resumes, a retrained one does not. The robot is hashed
        for every robot but the car (whose files predate it and still resume)."""
        d: dict[str, Any] = {
            "params": self.params,
            "randomization": robot_teach(self.robot).randomization(self.randomization),
            "image_size": list(self.image_size),
            "control_hz": self.control_hz,
            "camera_fps": self.camera_fps,
        }
        if self.robot != "rc_car":
            d["robot"] = self.robot
        if self.teacher:  # absent without options: older files still resume
            d["teacher"] = [list(kv) for kv in self.teacher]
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
    """One generated episode as plain arrays (what a worker returns).

    command_t (N,), command_seq (N,), action (N, A); sensors: "t", "t_device" and the
    robot's fields, each (M,) or (M, k) with M = N + 1; frames: camera -> [(t, jpeg)];
    privileged_static: per-episode arrays; privileged_series: (M, ...) on sensors["t"].
    """

    index: int
    seed: int
    command_t: np.ndarray
    command_seq: np.ndarray
    action: np.ndarray
    sensors: dict[str, np.ndarray]
    frames: dict[str, list[tuple[float, bytes]]]
    privileged_static: dict[str, np.ndarray]
    privileged_series: dict[str, np.ndarray]
    success: int
    score: float
    extra: dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------
# one episode
# ---------------------------------------------------------------------------------------
_ENV_CACHE: dict[str, Any] = {}


def _env(cfg: TeachConfig, rt: RobotTeach) -> Any:
    """The worker's environment for `cfg` (built once per configuration)."""
    key = cfg.digest()
    env = _ENV_CACHE.get(key)
    if env is None:
        for old in _ENV_CACHE.values():
            old.close()
        _ENV_CACHE.clear()
        env = rt.make_env(cfg)
        _ENV_CACHE[key] = env
    return env


def generate_episode(cfg: TeachConfig, index: int) -> EpisodeRecord:
    """Run the robot's teacher for episode `index` of the run `cfg`; return it as arrays."""
    rt = robot_teach(cfg.robot)
    env = _env(cfg, rt)
    seed = episode_seed(cfg.seed, index)
    obs = env.reset(seed)
    teacher = rt.make_teacher(env, seed, cfg.teacher)
    cmd_t: list[float] = []
    actions: list[np.ndarray] = []
    sens: dict[str, list[Any]] = {k: [] for k in ("t", *rt.sensor_fields)}
    series: dict[str, list[np.ndarray]] = {}
    frames: dict[str, list[tuple[float, bytes]]] = {c: [] for c in rt.cameras}

    def record(o: Any) -> None:
        sens["t"].append(o.t)
        for k in rt.sensor_fields:
            sens[k].append(o.telemetry[k])
        for k, v in rt.series(env.privileged()).items():
            series.setdefault(k, []).append(np.asarray(v, dtype=np.float64))
        for cam, ft, jpeg in rt.frames(o):
            frames[cam].append((ft, jpeg))

    record(obs)
    while not env.done:
        a = teacher.act(env.privileged())
        cmd_t.append(env.t)
        label = getattr(teacher, "label", None)  # the plan, where the teacher executes a perturbed one
        actions.append(np.asarray(a if label is None else label))
        record(env.step(a))
    success, score = env.verdict()
    flat = rt.draw_flat(env)
    sensors = {k: np.asarray(v) for k, v in sens.items()}
    sensors["t_device"] = sensors["t"].copy()  # the simulated device clock = sim time
    static = dict(rt.static(env))
    static["randomization"] = np.array(list(flat.values()), dtype=np.float64)
    static["randomization_names"] = np.array(list(flat.keys()), dtype="S")
    return EpisodeRecord(
        index=index,
        seed=seed,
        command_t=np.asarray(cmd_t, dtype=np.float64),
        command_seq=np.arange(len(cmd_t), dtype=np.int64),
        action=np.asarray(actions, dtype=np.float32).reshape(-1, rt.action_dim),
        sensors=sensors,
        frames=frames,
        privileged_static=static,
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
    for cam, frames in rec.frames.items():
        for ft, jpeg in frames:
            ep.add_frame(cam, ft, jpeg)
    for k, v in rec.privileged_static.items():
        ep.add_privileged(k, v)
    for k, v in rec.privileged_series.items():
        ep.add_privileged(k, v, t=t)
    ep.close(success=rec.success, score=rec.score)


def completed_indices(path: Path, cfg: TeachConfig) -> set[int]:
    """Teacher episode indices already complete in `path` (empty if no file). Raises
    UserError if the file is another robot's log, or holds teacher episodes of another
    seed or configuration."""
    if not path.exists() or path.stat().st_size == 0:
        return set()
    from realsim.logs import LogReader

    done: set[int] = set()
    with LogReader(path) as r:
        if r.robot != cfg.robot:
            raise UserError(f"{path}: a log of robot {r.robot!r}, not {cfg.robot!r}")
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
    with LogWriter(path, robot=cfg.robot, source="sim", attrs=attrs) as writer:
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

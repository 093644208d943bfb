"""DAgger for the car (`realsim dagger`): the student drives, the privileged teacher relabels.

One round, per episode k (scene and world drawn from `episode_seed(seed, k)`, exactly as
`realsim teach` draws them, camera rendered the same way):

1. Roll the current student (`PolicyRunner`) out in the randomized simulator until the
   episode is decided (success, the blue cone touched, or the 10 s window over). The
   student sees only the robot-legal `Obs`, as in `student.evaluate`.
2. At every control tick i, before the student's command, relabel: the teacher's action
   at that state, `relabel(env.privileged())` = a fresh `PurePursuitTeacher` planning from
   the state (the teacher as a function of state; its own episodes replan every 0.2 s,
   so this is the action it would send there), and snapshot `env.get_state()`.
3. Gate (on by default): state i is kept only if `teacher.recoverability.teacher_recovers`
   (the teacher, driving from the snapshot for the rest of the window, succeeds). The
   episode is CUT at its first rejected state: ticks 0..cut-1 are written, the first
   rejected one and everything after it are dropped.

Why cut rather than mask: the student's loader builds each sample's target chunk from
the next `chunk_len` consecutive commands and masks the steps past an episode's end. A
rejected state in the middle of the kept data would either put a hopeless label inside
a chunk or need a per-step mask the loader does not read; cutting makes the written
episode a plain prefix, so every chunk target holds only accepted labels (the loader's
end-of-episode mask covers the tail) and `realsim train-student` needs no change. What a
student does after an unrecoverable state is off the teacher's solution manifold anyway.

Checking every tick costs one teacher rollout per state, so the gate checks every
`gate_every`-th tick and the last one; at the first rejected check it checks the ticks
since the last accepted check one by one, so the cut is exact under the assumption that
a state between two accepted checks is recoverable too.

Without the gate every visited state is kept (vanilla DAgger); `audit=True` still runs
the checks (without cutting) and records their verdicts, so an experiment can count how
many of vanilla DAgger's labels lie on states the teacher itself cannot recover from.

Written (spec/log_format.md, source="sim", driver "dagger"; one episode per rollout with
at least one kept state), times in s since the episode start:
command/ t, seq, action (N, 2) = the TEACHER's relabels at the kept ticks; sensors/ at
every tick up to the cut (N + 1 samples, the first at t=0); camera/front: the frames
that arrived by then; privileged/ pose, velocity, qpos, qvel on the sensor times,
student_action (N, 2) on the command times (what the student sent), gate_tick (C,) int
and gate_ok (C,) bool (every check: tick index and verdict), cone_xy, distractor_xy,
randomization, randomization_names as `teacher.generate` writes them. Attrs: success -1
(a relabelled student rollout has no single outcome; the loader keeps it), and the
student's own outcome (student_success, student_score), visited, relabelled, rejected,
checks, gate, gate_every, dagger_index, dagger_seed, dagger_config (resume digest).

The student's learning code never imports the teacher; this module does (lazily, inside
the functions that run a round), because relabelling is the teacher's job: it is a data
generator like `realsim teach`, and its output passes through the same wall (the
loader refuses privileged/).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from realsim.errors import UserError

DRIVER = "dagger"


@dataclass(frozen=True)
class DaggerConfig:
    """Everything that shapes a DAgger round's episodes (its digest guards resuming)."""

    seed: int = 0
    """Run seed: episode k uses `episode_seed(seed, k)`. Use another seed than the teach
    run's, else the student relabels the very scenes the teacher already solved."""
    gate: bool = True
    """Keep a state only if the teacher recovers from it; cut the episode at the first
    rejected state (see the module docstring). False: vanilla DAgger, every state kept."""
    gate_every: int = 5
    """Ticks between gate checks (1: every state). 5 ticks = 0.1 s at 50 Hz: a fifth of
    the checks' cost; the ticks before a rejection are re-checked one by one."""
    audit: bool = False
    """With the gate off: still run the checks and record their verdicts (nothing is cut),
    to count how many vanilla-DAgger labels lie on unrecoverable states."""
    action_noise: float = 0.0
    """Std of Gaussian noise added to the student's executed action (widens the visited
    states; 0: the student as it is, plus the world's own randomized actuator noise)."""
    params: dict[str, Any] | None = None
    """CarParams.to_dict() of the randomization's centre (None: datasheet), as teach."""
    residual: str | None = None
    """Residual checkpoint path: rollouts and gate checks in the hybrid simulator."""
    image_size: tuple[int, int] = (240, 320)
    """Camera (H, W): the real camera's, as teach renders it."""
    control_hz: float = 50.0
    """Control (and relabel) rate, as teach."""
    camera_fps: float = 20.0
    """Camera frame rate, as teach."""

    def digest(self, policy_sha1: str) -> str:
        """Short hash of everything but the seed, with the policy's bytes (resume check)."""
        d = {k: v for k, v in asdict(self).items() if k != "seed"}
        d["image_size"] = list(self.image_size)
        d["policy"] = policy_sha1
        return hashlib.sha1(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:16]


@dataclass
class DaggerEpisode:
    """One relabelled rollout as plain arrays (what `write_episode` writes)."""

    index: int
    seed: int
    command_t: np.ndarray  # (N,) s, the kept ticks
    label: np.ndarray  # (N, 2) teacher actions
    student_action: np.ndarray  # (N, 2) what the student sent
    sensors: dict[str, np.ndarray]  # (N + 1, ...) each, "t" and "t_device" included
    frames: list[tuple[float, bytes]]
    privileged_static: dict[str, np.ndarray]
    privileged_series: dict[str, np.ndarray]  # (N + 1, ...) on the sensor times
    gate_tick: np.ndarray  # (C,) int64
    gate_ok: np.ndarray  # (C,) bool
    visited: int
    student_success: int
    student_score: float

    @property
    def kept(self) -> int:
        """States written (relabelled and kept)."""
        return len(self.command_t)


@dataclass
class DaggerSummary:
    """Counts of one round (over all episodes run now)."""

    episodes: int = 0  # rollouts run now
    written: int = 0  # episodes written (with >= 1 kept state)
    visited: int = 0  # control ticks the student drove
    relabelled: int = 0  # states written with the teacher's label
    rejected: int = 0  # gate on: visited states dropped (first unrecoverable one and after)
    checks: int = 0  # teacher_recovers calls
    checks_rejected: int = 0  # of which said "not recoverable" (audit: would-reject count)
    student_successes: int = 0  # rollouts the student itself won
    seconds: float = 0.0
    per_episode: list[dict[str, Any]] = field(default_factory=list)

    def line(self, out: str | os.PathLike[str]) -> str:
        """The CLI's last line."""
        return (f"episodes={self.episodes} written={self.written} visited={self.visited} "
                f"relabelled={self.relabelled} rejected={self.rejected} checks={self.checks} "
                f"checks_rejected={self.checks_rejected} "
                f"student_success={self.student_successes}/{self.episodes} out={out}")


# ---------------------------------------------------------------------------------------
# the pieces
# ---------------------------------------------------------------------------------------
def relabel(priv: dict[str, Any]) -> np.ndarray:
    """The teacher's action at a state: a fresh `PurePursuitTeacher` planning from
    `priv` (= `CarTaskEnv.privileged()`). Shape: (2,) [steer, throttle] in [-1, 1]."""
    from teacher.pure_pursuit import PurePursuitTeacher

    return PurePursuitTeacher().act(priv)


def gate_cut(n: int, recovers: Callable[[int], bool], every: int,
             cut: bool = True) -> tuple[int, list[tuple[int, bool]]]:
    """Where the gate cuts an episode of `n` ticks, and the checks it ran.

    recovers(i): the verdict for tick i. Checked: ticks 0, every, 2 every, ... and n - 1.
    cut=True: at the first rejected check r, ticks since the previous accepted check are
    checked in order; returns (index of the first rejected tick, checks), or (n, checks)
    if none was rejected. cut=False (audit): every scheduled check runs, returns (n, checks).
    """
    if n <= 0:
        return 0, []
    every = max(1, int(every))
    ticks = list(range(0, n, every))
    if ticks[-1] != n - 1:
        ticks.append(n - 1)
    checks: list[tuple[int, bool]] = []
    prev_ok = -1
    for i in ticks:
        ok = bool(recovers(i))
        if not cut:
            checks.append((i, ok))
            continue
        if ok:
            checks.append((i, ok))
            prev_ok = i
            continue
        for j in range(prev_ok + 1, i):  # refine: the first rejected tick since prev_ok
            ok_j = bool(recovers(j))
            checks.append((j, ok_j))
            if not ok_j:
                return j, checks
        checks.append((i, False))
        return i, checks
    return n, checks


def make_env(cfg: DaggerConfig) -> Any:
    """The rendering environment: the one `realsim teach rc_car` builds (its adapter, with
    the default randomization), so rollouts see the teacher data's world."""
    from teacher.generate import TeachConfig, robot_teach

    return robot_teach("rc_car").make_env(TeachConfig(
        seed=cfg.seed, params=cfg.params, image_size=cfg.image_size, control_hz=cfg.control_hz,
        camera_fps=cfg.camera_fps, residual=cfg.residual, robot="rc_car"))


def rollout_episode(runner: Any, env: Any, cfg: DaggerConfig, index: int,
                    check_env: Any = None) -> DaggerEpisode:
    """Episode `index` of the round: the student drives, the teacher relabels, the gate
    (cfg.gate / cfg.audit) checks. runner: a `PolicyRunner`; env: `make_env(cfg)`;
    check_env: a camera-free env for the checks (`teacher.recoverability.gate_env`)."""
    from realsim.robots.rc_car import constants as C
    from realsim.robots.rc_car.scene import episode_seed
    from teacher.recoverability import teacher_recovers

    seed = episode_seed(cfg.seed, index)
    obs = env.reset(seed)
    runner.reset()
    noise = np.random.default_rng([seed, 0xDA66E])
    checking = cfg.gate or cfg.audit
    cmd_t: list[float] = []
    labels: list[np.ndarray] = []
    acts: list[np.ndarray] = []
    snaps: list[dict[str, Any]] = []
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
        labels.append(relabel(env.privileged()))
        if checking:
            snaps.append(env.get_state())
        a = np.asarray(runner.act(obs.telemetry, obs.frame_jpeg, t_host=float(obs.t)), np.float64)
        if cfg.action_noise > 0:
            a = a + cfg.action_noise * noise.standard_normal(2)
        a = np.clip(a, -1.0, 1.0)
        cmd_t.append(env.t)
        acts.append(a)
        obs = env.step(a)
        record(obs)
    student_success, student_score = env.verdict()
    n = len(cmd_t)
    checks: list[tuple[int, bool]] = []
    cut = n
    if checking:
        own = check_env is None
        if own:
            from teacher.recoverability import gate_env

            check_env = gate_env(cfg.control_hz, cfg.residual)
        try:
            cut, checks = gate_cut(n, lambda i: teacher_recovers(snaps[i], env=check_env),
                                   cfg.gate_every, cut=cfg.gate)
        finally:
            if own:
                check_env.close()
        if not cfg.gate:
            cut = n
    t_end = sens["t"][cut]  # the sensor sample after the last kept command
    flat = env.draw.flat()
    scene = env.scene
    dxy = scene.distractor_xy if scene.distractor_xy is not None else (np.nan, np.nan)
    sensors = {k: np.asarray(v[: cut + 1]) for k, v in sens.items()}
    sensors["t_device"] = sensors["t"].copy()  # the simulated device clock = sim time
    return DaggerEpisode(
        index=index,
        seed=seed,
        command_t=np.asarray(cmd_t[:cut], np.float64),
        label=np.asarray(labels[:cut], np.float32).reshape(-1, 2),
        student_action=np.asarray(acts[:cut], np.float32).reshape(-1, 2),
        sensors=sensors,
        frames=[f for f in frames if f[0] <= t_end + 1e-9],
        privileged_static={
            "cone_xy": np.asarray(scene.cone_xy, dtype=np.float64),
            "distractor_xy": np.asarray(dxy, dtype=np.float64),
            "randomization": np.array(list(flat.values()), dtype=np.float64),
            "randomization_names": np.array(list(flat.keys()), dtype="S"),
        },
        privileged_series={k: np.stack(v[: cut + 1]) for k, v in series.items()},
        gate_tick=np.array([c[0] for c in checks], np.int64),
        gate_ok=np.array([c[1] for c in checks], bool),
        visited=n,
        student_success=int(student_success),
        student_score=float(student_score),
    )


def write_episode(writer: Any, rec: DaggerEpisode, cfg: DaggerConfig, digest: str) -> None:
    """Append `rec` to an open LogWriter (source="sim") as one complete episode."""
    ep = writer.begin_episode(
        driver=DRIVER,
        seed=rec.seed,
        attrs={"dagger_index": rec.index, "dagger_seed": cfg.seed, "dagger_config": digest,
               "gate": int(cfg.gate), "gate_every": cfg.gate_every, "visited": rec.visited,
               "relabelled": rec.kept, "rejected": rec.visited - rec.kept if cfg.gate else 0,
               "student_success": rec.student_success, "student_score": rec.student_score},
    )
    ep.add_commands(rec.command_t, np.arange(rec.kept, dtype=np.int64), rec.label)
    s = dict(rec.sensors)
    t, td = s.pop("t"), s.pop("t_device")
    ep.add_sensor_block(t, td, **s)
    for ft, jpeg in rec.frames:
        ep.add_frame("front", ft, jpeg)
    for k, v in rec.privileged_static.items():
        ep.add_privileged(k, v)
    ep.add_privileged("gate_tick", rec.gate_tick)
    ep.add_privileged("gate_ok", rec.gate_ok.astype(np.int8))
    ep.add_privileged("student_action", rec.student_action, t=rec.command_t)
    for k, v in rec.privileged_series.items():
        ep.add_privileged(k, v, t=t)
    ep.close()  # success stays -1 (unknown): the loader keeps the episode


def _sha1(path: Path) -> str:
    return hashlib.sha1(path.read_bytes()).hexdigest()


def completed_indices(path: Path, cfg: DaggerConfig, digest: str) -> set[int]:
    """DAgger episode indices already complete in `path` (empty if no file); UserError if
    it holds DAgger episodes of another seed, policy or configuration."""
    if not path.exists() or path.stat().st_size == 0:
        return set()
    from realsim.logs import LogReader

    done: set[int] = set()
    with LogReader(path) as r:
        if r.robot != "rc_car":
            raise UserError(f"{path}: a log of {r.robot}, not rc_car")
        for name in r.episode_names:
            ep = r.episode(name)
            if ep.driver != DRIVER or "dagger_index" not in ep.attrs:
                continue
            if int(ep.attrs.get("dagger_seed", -1)) != cfg.seed or \
                    str(ep.attrs.get("dagger_config", "")) != digest:
                raise UserError(f"{path}: holds DAgger episodes of another --seed, policy or "
                                "configuration; use a new --out file")
            if ep.complete:
                done.add(int(ep.attrs["dagger_index"]))
    return done


# ---------------------------------------------------------------------------------------
# a round
# ---------------------------------------------------------------------------------------
def dagger_round(policy: str | os.PathLike[str], out: str | os.PathLike[str], episodes: int,
                 cfg: DaggerConfig | None = None,
                 log: Callable[[str], None] | None = None,
                 runner: Any = None) -> DaggerSummary:
    """Run episodes 0..episodes-1 of a DAgger round with the student `policy` and append
    the kept relabelled states to `out` (resuming: indices already complete are skipped).
    runner: drive with this object (`reset()`, `act(telemetry, jpeg, t_host)`) instead of
    the checkpoint's `PolicyRunner` (tests, scripted drivers); `policy` then only names it.
    Returns the round's counts (for the episodes run now)."""
    from realsim.logs import LogWriter
    from student.policy import PolicyRunner
    from teacher.recoverability import gate_env

    cfg = cfg or DaggerConfig()
    if episodes < 1:
        raise UserError("--episodes must be >= 1")
    if cfg.gate_every < 1:
        raise UserError("--gate-every must be >= 1")
    pol = Path(policy)
    if runner is None:
        runner = PolicyRunner.from_checkpoint(pol)  # UserError: missing / not a student ckpt
    path = Path(out)
    if not path.parent.exists():
        raise UserError(f"no such directory: {path.parent}")
    digest = cfg.digest(_sha1(pol) if pol.is_file() else str(policy))
    done = completed_indices(path, cfg, digest)
    todo = [k for k in range(episodes) if k not in done]
    summ = DaggerSummary()
    t0 = time.monotonic()
    env = make_env(cfg)
    check_env = gate_env(cfg.control_hz, cfg.residual) if (cfg.gate or cfg.audit) else None
    attrs = {"generator": "realsim dagger", "dagger_seed": cfg.seed, "dagger_config": digest,
             "policy": str(pol)}
    try:
        with LogWriter(path, robot="rc_car", source="sim", attrs=attrs) as writer:
            for k in todo:
                rec = rollout_episode(runner, env, cfg, k, check_env)
                rej = rec.visited - rec.kept if cfg.gate else 0
                n_bad = int((~rec.gate_ok).sum())
                summ.episodes += 1
                summ.visited += rec.visited
                summ.relabelled += rec.kept
                summ.rejected += rej
                summ.checks += len(rec.gate_ok)
                summ.checks_rejected += n_bad
                summ.student_successes += rec.student_success
                summ.per_episode.append({"index": k, "seed": rec.seed, "visited": rec.visited,
                                         "kept": rec.kept, "rejected": rej,
                                         "checks": len(rec.gate_ok), "checks_rejected": n_bad,
                                         "student_success": rec.student_success})
                if rec.kept > 0:
                    write_episode(writer, rec, cfg, digest)
                    summ.written += 1
                if log:
                    log(f"dagger {k + 1}/{episodes}: student {'won' if rec.student_success else 'lost'}"
                        f", {rec.visited} states, kept {rec.kept}, checks {len(rec.gate_ok)} "
                        f"({n_bad} rejected)")
    finally:
        env.close()
        if check_env is not None:
            check_env.close()
    summ.seconds = time.monotonic() - t0
    return summ


# ---------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------
def add_dagger_arguments(p: argparse.ArgumentParser) -> None:
    """`realsim dagger rc_car --policy CKPT --episodes N --out DAGGER.h5 [--gate/--no-gate]
    [--params PARAMS] [--seed S]` plus the project's options."""
    p.add_argument("robot", help="rc_car")
    p.add_argument("--policy", required=True, metavar="CKPT", help="student checkpoint that drives")
    p.add_argument("--episodes", type=int, required=True, help="student rollouts in this round")
    p.add_argument("--out", required=True, help="log file for the relabelled states (appended to, "
                   "resumable); train on it with `realsim train-student --data TEACH.h5 OUT ...`")
    p.add_argument("--gate", action=argparse.BooleanOptionalAction, default=True,
                   help="keep a state only if the teacher recovers from it; cut each episode at "
                   "its first rejected state (default: on)")
    p.add_argument("--gate-every", type=int, default=DaggerConfig.gate_every, metavar="K",
                   help="ticks between gate checks (default 5; 1: every state)")
    p.add_argument("--audit", action="store_true",
                   help="with --no-gate: still check and record the verdicts (nothing is cut)")
    p.add_argument("--action-noise", type=float, default=0.0,
                   help="std of noise on the student's executed actions (default 0)")
    p.add_argument("--params", help="fitted params.yaml: centre the randomization on it")
    p.add_argument("--residual", metavar="CKPT", help="residual dynamics checkpoint: hybrid sim")
    p.add_argument("--seed", type=int, default=0,
                   help="run seed; episode k uses (seed, k); use another than the teach run's")


def cmd_dagger(a: argparse.Namespace) -> int:
    """Run one DAgger round from parsed arguments; the last line printed holds the counts."""
    if a.robot != "rc_car":
        raise UserError(f"dagger {a.robot}: only rc_car has a teacher and a student yet")
    if a.episodes < 1:
        raise UserError("--episodes must be >= 1")
    if a.gate_every < 1:
        raise UserError("--gate-every must be >= 1")
    if a.action_noise < 0 or not math.isfinite(a.action_noise):
        raise UserError("--action-noise must be >= 0")
    if not Path(a.policy).is_file():
        raise UserError(f"no such file: {a.policy}")
    os.environ.setdefault("MUJOCO_GL", "egl")
    params = None
    if a.params is not None:
        if not Path(a.params).is_file():
            raise UserError(f"no such file: {a.params}")
        from realsim.robots.rc_car.params import CarParams

        params = CarParams.from_yaml(a.params).to_dict()
    residual = None
    if a.residual is not None:
        if not Path(a.residual).is_file():
            raise UserError(f"no such file: {a.residual}")
        from realsim.residual import load_residual

        load_residual(a.residual, "rc_car")
        residual = str(Path(a.residual).resolve())
    import torch

    torch.set_num_threads(1)  # one small CNN per tick; the simulator is the cost
    cfg = DaggerConfig(seed=int(a.seed), gate=bool(a.gate), gate_every=int(a.gate_every),
                       audit=bool(a.audit), action_noise=float(a.action_noise), params=params,
                       residual=residual)
    s = dagger_round(a.policy, a.out, a.episodes, cfg,
                     log=lambda m: print(m, file=sys.stderr, flush=True))
    print(s.line(a.out))
    return 0


"""Running a trained student on a robot: the `policy:CKPT` driver and `realsim deploy`.

`PolicySource(ckpt)` is an action source for `hardware.recorder.CarRecorder` and
`hardware.arm_recorder.ArmRecorder` (`name`, `begin(episode) -> seed`,
`act(obs) -> action (A,)`): it feeds the latest telemetry and camera JPEGs through
`student.policy.PolicyRunner`, so the robot sees exactly training's preprocessing and
the checkpoint's execution strategy. `cmd_deploy(args)` records N episodes with it
(the car through `CarRecorder`, the arm through `hardware.arm_recorder.record_arm`) and
prints the success rate from the world's JDG verdicts (emulator or lab judge) as its
last line.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

from realsim.errors import UserError


class PolicySource:
    """`record --driver policy:CKPT`: a student checkpoint as an action source.

    act(obs): obs is a `hardware.recorder.Observation` (t, telemetry: Telemetry | None,
    frame: (t_host, jpeg) | None) or a `hardware.arm_recorder.ArmObservation` (t, state:
    ArmState | None, frames: {name: (t_host, jpeg) | None}). Returns Shape: (A,) in
    [-1, 1] (the car's [steer, throttle], the arm's six normalised joint goals); the
    robot's idle action until every camera the policy uses has delivered a frame.
    """

    def __init__(self, checkpoint: str | Path, threads: int = 1, execution: str | None = None,
                 dither: float | None = None, seed: int = 0) -> None:
        import torch  # here, not at module level: `realsim --help` must not pay for torch

        from student.execution import parse_execution
        from student.policy import PolicyRunner, load_checkpoint

        if threads > 0:
            torch.set_num_threads(threads)  # leave the other cores to the wire and camera threads
        self.checkpoint = Path(checkpoint)
        model, cfg, _ = load_checkpoint(self.checkpoint)
        # the checkpoint's own strategy unless the user names another
        ex = parse_execution(execution, cfg.chunk_len) if execution else None
        self.runner = PolicyRunner(model, cfg, ex)
        self.robot = self.runner.cfg.robot
        self.name = f"policy:{checkpoint}"
        # Gaussian noise on every action sent (normalised units; None: the checkpoint's
        # deploy_dither), as the closed-loop evaluation that selected it adds noise: the
        # runner keeps its clean actions, as in sim. Why: StudentConfig.deploy_dither.
        dither = self.runner.cfg.deploy_dither if dither is None else dither
        if not (math.isfinite(dither) and dither >= 0):
            raise UserError(f"deploy: dither must be a number >= 0, not {dither}")
        self.dither = float(dither)
        self.seed = seed
        self._rng = np.random.default_rng([seed, 0])
        self._warm_up()

    def _warm_up(self) -> None:
        """One throw-away query, so the first real tick is not slow."""
        import torch

        cfg = self.runner.cfg
        img = torch.zeros(1, 3 * len(cfg.cameras), cfg.image_height, cfg.image_width)
        tel = torch.zeros(1, cfg.history + 1, self.runner.model.tel_mean.shape[0])
        with torch.inference_mode():
            self.runner.model(img, tel, torch.zeros(1, cfg.history, cfg.action_dim))

    def begin(self, episode: int) -> int:
        self.runner.reset()
        self._rng = np.random.default_rng([self.seed, episode])
        return -1

    def act(self, obs: Any) -> np.ndarray:
        tlm = obs.telemetry
        frames = getattr(obs, "frames", None)
        if not isinstance(frames, dict):
            frames = {self.runner.cfg.cameras[0]: obs.frame}
        t_host = float(getattr(tlm, "t_host", math.nan)) if tlm is not None else math.nan
        a = self.runner.act(tlm, frames, t_host=t_host)
        if self.dither > 0:
            a = np.clip(a + self.dither * self._rng.standard_normal(a.shape), -1.0, 1.0)
        return a

    def close(self) -> None:
        pass


def add_deploy_arguments(p: argparse.ArgumentParser) -> None:
    """`realsim deploy ROBOT --policy CKPT --port PORT --camera SRC [--control PORT] --episodes N --out FILE.h5`."""
    p.add_argument("robot", help="rc_car or arm")
    p.add_argument("--policy", required=True, help="student checkpoint (realsim train-student --out)")
    p.add_argument("--port", required=True, help="serial port of the robot (or emulator)")
    p.add_argument("--camera", required=True, help="camera source(s) (URL, device index or file); "
                   "the arm's as front=SRC,wrist=SRC")
    p.add_argument("--control", help="control port for EPS/EPE/JDG (arm; unused for rc_car)")
    p.add_argument("--episodes", type=int, required=True)
    p.add_argument("--out", required=True, help="log file (HDF5), appended to")
    p.add_argument("--seconds", type=float, default=None,
                   help="episode length, s (default: the task's window: car 10, arm 20)")
    p.add_argument("--rate", type=float, default=None,
                   help="control rate, Hz (default: the rate the policy was trained at: car 50, arm 25)")
    p.add_argument("--execution", default=None, metavar="STRATEGY",
                   help="how predicted chunks are executed, instead of the checkpoint's own: "
                        "single_step, chunk_open_loop, receding_horizon:N, temporal_ensemble[:M]")
    p.add_argument("--dither", default=None, metavar="SIGMA",
                   help="Gaussian noise added to every action sent (normalised units), or 'eval' "
                        "for the checkpoint's eval_action_noise, the noise its selection was "
                        "measured under (default: the checkpoint's deploy_dither; the arm's 0.01)")


def judged_success(path: str | Path, names: list[str]) -> tuple[int, int]:
    """(successes, judged episodes) among `names` of the log, from their JDG verdicts."""
    from realsim.logs import LogReader

    wins = judged = 0
    with LogReader(path) as r:
        for n in names:
            j = r.episode(n).judge
            if j is not None and "success" in j:
                judged += 1
                wins += int(j["success"])
    return wins, judged


def deploy(policy: str | Path, port: str, camera: str, episodes: int, out: str | Path, *,
           robot: str = "rc_car", seconds: float | None = None, rate: float | None = None,
           control: str | None = None, execution: str | None = None,
           dither: float | None = None) -> tuple[list[str], int, int]:
    """Record `episodes` episodes of the policy on the robot at `port`/`camera` (and the
    arm's `control` port) into `out`. seconds, rate: None for the robot's task window and
    the policy's control rate. execution: a `student.execution.parse_execution` spec
    that replaces the checkpoint's strategy (None: its own). dither: `PolicySource`'s.

    Returns (episode names, successes, judged episodes) from the JDG verdicts.
    """
    from student.robots import robot_spec

    spec = robot_spec(robot)
    seconds = spec.seconds if seconds is None else seconds
    rate = spec.control_hz if rate is None else rate
    source = PolicySource(policy, execution=execution, dither=dither)
    if source.robot != robot:
        raise UserError(f"{policy}: a policy for {source.robot}, not {robot}")
    if robot == "arm":
        from hardware.arm_recorder import record_arm

        names = record_arm(port, camera, control, episodes, seconds, source, out, rate_hz=rate)
        return (names, *judged_success(out, names))
    from hardware.camera import CameraReader, parse_camera_spec
    from hardware.rc_car import RcCarDriver
    from hardware.recorder import CarRecorder
    from realsim.logs import LogReader, LogWriter

    out = Path(out)
    if out.exists():
        with LogReader(out) as r:
            if r.robot != robot:
                raise UserError(f"{out}: a log of {r.robot}, not {robot}")
    cams = parse_camera_spec(camera)
    readers = {name: CameraReader(src, name=name) for name, src in cams.items()}
    for cam in readers.values():
        cam.open_check(timeout=3.0)
    try:
        with RcCarDriver(port) as car:
            for cam in readers.values():
                cam.start()
            attrs = {"host": os.uname().nodename, "port": port, "camera": camera,
                     "policy": str(policy)}
            with LogWriter(out, robot=robot, source="real", attrs=attrs) as writer:
                rec = CarRecorder(car, readers, writer, rate_hz=rate)
                names = rec.run(source, episodes=episodes, seconds=seconds)
    finally:
        for cam in readers.values():
            cam.stop()
    wins, judged = judged_success(out, names)
    return names, wins, judged


def _dither(value: str | None, policy: str | Path) -> float | None:
    """`--dither`: a number >= 0, 'eval' for the checkpoint's eval_action_noise, None for
    its deploy_dither."""
    if value is None:
        return None
    if value == "eval":
        from student.policy import load_checkpoint

        return float(load_checkpoint(Path(policy))[1].eval_action_noise)
    try:
        sigma = float(value)
    except ValueError:
        raise UserError(f"deploy: --dither must be a number >= 0 or 'eval', not {value!r}") from None
    if not (math.isfinite(sigma) and sigma >= 0):
        raise UserError(f"deploy: --dither must be a number >= 0 or 'eval', not {value!r}")
    return sigma


def cmd_deploy(a: argparse.Namespace) -> int:
    """Run the policy for N episodes on the robot, record them, print the JDG success rate last."""
    from student.robots import robot_spec

    robot_spec(a.robot)  # UserError: a robot the student does not drive
    if a.episodes < 1 or (a.seconds is not None and a.seconds <= 0) or \
            (a.rate is not None and a.rate <= 0):
        raise UserError("deploy: --episodes, --seconds and --rate must be positive")
    if not Path(a.policy).is_file():
        raise UserError(f"no such file: {a.policy}")
    dither = _dither(getattr(a, "dither", None), a.policy)
    names, wins, judged = deploy(a.policy, a.port, a.camera, a.episodes, a.out, robot=a.robot,
                                 seconds=a.seconds, rate=a.rate, control=getattr(a, "control", None),
                                 execution=getattr(a, "execution", None), dither=dither)
    print(f"recorded {len(names)} episodes into {a.out}", file=sys.stderr)
    rate = f"{wins / judged:.3f}" if judged else "unknown"
    print(f"episodes={len(names)} judged={judged} success={rate}")
    return 0

"""Running a trained student on a robot: the `policy:CKPT` driver and `realsim deploy`.

`PolicySource(ckpt)` is an action source for `hardware.recorder.CarRecorder`
(`name`, `begin(episode) -> seed`, `act(obs) -> action (2,)`): it feeds the
latest telemetry and camera JPEG through `student.policy.PolicyRunner`, so the
car sees exactly training's preprocessing and the checkpoint's execution
strategy. `cmd_deploy(args)` records N episodes with it and prints the success
rate from the world's JDG verdicts (emulator or lab judge) as its last line.
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
    frame: (t_host, jpeg) | None). Returns Shape: (2,) [steer, throttle] in [-1, 1];
    [0, 0] until the camera has delivered a first frame.
    """

    def __init__(self, checkpoint: str | Path, threads: int = 1) -> None:
        import torch  # here, not at module level: `realsim --help` must not pay for torch

        from student.policy import PolicyRunner

        if threads > 0:
            torch.set_num_threads(threads)  # leave the other cores to the wire and camera threads
        self.checkpoint = Path(checkpoint)
        self.runner = PolicyRunner.from_checkpoint(self.checkpoint)
        self.name = f"policy:{checkpoint}"
        self._warm_up()

    def _warm_up(self) -> None:
        """One throw-away query, so the first real tick is not slow."""
        import torch

        cfg = self.runner.cfg
        img = torch.zeros(1, 3, cfg.image_height, cfg.image_width)
        tel = torch.zeros(1, cfg.history + 1, len(cfg.telemetry_fields))
        with torch.inference_mode():
            self.runner.model(img, tel, torch.zeros(1, cfg.history, 2))

    def begin(self, episode: int) -> int:
        self.runner.reset()
        return -1

    def act(self, obs: Any) -> np.ndarray:
        tlm = obs.telemetry
        jpeg = obs.frame[1] if obs.frame is not None else None
        t_host = float(getattr(tlm, "t_host", math.nan)) if tlm is not None else math.nan
        return self.runner.act(tlm, jpeg, t_host=t_host)

    def close(self) -> None:
        pass


def add_deploy_arguments(p: argparse.ArgumentParser) -> None:
    """`realsim deploy ROBOT --policy CKPT --port PORT --camera SRC [--control PORT] --episodes N --out FILE.h5`."""
    p.add_argument("robot", help="rc_car")
    p.add_argument("--policy", required=True, help="student checkpoint (realsim train-student --out)")
    p.add_argument("--port", required=True, help="serial port of the robot (or emulator)")
    p.add_argument("--camera", required=True, help="camera source (URL, device index or file)")
    p.add_argument("--control", help="control port (arm; unused for rc_car)")
    p.add_argument("--episodes", type=int, required=True)
    p.add_argument("--out", required=True, help="log file (HDF5), appended to")
    p.add_argument("--seconds", type=float, default=10.0, help="episode length, s (the task's 10 s)")
    p.add_argument("--rate", type=float, default=50.0, help="control rate, Hz")


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
           robot: str = "rc_car", seconds: float = 10.0, rate: float = 50.0) -> tuple[list[str], int, int]:
    """Record `episodes` episodes of the policy on the robot at `port`/`camera` into `out`.

    Returns (episode names, successes, judged episodes) from the JDG verdicts.
    """
    from hardware.camera import CameraReader, parse_camera_spec
    from hardware.rc_car import RcCarDriver
    from hardware.recorder import CarRecorder
    from realsim.logs import LogReader, LogWriter

    source = PolicySource(policy)
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


def cmd_deploy(a: argparse.Namespace) -> int:
    """Run the policy for N episodes on the robot, record them, print the JDG success rate last."""
    if a.robot != "rc_car":
        raise UserError(f"deploy {a.robot}: the student drives rc_car only (the arm is issue 7)")
    if a.episodes < 1 or a.seconds <= 0 or a.rate <= 0:
        raise UserError("deploy: --episodes, --seconds and --rate must be positive")
    if not Path(a.policy).is_file():
        raise UserError(f"no such file: {a.policy}")
    names, wins, judged = deploy(a.policy, a.port, a.camera, a.episodes, a.out, robot=a.robot,
                                 seconds=a.seconds, rate=a.rate)
    print(f"recorded {len(names)} episodes into {a.out}", file=sys.stderr)
    rate = f"{wins / judged:.3f}" if judged else "unknown"
    print(f"episodes={len(names)} judged={judged} success={rate}")
    return 0

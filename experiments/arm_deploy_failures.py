"""Why did deployed arm episodes fail? Read it from what the robot recorded, nothing more.

    python experiments/arm_deploy_failures.py LOG.h5 [LOG.h5 ...] [--tail 1.0]

`experiments/arm_student_failures.py` diagnoses the student in the simulator from its
privileged state. A real (or emulated) arm has none: this reads only the robot-legal
streams of a `realsim deploy arm` log (the gripper's measured opening, the gripper goal
sent, the arm joints' speeds) and the judge's verdict and score, so it works on any robot
that speaks the protocol, including emulators this project did not write.

Each judged failure is put in one class by the jaws over the last --tail seconds:
- held: the jaws are commanded shut and stopped by something about the cube's width
  (0.5..1.5 x CUBE_SIZE): the cube was carried and never let go. `over` counts those whose
  score (cube centre to square centre) lies within the square's half-width: carried to the
  square, then not released.
- empty: commanded shut and closed past half the cube's width: a missed or lost grasp.
- open: the jaws are open: released (or never closed) with the cube not at rest in the square.
`still` is how long the arm's five joints had stayed within 0.05 rad of where they end
(positions, not the noisy speeds): a held cube over the square with a long still time is a
policy stuck at a fixed point. `z` is the grasp point's height above the table at the end,
by the project's nominal kinematics (`teacher.arm_ik.ArmIK`) of the logged joints: a held
cube at the teacher's place hover (~8-10 cm) never started down; one near 3 cm did.

Prints one line per failed episode, then per log
`log=<path> episodes=<n> success=<rate> held=<n> (over the square <n>) empty=<n> open=<n>
unjudged=<n>`. A missing, corrupt or foreign log is a one-line error with status 2.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from realsim.errors import UserError
from realsim.logs import LogReader
from realsim.robots.arm import constants as C

STILL_RAD = 0.05  # rad: arm joints this close to their final position count as still


def classify(qpos: np.ndarray, t: np.ndarray, grip_goal: np.ndarray, tail_s: float) -> tuple[str, float]:
    """The failure class of one episode and the arm's still time at its end (s).

    Shape: qpos (M, 6) (the gripper's opening in m last); t (M,) s; grip_goal (N,)
    the gripper goals sent (m), the last ones at the episode's end.
    """
    last = t >= t[-1] - tail_s
    opening = float(np.median(qpos[last, 5]))
    shut = float(np.median(grip_goal[-max(1, int(last.sum())):])) < 0.5 * C.GRIPPER_MAX
    if not shut or opening > 1.5 * C.CUBE_SIZE:
        kind = "open"
    elif opening >= 0.5 * C.CUBE_SIZE:
        kind = "held"
    else:
        kind = "empty"
    moving = np.nonzero(np.abs(qpos[:, :5] - qpos[-1, :5]).max(axis=1) >= STILL_RAD)[0]
    still = float(t[-1] - t[moving[-1]]) if len(moving) else float(t[-1] - t[0])
    return kind, still


def grasp_height(ik, q: np.ndarray) -> float:  # noqa: ANN001
    """Height of the grasp point above the table at joints q (6,) (m), nominal kinematics."""
    from teacher.arm_ik import GRASP_POINT

    x, R = ik.fk(q[:5])
    return float((x + R @ GRASP_POINT)[2])  # the table top is z = 0


def summarize(path: str, tail_s: float, out=sys.stdout) -> dict[str, int]:  # noqa: ANN001
    """Classify every complete episode of one arm log; print and return the counts."""
    from teacher.arm_ik import ArmIK

    ik = ArmIK()
    counts = {"episodes": 0, "success": 0, "held": 0, "over": 0, "empty": 0, "open": 0, "unjudged": 0}
    with LogReader(path) as r:
        if r.robot != "arm":
            raise UserError(f"{path}: a log of {r.robot}, not of the arm")
        for name in r.episode_names:
            ep = r.episode(name, privileged=False)
            if not ep.complete or "qpos" not in ep.sensors or len(ep.sensors) < 2 \
                    or len(ep.command) < 1:
                continue
            counts["episodes"] += 1
            if ep.success == 1:
                counts["success"] += 1
                continue
            if ep.success != 0:
                counts["unjudged"] += 1
                continue
            goal = (ep.command["action"][:, 5] + 1.0) * 0.5 * C.GRIPPER_MAX
            kind, still = classify(ep.sensors["qpos"], ep.sensors.t, goal, tail_s)
            counts[kind] += 1
            over = kind == "held" and ep.score <= C.TARGET_SIZE / 2
            counts["over"] += int(over)
            print(f"{name} {kind}{' over the square' if over else ''} score={ep.score:.3f} "
                  f"opening={np.median(ep.sensors['qpos'][-5:, 5]) * 100:.1f} cm still={still:.1f} s "
                  f"z={grasp_height(ik, ep.sensors['qpos'][-1]) * 100:.1f} cm",
                  file=out)
    n = counts["episodes"]
    print(f"log={path} episodes={n} success={counts['success'] / max(n, 1):.3f} held={counts['held']} "
          f"(over the square {counts['over']}) empty={counts['empty']} open={counts['open']} "
          f"unjudged={counts['unjudged']}", file=out)
    return counts


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("logs", nargs="+")
    p.add_argument("--tail", type=float, default=1.0, help="seconds at the end that decide the class")
    a = p.parse_args(argv)
    if a.tail <= 0:
        print("error: --tail must be > 0", file=sys.stderr)
        return 2
    try:
        for path in a.logs:
            summarize(path, a.tail)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The emulated arm's reality: six servos with their own controllers, and a cube on a table.

Deliberately not the project's MuJoCo model: each joint is one servo driving a
lumped inertia through a gearbox, in plain numpy at 2 ms steps:

- the servo's own position controller: PWM duty ``u = clip(kp (goal - q) - kd qd, -1, 1)``
  (``kp`` from the P_Coefficient register, 32 -> full duty at ``p_full_err`` rad),
  with a deadband of a count or two, acting one command latency after the
  SYNC_WRITE that set the goal;
- a DC motor behind it: ``tau = tau_stall (V / 7.4) (u - qd / w_noload)``, so torque
  is limited at stall and speed at no load, and the supply sags under current;
- Coulomb (stick-slip) and viscous friction, a reflected rotor inertia (armature),
  and the gearbox's resistance to back-driving while the torque is off;
- gravity torque of a planar link model (upper arm, forearm, wrist + gripper,
  each servo a point mass) on shoulder_lift, elbow_flex and wrist_flex;
- gear backlash: the output shaft (where the encoder sits) lags the gear train
  inside a play of ``backlash`` rad, falling to the side gravity pulls;
- temperature rising with the square of the duty, cooling to ambient.

The task objects are kinematic: the cube rests on the table until the jaws
close on it (a rule: it lies between the fingertips when the opening passes
the cube's width), then follows the grasp point; opening the jaws drops it
where it is. `TaskJudge` gives the JDG verdict of spec/arm.md.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from hardware.emulators.arm.bus import BusFaults
from realsim.errors import UserError

DT = 0.002
"""Physics step, s (the stiffest joint's closed loop has w dt < 0.3; damping is implicit)."""
OBJECT_EVERY = 5
"""The task objects and the judge update every this many steps."""
G = 9.81
RAD_PER_COUNT = 2.0 * math.pi / 4096
GRIPPER_M_PER_COUNT = 0.07 / 952.0
"""Gripper opening per count, m (2048..3000 counts = 0..0.07 m)."""
SHOULDER_Z = 0.095
UPPER_ARM = 0.116
FOREARM = 0.135
WRIST = 0.060
FINGERS = 0.095
GRASP_DEPTH = 0.075
"""Distance from the wrist_roll axis to the point between the jaws where a grasp holds the cube, m."""
CUBE = 0.03
SQUARE = 0.08
LIMITS_LO = np.array([-1.9, -1.7, -1.6, -1.7, -2.7, 0.0])
LIMITS_HI = np.array([1.9, 1.7, 1.6, 1.7, 2.7, 0.07])
HOME = np.array([0.0, 0.0, 1.2, 1.4, 0.0, 0.0])
EPISODE_S = 20.0
REST_S = 0.3


@dataclass
class RealityParams:
    """The true parameters of one emulated arm (never served to the host side).

    Per-joint lists have six entries, in servo-id order. Units: torques N m,
    speeds rad/s, inertia kg m^2, angles rad, masses kg, times s, volts V.
    Faults (``fault_*``) are off unless a reality file turns them on.
    """

    stall_torque: list[float] = field(default_factory=lambda: [1.5] * 6)
    noload_speed: list[float] = field(default_factory=lambda: [5.0] * 6)
    armature: list[float] = field(default_factory=lambda: [0.008, 0.01, 0.008, 0.004, 0.003, 0.002])
    coulomb: list[float] = field(default_factory=lambda: [0.05] * 6)
    viscous: list[float] = field(default_factory=lambda: [0.02] * 6)
    backlash: list[float] = field(default_factory=lambda: [0.005] * 6)
    backdrive_friction: float = 0.4
    p_full_err: float = 0.12
    kd: float = 0.04
    deadband_counts: int = 1
    upper_arm_mass: float = 0.11
    forearm_mass: float = 0.11
    servo_mass: float = 0.055
    gripper_mass: float = 0.08
    supply_v: float = 7.4
    supply_r: float = 0.2
    stall_current: float = 2.5
    latency: float = 0.004
    ambient_c: float = 26.0
    heat_rate: float = 0.05
    cool_tau: float = 300.0
    cam_latency: float = 0.05
    fault_drop_servo: int = 0
    fault_drop_after_s: float = 0.0
    fault_checksum_every: int = 0
    fault_corrupt_every: int = 0
    fault_garbage_every: int = 0

    @classmethod
    def sample(cls, seed: int) -> RealityParams:
        """Draw a reality within the datasheet's uncertain ranges."""
        r = np.random.default_rng([seed, 1])

        def six(lo: float, hi: float) -> list[float]:
            return [round(float(v), 5) for v in r.uniform(lo, hi, 6)]

        return cls(
            stall_torque=six(1.2, 1.9),
            noload_speed=six(4.0, 6.0),
            armature=[round(float(a * r.uniform(0.6, 1.5)), 5)
                      for a in (0.008, 0.01, 0.008, 0.004, 0.003, 0.002)],
            coulomb=six(0.02, 0.09),
            viscous=six(0.005, 0.04),
            backlash=six(0.002, 0.012),
            backdrive_friction=float(r.uniform(0.3, 0.6)),
            p_full_err=float(r.uniform(0.09, 0.16)),
            kd=float(r.uniform(0.02, 0.06)),
            upper_arm_mass=float(r.uniform(0.08, 0.14)),
            forearm_mass=float(r.uniform(0.08, 0.14)),
            gripper_mass=float(r.uniform(0.06, 0.1)),
            supply_v=float(r.uniform(7.2, 7.6)),
            supply_r=float(r.uniform(0.1, 0.3)),
            latency=float(r.uniform(0.002, 0.010)),
            ambient_c=float(r.uniform(22.0, 30.0)),
            cam_latency=float(r.uniform(0.03, 0.08)),
        )

    @classmethod
    def from_yaml(cls, path: str | Path | None, seed: int) -> RealityParams:
        """`sample` (seed), then the fields a YAML file names; `UserError` for a bad file."""
        p = cls.sample(seed)
        if path is None:
            return p
        import yaml

        try:
            data = yaml.safe_load(Path(path).read_text()) or {}
        except (OSError, yaml.YAMLError) as e:
            raise UserError(f"cannot read reality file {path}: {str(e).splitlines()[0]}") from None
        if not isinstance(data, dict):
            raise UserError(f"{path}: expected a mapping of RealityParams fields")
        names = {f.name: f for f in dataclasses.fields(cls)}
        for k, v in data.items():
            if k not in names:
                raise UserError(f"{path}: unknown reality field {k!r}")
            cur = getattr(p, k)
            try:
                if isinstance(cur, list):
                    vals = [float(x) for x in (v if isinstance(v, list) else [v] * 6)]
                    if len(vals) != 6:
                        raise ValueError("needs 6 values")
                    v = vals
                else:
                    v = type(cur)(v)
            except (TypeError, ValueError) as e:
                raise UserError(f"{path}: field {k}: {e}") from None
            setattr(p, k, v)
        return p

    @property
    def faults(self) -> BusFaults:
        """The bus faults to inject."""
        return BusFaults(self.fault_drop_servo, self.fault_drop_after_s, self.fault_checksum_every,
                         self.fault_corrupt_every, self.fault_garbage_every)


# ---------------------------------------------------------------- kinematics


def _rz(a: float) -> np.ndarray:
    c, s = math.cos(a), math.sin(a)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


def _ry(a: float) -> np.ndarray:
    c, s = math.cos(a), math.sin(a)
    return np.array([[c, 0.0, s], [0.0, 1.0, 0.0], [-s, 0.0, c]])


def forward_kinematics(q: np.ndarray) -> dict[str, Any]:
    """World points of the arm at joint positions ``q`` (rad, gripper m).

    Returns base, shoulder, elbow, wrist (wrist_flex axis), roll (wrist_roll
    joint), grasp (between the jaws), tips (2, 3) fingertips, R_tool (3, 3)
    tool frame: z along the fingers, y the jaws' opening direction.
    """
    pan = _rz(q[0])
    shoulder = np.array([0.0, 0.0, SHOULDER_Z])
    r2 = pan @ _ry(q[1])
    elbow = shoulder + r2 @ np.array([0.0, 0.0, UPPER_ARM])
    r3 = pan @ _ry(q[1] + q[2])
    wrist = elbow + r3 @ np.array([0.0, 0.0, FOREARM])
    r4 = pan @ _ry(q[1] + q[2] + q[3])
    roll = wrist + r4 @ np.array([0.0, 0.0, WRIST])
    tool = r4 @ _rz(q[4])
    grasp = roll + tool @ np.array([0.0, 0.0, GRASP_DEPTH])
    half = 0.5 * max(float(q[5]), 0.0) + 0.004
    tips = np.stack([roll + tool @ np.array([0.0, s * half, FINGERS]) for s in (-1.0, 1.0)])
    return {"base": np.zeros(3), "shoulder": shoulder, "elbow": elbow, "wrist": wrist,
            "roll": roll, "grasp": grasp, "tips": tips, "R_tool": tool}


def gravity_torque(q: np.ndarray, p: RealityParams) -> np.ndarray:
    """Gravity torque on each joint, N m (positive tilts forward). Shape: (6,)."""
    a2, a3, a4 = q[1], q[1] + q[2], q[1] + q[2] + q[3]
    # forward offsets in the arm's plane
    x_el = UPPER_ARM * math.sin(a2)
    x_wr = x_el + FOREARM * math.sin(a3)
    x_tool = x_wr + (WRIST + 0.05) * math.sin(a4)
    masses = [  # (mass, forward offset of its centre)
        (p.upper_arm_mass, 0.5 * x_el, 1),
        (p.servo_mass, x_el, 1),
        (p.forearm_mass, x_el + 0.5 * FOREARM * math.sin(a3), 2),
        (p.servo_mass * 2, x_wr, 2),
        (p.gripper_mass + p.servo_mass, x_tool, 3),
    ]
    joint_x = (0.0, 0.0, x_el, x_wr)
    tau = np.zeros(6)
    for j in (1, 2, 3):
        tau[j] = G * sum(m * (x - joint_x[j]) for m, x, first in masses if first >= j)
    return tau


def link_inertia(q: np.ndarray, p: RealityParams) -> np.ndarray:
    """Rough inertia of what each joint moves, kg m^2 (point masses). Shape: (6,)."""
    pts = forward_kinematics(q)
    sh, el, wr, tool = pts["shoulder"], pts["elbow"], pts["wrist"], pts["grasp"]
    bodies = [(p.upper_arm_mass, 0.5 * (sh + el), 1), (p.servo_mass, el, 1),
              (p.forearm_mass, 0.5 * (el + wr), 2), (2 * p.servo_mass, wr, 2),
              (p.gripper_mass + p.servo_mass, tool, 3)]
    axes = {1: sh, 2: el, 3: wr}
    inertia = np.zeros(6)
    inertia[0] = sum(m * (b[0] ** 2 + b[1] ** 2) for m, b, _ in bodies)
    for j in (1, 2, 3):
        inertia[j] = sum(m * float(np.sum((b - axes[j]) ** 2)) for m, b, first in bodies if first >= j)
    inertia[4] = 2e-5
    return inertia


# ---------------------------------------------------------------- the servos


def joint_to_motor(q: np.ndarray) -> np.ndarray:
    """Joint SI (rad, gripper m) -> servo output angle, rad (the gripper's servo turns too)."""
    m = np.array(q, dtype=np.float64)
    m[5] = q[5] / GRIPPER_M_PER_COUNT * RAD_PER_COUNT
    return m


def motor_to_joint(m: np.ndarray) -> np.ndarray:
    """Servo output angle, rad -> joint SI (rad, gripper m)."""
    q = np.array(m, dtype=np.float64)
    q[5] = m[5] / RAD_PER_COUNT * GRIPPER_M_PER_COUNT
    return q


class ArmReality:
    """Six servos and the task objects, stepped at `DT`.

    State in servo-output radians (`m`: gear train, `q`: output shaft after the
    backlash, where the encoder reads); goals in counts as the bus wrote them.
    """

    def __init__(self, params: RealityParams, seed: int = 0) -> None:
        self.p = params
        self.rng = np.random.default_rng([seed, 2])
        self.t = 0.0
        self.m = joint_to_motor(HOME)
        self.q = self.m.copy()
        self.qd = np.zeros(6)
        self.u = np.zeros(6)
        self.torque_on = np.zeros(6, dtype=bool)
        self.goal_counts = np.round(2048 + self.m / RAD_PER_COUNT).astype(np.int64)
        self.p_coef = np.full(6, 32.0)
        self.pending: list[tuple[float, int, int]] = []  # (t_apply, joint, counts)
        self.active_goal = self.goal_counts.copy()
        self.temp = np.full(6, params.ambient_c + 4.0) + self.rng.uniform(0, 2, 6)
        self.voltage = params.supply_v
        self.stall = np.array(params.stall_torque)
        self.w_nl = np.array(params.noload_speed)
        self.arm = np.array(params.armature)
        self.fc = np.array(params.coulomb)
        self.fv = np.array(params.viscous)
        self.bl = np.array(params.backlash)
        self.motor_lo = joint_to_motor(LIMITS_LO) - 0.05
        self.motor_hi = joint_to_motor(LIMITS_HI) + 0.05
        self.motor_lo[5] = 0.0
        self.objects = TaskObjects()
        self.judge: TaskJudge | None = None
        self._steps = 0
        self._inertia = self.arm + link_inertia(HOME, params)

    # -- bus side -------------------------------------------------------------------------------

    def set_goal(self, joint: int, counts: int) -> None:
        """Goal_Position written at `t`; it acts one latency later."""
        self.pending.append((self.t + self.p.latency, joint, int(counts)))

    def set_torque(self, joint: int, on: bool) -> None:
        """Torque_Enable."""
        self.torque_on[joint] = bool(on)

    def present(self, joint: int) -> tuple[int, int, int, int, int]:
        """(position counts, speed counts/s, load per-mille signed, voltage 0.1 V, temp C)."""
        pos = int(round(2048 + self.q[joint] / RAD_PER_COUNT))
        spd = int(round(self.qd[joint] / RAD_PER_COUNT))
        load = int(round(1000 * self.u[joint]))
        return pos, spd, load, int(round(self.voltage * 10)), int(round(self.temp[joint]))

    # -- physics --------------------------------------------------------------------------------

    def step(self, dt: float = DT) -> None:
        """Advance one step of ``dt`` s."""
        p = self.p
        self.t += dt
        if self.pending and self.pending[0][0] <= self.t:
            keep = []
            for item in self.pending:
                if item[0] <= self.t:
                    self.active_goal[item[1]] = item[2]
                else:
                    keep.append(item)
            self.pending = keep
        goal = (self.active_goal - 2048) * RAD_PER_COUNT
        err = goal - self.q
        err = np.where(np.abs(err) <= p.deadband_counts * RAD_PER_COUNT, 0.0, err)
        kp = self.p_coef / 32.0 / p.p_full_err
        u = np.clip(kp * err - p.kd * self.qd, -1.0, 1.0) * self.torque_on
        self.u = u
        vscale = self.voltage / 7.4
        qj = motor_to_joint(self.q)
        tau_g = gravity_torque(qj, p)
        self._steps += 1
        if self._steps % 10 == 1:  # the configuration-dependent inertia changes slowly
            self._inertia = self.arm + link_inertia(qj, p)
        inertia = self._inertia
        # motor torque split: the drive (explicit) and its back-EMF damping (implicit, when on)
        tau_drive = self.stall * vscale * u
        damp = np.where(self.torque_on, self.stall / self.w_nl, 0.0) + self.fv
        v = self.qd + dt * (tau_drive + tau_g) / inertia
        v = v / (1.0 + dt * damp / inertia)
        # Coulomb friction: stick when its impulse would reverse the motion
        fc = np.where(self.torque_on, self.fc, self.fc + p.backdrive_friction)  # gearbox unpowered
        imp = fc * dt / inertia
        stick = np.abs(v) <= imp
        v = np.where(stick, 0.0, v - np.sign(v) * imp)
        self.qd = v
        self.m = self.m + v * dt
        # hard stops (joint ends, gripper closed or on the cube)
        lo = self.motor_lo.copy()
        if self.objects.grasped:
            lo[5] = CUBE / GRIPPER_M_PER_COUNT * RAD_PER_COUNT
        hit = (self.m < lo) | (self.m > self.motor_hi)
        if hit.any():
            self.m = np.clip(self.m, lo, self.motor_hi)
            self.qd = np.where(hit, 0.0, self.qd)
        # backlash: the output rides in the play, on the side the load pushes
        # (gravity wins where it is strong; elsewhere the output trails the motion)
        side = np.where(np.abs(tau_g) > 0.02, np.sign(tau_g),
                        np.where(np.abs(self.qd) > 1e-3, -np.sign(self.qd), 0.0))
        half = 0.5 * self.bl
        target = self.m + side * half
        self.q = np.clip(np.where(side != 0, target, self.q), self.m - half, self.m + half)
        self.q[5] = self.m[5]
        # supply and heat
        current = float(np.sum(np.abs(u))) * p.stall_current * 0.5
        self.voltage = p.supply_v - p.supply_r * current
        self.temp += dt * (p.heat_rate * u * u - (self.temp - p.ambient_c) / p.cool_tau)
        if self._steps % OBJECT_EVERY == 0:
            self.objects.update(self.t, motor_to_joint(self.q), dt * OBJECT_EVERY)
            if self.judge is not None:
                self.judge.update(self.t, self.objects)

    def advance(self, t: float) -> None:
        """Step until `t` (s of reality time)."""
        while self.t + DT <= t + 1e-9:
            self.step(DT)

    def joints(self) -> np.ndarray:
        """Output-shaft positions in joint SI (rad, gripper m). Shape: (6,)."""
        return motor_to_joint(self.q)


# ---------------------------------------------------------------- task objects and judge


@dataclass
class Scene:
    """Where the cube starts (centre x, y, yaw) and where the green square is (centre x, y), m/rad."""

    cube: tuple[float, float, float]
    square: tuple[float, float]


def sample_scene(rng: np.random.Generator) -> Scene:
    """Cube and square anywhere in x 0.15..0.30, y -0.12..0.12, at least 0.08 m apart."""
    cube = (float(rng.uniform(0.15, 0.30)), float(rng.uniform(-0.12, 0.12)),
            float(rng.uniform(-math.pi, math.pi)))
    while True:
        sq = (float(rng.uniform(0.15, 0.30)), float(rng.uniform(-0.12, 0.12)))
        if math.hypot(sq[0] - cube[0], sq[1] - cube[1]) >= 0.08:
            return Scene(cube, sq)


class TaskObjects:
    """The cube (kinematic: on the table, falling, or held) and the green square."""

    def __init__(self) -> None:
        self.scene: Scene | None = None
        self.pos = np.array([0.22, 0.0, CUBE / 2])
        self.yaw = 0.0
        self.grasped = False
        self.fall_v = 0.0
        self.rest_since = 0.0
        self._last_open = 0.0

    def reset(self, scene: Scene, t: float) -> None:
        """Place the cube and the square for a new episode."""
        self.scene = scene
        self.pos = np.array([scene.cube[0], scene.cube[1], CUBE / 2])
        self.yaw = scene.cube[2]
        self.grasped = False
        self.fall_v = 0.0
        self.rest_since = t

    @property
    def on_table(self) -> bool:
        """Resting on the table (not held, not falling)."""
        return not self.grasped and self.pos[2] <= CUBE / 2 + 1e-6

    def update(self, t: float, q: np.ndarray, dt: float) -> None:
        """Grasp, carry, release and fall rules, after the arm moved to ``q``."""
        if self.scene is None:
            return
        opening = float(q[5])
        fk = forward_kinematics(q)
        g = fk["grasp"]
        if self.grasped:
            self.pos = g.copy()
            if opening > CUBE + 0.004:
                self.grasped = False
                self.fall_v = 0.0
        else:
            close = (np.hypot(*(g[:2] - self.pos[:2])) < 0.015 and abs(g[2] - self.pos[2]) < 0.015)
            if close and self._last_open > CUBE >= opening - 1e-4:
                self.grasped = True
                self.pos = g.copy()
            elif self.pos[2] > CUBE / 2:  # falling
                self.fall_v += G * dt
                self.pos[2] = max(CUBE / 2, self.pos[2] - self.fall_v * dt)
                if self.pos[2] <= CUBE / 2:
                    self.rest_since = t
        self._last_open = opening


class TaskJudge:
    """The verdict of spec/arm.md: cube at rest >= 0.3 s on the table inside the square,
    not held, within 20 s of the start; score = final distance to the square's centre."""

    def __init__(self, t_start: float) -> None:
        self.t_start = t_start
        self.success = 0

    def update(self, t: float, obj: TaskObjects) -> None:
        """Check the success rule at time ``t``."""
        if self.success or obj.scene is None or t - self.t_start > EPISODE_S:
            return
        if obj.on_table and t - max(obj.rest_since, self.t_start) >= REST_S:
            sx, sy = obj.scene.square
            if abs(obj.pos[0] - sx) <= SQUARE / 2 and abs(obj.pos[1] - sy) <= SQUARE / 2:
                self.success = 1

    def verdict(self, obj: TaskObjects) -> tuple[int, float]:
        """(success, score m) at the episode's end."""
        if obj.scene is None:
            return 0, math.nan
        sx, sy = obj.scene.square
        return self.success, float(math.hypot(obj.pos[0] - sx, obj.pos[1] - sy))

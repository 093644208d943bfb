"""Build the arm's MuJoCo model: `arm.xml` plus the spec-type parameters as MjSpec edits.

`build_spec(params)` gives the complete scene (arm, table, cube, target square, cameras)
that callers may extend before compiling; `build_model(params)` compiles; `cached_model`
shares compiled models between calls with equal spec-type values.

Physics summary (details in arm.xml comments and constants.py):

- links: each body's inertial is a uniform rod along the link (its mass a parameter for
  the upper arm and forearm) plus the servo that sits in it (0.055 kg, datasheet);
- servo j = MuJoCo position actuator on the motor hinge: force kp_j (goal - q) clamped to
  +-stall_torque_j, kp_j = servo_kp stall_torque_j / STALL_REF (the gain sets the duty),
  with joint damping stall_torque_j / no_load_speed_j (the back-EMF: a saturated servo
  slews at its no-load speed), armature (reflected rotor) and Coulomb frictionloss; the
  goal is clamped to the joint limits (ctrlrange) as the servo does;
- backlash: a second hinge on the same axis, free within +-backlash/2 (a joint limit),
  between the motor and the link; the encoder reads motor + play (fixed tendons);
- gripper: two slide fingers coupled by an equality; the gripper servo acts on their sum
  (the jaw opening) through a lever GRIPPER_LEVER: kp / lever^2, stall / lever;
- contacts: cube (condim 4, priority 1: its friction rules) with the table and the
  gripper's palm and pads; the arm's links are visual only.
"""

from __future__ import annotations

from functools import lru_cache

import mujoco
import numpy as np

from realsim.robots.arm import constants as C
from realsim.robots.arm.params import SPEC_PARAMS, STALL_REF, ArmParams, servo_values

GRIPPER_ARMATURE_ROT = 0.003  # kg m^2 at the gripper servo (not fitted)
_SERVO_INERTIA = 1.5e-5  # kg m^2, a 45 x 25 x 35 mm servo about its own centre (each axis)


def link_inertial(parts: list[tuple[float, float, float]]) -> tuple[float, np.ndarray, np.ndarray]:
    """Inertial of a body made of parts along its z axis.

    parts: (mass kg, z0 m, z1 m) each: a uniform rod of radius LINK_RADIUS from z0 to z1,
    or a servo-sized lump centred at z0 when z1 == z0.
    Returns (mass, ipos (3,), diaginertia (3,)) about the combined centre of mass.
    """
    m_tot = sum(m for m, _, _ in parts)
    zc = sum(m * 0.5 * (a + b) for m, a, b in parts) / m_tot
    ixx = izz = 0.0
    r = C.LINK_RADIUS
    for m, a, b in parts:
        L = abs(b - a)
        if L > 0:
            own_xx, own_zz = m * (3 * r * r + L * L) / 12, m * r * r / 2
        else:
            own_xx = own_zz = _SERVO_INERTIA * m / C.SERVO_MASS
        ixx += own_xx + m * (0.5 * (a + b) - zc) ** 2
        izz += own_zz
    return m_tot, np.array([0.0, 0.0, zc]), np.array([ixx, ixx, izz])


def body_parts(params: ArmParams) -> dict[str, list[tuple[float, float, float]]]:
    """What each arm body is made of (see `link_inertial`), body name -> parts."""
    s = C.SERVO_MASS
    return {
        C.TURRET_BODY: [
            (C.TURRET_MASS, 0.05, C.SHOULDER_HEIGHT),
            (s, C.SHOULDER_HEIGHT, C.SHOULDER_HEIGHT),
        ],
        C.UPPER_ARM_BODY: [
            (params["mass_upper_arm"], 0.0, C.UPPER_ARM),
            (s, C.UPPER_ARM, C.UPPER_ARM),
        ],
        C.FOREARM_BODY: [(params["mass_forearm"], 0.0, C.FOREARM), (s, C.FOREARM, C.FOREARM)],
        C.WRIST_BODY: [(C.WRIST_LINK_MASS, 0.0, C.WRIST), (s, 0.04, 0.04)],
        C.GRIPPER_BODY: [(s, 0.02, 0.02), (C.PALM_MASS, 0.045, 0.045)],
    }


def servo_damping(params: ArmParams) -> np.ndarray:
    """Back-EMF damping of each servo (N m s/rad, at the servo): stall torque / no-load
    speed. Shape: (6,), JOINTS order."""
    return servo_values(params, "stall_torque") / servo_values(params, "no_load_speed")


def servo_gain(params: ArmParams) -> np.ndarray:
    """Position gain of each servo (N m/rad, at the servo): servo_kp stall / STALL_REF.
    Shape: (6,), JOINTS order."""
    return params["servo_kp"] * servo_values(params, "stall_torque") / STALL_REF


def apply_params(spec: mujoco.MjSpec, params: ArmParams) -> mujoco.MjSpec:
    """Write the spec-type parameters (and the fixed constants) into an arm spec, in place.

    Returns `spec`.
    """
    for name, parts in body_parts(params).items():
        mass, ipos, inertia = link_inertial(parts)
        b = spec.body(name)
        b.mass = mass
        b.ipos = ipos
        b.inertia = inertia
        b.iquat = [1, 0, 0, 0]
        b.explicitinertial = True

    kps, taus = servo_gain(params), servo_values(params, "stall_torque")
    damps = servo_damping(params)
    for i, (j, lo, hi) in enumerate(zip(C.ARM_JOINTS, C.LIMITS_LO, C.LIMITS_HI, strict=False)):
        kp, tau, damp = float(kps[i]), float(taus[i]), float(damps[i])
        jm = spec.joint(j)
        jm.damping = [damp, 0.0, 0.0]  # linear coefficient (MuJoCo 4: polynomial)
        jm.armature = params[f"armature_{j}"]
        jm.frictionloss = params[f"friction_{j}"]
        jm.range = [lo, hi]
        half = 0.5 * max(params[f"backlash_{j}"], C.MIN_PLAY)
        jp = spec.joint(C.play_joint(j))
        jp.range = [-half, half]
        jp.damping = [C.PLAY_DAMPING, 0.0, 0.0]
        act = spec.actuator(j)
        act.gainprm = np.r_[kp, np.zeros(9)]
        act.biasprm = np.r_[0.0, -kp, 0.0, np.zeros(7)]
        act.forcerange = [-tau, tau]
        act.ctrlrange = [lo, hi]

    lev2 = C.GRIPPER_LEVER**2
    kp, tau, damp = float(kps[5]), float(taus[5]), float(damps[5])
    g = spec.actuator(C.GRIPPER_TENDON)
    g.gainprm = np.r_[kp / lev2, np.zeros(9)]
    g.biasprm = np.r_[0.0, -kp / lev2, 0.0, np.zeros(7)]
    g.forcerange = [-tau / C.GRIPPER_LEVER, tau / C.GRIPPER_LEVER]
    g.ctrlrange = [0.0, C.GRIPPER_MAX]
    t = spec.tendon(C.GRIPPER_TENDON)
    t.damping = [damp / lev2, 0.0, 0.0] if _poly(t.damping) else damp / lev2
    t.armature = GRIPPER_ARMATURE_ROT / lev2
    t.frictionloss = C.GRIPPER_FRICTION

    cube = spec.geom(C.CUBE_GEOM)
    cube.mass = params["cube_mass"]
    cube.friction = [params["cube_friction"], C.CUBE_TORSION, 0.0001]
    spec.geom(C.TABLE_GEOM).friction = [C.TABLE_FRICTION, C.CUBE_TORSION, 0.0001]
    for pad in (*C.FINGER_PADS, C.PALM_GEOM):
        spec.geom(pad).friction = [C.PAD_FRICTION, C.CUBE_TORSION, 0.0001]
    return spec


def _poly(value: object) -> bool:
    """True if an MjSpec damping attribute is a polynomial (sequence) in this MuJoCo."""
    return hasattr(value, "__len__")


def _set_options(spec: mujoco.MjSpec) -> None:
    spec.option.timestep = C.TIMESTEP
    spec.option.integrator = mujoco.mjtIntegrator.mjINT_IMPLICITFAST
    spec.option.cone = mujoco.mjtCone.mjCONE_ELLIPTIC
    spec.option.gravity = [0.0, 0.0, -C.GRAVITY]
    spec.visual.quality.shadowsize = 0
    spec.visual.quality.offsamples = 0


def build_spec(params: ArmParams | None = None) -> mujoco.MjSpec:
    """The scene of arm.xml (arm, table, cube, target, cameras) with `params` applied
    (nominal if None). Callers may add to it before `spec.compile()`."""
    spec = mujoco.MjSpec.from_file(str(C.ARM_XML))
    _set_options(spec)
    return apply_params(spec, params or ArmParams())


def build_model(params: ArmParams | None = None) -> mujoco.MjModel:
    """Compile the scene. A fresh MjModel each call."""
    return build_spec(params).compile()


@lru_cache(maxsize=128)
def _cached_model(spec_key: tuple[float, ...]) -> mujoco.MjModel:
    return build_model(ArmParams(dict(zip(SPEC_PARAMS, spec_key, strict=True)), strict=False))


def cached_model(params: ArmParams) -> mujoco.MjModel:
    """Compiled model shared between calls with equal spec-type values. Do not mutate."""
    return _cached_model(params.spec_key())


# ---------------------------------------------------------------------------------------
# addresses: where the arm lives in a model's state
# ---------------------------------------------------------------------------------------
class ArmLayout:
    """qpos / dof addresses of the arm's joints, the cube and the sensors in a model.

    motor_q, play_q, motor_v, play_v: Shape: (5,) each, the revolute joints' motor and
    play hinges; finger_q, finger_v: Shape: (2,) left, right; cube_q: qpos address of the
    cube's free joint (7 values), cube_v: its dof address (6); grasp_site, pad_geoms (2,),
    cube_geom, table_geom, cube_body, target_mocap: ids.
    """

    def __init__(self, model: mujoco.MjModel) -> None:
        def jid(name: str) -> int:
            j = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, name)
            if j < 0:
                raise ValueError(f"model has no joint {name!r}")
            return j

        def oid(kind: mujoco.mjtObj, name: str) -> int:
            i = mujoco.mj_name2id(model, kind, name)
            if i < 0:
                raise ValueError(f"model has no {kind.name} {name!r}")
            return i

        self.motor_j = np.array([jid(j) for j in C.ARM_JOINTS])
        self.play_j = np.array([jid(C.play_joint(j)) for j in C.ARM_JOINTS])
        self.motor_q = model.jnt_qposadr[self.motor_j].copy()
        self.play_q = model.jnt_qposadr[self.play_j].copy()
        self.motor_v = model.jnt_dofadr[self.motor_j].copy()
        self.play_v = model.jnt_dofadr[self.play_j].copy()
        fj = np.array([jid(C.FINGER_LEFT), jid(C.FINGER_RIGHT)])
        self.finger_q = model.jnt_qposadr[fj].copy()
        self.finger_v = model.jnt_dofadr[fj].copy()
        cj = jid(C.CUBE_JOINT)
        self.cube_q = int(model.jnt_qposadr[cj])
        self.cube_v = int(model.jnt_dofadr[cj])
        self.grasp_site = oid(mujoco.mjtObj.mjOBJ_SITE, C.GRASP_SITE)
        self.pad_geoms = np.array([oid(mujoco.mjtObj.mjOBJ_GEOM, g) for g in C.FINGER_PADS])
        self.palm_geom = oid(mujoco.mjtObj.mjOBJ_GEOM, C.PALM_GEOM)
        self.cube_geom = oid(mujoco.mjtObj.mjOBJ_GEOM, C.CUBE_GEOM)
        self.table_geom = oid(mujoco.mjtObj.mjOBJ_GEOM, C.TABLE_GEOM)
        self.cube_body = oid(mujoco.mjtObj.mjOBJ_BODY, C.CUBE_BODY)
        self.target_mocap = int(model.body_mocapid[oid(mujoco.mjtObj.mjOBJ_BODY, C.TARGET_BODY)])
        self.act = np.array([oid(mujoco.mjtObj.mjOBJ_ACTUATOR, a) for a in C.ACTUATORS])
        self.nq, self.nv = int(model.nq), int(model.nv)

    def joint_qpos(self, qpos: np.ndarray) -> np.ndarray:
        """The six servo readings (output angles, jaw opening) from qpos.

        qpos Shape: (..., nq) -> Shape: (..., 6).
        """
        arm = qpos[..., self.motor_q] + qpos[..., self.play_q]
        grip = qpos[..., self.finger_q[0]] + qpos[..., self.finger_q[1]]
        return np.concatenate([arm, grip[..., None]], axis=-1)

    def joint_qvel(self, qvel: np.ndarray) -> np.ndarray:
        """Output speeds (rad/s, gripper m/s) from qvel. (..., nv) -> (..., 6)."""
        arm = qvel[..., self.motor_v] + qvel[..., self.play_v]
        grip = qvel[..., self.finger_v[0]] + qvel[..., self.finger_v[1]]
        return np.concatenate([arm, grip[..., None]], axis=-1)


def max_force(params: ArmParams) -> np.ndarray:
    """Each actuator's force limit (N m; the gripper's in N). Shape: (6,)."""
    tau = servo_values(params, "stall_torque")
    return np.r_[tau[:5], tau[5] / C.GRIPPER_LEVER]


def rest_qpos(
    model: mujoco.MjModel,
    params: ArmParams,
    joints: np.ndarray,
    cube_pose: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The arm at rest in servo reading `joints` (6,) with the gear play taken up by
    gravity, and the goals that hold it there.

    Each play hinge sits at the end of its range that gravity pushes it to; the motor
    angle is the reading minus the play; the hold goal is the motor angle plus the gravity
    torque / kp (clamped to the force limit), so the servo is in equilibrium.
    cube_pose: (7,) cube position + quaternion (default: parked at +y off the workspace).
    Returns (qpos (nq,), hold goals (6,)).
    """
    lay = ArmLayout(model)
    j = np.asarray(joints, dtype=np.float64).reshape(6)
    d = mujoco.MjData(model)
    q = model.qpos0.copy()
    q[lay.cube_q : lay.cube_q + 7] = (
        np.asarray(cube_pose, dtype=np.float64) if cube_pose is not None else PARKED_CUBE
    )
    grip = float(np.clip(j[5], 0.0, C.GRIPPER_MAX))
    q[lay.finger_q] = 0.5 * grip
    q[lay.motor_q] = j[:5]
    q[lay.play_q] = 0.0
    d.qpos[:] = q
    mujoco.mj_forward(model, d)
    bias = d.qfrc_bias[lay.play_v].copy()  # gravity torque the play hinge must resist
    half = 0.5 * (model.jnt_range[lay.play_j, 1] - model.jnt_range[lay.play_j, 0])
    play = -np.sign(bias) * half
    q[lay.play_q] = play
    q[lay.motor_q] = j[:5] - play
    kp = servo_gain(params)[:5]
    tau = servo_values(params, "stall_torque")[:5]
    hold = np.empty(6)
    hold[:5] = q[lay.motor_q] + np.clip(bias, -tau, tau) / kp
    hold[:5] = np.clip(hold[:5], C.LIMITS_LO[:5], C.LIMITS_HI[:5])
    hold[5] = grip
    return q, hold


PARKED_CUBE = np.array([0.45, 0.38, C.CUBE_SIZE / 2, 1.0, 0.0, 0.0, 0.0])
"""Cube pose (7,) for replays: on the table corner, out of the arm's way."""

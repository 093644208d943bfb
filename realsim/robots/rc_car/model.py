"""Build the car's MuJoCo model: `car.xml` plus the spec-type parameters as MjSpec edits.

`build_spec(params)` gives a complete scene (the car on a plain floor) that callers may
extend with more MjSpec edits (textures, cones, lights) before compiling; `attach_car`
puts the car into a scene someone else built. `build_model(params)` compiles.

Physics summary (details in car.xml comments and constants.py):

- chassis on a free joint; four wheel bodies on hinges (their own mass and inertia), the
  front ones on steering knuckles; wheel contact is a sphere of the wheel radius.
- open rear differential = a fixed tendon with coefficient 1/2 on each rear wheel: one
  force on it is equal torque on both wheels, its length is the encoder's mean angle, and
  its armature is the motor rotor reflected through the gearbox.
- drive actuator on the tendon: brushed DC motor F = Kg (ctrl - ke v), ctrl = duty * Vbat,
  clamped at F >= 0 (a forward/brake ESC never drives current backwards: it coasts);
  brake actuator: F = -Kg ke v * brake (motor shorted), opposes rotation, never reverses.
- tyres: explicit tyre-floor contact pairs, Coulomb friction both ways (elliptic cone)
  with a slip-damping friction reference (force grows with slip speed up to mu N, then
  slides); front grip is FRONT_GRIP_RATIO of the rear (understeer at the limit).
- rolling resistance: Coulomb frictionloss on each wheel hinge; aero drag: MuJoCo's
  ellipsoid fluid model on the chassis geom only (blunt drag, F = drag * v^2).
- steering servo: per knuckle, P control saturated at forcerange with joint damping, so
  the knuckle slews at forcerange / damping = the servo's rated speed.
"""

from __future__ import annotations

import math
import warnings
from functools import lru_cache

import mujoco
import numpy as np

from realsim.robots.rc_car import constants as C
from realsim.robots.rc_car.params import CarParams

FLOOR_CONAFFINITY = 3  # the floor collides with tyres (contype 1) and bumpers (contype 2)


def _part_masses() -> list[tuple[float, np.ndarray, float]]:
    """Non-chassis parts as (mass, position in the body frame, inertia about vertical)."""
    L2, T2, r = C.WHEELBASE / 2, C.TRACK / 2, C.WHEEL_RADIUS
    wheel_izz = 0.25 * C.WHEEL_MASS * r**2 + C.WHEEL_MASS * C.WHEEL_WIDTH**2 / 12
    parts = []
    for x in (-L2, L2):
        for y in (-T2, T2):
            parts.append((C.WHEEL_MASS, np.array([x, y, r]), wheel_izz))
    for y in (-T2, T2):
        parts.append((C.KNUCKLE_MASS, np.array([L2, y, r]), 1e-6))
    return parts


def chassis_inertial(com_x: float, yaw_inertia: float) -> tuple[np.ndarray, np.ndarray]:
    """Chassis inertial frame so that the *whole car* has its COM `com_x` (m) ahead of the
    rear axle at COM_HEIGHT and yaw inertia `yaw_inertia` (kg m^2) about it.

    Returns (ipos (3,), diaginertia (3,)) of the chassis body.
    """
    parts = _part_masses()
    target = np.array([C.REAR_AXLE_X + com_x, 0.0, C.COM_HEIGHT])
    moment = sum(m * p for m, p, _ in parts)
    ipos = (C.TOTAL_MASS * target - moment) / C.CHASSIS_MASS
    share = sum(iz + m * ((p[0] - target[0]) ** 2 + p[1] ** 2) for m, p, iz in parts)
    share += C.CHASSIS_MASS * (ipos[0] - target[0]) ** 2
    izz = yaw_inertia - share
    if izz <= 1e-4:
        raise ValueError(f"yaw_inertia {yaw_inertia} too small for the wheels' share {share:.4g}")
    ixx = C.CHASSIS_IXX
    # pitch: a flat box has Ixx + Iyy - Izz = m h^2 / 6 (h ~ 0.06 m); the abs() keeps the
    # triangle inequalities for every yaw inertia in range
    iyy = abs(izz - ixx) + C.CHASSIS_MASS * 0.06**2 / 6
    return ipos, np.array([ixx, iyy, izz])


def servo_force_limit(servo_time_60: float) -> float:
    """Steering actuator force limit (N m) giving a slew rate of 60 deg per servo_time_60."""
    return C.STEER_DAMPING * (math.pi / 3) / servo_time_60


def apply_params(spec: mujoco.MjSpec, params: CarParams) -> mujoco.MjSpec:
    """Write the spec-type parameters (and the fixed constants) into a car spec, in place.

    Works on the bare car spec of `car_spec()` (unprefixed names). Returns `spec`.
    """
    ipos, inertia = chassis_inertial(params["com_x"], params["yaw_inertia"])
    chassis = spec.body(C.CHASSIS_BODY)
    chassis.mass = C.CHASSIS_MASS
    chassis.ipos = ipos
    chassis.inertia = inertia
    chassis.iquat = [1, 0, 0, 0]
    chassis.explicitinertial = True

    kg, ke = params["motor_gain"], params["back_emf"]
    drive = spec.actuator(C.ACT_DRIVE)
    drive.gainprm = np.r_[kg, np.zeros(9)]
    drive.biasprm = np.r_[0.0, 0.0, -kg * ke, np.zeros(7)]
    brake = spec.actuator(C.ACT_BRAKE)
    brake.gainprm = np.r_[0.0, 0.0, -C.BRAKE_FACTOR * params["brake_gain"] * kg * ke, np.zeros(7)]
    spec.tendon(C.DIFF_TENDON).armature = C.ROTOR_INERTIA_AT_WHEEL

    fl = params["rolling_resistance"] * C.TOTAL_MASS * C.GRAVITY * C.WHEEL_RADIUS / 4
    for name in C.WHEEL_JOINTS:
        spec.joint(name).frictionloss = fl

    geom = spec.geom(C.CHASSIS_GEOM)
    area = math.pi * geom.size[1] * geom.size[2]  # ellipsoid cross-section facing +x
    coef = list(geom.fluid_coefs)
    coef[0] = params["drag"] / (C.AIR_DENSITY * area)  # MuJoCo: F = C_blunt rho A v^2
    geom.fluid_coefs = coef

    fmax = servo_force_limit(params["servo_time_60"])
    for act_name, joint_name in zip(
        (C.ACT_STEER_LEFT, C.ACT_STEER_RIGHT), C.STEER_JOINTS, strict=True
    ):
        act = spec.actuator(act_name)
        act.gainprm = np.r_[C.STEER_KP, np.zeros(9)]
        act.biasprm = np.r_[0.0, -C.STEER_KP, 0.0, np.zeros(7)]
        act.forcerange = [-fmax, fmax]
        act.ctrlrange = [-C.STEER_LIMIT, C.STEER_LIMIT]
        j = spec.joint(joint_name)
        j.damping = [C.STEER_DAMPING, 0.0, 0.0]  # linear coefficient (MuJoCo 4: polynomial)
        j.armature = C.STEER_ARMATURE
        j.range = [-C.STEER_LIMIT, C.STEER_LIMIT]
    return spec


def add_tyre_contacts(
    spec: mujoco.MjSpec, params: CarParams, floor: str = C.FLOOR_GEOM, prefix: str = ""
) -> None:
    """Add the four tyre-floor contact pairs (in place): the tyre model.

    Coulomb friction in both directions, rear mu = tyre_mu, front mu = tyre_mu *
    FRONT_GRIP_RATIO, elliptic cone; the friction rows' reference is a pure slip damping
    (solreffriction = (0, -tyre_slip_damping), a parameter), so below the grip limit tyre
    force rises with slip speed and above it the tyre slides. (Default, stiff friction references
    make a spinning tyre hop on and off the floor at ~70 Hz.) `floor` names the floor geom.
    """
    mu = params["tyre_mu"]
    for names, grip in ((C.REAR_TYRES, mu), (C.FRONT_TYRES, mu * C.FRONT_GRIP_RATIO)):
        for name in names:
            pair = spec.add_pair(
                name=f"{prefix}{name}_floor", geomname1=prefix + name, geomname2=floor, condim=3
            )
            pair.friction = [grip, grip, 0.005, 0.0001, 0.0001]
            pair.solreffriction = [0.0, -params["tyre_slip_damping"]]


def _set_options(spec: mujoco.MjSpec) -> None:
    spec.option.timestep = C.TIMESTEP
    spec.option.integrator = mujoco.mjtIntegrator.mjINT_EULER  # see constants.TIMESTEP
    spec.option.cone = mujoco.mjtCone.mjCONE_ELLIPTIC
    spec.option.density = C.AIR_DENSITY
    spec.option.viscosity = 0.0


def car_spec(params: CarParams | None = None) -> mujoco.MjSpec:
    """The bare car (no floor) from car.xml with `params` applied (nominal if None)."""
    spec = mujoco.MjSpec.from_file(str(C.CAR_XML))
    return apply_params(spec, params or CarParams())


def add_floor(
    spec: mujoco.MjSpec, *, rgba: tuple[float, float, float, float] = (0.55, 0.5, 0.45, 1)
) -> None:
    """Add a plain infinite floor plane named FLOOR_GEOM and a light (in place)."""
    spec.worldbody.add_geom(
        name=C.FLOOR_GEOM,
        type=mujoco.mjtGeom.mjGEOM_PLANE,
        size=[0, 0, 0.05],
        contype=0,
        conaffinity=FLOOR_CONAFFINITY,
        rgba=list(rgba),
    )
    spec.worldbody.add_light(pos=[0, 0, 4], dir=[0, 0, -1], castshadow=False)
    spec.visual.quality.shadowsize = 0
    spec.visual.quality.offsamples = 0


def build_spec(params: CarParams | None = None, *, floor: bool = True) -> mujoco.MjSpec:
    """The simulation scene: the car (parameters applied) and, if `floor`, a plain floor
    with the tyre contacts (without it, call `add_floor`/`add_tyre_contacts` yourself).

    Callers may add to it (floor texture, cones, lights) before `spec.compile()`; anything
    they add must keep contype 0 unless it should touch the car (the floor's conaffinity
    is FLOOR_CONAFFINITY). Names are the unprefixed ones of constants.py.
    """
    spec = car_spec(params)
    _set_options(spec)
    if floor:
        add_floor(spec)
        add_tyre_contacts(spec, params or CarParams())
    return spec


def attach_car(
    scene: mujoco.MjSpec,
    params: CarParams | None = None,
    *,
    prefix: str = "car/",
    floor: str = C.FLOOR_GEOM,
) -> mujoco.MjsFrame:
    """Attach the car into `scene` at its world origin (in place); returns the frame.

    Element names get `prefix`. The scene supplies the floor geom named `floor` (give
    it conaffinity FLOOR_CONAFFINITY for the bumpers); the tyre contacts are added here.
    Sets the scene's timestep, integrator, cone and air density (the car's drag needs
    density; other bodies with an inertia-box fluid model get air drag too).
    """
    params = params or CarParams()
    _set_options(scene)
    frame = scene.worldbody.add_frame()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scene.attach(car_spec(params), prefix=prefix, frame=frame)
    add_tyre_contacts(scene, params, floor=floor, prefix=prefix)
    return frame


def build_model(params: CarParams | None = None) -> mujoco.MjModel:
    """Compile the default scene (car on a plain floor). A fresh MjModel each call."""
    return build_spec(params).compile()


@lru_cache(maxsize=128)
def _cached_model(spec_key: tuple[float, ...]) -> mujoco.MjModel:
    from realsim.robots.rc_car.params import SPEC_PARAMS

    return build_model(CarParams(dict(zip(SPEC_PARAMS, spec_key, strict=True)), strict=False))


def cached_model(params: CarParams) -> mujoco.MjModel:
    """Compiled model shared between calls with equal spec-type values. Do not mutate."""
    return _cached_model(params.spec_key())

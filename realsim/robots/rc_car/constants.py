"""Names and fixed (certain, or deliberately not fitted) quantities of the RC car.

Every body, joint, tendon, site, sensor, actuator and camera name that code uses is
defined here once; `car.xml` uses the same strings. Geometry comes from the datasheet
(/work/shared/spec/rc_car.md); the rest are engineering estimates, documented where set.
Units: SI (m, kg, s, rad, N, V).
"""

from __future__ import annotations

import math
from pathlib import Path

# --- files -------------------------------------------------------------------------------
CAR_XML = Path(__file__).with_name("car.xml")

# --- MJCF names --------------------------------------------------------------------------
CHASSIS_BODY = "chassis"
ROOT_JOINT = "root"
REAR_LEFT_WHEEL = "rear_left_wheel"  # body and hinge joint share the name
REAR_RIGHT_WHEEL = "rear_right_wheel"
FRONT_LEFT_WHEEL = "front_left_wheel"
FRONT_RIGHT_WHEEL = "front_right_wheel"
FRONT_LEFT_KNUCKLE = "front_left_knuckle"
FRONT_RIGHT_KNUCKLE = "front_right_knuckle"
FRONT_LEFT_STEER = "front_left_steer"  # steering hinge joints
FRONT_RIGHT_STEER = "front_right_steer"
WHEEL_JOINTS = (REAR_LEFT_WHEEL, REAR_RIGHT_WHEEL, FRONT_LEFT_WHEEL, FRONT_RIGHT_WHEEL)
STEER_JOINTS = (FRONT_LEFT_STEER, FRONT_RIGHT_STEER)
REAR_TYRES = ("rear_left_tyre", "rear_right_tyre")
FRONT_TYRES = ("front_left_tyre", "front_right_tyre")
CHASSIS_GEOM = "chassis_body"  # carries the aerodynamic drag (ellipsoid fluid model)
DIFF_TENDON = "rear_diff"  # length = mean rear-wheel angle
IMU_SITE = "imu"
FRONT_CAMERA = "front"
FLOOR_GEOM = "floor"

# Actuators, in ctrl order. `mujoco.rollout` controls are (nstep, NU) in this order.
ACT_STEER_LEFT = "steer_left"  # ctrl: left wheel steering angle target (rad)
ACT_STEER_RIGHT = "steer_right"  # ctrl: right wheel steering angle target (rad)
ACT_DRIVE = "drive"  # ctrl: duty * battery voltage (V)
ACT_BRAKE = "brake"  # ctrl: brake duty 0..1
ACTUATORS = (ACT_STEER_LEFT, ACT_STEER_RIGHT, ACT_DRIVE, ACT_BRAKE)
NU = len(ACTUATORS)

# Sensors (MuJoCo sensordata order): gyro (3), accelerometer (3), encoder (1)
SENSOR_GYRO = "imu_gyro"
SENSOR_ACCEL = "imu_accel"
SENSOR_ENCODER = "encoder"
GYRO_SLICE = slice(0, 3)
ACCEL_SLICE = slice(3, 6)
ENCODER_INDEX = 6

# Log fields the car's telemetry produces (log_format.md, rc_car sensors).
SENSOR_FIELDS = ("enc_rad", "yaw_rate", "accel", "vbat", "ack", "flags")

# --- geometry (datasheet) ----------------------------------------------------------------
WHEELBASE = 0.185
TRACK = 0.150
WHEEL_RADIUS = 0.032
WHEEL_WIDTH = 0.025
TOTAL_MASS = 1.05
IMU_HEIGHT = 0.05
REAR_AXLE_X = -WHEELBASE / 2  # body frame origin is midway between the axles
COM_HEIGHT = 0.045  # estimate: battery and motor sit low

# --- masses of the parts (estimates; they sum to TOTAL_MASS) -----------------------------
WHEEL_MASS = 0.025  # tyre + rim, each
KNUCKLE_MASS = 0.005  # steering knuckle, each
CHASSIS_MASS = TOTAL_MASS - 4 * WHEEL_MASS - 2 * KNUCKLE_MASS
CHASSIS_IXX = 0.0028  # roll, pitch inertia of the chassis (box 0.28 x 0.17 x 0.08 estimate)
CHASSIS_IYY = 0.0066
# Motor rotor reflected through the gearbox to the mean rear-wheel speed (kg m^2): ~1e-6
# rotor at a ~17:1 reduction. This is why the rear wheels spin up faster than the car.
ROTOR_INERTIA_AT_WHEEL = 3.0e-4

# --- tyres -------------------------------------------------------------------------------
# Front tyres grip this fraction of the rear ones (narrower contact, no drive load): the
# front axle saturates first, so the car understeers at its grip limit.
FRONT_GRIP_RATIO = 0.85
# Friction-row reference of the tyre contacts: a_ref = -TYRE_SLIP_DAMPING * slip speed
# (MuJoCo solreffriction, direct form). Soft enough that a spinning tyre doesn't hop.
TYRE_SLIP_DAMPING = 5.0  # 1/s: nominal of the tyre_slip_damping parameter (params.py)

# --- steering servo (inside MuJoCo: saturated P control + damping -> rate limit) ----------
STEER_KP = 30.0  # N m / rad, per wheel
STEER_DAMPING = 0.25  # N m s / rad; max steering rate = forcerange / STEER_DAMPING
STEER_ARMATURE = 5e-4  # kg m^2: servo and linkage inertia seen at each knuckle
STEER_LIMIT = 0.6  # rad, mechanical stop of each knuckle

# --- drivetrain / battery / ESC ----------------------------------------------------------
BRAKE_FACTOR = 1.0  # full brake = motor terminals shorted: F = -Kg * ke * v
WATCHDOG_S = 0.3  # no DRV for this long: neutral steering, full brake
V_FULL = 8.4  # 2S LiPo full
V_CUTOFF = 6.6
V_LOW_FLAG = 7.0  # telemetry flag bit 1 below this
BATTERY_R_INT = 0.08  # ohm, pack + wiring
BATTERY_CAPACITY_AH = 1.0
# open-circuit voltage of the 2S pack over state of charge (0..1)
BATTERY_SOC = (0.0, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 0.9, 1.0)
BATTERY_OCV = (6.6, 6.9, 7.2, 7.4, 7.6, 7.75, 7.95, 8.15, 8.4)

# --- sensors -----------------------------------------------------------------------------
TELEMETRY_HZ = 50.0
ENCODER_COUNTS_PER_REV = 116.4
ENCODER_RAD_PER_COUNT = 2 * math.pi / ENCODER_COUNTS_PER_REV
GYRO_NOISE = 0.005  # rad/s, 1 sigma per sample (CarSim only; replay is noise-free)
ACCEL_NOISE = 0.08  # m/s^2, 1 sigma per sample
FLAG_WATCHDOG = 1
FLAG_BATTERY_LOW = 2
FLAG_EPISODE = 4

# --- simulation --------------------------------------------------------------------------
# Semi-implicit Euler (joint damping implicit): every velocity-dependent force here is
# slow against dt (motor back-EMF time constant ~0.1 s), and implicitfast's analytic fluid
# derivatives would halve the speed. The servo (kp 30 on 5e-4 kg m^2) has w dt ~ 0.5.
TIMESTEP = 0.002  # s
GRAVITY = 9.81
AIR_DENSITY = 1.2  # kg/m^3 (option density; only the chassis takes part)

# --- front camera (datasheet) ------------------------------------------------------------
CAMERA_WIDTH = 320
CAMERA_HEIGHT = 240
CAMERA_HFOV_DEG = 100.0
CAMERA_PITCH_DEG = 20.0
CAMERA_FOVY_DEG = math.degrees(
    2 * math.atan(math.tan(math.radians(CAMERA_HFOV_DEG / 2)) * CAMERA_HEIGHT / CAMERA_WIDTH)
)

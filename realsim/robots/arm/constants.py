"""Names and fixed (certain, or deliberately not fitted) quantities of the arm.

Every body, joint, tendon, site, sensor, actuator and camera name that code uses is
defined here once; `arm.xml` uses the same strings. Geometry comes from the datasheet
(/work/shared/spec/arm.md); the rest are engineering estimates, documented where set.
Units: SI (m, kg, s, rad, N, V).

Frames: world = table frame, origin at the arm's base on the table top, x forward into
the workspace, y left, z up. Zero pose: the arm straight up, gripper closed.
"""

from __future__ import annotations

import math
from pathlib import Path

# --- files -------------------------------------------------------------------------------
ARM_XML = Path(__file__).with_name("arm.xml")

# --- joints (datasheet order; the servo ids are 1..6) --------------------------------------
JOINTS = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper")
ARM_JOINTS = JOINTS[:5]  # the five revolute joints; each is a motor hinge + a play hinge
NJ = len(JOINTS)
LIMITS_LO = (-1.9, -1.7, -1.6, -1.7, -2.7, 0.0)  # rad, rad, rad, rad, rad, m
LIMITS_HI = (1.9, 1.7, 1.6, 1.7, 2.7, 0.07)
HOME = (0.0, 0.0, 1.2, 1.4, 0.0, 0.0)  # rest pose between episodes (rad..., gripper m)
GRIPPER_MAX = 0.07  # m, full jaw opening


def play_joint(joint: str) -> str:
    """Name of the backlash ("play") hinge that follows motor hinge `joint`."""
    return f"{joint}_play"


def output_tendon(joint: str) -> str:
    """Fixed tendon = motor + play angle: the servo output shaft that the encoder reads."""
    return f"{joint}_out"


FINGER_LEFT = "finger_left"  # slide joints (and bodies), each 0..GRIPPER_MAX / 2
FINGER_RIGHT = "finger_right"
GRIPPER_TENDON = "gripper"  # = finger_left + finger_right: the jaw opening (m)
FINGER_EQUALITY = "finger_coupling"  # finger_right = finger_left
OUTPUT_TENDONS = tuple(output_tendon(j) for j in ARM_JOINTS) + (GRIPPER_TENDON,)

# --- bodies, geoms, sites, cameras ---------------------------------------------------------
TURRET_BODY = "turret"
UPPER_ARM_BODY = "upper_arm"
FOREARM_BODY = "forearm"
WRIST_BODY = "wrist"
GRIPPER_BODY = "gripper"
ARM_BODIES = (TURRET_BODY, UPPER_ARM_BODY, FOREARM_BODY, WRIST_BODY, GRIPPER_BODY)
FINGER_PADS = ("pad_left", "pad_right")  # the two jaw pads (geoms)
PALM_GEOM = "palm"
TABLE_GEOM = "table"
CUBE_BODY = "cube"
CUBE_JOINT = "cube"  # free joint
CUBE_GEOM = "cube"
TARGET_BODY = "target"  # mocap body carrying the green square
TARGET_GEOM = "target"
GRASP_SITE = "grasp"  # between the pads, 10 mm back from the fingertips
FRONT_CAMERA = "front"
WRIST_CAMERA = "wrist"
CAMERAS = (FRONT_CAMERA, WRIST_CAMERA)

# Actuators, in ctrl order (= JOINTS order): position servos, ctrl = goal (rad / m).
ACTUATORS = JOINTS
NU = len(ACTUATORS)

# Sensors (sensordata order): output angle (6: tendonpos), output speed (6: tendonvel),
# actuator force (6: actuatorfrc).
SENSOR_POS = tuple(f"pos_{j}" for j in JOINTS)
SENSOR_VEL = tuple(f"vel_{j}" for j in JOINTS)
SENSOR_FRC = tuple(f"frc_{j}" for j in JOINTS)
POS_SLICE = slice(0, 6)
VEL_SLICE = slice(6, 12)
FRC_SLICE = slice(12, 18)
NSENSOR = 18

# Log fields the arm's telemetry produces (log_format.md, arm sensors).
SENSOR_FIELDS = ("qpos", "qvel", "load", "voltage", "temperature")

# --- geometry (datasheet) ----------------------------------------------------------------
SHOULDER_HEIGHT = 0.095  # shoulder_lift axis above the table
UPPER_ARM = 0.116  # shoulder_lift -> elbow_flex
FOREARM = 0.135  # elbow_flex -> wrist_flex
WRIST = 0.060  # wrist_flex -> wrist_roll joint, along the link
FINGER_REACH = 0.095  # wrist_roll joint -> fingertips
PAD_WIDTH = 0.02  # finger pads, across the jaw motion
PAD_LENGTH = 0.04  # along the fingers (estimate)
PAD_THICKNESS = 0.008  # (estimate)
GRASP_OFFSET = 0.010  # grasp site this far back from the fingertips (estimate)
CUBE_SIZE = 0.03
TARGET_SIZE = 0.08

# --- masses (datasheet: servo 0.055 kg; links uncertain, in params) -------------------------
SERVO_MASS = 0.055
TURRET_MASS = 0.03  # turret bracket (estimate), plus the shoulder_lift servo
WRIST_LINK_MASS = 0.02  # wrist bracket (estimate), plus the wrist_roll servo
PALM_MASS = 0.02  # gripper frame (estimate), plus the gripper servo
FINGER_MASS = 0.01  # each (estimate)
LINK_RADIUS = 0.02  # for link inertias (rod of this radius)

# --- servos --------------------------------------------------------------------------------
# The gripper servo drives the jaw opening through a lever: a servo torque tau gives an
# opening force tau / GRIPPER_LEVER; its gain, damping and armature map by 1 / lever^2.
GRIPPER_LEVER = 0.05  # m (estimate)
GRIPPER_FRICTION = 0.5  # N, Coulomb friction on the opening (estimate; not fitted)
PLAY_DAMPING = 1e-3  # N m s / rad inside the backlash (numerical only)
MIN_PLAY = 2e-4  # rad: the smallest modelled play width (a zero-width range is degenerate)
COUNTS_PER_REV = 4096
RAD_PER_COUNT = 2 * math.pi / COUNTS_PER_REV
GRIPPER_COUNTS = (2048, 3000)  # counts at opening 0 and GRIPPER_MAX
V_SUPPLY = 7.4  # V, servo supply at no load (stall torque is rated here)
V_SAG = 0.15  # V per unit of summed |load| (supply resistance; estimate)
T_AMBIENT = 30.0  # deg C, temperature at power-on in ArmSim
THERMAL_TAU = 300.0  # s, servo case thermal time constant (estimate)
THERMAL_RISE = 25.0  # deg C, steady rise at sustained full load (estimate)

# --- sensors / timing ------------------------------------------------------------------------
TELEMETRY_HZ = 50.0  # SYNC_READ rate of the emulator and the sim's telemetry (choice)
QPOS_NOISE = RAD_PER_COUNT / 2  # rad, ArmSim reading noise (1 sigma), encoder-like
LOAD_NOISE = 0.01  # fraction of max

# --- contacts ------------------------------------------------------------------------------
# collision bits: table 1, cube 2, gripper (palm, pads) 4. Arm links are visual only.
TABLE_CONTYPE, TABLE_CONAFFINITY = 1, 0
CUBE_CONTYPE, CUBE_CONAFFINITY = 2, 1 | 4
GRIPPER_CONTYPE, GRIPPER_CONAFFINITY = 4, 1
CUBE_TORSION = 0.005  # m: torsional friction = this * normal force (condim 4)
PAD_FRICTION = 1.0  # pads (the cube's friction wins: cube geom priority 1)
TABLE_FRICTION = 0.6

# --- simulation ----------------------------------------------------------------------------
TIMESTEP = 0.002  # s
GRAVITY = 9.81

# --- cameras (datasheet) -----------------------------------------------------------------
CAMERA_WIDTH = 640
CAMERA_HEIGHT = 480
CAMERA_FPS = 30.0
FRONT_CAMERA_POS = (0.45, 0.0, 0.30)
FRONT_CAMERA_PITCH_DEG = 35.0
FRONT_CAMERA_FOVY_DEG = 66.0
WRIST_CAMERA_OFFSET = 0.03  # m off the jaw plane (gripper frame +x)
WRIST_CAMERA_FOVY_DEG = 72.0

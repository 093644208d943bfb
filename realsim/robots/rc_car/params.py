"""The car's uncertain quantities as named parameters (nominal value, range, how applied).

Every quantity rc_car.md marks *uncertain* is one `ParamSpec` in `PARAMS`. `applies` says
where it acts:

- ``"spec"``: an MjSpec edit when the model is built (`model.apply_params`); changing it
  needs a new MjModel (cheap: a compile is ~ms).
- ``"actuation"``: the command path ahead of MuJoCo (latency, ESC deadband, steering
  angle map), computed in numpy per simulation step (`actuation.py`).
- ``"sensor"``: added to the simulated sensor streams (IMU biases).

Ranges are the datasheet's where it gives one, physically sensible otherwise; they are the
prior box that system identification searches. `CarParams` holds one value per name: the
shared `realsim.params.ParamSet` (an immutable, validated mapping that round-trips to YAML
and keeps the ``ci95`` / ``identifiable`` annotations that sysid adds) on this table.
"""

from __future__ import annotations

from realsim.params import Applies, ParamSet, ParamSpec

__all__ = ["PARAMS", "PARAM_BY_NAME", "PARAM_NAMES", "SPEC_PARAMS", "Applies", "CarParams",
           "ParamSpec", "param_table"]

PARAMS: tuple[ParamSpec, ...] = (
    ParamSpec(
        "com_x",
        0.095,
        0.07,
        0.12,
        "m",
        "spec",
        "centre of mass ahead of the rear axle (datasheet range); moves the chassis "
        "inertial frame so the whole car's COM lands there",
    ),
    ParamSpec(
        "yaw_inertia",
        0.008,
        0.004,
        0.012,
        "kg m^2",
        "spec",
        "whole car's yaw inertia about its COM (datasheet range); the chassis izz is "
        "this minus the wheels' and knuckles' share",
    ),
    ParamSpec(
        "tyre_mu",
        0.8,
        0.4,
        1.2,
        "1",
        "spec",
        "tyre-floor Coulomb friction, both directions (rear tyres; front = "
        "FRONT_GRIP_RATIO x this); geom friction[0], tyre priority wins over the floor",
    ),
    ParamSpec(
        "motor_gain",
        0.05,
        0.02,
        0.12,
        "N m/V",
        "spec",
        "Kg = gear * kt / R: rear-axle torque per volt across the motor; drive actuator gainprm[0]",
    ),
    ParamSpec(
        "back_emf",
        0.075,
        0.06,
        0.095,
        "V s/rad",
        "spec",
        "ke referred to the mean rear-wheel speed (= torque constant at the wheel); "
        "no-load wheel speed = V / ke; drive biasprm[2] = -Kg ke, brake gainprm[2]",
    ),
    ParamSpec(
        "rolling_resistance",
        0.03,
        0.005,
        0.08,
        "1",
        "spec",
        "rolling-resistance coefficient c_rr: Coulomb friction torque "
        "c_rr * m g r / 4 on each wheel hinge (joint frictionloss)",
    ),
    ParamSpec(
        "drag",
        0.006,
        0.0,
        0.03,
        "N s^2/m^2",
        "spec",
        "aerodynamic drag F = drag * v^2 (= rho CdA / 2), chassis geom fluidcoef "
        "(ellipsoid fluid model, blunt drag only)",
    ),
    ParamSpec(
        "tyre_slip_damping",
        5.0,
        2.0,
        100.0,
        "1/s",
        "spec",
        "tyre contact friction reference a_ref = -this * slip speed (solreffriction "
        "(0, -this)): how fast tyre force builds with slip below the grip limit, i.e. "
        "cornering and longitudinal stiffness (soft: understeer and scrub in turns)",
    ),
    ParamSpec(
        "brake_gain",
        1.0,
        0.5,
        8.0,
        "1",
        "spec",
        "ESC brake strength relative to shorted motor terminals (F = -gain * Kg * ke * v "
        "at full brake); an ESC's active brake is stronger than a short",
    ),
    ParamSpec(
        "deadband",
        0.07,
        0.04,
        0.10,
        "1",
        "actuation",
        "ESC deadband as a fraction of full throttle (datasheet range); outside it the "
        "duty is (|t| - deadband) / (1 - deadband)",
    ),
    ParamSpec(
        "steer_max",
        0.40,
        0.35,
        0.45,
        "rad",
        "actuation",
        "mean front-wheel angle at full steering command (datasheet range)",
    ),
    ParamSpec(
        "steer_trim",
        0.0,
        -0.05,
        0.05,
        "rad",
        "actuation",
        "mean front-wheel angle at command 0 (datasheet range)",
    ),
    ParamSpec(
        "servo_time_60",
        0.115,
        0.08,
        0.15,
        "s",
        "spec",
        "servo seconds per 60 degrees (datasheet range): steering actuator "
        "forcerange = STEER_DAMPING * (pi/3) / servo_time_60",
    ),
    ParamSpec(
        "latency",
        0.045,
        0.01,
        0.08,
        "s",
        "actuation",
        "host send to wheels reacting (datasheet range): recorded commands take "
        "effect this long after their timestamps",
    ),
    ParamSpec(
        "gyro_bias", 0.0, -0.1, 0.1, "rad/s", "sensor", "gyro z zero-rate offset, added to yaw_rate"
    ),
    ParamSpec(
        "accel_bias_x",
        0.0,
        -0.5,
        0.5,
        "m/s^2",
        "sensor",
        "accelerometer x offset (MPU-6050 class: +-50 mg)",
    ),
    ParamSpec("accel_bias_y", 0.0, -0.5, 0.5, "m/s^2", "sensor", "accelerometer y offset"),
)


class CarParams(ParamSet):
    """A complete, validated set of the car's uncertain parameters (see `realsim.params`).

    Missing names take their nominal value; values outside [low, high] raise `UserError`
    unless ``strict=False`` (for experiments with deliberately impossible cars).
    """

    SPECS = PARAMS
    ROBOT = "rc_car"
    __slots__ = ()


PARAM_NAMES: tuple[str, ...] = CarParams.names()
PARAM_BY_NAME: dict[str, ParamSpec] = CarParams.by_name()
SPEC_PARAMS: tuple[str, ...] = CarParams.spec_names()
param_table = CarParams.table

"""The emulated RC car's "reality": a dynamics model that is deliberately not the simulator.

The project's simulator models the car in MuJoCo. This module stands in for the
physical car and shares no code with it: a planar dynamic single-track
(bicycle) model integrated with plain floats at 1 kHz, with

- chassis states x, y, yaw (body origin, world frame) and vx, vy, r (centre of
  mass velocity in the body frame, yaw rate);
- a rear-wheel spin state (both rear wheels lumped: open differential, equal
  torque) carrying wheel plus rotor inertia reflected through the gearbox;
- brush-model tyres with combined slip, saturation at ``mu * Fz`` and a lower
  sliding friction, slip regularised below ``V_EPS`` so standstill is smooth;
  static longitudinal load transfer from the (lagged) acceleration;
- a brushed DC motor (torque constant = back-EMF constant, winding
  resistance) behind a non-synchronous forward/brake ESC with a deadband, fed by
  a 2S LiPo with open-circuit voltage over state of charge, internal resistance
  (sag under load) and quiescent draw (the electronics and the camera board);
- a rate-limited steering servo with trim; a command latency with jitter;
  rolling resistance, drivetrain friction, aerodynamic drag;
- sensors as the microcontroller reads them: an MPU-6050-class IMU at the body
  origin (specific force incl. centripetal terms, low-pass, bias, white noise,
  LSB quantisation), the motor encoder (116.4 counts per rear-wheel revolution,
  int32) and the pack voltage.

Units are SI throughout (m, s, kg, rad, N, V, A) unless a name says otherwise.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from realsim.errors import UserError

G = 9.80665
"""Standard gravity (m/s^2)."""
ENCODER_COUNTS_PER_REV = 116.4
"""Encoder counts per rear-wheel revolution (datasheet)."""
V_FULL = 8.4
"""2S LiPo full voltage (V)."""
V_CUTOFF = 6.6
"""2S LiPo cut-off (V): the ESC stops driving below it."""
V_LOW = 7.0
"""Battery-low flag threshold (V)."""
V_EPS = 0.3
"""Slip-velocity regularisation (m/s): slip denominators never go below it."""
SERVO_THROW = math.radians(40.0)
"""Servo horn angle at full steering command (rad); the linkage maps it to `steer_max`."""
DT = 0.001
"""Integration substep (s)."""

# 2S open-circuit voltage against state of charge (per pack, V), a typical LiPo curve.
_OCV_SOC = (0.0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
_OCV_V = (6.6, 7.0, 7.2, 7.36, 7.44, 7.5, 7.6, 7.7, 7.8, 7.92, 8.1, 8.4)

FLOOR_KINDS = ("wood", "lino", "tiles")


def ocv(soc: float) -> float:
    """Open-circuit pack voltage (V) at state of charge ``soc`` in [0, 1]."""
    if soc <= 0.0:
        return _OCV_V[0]
    if soc >= 1.0:
        return _OCV_V[-1]
    i = min(int(soc * 10.0), 10)
    while _OCV_SOC[i + 1] < soc:
        i += 1
    while _OCV_SOC[i] > soc:
        i -= 1
    s0, s1 = _OCV_SOC[i], _OCV_SOC[i + 1]
    return _OCV_V[i] + (_OCV_V[i + 1] - _OCV_V[i]) * (soc - s0) / (s1 - s0)


@dataclass
class RealityParams:
    """Every true value of the emulated car and its room. Drawn once per session.

    Geometry comes from the datasheet; the *uncertain* quantities are drawn by
    `sample` inside the datasheet's ranges, the rest inside plausible ones.
    """

    # geometry and mass
    wheelbase: float = 0.185  #: front to rear axle (m)
    track: float = 0.150  #: wheel centre to wheel centre (m)
    wheel_radius: float = 0.032  #: (m)
    mass: float = 1.05  #: (kg)
    com_ahead_rear: float = 0.095  #: centre of mass ahead of the rear axle (m)
    com_height: float = 0.045  #: centre of mass above ground (m), load transfer
    yaw_inertia: float = 0.008  #: about the centre of mass (kg m^2)
    # tyres (brush model); stiffness given per newton of load
    mu: float = 0.75  #: peak friction coefficient
    mu_slide_ratio: float = 0.85  #: full-slide friction / peak friction
    cornering_front: float = 7.5  #: front cornering stiffness per unit load (1/rad)
    cornering_rear: float = 12.0  #: rear cornering stiffness per unit load (1/rad)
    long_stiffness: float = 12.0  #: rear longitudinal stiffness per unit load (1/slip)
    rolling_resistance: float = 0.02  #: rolling resistance coefficient (force / load)
    drag: float = 0.012  #: aerodynamic drag force / v^2 (N s^2/m^2)
    # drivetrain
    gear_ratio: float = 15.0  #: motor revolutions per rear-wheel revolution
    motor_k: float = 0.0047  #: torque constant = back-EMF constant (N m/A = V s/rad)
    motor_resistance: float = 1.1  #: winding + brushes + ESC FETs (ohm)
    rotor_inertia: float = 2.5e-6  #: motor rotor (kg m^2)
    wheel_inertia: float = 3.0e-5  #: both rear wheels and axle (kg m^2)
    drivetrain_viscous: float = 4e-5  #: gear losses at the axle (N m s/rad)
    drivetrain_coulomb: float = 0.004  #: gear friction at the axle (N m)
    # ESC, servo, latency
    esc_deadband: float = 0.07  #: fraction of full throttle that does nothing
    brake_torque: float = 0.3  #: full-brake holding torque at the axle (N m)
    brake_dynamic: float = 0.8  #: full-brake dynamic (shorted-winding) fraction
    steer_max: float = 0.40  #: steering angle at full command, Ackermann average (rad)
    steer_trim: float = 0.0  #: steering angle at command 0 (rad)
    servo_time_60: float = 0.11  #: servo seconds per 60 degrees (s)
    latency: float = 0.040  #: host send -> wheels reacting (s)
    latency_jitter: float = 0.003  #: +- uniform jitter on the latency (s)
    # battery
    battery_soc: float = 0.97  #: state of charge at boot (0..1)
    battery_capacity: float = 1.2  #: (A h)
    battery_resistance: float = 0.07  #: pack + wiring (ohm)
    quiescent_current: float = 0.35  #: electronics and camera board (A)
    # sensors
    gyro_bias: float = 0.0  #: (rad/s)
    gyro_noise: float = 0.005  #: white noise std per sample (rad/s)
    accel_bias_x: float = 0.0  #: (m/s^2)
    accel_bias_y: float = 0.0  #: (m/s^2)
    accel_noise: float = 0.08  #: white noise std per sample (m/s^2)
    accel_vibration: float = 0.004  #: extra accel noise std per rad/s of wheel speed (m/s^2 s)
    imu_lowpass_hz: float = 42.0  #: the IMU's digital low-pass cut-off (Hz)
    vbat_noise: float = 0.008  #: pack voltage measurement noise std (V)
    clock_ppm: float = 0.0  #: microcontroller clock error (parts per million, + runs fast)
    clock_offset_us: int = 0  #: microcontroller clock at emulator start (us)
    # camera and room (read by render.py)
    cam_pitch_deg: float = 20.0  #: downward pitch (deg)
    cam_roll_deg: float = 0.0  #: mounting roll (deg)
    cam_hfov_deg: float = 100.0  #: horizontal field of view, edge to edge (deg)
    cam_distortion: float = -0.12  #: division-model barrel coefficient (normalised units)
    cam_latency: float = 0.06  #: exposure to frame leaving the camera board (s)
    cam_exposure: float = 1.0  #: overall gain
    cam_wb_r: float = 1.05  #: red white-balance gain
    cam_wb_b: float = 0.9  #: blue white-balance gain
    cam_noise: float = 3.0  #: sensor noise std (8-bit levels)
    floor_kind: str = "wood"  #: one of FLOOR_KINDS
    floor_rgb: tuple[int, int, int] = (150, 110, 75)  #: floor base colour
    wall_rgb: tuple[int, int, int] = (205, 200, 185)  #: wall colour
    room_x_min: float = -4.0  #: room walls (m, world frame of an episode)
    room_x_max: float = 5.0
    room_y_min: float = -4.0
    room_y_max: float = 4.0
    light_gain: float = 1.0  #: ceiling light strength (relative)

    @classmethod
    def sample(cls, rng: np.random.Generator) -> RealityParams:
        """Draw a reality inside the datasheet's ranges (uniform unless noted)."""
        u = rng.uniform
        p = cls(
            mass=u(1.03, 1.07),
            com_ahead_rear=u(0.07, 0.12),
            com_height=u(0.035, 0.055),
            yaw_inertia=u(0.004, 0.012),
            mu=u(0.55, 0.9),
            mu_slide_ratio=u(0.75, 0.92),
            cornering_front=u(6.0, 9.0),
            cornering_rear=u(10.0, 14.0),
            long_stiffness=u(9.0, 16.0),
            rolling_resistance=u(0.012, 0.03),
            drag=u(0.006, 0.02),
            gear_ratio=u(12.0, 18.0),
            motor_resistance=u(0.8, 1.6),
            rotor_inertia=u(1.5e-6, 4e-6),
            drivetrain_viscous=u(2e-5, 8e-5),
            drivetrain_coulomb=u(0.002, 0.006),
            esc_deadband=u(0.04, 0.10),
            brake_torque=u(0.22, 0.4),
            brake_dynamic=u(0.5, 1.0),
            steer_max=u(0.35, 0.45),
            steer_trim=u(-0.05, 0.05),
            servo_time_60=u(0.08, 0.15),
            latency=u(0.010, 0.080),
            battery_soc=u(0.92, 1.0),
            battery_capacity=u(0.9, 1.5),
            battery_resistance=u(0.04, 0.10),
            quiescent_current=u(0.25, 0.45),
            gyro_bias=rng.normal(0.0, 0.01),
            gyro_noise=u(0.003, 0.008),
            accel_bias_x=rng.normal(0.0, 0.15),
            accel_bias_y=rng.normal(0.0, 0.15),
            accel_noise=u(0.04, 0.12),
            accel_vibration=u(0.002, 0.006),
            imu_lowpass_hz=u(30.0, 50.0),
            clock_ppm=u(-40.0, 40.0),
            clock_offset_us=int(rng.integers(0, 2**32)),
            cam_pitch_deg=u(17.0, 23.0),
            cam_roll_deg=u(-1.5, 1.5),
            cam_hfov_deg=u(95.0, 105.0),
            cam_distortion=u(-0.16, -0.08),
            cam_latency=u(0.04, 0.09),
            cam_exposure=u(0.85, 1.15),
            cam_wb_r=u(0.95, 1.15),
            cam_wb_b=u(0.8, 1.0),
            cam_noise=u(2.0, 5.0),
            room_x_min=u(-4.5, -3.5),
            room_x_max=u(4.5, 6.0),
            room_y_min=u(-4.5, -3.5),
            room_y_max=u(3.5, 4.5),
            light_gain=u(0.85, 1.15),
        )
        kind = FLOOR_KINDS[int(rng.integers(0, len(FLOOR_KINDS)))]
        base = {"wood": (150, 105, 70), "lino": (120, 125, 120), "tiles": (175, 170, 160)}[kind]
        p.floor_kind = kind
        p.floor_rgb = tuple(int(np.clip(c + rng.normal(0, 15), 30, 230)) for c in base)  # type: ignore[assignment]
        p.wall_rgb = tuple(int(np.clip(c + rng.normal(0, 10), 120, 250)) for c in (210, 205, 190))  # type: ignore[assignment]
        p.motor_k = p.motor_k_for_top_speed(u(3.15, 3.85))
        return p

    def motor_k_for_top_speed(self, v_top: float) -> float:
        """The motor constant (N m/A) that gives steady top speed ``v_top`` (m/s) on a full
        battery at full throttle (no slip; drag, rolling and drivetrain losses balanced)."""
        R = self.wheel_radius
        w = v_top / R
        r_sum = self.motor_resistance + self.battery_resistance
        V = V_FULL - self.battery_resistance * self.quiescent_current
        load = (
            (self.rolling_resistance * self.mass * G + self.drag * v_top * v_top) * R
            + self.drivetrain_viscous * w
            + self.drivetrain_coulomb
        )
        # G k (V - k G w) / r_sum = load  ->  a k^2 - b k + load = 0, larger root
        a = self.gear_ratio**2 * w / r_sum
        b = self.gear_ratio * V / r_sum
        return (b + math.sqrt(b * b - 4 * a * load)) / (2 * a)

    def top_speed(self) -> float:
        """Steady top speed (m/s) on a full battery at full throttle (no slip), by bisection
        on the axle torque balance."""
        R = self.wheel_radius
        r_sum = self.motor_resistance + self.battery_resistance
        V = V_FULL - self.battery_resistance * self.quiescent_current
        kg = self.motor_k * self.gear_ratio

        def surplus(v: float) -> float:
            w = v / R
            drive = kg * (V - kg * w) / r_sum
            load = (
                (self.rolling_resistance * self.mass * G + self.drag * v * v) * R
                + self.drivetrain_viscous * w
                + self.drivetrain_coulomb
            )
            return drive - load

        lo, hi = 0.0, V / kg * R
        for _ in range(60):
            mid = 0.5 * (lo + hi)
            if surplus(mid) > 0.0:
                lo = mid
            else:
                hi = mid
        return 0.5 * (lo + hi)

    def as_dict(self) -> dict[str, Any]:
        """Every field as plain Python values (YAML/JSON friendly)."""
        d = dataclasses.asdict(self)
        d["floor_rgb"] = list(self.floor_rgb)
        d["wall_rgb"] = list(self.wall_rgb)
        return d

    @classmethod
    def from_yaml(cls, path: str | Path | None, seed: int = 0) -> RealityParams:
        """`sample` with ``seed``, then override any subset of fields from the YAML mapping
        in ``path`` (None: no overrides). Raises `UserError` (one line naming the file
        and the key) for a missing or unreadable file, an unknown key or a bad value.

        ``motor_k`` is re-derived when the file sets ``top_speed`` (m/s) instead.
        """
        p = cls.sample(np.random.default_rng([seed, 0]))
        if path is None:
            return p
        import yaml

        path = Path(path)
        try:
            data = yaml.safe_load(path.read_text())
        except OSError as e:
            raise UserError(f"{path}: cannot read reality file ({e.strerror or e})") from None
        except yaml.YAMLError as e:
            raise UserError(f"{path}: not valid YAML ({str(e).splitlines()[0]})") from None
        if data is None:
            return p
        if not isinstance(data, dict):
            raise UserError(f"{path}: a reality file must be a mapping of parameter: value")
        names = {f.name for f in dataclasses.fields(cls)}
        top = data.pop("top_speed", None)
        for key, value in data.items():
            if key not in names:
                raise UserError(f"{path}: unknown reality parameter {key!r}")
            cur = getattr(p, key)
            try:
                if isinstance(cur, str):
                    if key == "floor_kind" and value not in FLOOR_KINDS:
                        raise ValueError(f"one of {', '.join(FLOOR_KINDS)}")
                    new: Any = str(value)
                elif isinstance(cur, tuple):
                    if not isinstance(value, (list, tuple)) or len(value) != 3:
                        raise ValueError("three integers 0..255")
                    new = tuple(int(max(0, min(255, int(c)))) for c in value)
                elif isinstance(cur, int):
                    new = int(value)
                else:
                    if isinstance(value, bool) or not isinstance(value, (int, float)):
                        raise ValueError("a number")
                    new = float(value)
                    if not math.isfinite(new):
                        raise ValueError("a finite number")
            except (TypeError, ValueError) as e:
                raise UserError(f"{path}: reality parameter {key!r} must be {e}") from None
            setattr(p, key, new)
        if top is not None:
            if isinstance(top, bool) or not isinstance(top, (int, float)) or not 0.3 < top < 15:
                raise UserError(f"{path}: reality parameter 'top_speed' must be a speed in m/s")
            p.motor_k = p.motor_k_for_top_speed(float(top))
        return p


class Telemetry(NamedTuple):
    """The raw integers a TLM line carries (the microcontroller adds ack, t_us, flags)."""

    enc: int  #: encoder counts, int32
    gz: int  #: yaw rate (milli-degrees/s)
    ax: int  #: acceleration x (milli-g)
    ay: int  #: acceleration y (milli-g)
    vbat: int  #: pack voltage (mV)
    battery_low: bool  #: pack below 7.0 V (debounced)


def _wrap_i32(n: int) -> int:
    return ((n + 2**31) % 2**32) - 2**31


class CarReality:
    """The emulated car's physical state, stepped in `DT` substeps.

    Time ``t`` (s) is the reality's own clock, starting at 0; `command` takes
    stamps on the same clock. Inputs are normalised: steer and throttle in
    [-1, 1] (DRV fields / 1000). The car boots braked with the wheels straight.
    """

    def __init__(self, params: RealityParams, seed: int = 0) -> None:
        self.p = params
        self._rnd = random.Random(int(np.random.default_rng([seed, 1]).integers(0, 2**63)))
        self.t = 0.0
        # chassis (CoM velocities in the body frame; pose of the body origin in the world)
        self.x = self.y = self.yaw = 0.0
        self.vx = self.vy = self.r = 0.0
        # rear wheel spin (rad/s) and mean angle (rad)
        self.omega = 0.0
        self.theta = 0.0
        # servo horn angle (rad) and commands in effect
        self.servo = 0.0
        self.u_steer = 0.0
        self.u_throttle = -1.0
        self._queue: deque[tuple[float, float, float]] = deque()
        self._last_apply = 0.0
        # electrics
        self.soc = params.battery_soc
        self.v_term = ocv(self.soc)
        self.i_motor = 0.0
        self._v_adc = self.v_term
        self._v_slow = self.v_term
        # accelerations (specific force at the CoM, body frame) and IMU filter states
        self.ax_cg = 0.0
        self.ay_cg = 0.0
        self._ax_lag = 0.0
        self._imu_gz = 0.0
        self._imu_ax = 0.0
        self._imu_ay = 0.0
        self._derive()

    def _derive(self) -> None:
        p = self.p
        self.lr = p.com_ahead_rear
        self.lf = p.wheelbase - p.com_ahead_rear
        self.d_cg = p.com_ahead_rear - 0.5 * p.wheelbase  # CoM ahead of the body origin
        self.j_axle = p.wheel_inertia + p.rotor_inertia * p.gear_ratio**2
        self.kg = p.motor_k * p.gear_ratio  # axle torque per amp, back-EMF per axle rad/s
        self.servo_rate = (math.pi / 3.0) / p.servo_time_60
        self.imu_alpha = 1.0 - math.exp(-2.0 * math.pi * p.imu_lowpass_hz * DT)

    # -- inputs -------------------------------------------------------------------------

    def reset_pose(self) -> None:
        """The operator puts the car at rest at the origin heading +x. Battery, encoder,
        servo and pending commands carry on."""
        self.x = self.y = self.yaw = 0.0
        self.vx = self.vy = self.r = 0.0
        self.omega = 0.0
        self.ax_cg = self.ay_cg = self._ax_lag = 0.0

    def command(self, t: float, steer: float, throttle: float) -> None:
        """Queue a command received at time ``t`` (s); it takes effect one latency later.
        ``steer`` +1 = full left, ``throttle`` > 0 drives, < 0 brakes; both clamped to [-1, 1]."""
        p = self.p
        at = t + p.latency + self._rnd.uniform(-p.latency_jitter, p.latency_jitter)
        at = max(at, self._last_apply)
        self._last_apply = at
        self._queue.append((at, max(-1.0, min(1.0, steer)), max(-1.0, min(1.0, throttle))))

    # -- dynamics -----------------------------------------------------------------------

    def advance_to(self, t: float) -> None:
        """Step in `DT` substeps until the clock is within one substep of ``t`` (s)."""
        while self.t + DT <= t + 1e-12:
            self.step(DT)

    def step(self, dt: float = DT) -> None:
        """Advance the reality by ``dt`` seconds (semi-implicit Euler; keep ``dt`` <= 2 ms)."""
        p = self.p
        t = self.t + dt
        q = self._queue
        while q and q[0][0] <= t:
            _, self.u_steer, self.u_throttle = q.popleft()

        # steering servo: rate-limited horn, linkage to the average wheel angle
        target = self.u_steer * SERVO_THROW
        step = self.servo_rate * dt
        diff = target - self.servo
        self.servo += step if diff > step else (-step if diff < -step else diff)
        delta = p.steer_trim + p.steer_max * self.servo / SERVO_THROW

        vx, vy, r, omega = self.vx, self.vy, self.r, self.omega
        m = p.mass
        R = p.wheel_radius
        lf, lr = self.lf, self.lr
        mu = p.mu

        # loads with longitudinal transfer from the lagged acceleration
        mg = m * G
        shift = m * self._ax_lag * p.com_height / p.wheelbase
        fz_f = max(0.1 * mg, mg * lr / p.wheelbase - shift)
        fz_r = max(0.1 * mg, mg * lf / p.wheelbase + shift)

        # front axle: lateral brush force plus rolling resistance, in the wheel frame
        cd, sd = math.cos(delta), math.sin(delta)
        vyf = vy + lf * r
        vxw = vx * cd + vyf * sd
        vyw = -vx * sd + vyf * cd
        den_f = max(abs(vxw), V_EPS)
        cy_f = p.cornering_front * fz_f
        sig = cy_f * abs(vyw) / den_f / (mu * fz_f)
        gf = _brush_gain(sig, p.mu_slide_ratio)
        fyw = -cy_f * vyw / den_f * gf
        fxw = -p.rolling_resistance * fz_f * vxw / max(abs(vxw), 0.02)
        fx_f = fxw * cd - fyw * sd
        fy_f = fxw * sd + fyw * cd

        # rear axle: combined slip
        vyr = vy - lr * r
        wr = omega * R
        den_r = max(abs(vx), abs(wr), V_EPS)
        cx_r = p.long_stiffness * fz_r
        cy_r = p.cornering_rear * fz_r
        sx = (wr - vx) / den_r
        sy = -vyr / den_r
        sig = math.hypot(cx_r * sx, cy_r * sy) / (mu * fz_r)
        gr = _brush_gain(sig, p.mu_slide_ratio)
        fx_r = cx_r * sx * gr
        fy_r = cy_r * sy * gr

        # battery, ESC and motor
        u = self.u_throttle
        db = p.esc_deadband
        v_oc = ocv(self.soc)
        kg = self.kg
        j = self.j_axle
        k_tyre = cx_r * gr / den_r * R * R  # d(tyre torque)/d(omega), secant
        k_lin = k_tyre + p.drivetrain_viscous
        torque = -fx_r * R - p.drivetrain_viscous * omega
        coulomb = p.drivetrain_coulomb + p.rolling_resistance * fz_r * R
        i_m = 0.0
        duty = 0.0
        if u > db and v_oc > V_CUTOFF:
            duty = (u - db) / (1.0 - db)
            r_eff = p.motor_resistance + duty * duty * p.battery_resistance
            i_m = (duty * (v_oc - p.battery_resistance * p.quiescent_current) - kg * omega) / r_eff
            if i_m > 0.0:  # a non-synchronous ESC cannot drive current backwards
                torque += kg * i_m
                k_lin += kg * kg / r_eff
            else:
                i_m = 0.0
        elif u < -db:
            b = (-u - db) / (1.0 - db)
            kd = b * p.brake_dynamic * kg * kg / p.motor_resistance
            torque -= kd * omega
            k_lin += kd
            coulomb += b * p.brake_torque
        # implicit in the linear terms, Coulomb terms with stiction
        omega_free = omega + dt * torque / (j + dt * k_lin)
        imp = dt * coulomb / (j + dt * k_lin)
        if omega_free > imp:
            omega_new = omega_free - imp
        elif omega_free < -imp:
            omega_new = omega_free + imp
        else:
            omega_new = 0.0
        self.omega = omega_new
        self.theta += omega_new * dt
        self.i_motor = i_m

        i_bat = duty * i_m + p.quiescent_current
        self.v_term = v_oc - p.battery_resistance * i_bat
        self.soc = max(0.0, self.soc - i_bat * dt / (3600.0 * p.battery_capacity))

        # chassis: forces at the current state, diagonal-implicit in each velocity
        fx = fx_r + fx_f - p.drag * vx * abs(vx)
        fy = fy_r + fy_f
        mz = lf * fy_f - lr * fy_r
        ax = fx / m
        ay = fy / m
        k_vx = cx_r * gr / den_r
        kf = cy_f * gf / den_f
        kr = cy_r * gr / den_r
        k_vy = kf * cd * cd + kr
        k_r = kf * lf * lf + kr * lr * lr
        vx_new = vx + dt * (ax + r * vy) / (1.0 + dt * k_vx / m)
        vy_new = vy + dt * (ay - r * vx) / (1.0 + dt * k_vy / m)
        rdot = mz / p.yaw_inertia
        r_new = r + dt * rdot / (1.0 + dt * k_r / p.yaw_inertia)
        self.vx, self.vy, self.r = vx_new, vy_new, r_new

        # pose of the body origin: v_origin = v_cg + r x (-d_cg, 0)
        vyo = vy_new - r_new * self.d_cg
        yaw = self.yaw + r_new * dt
        cy, sy_ = math.cos(yaw), math.sin(yaw)
        self.x += (vx_new * cy - vyo * sy_) * dt
        self.y += (vx_new * sy_ + vyo * cy) * dt
        self.yaw = yaw

        # what the IMU at the origin feels (specific force), and its low-pass
        self.ax_cg, self.ay_cg = ax, ay
        self._ax_lag += (ax - self._ax_lag) * min(1.0, dt / 0.02)
        a_imu_x = ax + r_new * r_new * self.d_cg
        a_imu_y = ay - rdot * self.d_cg
        al = self.imu_alpha
        self._imu_gz += (r_new - self._imu_gz) * al
        self._imu_ax += (a_imu_x - self._imu_ax) * al
        self._imu_ay += (a_imu_y - self._imu_ay) * al
        self._v_adc += (self.v_term - self._v_adc) * min(1.0, dt / 0.005)
        self._v_slow += (self.v_term - self._v_slow) * (dt / 0.5)
        self.delta = delta
        self.t = t

    # -- outputs ------------------------------------------------------------------------

    def pose(self) -> tuple[float, float, float]:
        """Body origin ``(x, y, yaw)`` in the episode's world frame (m, m, rad)."""
        return (self.x, self.y, self.yaw)

    @property
    def encoder(self) -> int:
        """Encoder counts: the mean rear-wheel angle quantised at 116.4 counts/rev, int32."""
        return _wrap_i32(math.floor(self.theta * (ENCODER_COUNTS_PER_REV / (2.0 * math.pi))))

    def telemetry(self) -> Telemetry:
        """Sample the sensors now, as the microcontroller would for one TLM line."""
        p = self.p
        g = self._rnd.gauss
        vib = p.accel_vibration * abs(self.omega)
        gz = self._imu_gz + p.gyro_bias + g(0.0, p.gyro_noise)
        ax = self._imu_ax + p.accel_bias_x + g(0.0, p.accel_noise) + g(0.0, vib)
        ay = self._imu_ay + p.accel_bias_y + g(0.0, p.accel_noise) + g(0.0, vib)
        # MPU-6050 at +-2000 dps (16.4 LSB/dps) and +-4 g (8192 LSB/g)
        gz_lsb = max(-32768, min(32767, round(math.degrees(gz) * 16.4)))
        ax_lsb = max(-32768, min(32767, round(ax / G * 8192.0)))
        ay_lsb = max(-32768, min(32767, round(ay / G * 8192.0)))
        v = self._v_adc + g(0.0, p.vbat_noise)
        vbat_mv = int(round(v / 0.00244)) * 2.44  # 12-bit ADC over 0..10 V
        return Telemetry(
            enc=self.encoder,
            gz=round(gz_lsb * 1000.0 / 16.4),
            ax=round(ax_lsb * 1000.0 / 8192.0),
            ay=round(ay_lsb * 1000.0 / 8192.0),
            vbat=max(0, round(vbat_mv)),
            battery_low=self._v_slow < V_LOW,
        )

    def state(self) -> dict[str, float]:
        """Ground truth for tests and debugging (SI units)."""
        return {
            "t": self.t,
            "x": self.x,
            "y": self.y,
            "yaw": self.yaw,
            "vx": self.vx,
            "vy": self.vy,
            "r": self.r,
            "omega": self.omega,
            "wheel_speed": self.omega * self.p.wheel_radius,
            "delta": getattr(self, "delta", self.p.steer_trim),
            "servo": self.servo,
            "v_term": self.v_term,
            "soc": self.soc,
            "i_motor": self.i_motor,
            "u_steer": self.u_steer,
            "u_throttle": self.u_throttle,
        }


def _brush_gain(sig: float, slide_ratio: float) -> float:
    """Brush-model force / linear force at normalised slip ``sig`` = C|s| / (mu Fz) >= 0.

    Below ``sig`` = 3 the Fiala brush curve ``sig - sig^2/3 + sig^3/27`` (normalised to
    mu Fz); beyond it the tyre slides and the friction decays towards ``slide_ratio``.
    """
    if sig < 3.0:
        return 1.0 - sig / 3.0 + sig * sig / 27.0
    f = 1.0 - (1.0 - slide_ratio) * (1.0 - math.exp(-(sig - 3.0) / 2.0))
    return f / sig

"""The command path ahead of MuJoCo: latency, watchdog, ESC, steering map, Ackermann.

Everything here depends on the commands and the parameters only, never on the simulated
state, so for replay it is computed in numpy for a whole episode at once
(`control_sequence`) and the rollout runs entirely inside `mujoco.rollout`. The closed-loop
simulator uses `StreamingActuation`, the same rules one command at a time; a test checks
they agree.

Rules (rc_car.md):

- a command sent at host time t acts on the wheels at t + latency;
- before the first command, and whenever no command has acted for WATCHDOG_S, the car
  holds neutral steering (trim) and full brake;
- ESC, throttle t in [-1, 1], deadband d: t > d drives with duty (t - d) / (1 - d); t < -d
  brakes with duty (-t - d) / (1 - d); otherwise coast. It never reverses;
- mean front-wheel angle = trim + steer_max * clip(steer, -1, 1), split into left and
  right wheel angles by Ackermann geometry (both wheels' normals meet on the rear axle
  line); the servo's rate limit acts inside MuJoCo (model.py);
- the control of one physics step is the exact time average of this piecewise-constant
  signal over the step (so results vary continuously with latency, not in dt jumps).

Control vector per step (actuator order of constants.ACTUATORS):
[left wheel angle (rad), right wheel angle (rad), duty * Vbat (V), brake duty (0..1)].
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from realsim.logs.resample import step_average  # noqa: F401  (re-exported for callers)
from realsim.robots.rc_car import constants as C

# index of each signal in the per-command value vector (before multiplying duty by Vbat)
STEER_L, STEER_R, DUTY, BRAKE = 0, 1, 2, 3

_KAPPA = np.linspace(-8.0, 8.0, 4001)  # path curvature at the rear axle centre (1/m)
_DL = np.arctan(C.WHEELBASE * _KAPPA / (1 - _KAPPA * C.TRACK / 2))
_DR = np.arctan(C.WHEELBASE * _KAPPA / (1 + _KAPPA * C.TRACK / 2))
_DAVG = 0.5 * (_DL + _DR)


def ackermann(delta: np.ndarray | float) -> tuple[np.ndarray, np.ndarray]:
    """Left and right wheel angles (rad) whose mean is `delta` (rad), Ackermann geometry.

    Positive = left turn (the left wheel is then the inner one, with the larger angle).
    Shape: delta (...) -> two arrays (...).
    """
    d = np.asarray(delta, dtype=np.float64)
    return np.interp(d, _DAVG, _DL), np.interp(d, _DAVG, _DR)


def esc(throttle: np.ndarray, deadband: float) -> tuple[np.ndarray, np.ndarray]:
    """ESC map: throttle (...) in [-1, 1] -> (drive duty, brake duty), both (...) in [0, 1]."""
    t = np.clip(np.asarray(throttle, dtype=np.float64), -1.0, 1.0)
    scale = 1.0 / (1.0 - deadband)
    duty = np.clip((t - deadband) * scale, 0.0, 1.0)
    brake = np.clip((-t - deadband) * scale, 0.0, 1.0)
    return duty, brake


def command_values(action: np.ndarray, params: Mapping[str, float]) -> np.ndarray:
    """Per-command control values [steer_l, steer_r, duty, brake].

    action: Shape: (N, 2) [steer, throttle] in [-1, 1]. Returns Shape: (N, 4).
    """
    a = np.asarray(action, dtype=np.float64).reshape(-1, 2)
    delta = params["steer_trim"] + params["steer_max"] * np.clip(a[:, 0], -1.0, 1.0)
    dl, dr = ackermann(delta)
    duty, brake = esc(a[:, 1], params["deadband"])
    return np.stack([dl, dr, duty, brake], axis=1)


def neutral_values(params: Mapping[str, float]) -> np.ndarray:
    """Watchdog / boot state: neutral steering (trim), no drive, full brake. Shape: (4,)."""
    dl, dr = ackermann(params["steer_trim"])
    return np.array([float(dl), float(dr), 0.0, 1.0])


def command_events(
    command_t: np.ndarray, action: np.ndarray, params: Mapping[str, float]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Piecewise-constant control signal on the car's side of the latency.

    Returns (times (J,), values (J, 4), before (4,)): from times[j] on the signal is
    values[j] until times[j+1]; before times[0] it is `before` (boot: neutral + brake).
    Watchdog trips (a gap over WATCHDOG_S) are inserted as extra events.
    """
    t = np.asarray(command_t, dtype=np.float64).reshape(-1) + params["latency"]
    vals = command_values(action, params)
    neutral = neutral_values(params)
    if len(t) == 0:
        return np.zeros(0), np.zeros((0, 4)), neutral
    order = np.argsort(t, kind="stable")
    t, vals = t[order], vals[order]
    gaps = np.nonzero(np.diff(t) > C.WATCHDOG_S)[0]
    trips_t = np.r_[t[gaps] + C.WATCHDOG_S, t[-1] + C.WATCHDOG_S]
    all_t = np.r_[t, trips_t]
    all_v = np.vstack([vals, np.tile(neutral, (len(trips_t), 1))])
    order = np.argsort(all_t, kind="stable")  # a trip never ties with a command
    return all_t[order], all_v[order], neutral


def control_sequence(
    command_t: np.ndarray,
    action: np.ndarray,
    params: Mapping[str, float],
    t0: float,
    nstep: int,
    vbat_t: np.ndarray,
    vbat: np.ndarray,
    dt: float = C.TIMESTEP,
) -> np.ndarray:
    """Per-physics-step controls for an open-loop replay.

    command_t (N,) host send times (s), action (N, 2); physics step k spans
    [t0 + k dt, t0 + (k+1) dt]; the battery voltage (V) is the logged one, linearly
    interpolated (vbat_t (M,), vbat (M,)) at each step's midpoint.
    Returns Shape: (nstep, 4) in actuator order.
    """
    grid = t0 + dt * np.arange(nstep + 1)
    ev_t, ev_v, before = command_events(command_t, action, params)
    u = step_average(ev_t, ev_v, before, grid)
    v_mid = np.interp(grid[:-1] + 0.5 * dt, vbat_t, vbat)
    u[:, DUTY] *= v_mid
    return u


def initial_steer(
    command_t: np.ndarray, action: np.ndarray, params: Mapping[str, float], t0: float
) -> tuple[float, float]:
    """Wheel angles (rad) the servo holds at t0: the command acting then (settled)."""
    ev_t, ev_v, before = command_events(command_t, action, params)
    j = np.searchsorted(ev_t, t0, side="right") - 1
    v = before if j < 0 else ev_v[j]
    return float(v[STEER_L]), float(v[STEER_R])


class StreamingActuation:
    """The same command path, one command at a time (closed-loop simulation).

    `push(t_send, action)` queues a command (sent at host time t_send, s; times must not
    decrease); `average(t, dt)` is the control mean over [t, t + dt] with duty not yet
    multiplied by the battery voltage. Shape: (4,).
    """

    def __init__(self, params: Mapping[str, float]) -> None:
        self.params = params
        self.neutral = neutral_values(params)
        self._t: list[float] = []
        self._v: list[np.ndarray] = []

    def push(self, t_send: float, action: np.ndarray) -> None:
        """Queue a command sent at `t_send` (s); it acts at t_send + latency."""
        tau = float(t_send) + self.params["latency"]
        if self._t and tau < self._t[-1]:
            raise ValueError("commands must be pushed in time order")
        self._t.append(tau)
        self._v.append(command_values(np.asarray(action, dtype=np.float64), self.params)[0])

    def prune(self, t: float) -> None:
        """Forget commands superseded before time t (keeps memory bounded)."""
        j = int(np.searchsorted(self._t, t, side="right")) - 1
        if j > 0:
            del self._t[:j]
            del self._v[:j]

    def value(self, s: float) -> np.ndarray:
        """Signal at time s (watchdog included). Shape: (4,)."""
        j = int(np.searchsorted(self._t, s, side="right")) - 1
        if j < 0 or s >= self._t[j] + C.WATCHDOG_S:
            return self.neutral
        return self._v[j]

    def average(self, t: float, dt: float) -> np.ndarray:
        """Exact mean over [t, t + dt] of the piecewise-constant signal. Shape: (4,)."""
        end = t + dt
        cuts = [t]
        for tau in self._t:
            for c in (tau, tau + C.WATCHDOG_S):
                if t < c < end:
                    cuts.append(c)
        cuts = sorted(cuts) + [end]
        acc = np.zeros(4)
        for a, b in zip(cuts[:-1], cuts[1:], strict=True):
            if b > a:
                acc += self.value(0.5 * (a + b)) * (b - a)
        return acc / dt


def servo_rate(params: Mapping[str, float]) -> float:
    """Servo slew rate (rad/s) implied by servo_time_60."""
    return (math.pi / 3) / params["servo_time_60"]

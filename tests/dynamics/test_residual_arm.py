"""The arm's residual: the hybrid simulator, the closed-loop hook, training, the CLI.

Fast: a zero residual reproduces the fitted arm simulator bit for bit (open loop and
closed loop); a saturated residual's torque acts inside the step, within its bound, and
never makes the state jump; `ArmTaskEnv(residual=...)` runs through it; a one-pass
training writes a checkpoint that loads with weights_only=True and is the arm's;
another robot's checkpoint exits 2 with one line. Slow: `realsim train-residual arm`
then `realsim replay arm --residual`; a residual trained on logs of an arm whose two
servos are faster than the "fitted" parameters say halves the open-loop joint-angle
error of the fitted simulator on held-out logs.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from realsim.errors import UserError
from realsim.residual import (
    Residual,
    ResidualConfig,
    ResidualNet,
    load_residual,
    save_residual,
    zero_residual,
)
from realsim.robots.arm import constants as AC
from realsim.robots.arm import sim as arm_sim
from realsim.robots.arm.params import ArmParams
from realsim.sim import HybridArmSim, load_simulator, split_state
from sysid.synth import arm_commands, write_synthetic
from tests.conftest import assert_one_line_error, run_cli

ARM_CFG = ResidualConfig(robot="arm", history=2, hidden=(16,))


def _episodes(n: int, seconds: float, seed: int = 0) -> list[arm_sim.ReplayInput]:
    out = []
    for k in range(n):
        ct, ca = arm_commands(("sine", "steps", "smooth")[k % 3], seconds, seed + k)
        st = np.arange(0.01, seconds, 0.02)
        out.append(arm_sim.ReplayInput(ct, ca, st, qpos0=np.array(AC.HOME)))
    return out


def _saturated(bias: float) -> Residual:
    net = ResidualNet(ARM_CFG)
    with torch.no_grad():
        net.head.bias.fill_(bias)
    return Residual(net.eval(), {})


def test_arm_zero_residual_reproduces_fitted_simulator_exactly() -> None:
    p = ArmParams(latency=0.03, no_load_speed_wrist_roll=5.8, servo_kp=20.0)
    eps = _episodes(2, 1.5) + _episodes(1, 1.1, seed=7)  # unequal lengths
    ref = arm_sim.replay_batch([p], eps)[0]
    out = load_simulator("arm", p, zero_residual(ARM_CFG)).replay(eps)
    for a, b in zip(ref, out, strict=True):
        for k in a:
            np.testing.assert_array_equal(np.asarray(a[k]), np.asarray(b[k]), err_msg=k)


def test_arm_residual_torque_acts_inside_the_step_and_is_bounded() -> None:
    sim = load_simulator("arm", None, None)
    eps = _episodes(1, 1.5)
    plain = sim.rollout(eps, residual=None)[0]
    hyb = sim.rollout(eps, residual=_saturated(50.0))[0]
    assert np.allclose(hyb.out, ARM_CFG.max_out["tau_shoulder_pan"])  # at the bound, no more
    q0, v0 = split_state(sim.model, plain.state)
    q1, v1 = split_state(sim.model, hyb.state)
    r0, r1 = sim.layout.reduced(q0, v0), sim.layout.reduced(q1, v1)
    assert r1[-1, 0] > r0[-1, 0] + 0.02  # a positive torque pushed the pan joint positive
    # the state is integrated, never written: each period's end state is exactly MuJoCo
    # stepping its start state with the period's goals and the held torque
    P = ARM_CFG.period
    for j in (0, 7, 30):
        qf = sim.layout.force(hyb.out[j : j + 1], ARM_CFG.outputs, q1[j : j + 1])
        end = sim.advance(hyb.state[j : j + 1], hyb.warmstart[j : j + 1],
                          hyb.ctrl[None, j * P : (j + 1) * P], qf, nthread=1)
        np.testing.assert_array_equal(end[0], hyb.state[j + 1])
    assert not sim.layout.diverged(r1)


def test_arm_closed_loop_hook() -> None:
    p = ArmParams()
    a = arm_sim.ArmSim(p, noise=False)
    b = load_simulator("arm", p, zero_residual(ARM_CFG)).closed_loop(noise=False)
    c = HybridArmSim(p, _saturated(-50.0), noise=False)
    assert isinstance(b, HybridArmSim)
    for s in (a, b, c):
        s.reset(seed=1)
    rng = np.random.default_rng(0)
    for _ in range(25):
        act = rng.uniform(-0.3, 0.3, 6)
        ta, tb, tc = a.step(act), b.step(act), c.step(act)
        np.testing.assert_array_equal(ta["qpos"], tb["qpos"])
    assert tc["qpos"][0] < ta["qpos"][0] - 0.01  # the torque acts closed loop too
    assert np.all(c.data.qfrc_applied[c.hook._dofs] == -ARM_CFG.max_out["tau_shoulder_pan"])


def test_arm_task_env_runs_the_residual(tmp_path: Path) -> None:
    from realsim.robots.arm.scene import ArmRandomization, ArmTaskEnv

    path = save_residual(tmp_path / "arm.pt", _saturated(-50.0).net)
    env = ArmTaskEnv(randomization=ArmRandomization.none(), render=False, residual=str(path))
    plain = ArmTaskEnv(randomization=ArmRandomization.none(), render=False)
    o1, o0 = env.reset(seed=3), plain.reset(seed=3)
    for _ in range(10):
        o1, o0 = env.step(np.zeros(6)), plain.step(np.zeros(6))
    assert isinstance(env.sim, HybridArmSim)
    assert o1.telemetry["qpos"][0] < o0.telemetry["qpos"][0] - 0.01
    st = env.get_state()
    nxt = env.step(np.zeros(6)).telemetry["qpos"]
    env.set_state(st)
    np.testing.assert_array_equal(env.step(np.zeros(6)).telemetry["qpos"], nxt)
    car = save_residual(tmp_path / "car.pt", ResidualNet(ResidualConfig(hidden=(8,))))
    with pytest.raises(UserError, match="not arm"):
        ArmTaskEnv(render=False, residual=str(car))
    with pytest.raises(UserError):
        ArmTaskEnv(render=False, residual=str(tmp_path / "missing.pt"))


def _params_file(path: Path, values: dict[str, float]) -> Path:
    path.write_text(yaml.safe_dump({"robot": "arm", "params": {k: {"value": float(v)} for k, v in values.items()}}))
    return path


@pytest.fixture(scope="module")
def arm_log(tmp_path_factory) -> Path:
    p = tmp_path_factory.mktemp("arm_res") / "arm.h5"
    return write_synthetic(p, dict(ArmParams()), episodes=2, seconds=2.0, seed=1, robot="arm")


def test_arm_residual_trains_and_loads(tmp_path: Path, arm_log: Path) -> None:
    from dynamics.train import TrainConfig, train_residual

    prm = _params_file(tmp_path / "params.yaml", dict(ArmParams()))
    cfg = TrainConfig(robot="arm", params=str(prm), logs=[str(arm_log)], out=str(tmp_path / "arm.pt"),
                      holdout="0", passes=1, epochs=1, history=2, hidden=(16,), logdir=str(tmp_path / "tb"))
    res = train_residual(cfg, log=lambda s: None)
    assert "rmse_q" in res.metrics["fit_plus_residual"]["train"]
    blob = torch.load(res.path, weights_only=True)
    assert blob["config"]["robot"] == "arm" and blob["features"][0] == "q_shoulder_pan"
    loaded = load_residual(res.path, "arm")
    assert loaded.cfg.outputs == tuple(f"tau_{j}" for j in AC.ARM_JOINTS)
    x = np.random.default_rng(0).normal(size=(3, 2, 15))
    np.testing.assert_array_equal(loaded(x), res.residual(x))
    with pytest.raises(UserError, match="not rc_car"):
        load_residual(res.path, "rc_car")
    with pytest.raises(UserError, match="not rc_car"):
        load_simulator("rc_car", None, res.path)


def test_residual_of_another_robot_exits_2(tmp_path: Path, arm_log: Path) -> None:
    from dynamics.cli import parse_max_out

    car = save_residual(tmp_path / "car.pt", ResidualNet(ResidualConfig(hidden=(8,))))
    r = run_cli("replay", "arm", "--log", arm_log, "--out", tmp_path / "p.h5", "--residual", car)
    assert_one_line_error(r, "not arm")
    prm = _params_file(tmp_path / "params.yaml", dict(ArmParams()))
    r = run_cli("train-residual", "arm", "--params", prm, "--logs", arm_log, "--out", tmp_path / "r.pt",
                "--mode", "state")
    assert_one_line_error(r, "rc_car")
    with pytest.raises(UserError, match="--max-out"):
        parse_max_out("mz=0.5", "arm")
    assert parse_max_out("tau_wrist_roll=0.5", "arm") == {"tau_wrist_roll": 0.5}


@pytest.mark.slow
def test_train_residual_arm_cli_then_replay(tmp_path: Path, arm_log: Path) -> None:
    prm = _params_file(tmp_path / "params.yaml", dict(ArmParams()))
    ckpt = tmp_path / "arm.pt"
    r = run_cli("train-residual", "arm", "--params", prm, "--logs", arm_log, "--out", ckpt,
                "--holdout", "0", "--passes", "1", "--epochs", "1", "--history", "2", timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().splitlines()[-1] == f"residual={ckpt}"
    metrics = json.loads(r.stdout.strip().splitlines()[-2])
    assert "rmse_q" in metrics["fit_plus_residual"]["train"]
    out = tmp_path / "pred.h5"
    r = run_cli("replay", "arm", "--log", arm_log, "--out", out, "--params", prm, "--residual", ckpt)
    assert r.returncode == 0, r.stderr[-2000:]
    assert out.is_file()
    r = run_cli("replay", "rc_car", "--log", arm_log, "--out", tmp_path / "c.h5", "--residual", ckpt)
    assert r.returncode == 2


# Two servos faster than the "fitted" parameters say (less back-EMF damping): what the
# fitted simulator gets wrong is a velocity-dependent torque on those joints.
TRUE_FAST = {"no_load_speed_shoulder_pan": 5.4, "no_load_speed_wrist_roll": 5.6}
FITTED_SLOW = {"no_load_speed_shoulder_pan": 4.4, "no_load_speed_wrist_roll": 4.5}


@pytest.mark.slow
def test_arm_residual_halves_the_fitted_error(tmp_path: Path) -> None:
    from dynamics.data import load_episodes
    from dynamics.train import TrainConfig, evaluate, train_residual

    true = {**dict(ArmParams()), **TRUE_FAST}
    train_log = write_synthetic(tmp_path / "train.h5", true, episodes=6, seconds=6.0, seed=11, robot="arm")
    held_log = write_synthetic(tmp_path / "held.h5", true, episodes=3, seconds=6.0, seed=71, robot="arm")
    prm = _params_file(tmp_path / "fitted.yaml", {**dict(ArmParams()), **FITTED_SLOW})
    cfg = TrainConfig(robot="arm", params=str(prm), logs=[str(train_log)], out=str(tmp_path / "r.pt"),
                      holdout="0", passes=3, epochs=30, history=2, logdir=str(tmp_path / "tb"))
    res = train_residual(cfg, log=lambda s: None)
    sim = load_simulator("arm", prm, None)
    held = load_episodes([str(held_log)], "arm")
    fit_alone = evaluate(sim, held, None)
    hybrid = evaluate(sim, held, load_residual(res.path, "arm"))
    assert not hybrid["diverged"]
    assert hybrid["rmse_q"] <= 0.5 * fit_alone["rmse_q"], (hybrid["rmse_q"], fit_alone["rmse_q"])


def test_student_evaluation_takes_the_arm_residual(tmp_path: Path) -> None:
    """`train-student arm --residual` selects in the hybrid arm (the cycle passes it when the
    residual wins on validation); a car's checkpoint or a missing file is a UserError."""
    from realsim.robots.arm.scene import ArmTaskEnv
    from student.evaluate import corrected_sim_kwargs, make_env

    path = save_residual(tmp_path / "arm.pt", _saturated(-50.0).net)
    kw = corrected_sim_kwargs(residual=path, robot="arm")
    assert kw["residual"] == str(path.resolve())
    env = make_env("realsim.robots.arm.scene:ArmTaskEnv", {**kw, "render": False})
    assert isinstance(env, ArmTaskEnv) and env.residual is not None
    car = save_residual(tmp_path / "car.pt", ResidualNet(ResidualConfig(hidden=(8,))))
    with pytest.raises(UserError, match="arm"):
        corrected_sim_kwargs(residual=car, robot="arm")
    with pytest.raises(UserError):
        corrected_sim_kwargs(residual=tmp_path / "missing.pt", robot="arm")

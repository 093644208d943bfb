"""Residual dynamics: exactness of a zero residual, the checkpoint, the closed-loop hook,
the CLI's bad input, and recovery of a known added force law."""

from __future__ import annotations

import math
from pathlib import Path

import mujoco
import numpy as np
import pytest
import torch

from realsim.residual import (
    ResidualConfig,
    ResidualNet,
    load_residual,
    save_residual,
    zero_residual,
)
from realsim.robots.rc_car import constants as C
from realsim.robots.rc_car import sim as car_sim
from realsim.robots.rc_car.model import cached_model
from realsim.robots.rc_car.params import CarParams
from realsim.sim import load_simulator, split_state
from sysid.data import LogEpisode, signals_of
from sysid.synth import car_commands
from tests.conftest import assert_one_line_error, run_cli


def _episodes(n: int, seconds: float, seed: int = 0) -> list[car_sim.ReplayInput]:
    out = []
    for k in range(n):
        ct, ca = car_commands(("steps", "chirp", "prbs", "smooth")[k % 4], seconds, seed + k)
        st = np.arange(0.01, seconds, 0.02)
        out.append(car_sim.ReplayInput(ct, ca, st, np.full(len(st), 8.1 - 0.05 * k), enc0=1.5 * k))
    return out


def test_zero_residual_reproduces_fitted_simulator_exactly() -> None:
    p = CarParams({"latency": 0.05, "tyre_mu": 0.7}, strict=False)
    eps = _episodes(2, 3.0) + [_episodes(1, 2.3, seed=7)[0]]  # unequal lengths
    ref = car_sim.replay_batch([p], eps)[0]
    out = load_simulator("rc_car", p, zero_residual()).replay(eps)
    for a, b in zip(ref, out, strict=True):
        for k in a:
            np.testing.assert_array_equal(np.asarray(a[k]), np.asarray(b[k]), err_msg=k)


def test_residual_force_acts_inside_the_step_and_is_bounded() -> None:
    cfg = ResidualConfig(outputs=("fx",), history=2)
    net = ResidualNet(cfg)
    with torch.no_grad():
        net.head.bias.fill_(-50.0)  # saturates: fx = -bound, a brake
    sim = load_simulator("rc_car", None, None)
    eps = _episodes(1, 3.0)
    plain = sim.rollout(eps, residual=None)[0]
    from realsim.residual import Residual

    hyb = sim.rollout(eps, residual=Residual(net.eval(), {}))[0]
    assert np.allclose(hyb.out[:, 0], -cfg.max_out["fx"])
    q0, v0 = split_state(sim.model, plain.state)
    q1, v1 = split_state(sim.model, hyb.state)
    vx0 = sim.layout.reduced(q0, v0)[:, 0]
    vx1 = sim.layout.reduced(q1, v1)[:, 0]
    assert vx1[-1] < vx0[-1] - 0.1  # the braking force slowed the car
    # qpos/qvel never jump at period boundaries: the state is integrated, not written
    assert np.all(np.abs(np.diff(v1[:, 0])) < 0.2)


def test_steer_torque_acts_on_the_knuckles_and_its_linear_model_carries_it() -> None:
    """tau_steer (an actuator-level output) turns the wheels against the servo's P gain:
    a constant -bound moves the settled steering angle by -bound / STEER_KP, and nothing
    else is written; the linearised one-period maps see the steering angle as state."""
    from dynamics.data import sensitivities
    from realsim.residual import Residual

    cfg = ResidualConfig(outputs=("tau_steer",), history=2)
    assert ResidualConfig().outputs == ("fx", "fy", "mz", "tau", "tau_steer")  # the car's default
    net = ResidualNet(cfg)
    with torch.no_grad():
        net.head.bias.fill_(-50.0)  # saturates at -bound
    sim = load_simulator("rc_car", None, None)
    q = np.zeros((1, sim.model.nq))
    qf = sim.layout.force(np.array([[0.7]]), ("tau_steer",), q)
    assert set(np.flatnonzero(qf[0])) == set(sim.layout.steer_v) and np.allclose(qf[0, list(sim.layout.steer_v)], 0.7)
    ct = np.array([0.0, 1.0])
    ca = np.array([[0.5, 0.3], [0.5, 0.3]])  # steady steering, gentle throttle
    st = np.arange(0.01, 2.0, 0.02)
    ep = car_sim.ReplayInput(ct, ca, st, np.full(len(st), 8.0))
    plain = sim.rollout([ep], residual=None)[0]
    hyb = sim.rollout([ep], residual=Residual(net.eval(), {}))[0]
    s0 = sim.layout.reduced(*split_state(sim.model, plain.state))[:, 4]
    s1 = sim.layout.reduced(*split_state(sim.model, hyb.state))[:, 4]
    shift = np.median((s1 - s0)[len(s0) // 2 :])
    assert shift == pytest.approx(-cfg.max_out["tau_steer"] / C.STEER_KP, rel=0.1)
    A, G = sensitivities(sim, [hyb], cfg)
    assert A[0].shape[1:] == (5, 5) and G[0].shape[1:] == (5, 1)
    # more torque turns the wheels that way, settled within the period: 1 / STEER_KP per N m
    assert np.median(G[0][:, 4, 0]) == pytest.approx(1 / C.STEER_KP, rel=0.2)
    assert np.median(np.abs(A[0][len(s0) // 2 :, 2, 4])) > 0  # a steering change reaches the yaw rate


def test_hybrid_rollout_threads_do_not_change_results() -> None:
    net = ResidualNet(ResidualConfig(history=3))
    with torch.no_grad():
        net.head.weight.normal_(0, 0.3)
    from realsim.residual import Residual

    sim = load_simulator("rc_car", None, Residual(net.eval(), {}))
    eps = _episodes(3, 2.0) + [_episodes(1, 1.3, seed=5)[0]]
    one = sim.rollout(eps, nthread=1)
    two = sim.rollout(eps, nthread=2)
    assert np.any(one[0].out != 0)
    for a, b in zip(one, two, strict=True):
        for k in ("state", "warmstart", "feat", "out", "sens"):
            np.testing.assert_array_equal(getattr(a, k), getattr(b, k), err_msg=k)


def test_checkpoint_loads_with_weights_only(tmp_path: Path) -> None:
    net = ResidualNet(ResidualConfig(history=3, hidden=(16,)))
    net.set_normalisation(torch.arange(9.0), torch.ones(9) * 2)
    path = save_residual(tmp_path / "r.pt", net, {"note": "x", "n": np.float64(2.0)})
    blob = torch.load(path, weights_only=True)
    assert blob["config"]["history"] == 3
    res = load_residual(path)
    x = np.random.default_rng(0).normal(size=(4, 3, 9))
    np.testing.assert_array_equal(res(x), net.eval()(torch.as_tensor(x)).detach().numpy())
    assert res.meta["n"] == 2.0


def test_closed_loop_hook_zero_residual_matches_carsim() -> None:
    p = CarParams()
    a = car_sim.CarSim(p, noise=False)
    b = load_simulator("rc_car", p, zero_residual()).closed_loop(noise=False)
    a.reset(seed=1)
    b.reset(seed=1)
    rng = np.random.default_rng(0)
    for _ in range(60):
        act = rng.uniform(-1, 1, 2)
        ta, tb = a.step(act), b.step(act)
        for k in ("enc_rad", "yaw_rate", "accel"):
            np.testing.assert_array_equal(ta[k], tb[k])


def test_train_residual_bad_input(tmp_path: Path) -> None:
    p = run_cli("train-residual", "rc_car", "--params", tmp_path / "none.yaml",
                "--logs", tmp_path / "x.h5", "--out", tmp_path / "r.pt")
    if "invalid choice" in p.stderr:  # not wired into realsim.cli yet: the module entry
        import subprocess
        import sys

        p = subprocess.run([sys.executable, "-m", "dynamics.cli", "train-residual", "rc_car",
                            "--params", str(tmp_path / "none.yaml"), "--logs", str(tmp_path / "x.h5"),
                            "--out", str(tmp_path / "r.pt")], capture_output=True, text=True)
    assert_one_line_error(p, "none.yaml")


@pytest.mark.parametrize(("opt", "value", "needle"), [
    ("--hidden", "64,x", "--hidden"), ("--hidden", "0", "--hidden"),
    ("--weight-decay", "-1", "--weight-decay"), ("--lr", "0", "--lr"),
    ("--chunk", "-1", "--chunk"), ("--inner", "0", "--inner"), ("--clip", "-1", "--clip"),
    ("--ensemble", "0", "--ensemble"), ("--line-search", "2", "--line-search"),
    ("--max-radius", "-1", "--max-radius"), ("--max-radius", "nan", "--max-radius"),
    ("--outputs", "fx,steer", "--outputs"), ("--outputs", "fx,fx", "--outputs"),
])
def test_train_residual_bad_training_knob(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                         opt: str, value: str, needle: str) -> None:
    """A malformed network width, learning rate or weight decay: one line, exit 2."""
    from dynamics.cli import main

    for f in ("p.yaml", "x.h5"):
        (tmp_path / f).touch()
    rc = main(["train-residual", "rc_car", "--params", str(tmp_path / "p.yaml"), "--logs",
               str(tmp_path / "x.h5"), "--out", str(tmp_path / "r.pt"), opt, value])
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert rc == 2 and len(err) == 1 and needle in err[0], (rc, err)


# ---------------------------------------------------------------------------------------
# a known force law: extra drag F = -k |v| v on the chassis
# ---------------------------------------------------------------------------------------
K_DRAG = 0.12  # N s^2 / m^2


def drag_law_episode(p: CarParams, ep: car_sim.ReplayInput, k: float, name: str) -> LogEpisode:
    """The MuJoCo car plus drag -k |v| v (xfrc_applied at the chassis COM), Python step
    loop; noise-free sensors written as a log episode."""
    m = cached_model(p)
    d = mujoco.MjData(m)
    q, v = car_sim.initial_qpos_qvel(m, p, ep)
    mujoco.mj_resetData(m, d)
    d.qpos[:], d.qvel[:], d.time = q, v, float(ep.sensor_t[0])
    K = ep.nstep
    u = car_sim.control_sequence(ep.command_t, ep.action, p, float(ep.sensor_t[0]), K, ep.sensor_t, ep.vbat)
    body = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, C.CHASSIS_BODY)
    sens = np.empty((K, m.nsensordata))
    for i in range(K):
        d.ctrl[:] = u[i]
        vel = d.qvel[0:2]
        d.xfrc_applied[body, 0:2] = -k * math.hypot(*vel) * vel
        mujoco.mj_step(m, d)
        sens[i] = d.sensordata
    out = car_sim.sensors_on_times(sens, float(ep.sensor_t[0]), ep, p)
    fields = {f: np.asarray(out[f], float) for f in ("enc_rad", "yaw_rate", "accel", "vbat")}
    e = LogEpisode("law.h5", name, ep.command_t, ep.action, ep.sensor_t, fields)
    e.signals = signals_of(ep.sensor_t, fields)
    return e


@pytest.mark.slow
def test_residual_recovers_known_drag_law(tmp_path: Path) -> None:
    from dynamics.train import TrainConfig, train_residual

    p = CarParams()
    eps = [drag_law_episode(p, ep, K_DRAG, f"ep_{i:06d}") for i, ep in enumerate(_episodes(8, 8.0, seed=3))]
    cfg = TrainConfig(out=str(tmp_path / "law.pt"), holdout="0", outputs=("fx", "fy", "mz"),
                      passes=3, epochs=40, horizon=0, history=2, logdir=str(tmp_path / "tb"))
    res = train_residual(cfg, episodes=eps, log=lambda s: None)
    # regress the learned longitudinal force against the law's regressor on the visited states
    sim = load_simulator("rc_car", p, res.residual)
    trajs = sim.rollout([car_sim.ReplayInput(e.cmd_t, e.cmd_action, e.sensor_t, e.sensors["vbat"]) for e in eps])
    feat = np.concatenate([tr.feat[:-1] for tr in trajs])
    fx = np.concatenate([tr.out[:, 0] for tr in trajs])
    vx, vy = feat[:, 0], feat[:, 1]
    x = -np.hypot(vx, vy) * vx
    keep = np.abs(vx) > 0.5
    k_hat = float(np.sum(fx[keep] * x[keep]) / np.sum(x[keep] ** 2))
    assert abs(k_hat - K_DRAG) <= 0.1 * K_DRAG, k_hat


def test_train_residual_default_history_is_the_robots(tmp_path: Path) -> None:
    """No --history: the robot's own (the car 10 periods = 200 ms of commands, several
    times its latency plus lag; the arm unchanged at 5)."""
    import argparse

    from dynamics.cli import add_train_residual_arguments
    from dynamics.train import TrainConfig, train_residual
    from realsim.residual import robot_io

    a = add_train_residual_arguments(argparse.ArgumentParser()).parse_args(
        ["rc_car", "--params", "p.yaml", "--logs", "x.h5", "--out", "r.pt"])
    assert a.history is None and TrainConfig().history is None
    assert robot_io("rc_car").history == 10 and robot_io("arm").history == 5
    p = CarParams()
    eps = [drag_law_episode(p, ep, K_DRAG, f"ep_{i:06d}") for i, ep in enumerate(_episodes(2, 1.0))]
    cfg = TrainConfig(out=str(tmp_path / "h.pt"), holdout="0", passes=1, epochs=1, logdir=str(tmp_path / "tb"))
    res = train_residual(cfg, episodes=eps, log=lambda s: None)
    assert res.residual.cfg.history == 10
    assert load_residual(tmp_path / "h.pt").cfg.history == 10


def test_chunked_unroll_matches_the_whole_segment_unroll() -> None:
    """Chunks started from a whole unroll's own deltas give that unroll's predictions."""
    from dynamics.lightning import chunk_batch, unroll

    torch.manual_seed(0)
    cfg = ResidualConfig(history=4)
    net = ResidualNet(cfg)
    with torch.no_grad():
        net.head.weight.normal_(0, 0.3)
    B, J, S, n, F = 3, 23, 4, len(cfg.outputs), 9
    d = torch.float64
    b = {"A": 0.9 * torch.eye(S, dtype=d).expand(B, J, S, S) + 0.01 * torch.randn(B, J, S, S, dtype=d),
         "G": 0.1 * torch.randn(B, J, S, n, dtype=d), "fbar": torch.zeros(B, J, n, dtype=d),
         "sbar": torch.randn(B, J + 1, S, dtype=d), "feat": torch.randn(B, J + 3, F, dtype=d),
         "y": torch.randn(B, J, 2, dtype=d), "mask": torch.ones(B, J, dtype=d)}
    b["mask"][1, 20:] = 0
    with torch.no_grad():
        pred, _ = unroll(net, b, 4)
        cb = chunk_batch(b, pred, 5, 4)
        pc, _ = unroll(net, cb, 4, 0, cb["d0"])
    assert cb["A"].shape[:2] == (B * 5, 5)
    got = torch.cat(pc.split(B, dim=0), dim=1)[:, :J]
    torch.testing.assert_close(got, pred, rtol=1e-12, atol=1e-12)
    assert float(cb["mask"].sum()) == float(b["mask"].sum())


def test_chunked_training_runs(tmp_path: Path) -> None:
    from dynamics.train import TrainConfig, train_residual

    p = CarParams()
    eps = [drag_law_episode(p, ep, K_DRAG, f"ep_{i:06d}") for i, ep in enumerate(_episodes(2, 1.0))]
    cfg = TrainConfig(out=str(tmp_path / "c.pt"), holdout="0", passes=1, epochs=1, chunk=10, inner=2,
                      clip=1.0, logdir=str(tmp_path / "tb"))
    res = train_residual(cfg, episodes=eps, log=lambda s: None)
    assert load_residual(tmp_path / "c.pt").cfg.history == res.residual.cfg.history


@pytest.mark.parametrize("chunk", [0, 5])
def test_cosine_schedule_ends_each_pass_at_a_hundredth_of_the_rate(tmp_path: Path, chunk: int) -> None:
    """The cosine schedule steps once per batch and reaches lr / 100 at a pass's last
    batch, for whole-segment and chunked (manual optimisation) training alike; the
    constant one stays at lr; an unknown schedule is refused."""
    import lightning as L

    from dynamics.data import linearise
    from dynamics.lightning import ResidualDataModule, ResidualModule
    from realsim.sim import HybridSim

    p = CarParams()
    eps = [drag_law_episode(p, ep, K_DRAG, f"ep_{i:06d}") for i, ep in enumerate(_episodes(3, 0.6))]
    rcfg = ResidualConfig(history=2)
    sim = HybridSim("rc_car", p, None)
    lin, _ = linearise(sim, eps, None, rcfg, window=0)
    for schedule, want in (("cosine", 3e-3 / 100), ("constant", 3e-3)):
        mod = ResidualModule(ResidualNet(rcfg), [1.0, 10.0], lr=3e-3, schedule=schedule, chunk=chunk)
        dm = ResidualDataModule(rcfg.history, batch_size=1)
        dm.set_pass(lin, None)
        tr = L.Trainer(max_epochs=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                       enable_model_summary=False, num_sanity_val_steps=0)
        tr.fit(mod, datamodule=dm)
        lr = tr.optimizers[0].param_groups[0]["lr"]
        assert lr == pytest.approx(want, rel=1e-6), (schedule, lr)
    with pytest.raises(ValueError, match="schedule"):
        ResidualModule(ResidualNet(rcfg), [1.0, 10.0], schedule="linear")
    for f in ("p.yaml", "x.h5"):
        (tmp_path / f).touch()
    r = run_cli("train-residual", "rc_car", "--params", tmp_path / "p.yaml", "--logs", tmp_path / "x.h5",
                "--out", tmp_path / "r.pt", "--lr-schedule", "linear")
    assert_one_line_error(r, "--lr-schedule")


def test_contract_caps_the_spectral_radius_and_leaves_contracting_maps_alone() -> None:
    """A one-period map that expands (radius 12, as finite differences across backlash
    gave on an emulated arm) is scaled to radius 1; a contracting one is untouched; and
    unrolled over 400 periods, the contracted maps no longer blow a perturbation up."""
    from dynamics.data import contract

    rng = np.random.default_rng(0)
    stable = np.diag([0.9, 0.5, -0.3])
    expand = np.array([[1.0, 0.02, 0.0], [280.0, 0.2, 0.0], [0.0, 0.0, 0.95]])  # stiff servo across a stick
    assert np.abs(np.linalg.eigvals(expand)).max() > 2.0
    A = np.stack([stable if k % 4 else expand for k in range(400)])
    A = A + 1e-3 * rng.standard_normal(A.shape)
    got, share = contract(A, 1.0)
    rho = np.abs(np.linalg.eigvals(got)).max(-1)
    assert rho.max() <= 1.0 + 1e-9 and share == pytest.approx(0.25)
    np.testing.assert_array_equal(got[1], A[1])  # contracting: untouched
    d0 = np.ones(3)
    blow = np.linalg.norm(np.linalg.multi_dot(list(A[::-1])) @ d0)
    kept = np.linalg.norm(np.linalg.multi_dot(list(got[::-1])) @ d0)
    assert blow > 1e6 and kept < 1e3, (blow, kept)


def test_ensemble_averages_members_and_loads_weights_only(tmp_path: Path) -> None:
    """An ensemble checkpoint: the mean of its members, bounded, loads with
    weights_only=True; a single net's checkpoint keeps the old format (no 'members')."""
    from realsim.residual import ensemble_of

    torch.manual_seed(0)
    nets = [ResidualNet(ResidualConfig(history=3)) for _ in range(3)]
    for n in nets:
        with torch.no_grad():
            n.head.weight.normal_(0, 3.0)
    ens = ensemble_of(nets)
    x = torch.randn(7, 3, 9, dtype=torch.float64)
    torch.testing.assert_close(ens(x), sum(n(x) for n in nets) / 3)
    with torch.no_grad():
        assert bool((ens(x).abs() <= ens.bound).all())
    save_residual(tmp_path / "e.pt", ens)
    r = load_residual(tmp_path / "e.pt")
    assert r.cfg.members == 3
    torch.testing.assert_close(r.net(x), ens(x))
    save_residual(tmp_path / "one.pt", nets[0])
    assert "members" not in torch.load(tmp_path / "one.pt", weights_only=True)["config"]
    assert load_residual(tmp_path / "one.pt").cfg.members == 1
    z = ResidualNet(ResidualConfig(history=3, members=2)).zero_()
    with torch.no_grad():
        assert float(z(x).abs().max()) == 0.0


def test_ensemble_training_runs(tmp_path: Path) -> None:
    from dynamics.train import TrainConfig, train_residual

    p = CarParams()
    eps = [drag_law_episode(p, ep, K_DRAG, f"ep_{i:06d}") for i, ep in enumerate(_episodes(2, 1.0))]
    cfg = TrainConfig(out=str(tmp_path / "k.pt"), holdout="0", passes=1, epochs=1, ensemble=2,
                      logdir=str(tmp_path / "tb"))
    res = train_residual(cfg, episodes=eps, log=lambda s: None)
    assert res.residual.cfg.members == 2 and load_residual(tmp_path / "k.pt").cfg.members == 2

"""Throughput of data generation, fitting and training with 1 and 2 workers, as ratios.

    .venv/bin/python experiments/bench_scale.py [--episodes 8] [--trials 48] [--epochs 3]

- teach: `teacher.generate.teach` episodes/s with a process pool of 1 and 2 workers
  (and on a local 2-CPU Ray instance when Ray is installed);
- fit: `realsim fit` global-search trials/s with ``--workers 1`` and ``--workers 2``
  (one sqlite study; ``--jobs 1`` so that each worker is one core);
- train: residual training (`dynamics.lightning`) windows/s in one process and in
  DDP over gloo with 2 processes (`realsim.distributed.trainer_kwargs`).

Each line prints the 1-worker and 2-worker rates and their ratio; the load average
before and after is printed too (the ratios mean little on a loaded machine). The
training bench re-runs this file as ``... _train LOG OUT STRATEGY DEVICES EPOCHS``
(Lightning's ddp launcher re-runs that command for rank 1).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load() -> str:
    """The 1/5/15-minute load averages and the core count."""
    a, b, c = os.getloadavg()
    return f"load {a:.2f} {b:.2f} {c:.2f} on {os.cpu_count()} cores"


def bench_teach(tmp: Path, episodes: int) -> dict[str, float]:
    """Episodes/s of `teach` (small frames: the simulator and teacher dominate)."""
    from teacher.generate import TeachConfig, teach

    cfg = TeachConfig(seed=11, image_size=(120, 160))
    rates: dict[str, float] = {}
    for w in (1, 2):
        t0 = time.perf_counter()
        s = teach(tmp / f"teach{w}.h5", episodes, cfg, workers=w, progress=False)
        rates[f"pool {w}"] = s.written / (time.perf_counter() - t0)
    try:
        import ray
    except ImportError:
        return rates
    from teacher.ray_backend import teach_ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        teach_ray(tmp / "warm.h5", 2, cfg, workers=2, progress=False)  # workers start, import
        t0 = time.perf_counter()
        s = teach_ray(tmp / "teach_ray.h5", episodes, cfg, workers=2, progress=False)
        rates["ray 2"] = s.written / (time.perf_counter() - t0)
    finally:
        ray.shutdown()
    return rates


def bench_fit(tmp: Path, log: Path, trials: int) -> dict[str, float]:
    """Completed global-search trials per second over the search's span (first trial asked
    to last told, all workers). A helper joins after its start-up (interpreter, MuJoCo,
    logs: seconds), so short searches understate the 2-worker rate: use >= 96 trials."""
    import optuna

    rates: dict[str, float] = {}
    for w in (1, 2):
        out = tmp / f"fit{w}"
        cmd = [sys.executable, "-W", "ignore", "-m", "realsim", "fit", "rc_car", "--logs", str(log),
               "--out", str(out), "--trials", str(trials), "--batch", "8", "--jobs", "1",
               "--workers", str(w), "--search-seconds", "12", "--refine-seconds", "6",
               "--refine-iters", "1", "--free", "motor_gain,back_emf,latency,steer_max"]
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=1800, env=env)
        if r.returncode != 0:
            raise RuntimeError(r.stderr[-2000:])
        storage = f"sqlite:///{(out / 'study.db').resolve()}"
        (name,) = [s.study_name for s in optuna.get_all_study_summaries(storage)]
        trials_ = optuna.load_study(study_name=name, storage=storage).get_trials(
            states=(optuna.trial.TrialState.COMPLETE,))
        # the search's span: first trial started to last trial finished, all workers
        span = (max(t.datetime_complete for t in trials_) -  # type: ignore[type-var]
                min(t.datetime_start for t in trials_)).total_seconds()  # type: ignore[type-var]
        rates[f"workers {w}"] = len(trials_) / span
    return rates


def bench_train(tmp: Path, log: Path, epochs: int) -> dict[str, float]:
    """Training windows per second (rank 0's fit time) in 1 process and in DDP x 2."""
    rates: dict[str, float] = {}
    for name, strategy, dev in (("1 process", "auto", 1), ("ddp 2 (gloo)", "ddp", 2)):
        out = tmp / f"train_{strategy}"
        env = {k: v for k, v in os.environ.items() if k not in ("LOCAL_RANK", "RANK", "WORLD_SIZE")}
        env["OMP_NUM_THREADS"] = "1"
        r = subprocess.run([sys.executable, "-W", "ignore", __file__, "_train", str(log), str(out),
                            strategy, str(dev), str(epochs)], capture_output=True, text=True,
                           cwd=ROOT, env=env, timeout=1800)
        if r.returncode != 0:
            raise RuntimeError(r.stderr[-2000:])
        rep = json.loads((out / "rank0.json").read_text())
        rates[name] = rep["windows"] * epochs / rep["seconds"]
    return rates


def _train(log: str, out: str, strategy: str, devices: int, epochs: int) -> None:
    """One residual training run (the child of `bench_train`)."""
    import inspect
    import warnings

    import lightning as L
    import torch

    from dynamics.data import feature_stats, linearise, load_episodes, scales
    from dynamics.lightning import ResidualDataModule, ResidualModule
    from realsim.distributed import DistConfig, trainer_kwargs
    from realsim.residual import ResidualConfig, ResidualNet
    from realsim.sim import HybridSim, load_params

    torch.manual_seed(0)
    torch.set_num_threads(1)
    outdir = Path(out)
    outdir.mkdir(parents=True, exist_ok=True)
    eps = load_episodes([log], "rc_car")
    rcfg = ResidualConfig(robot="rc_car", history=5, period=10, hidden=(64, 64))
    sim = HybridSim("rc_car", load_params("rc_car", None), None)
    sim.period = rcfg.period
    lin, _ = linearise(sim, eps, None, rcfg, window=10)
    net = ResidualNet(rcfg)
    net.set_normalisation(*(torch.as_tensor(x) for x in feature_stats(lin)))
    module = ResidualModule(net, scales(eps), lr=3e-3)
    if "length" in inspect.signature(ResidualDataModule.__init__).parameters:
        dm = ResidualDataModule(10, rcfg.history, batch_size=8, seed=0)
    else:
        dm = ResidualDataModule(rcfg.history, batch_size=8, seed=0)
    dm.set_pass(lin, None)

    class Clock(L.Callback):
        def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
            self.t0 = time.perf_counter()

        def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
            rep = {"seconds": time.perf_counter() - self.t0, "world_size": trainer.world_size,
                   "windows": len(trainer.train_dataloader.dataset)}  # type: ignore[union-attr]
            (outdir / f"rank{trainer.global_rank}.json").write_text(json.dumps(rep))

    trainer = L.Trainer(max_epochs=epochs, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                        callbacks=[Clock()],
                        **trainer_kwargs(DistConfig(strategy=strategy, devices=devices)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(module, datamodule=dm)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "_train":
        a = sys.argv[2:]
        _train(a[0], a[1], a[2], int(a[3]), int(a[4]))
        return
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--episodes", type=int, default=8, help="teacher episodes per run")
    p.add_argument("--trials", type=int, default=96, help="fit trials per run")
    p.add_argument("--epochs", type=int, default=3, help="training epochs per run")
    p.add_argument("--only", choices=("teach", "fit", "train"), action="append")
    a = p.parse_args()
    os.environ.setdefault("MUJOCO_GL", "egl")
    from realsim.robots.rc_car.params import CarParams  # noqa: F401 - fail early if not installed
    from sysid.robot_adapter import get_adapter
    from sysid.synth import write_synthetic

    print(f"before: {load()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench_scale-") as d:
        tmp = Path(d)
        ad = get_adapter("rc_car")
        truth = {**ad.nominal, "motor_gain": 0.06, "back_emf": 0.082, "latency": 0.03, "steer_max": 0.42}
        log = write_synthetic(tmp / "synth.h5", truth, episodes=6, seconds=8.0, seed=3)
        only = a.only or ["teach", "fit", "train"]
        results: dict[str, dict[str, float]] = {}
        if "teach" in only:
            results["teach (episodes/s)"] = bench_teach(tmp, a.episodes)
        if "fit" in only:
            results["fit (trials/s)"] = bench_fit(tmp, log, a.trials)
        if "train" in only:
            results["train (windows/s)"] = bench_train(tmp, log, a.epochs)
    for what, r in results.items():
        base = next(iter(r.values()))
        cells = ", ".join(f"{k} {v:.3g}" + ("" if v is base else f" (x{v / base:.2f})") for k, v in r.items())
        print(f"{what}: {cells}")
    print(f"after: {load()}")
    print("ratios (2 workers / 1): " + ", ".join(
        f"{w.split(' ')[0]} x{list(r.values())[1] / list(r.values())[0]:.2f}" for w, r in results.items()))


if __name__ == "__main__":
    main()

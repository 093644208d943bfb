"""Training, selection by closed-loop success, checkpoints, the run-time policy."""

from __future__ import annotations

import hashlib
import math
import os
import sys
from pathlib import Path

import lightning as L
import numpy as np
import pytest
import torch
from student_helpers import FakeEnv, cone_image, synthetic_log

from student.config import StudentConfig
from student.dataset import _stack, load_dataset
from student.evaluate import EvalResult, Evaluator, run_episode
from student.features import TelemetryTracker, telemetry_features
from student.policy import PolicyRunner, load_checkpoint, model_from_checkpoint, save_checkpoint
from student.train import (
    ChunkDataModule,
    ClosedLoopSelection,
    StudentModule,
    chunk_loss,
    train_student,
)

FAKE_ENV = "student_helpers:FakeEnv"


def tiny_cfg(**kw) -> StudentConfig:
    base = dict(image_width=32, channels=(8, 16), feature_dim=32, hidden_dim=64, chunk_len=5,
                execute_n=2, batch_size=32, epochs=3, eval_every=1, eval_episodes=4,
                final_eval_episodes=4, eval_workers=0, footprint_samples=0, lr=3e-3, threads=1)
    base.update(kw)
    return StudentConfig(**base)


@pytest.fixture(scope="module")
def data_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return synthetic_log(tmp_path_factory.mktemp("d") / "d.h5", episodes=8)


def test_a_tiny_training_run_decreases_the_loss(data_path: Path) -> None:
    cfg = tiny_cfg()
    torch.manual_seed(0)
    data = load_dataset([data_path], cfg)
    mod = StudentModule(cfg, *data.telemetry_stats())
    dm = ChunkDataModule(data, data, cfg)
    batch = next(iter(dm.val_dataloader()))

    def loss() -> float:
        with torch.no_grad():
            return float(chunk_loss(mod(batch), batch["chunk"], batch["mask"]))

    before = loss()
    opt = torch.optim.AdamW(mod.parameters(), lr=3e-3)
    it = iter(dm.train_dataloader())
    for _ in range(40):
        try:
            b = next(it)
        except StopIteration:
            it = iter(dm.train_dataloader())
            b = next(it)
        opt.zero_grad()
        mod.training_step(b, 0).backward()
        opt.step()
    after = loss()
    assert after < 0.6 * before, (before, after)


class ScriptedEvaluator:
    """Success per evaluation from a script: the selection must follow it, not the val loss."""

    def __init__(self, rates: list[float]) -> None:
        self.rates, self.calls = list(rates), 0

    def evaluate(self, ck, episodes, seed0, **_):  # noqa: ANN001, ANN003, ANN201
        r = self.rates[self.calls]
        self.calls += 1
        return EvalResult(r, [{"seed": seed0 + i, "distractor": bool(i % 2), "success": 0,
                               "score": 0.0, "steps": 1} for i in range(episodes)])


def test_selection_keeps_the_best_closed_loop_checkpoint_not_the_lowest_val_loss(
        data_path: Path, tmp_path: Path) -> None:
    cfg = tiny_cfg(epochs=4, keep_all=True)
    data = load_dataset([data_path], cfg)
    mod = StudentModule(cfg, *data.telemetry_stats(), steps_per_epoch=len(data) // 32)
    out = tmp_path / "best.pt"
    ev = ScriptedEvaluator([0.2, 0.9, 0.5, 0.6])
    sel = ClosedLoopSelection(ev, cfg, out, {}, lambda m: None, 0.0)  # type: ignore[arg-type]
    tr = L.Trainer(max_epochs=4, accelerator="cpu", logger=False, callbacks=[sel],
                   enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                   num_sanity_val_steps=0)
    tr.fit(mod, datamodule=ChunkDataModule(data, data, cfg))
    assert ev.calls == 4
    vals = [h["val_loss"] for h in sel.history]
    assert all(math.isfinite(v) for v in vals)
    ck = torch.load(out, weights_only=True)
    assert ck["meta"]["epoch"] == 1 and ck["meta"]["sim_success"] == 0.9
    assert sel.best_epoch == 1
    kept = torch.load(sel.history[1]["checkpoint"], weights_only=True)
    for k, v in kept["state_dict"].items():
        assert torch.equal(v, ck["state_dict"][k])


def test_checkpoint_loads_weights_only_and_predicts_identically(data_path: Path, tmp_path: Path) -> None:
    cfg = tiny_cfg(history=3, execution="temporal_ensemble", ensemble_m=0.1)
    data = load_dataset([data_path], cfg)
    mod = StudentModule(cfg, *data.telemetry_stats())
    p = tmp_path / "c.pt"
    save_checkpoint(p, mod.policy, cfg, {"note": "x", "v": np.float32(1.5)})
    ck = torch.load(p, weights_only=True)
    assert ck["config"]["execution"] == "temporal_ensemble" and ck["config"]["ensemble_m"] == 0.1
    assert len(ck["norm"]["tel_mean"]) == 5
    model, cfg2, meta = load_checkpoint(p)
    assert cfg2 == cfg and meta["v"] == 1.5
    twin = model_from_checkpoint(torch.load(p, weights_only=True))
    mod.policy.eval()
    b = next(iter(ChunkDataModule(data, data, cfg).val_dataloader()))
    with torch.no_grad():
        y = model(b["img"], b["tel"], b["past"])
        assert torch.equal(y, twin(b["img"], b["tel"], b["past"]))
        # the training copy differs only in memory layout (channels_last): same numbers to rounding
        assert torch.allclose(mod.policy(b["img"], b["tel"], b["past"]), y, atol=1e-5)
    r1, r2 = PolicyRunner(twin, cfg), PolicyRunner.from_checkpoint(p)
    env = FakeEnv()
    obs = env.reset(3)
    for _ in range(12):
        a1 = r1.act(obs.telemetry, obs.frame_jpeg)
        a2 = r2.act(obs.telemetry, obs.frame_jpeg)
        assert np.array_equal(a1, a2)
        obs = env.step(a1)


def test_bad_checkpoint_is_a_user_error(tmp_path: Path) -> None:
    from realsim.errors import UserError

    p = tmp_path / "x.pt"
    p.write_bytes(b"not a checkpoint")
    with pytest.raises(UserError, match="not a student checkpoint"):
        load_checkpoint(p)


def test_train_student_end_to_end_selects_by_closed_loop_success(data_path: Path, tmp_path: Path) -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    cfg = tiny_cfg(epochs=4, eval_every=2, keep_all=True)
    res = train_student([data_path], tmp_path / "s.pt", cfg, env_spec=FAKE_ENV, log=lambda m: None)
    hist = res["history"]
    assert [h["epoch"] for h in hist] == [1, 3]
    best = max(h["success"] for h in hist)
    assert res["selection_success"] == best
    ck = torch.load(tmp_path / "s.pt", weights_only=True)
    assert ck["meta"]["sim_success"] == best and "sim_success_final" in ck["meta"]
    assert 0.0 <= res["success"] <= 1.0 and res["episodes"] == 4
    assert any((tmp_path / "s_tb").rglob("events.*")), "TensorBoard logs written"


def test_policy_source_acts_from_a_recorder_observation(data_path: Path, tmp_path: Path) -> None:
    from hardware.rc_car import Telemetry
    from hardware.recorder import Observation
    from student.deploy import PolicySource

    cfg = tiny_cfg(history=2)
    data = load_dataset([data_path], cfg)
    p = tmp_path / "c.pt"
    save_checkpoint(p, StudentModule(cfg, *data.telemetry_stats()).policy, cfg)
    src = PolicySource(p)
    assert src.name == f"policy:{p}"
    assert src.begin(0) == -1
    fields = Telemetry.__dataclass_fields__
    kw = dict(t_host=1.0, t_device=2.0, enc_rad=3.0, yaw_rate=0.1, accel=(0.2, -0.1), vbat=8.1,
              ack=4, flags=4)
    tlm = Telemetry(**{k: v for k, v in kw.items() if k in fields})
    a0 = src.act(Observation(t=0.0, telemetry=None, frame=None))
    assert a0.shape == (2,) and np.all(a0 == 0)
    jpeg = cone_image(200.0)
    for i in range(15):
        tlm = Telemetry(**{**{k: v for k, v in kw.items() if k in fields}, "t_device": 2.0 + 0.02 * i,
                           "enc_rad": 3.0 + 0.1 * i})
        a = src.act(Observation(t=0.02 * i, telemetry=tlm, frame=(1.0, jpeg)))
        assert a.shape == (2,) and np.all(np.abs(a) <= 1.0) and np.all(np.isfinite(a))


def test_frame_stacking_equals_concatenate_and_releases_the_blocks() -> None:
    rng = np.random.default_rng(0)
    blocks = [rng.integers(0, 255, (n, 3, 4, 3), dtype=np.uint8) for n in (5, 1, 7)]
    want = np.concatenate(blocks)
    got = _stack(list_ := list(blocks))
    assert np.array_equal(got, want) and got.dtype == np.uint8
    assert list_ == []  # emptied as it copied: no second full copy alive


_STACK_RSS = """
import os, sys
import numpy as np
import student.dataset as sd
if sys.argv[1] == "off":
    sd._release_freed_memory = lambda: None
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
x = np.ones((200, 60, 80, 3), np.uint8)
del x  # a freed mmapped block raises glibc's mmap threshold: later blocks go on the heap
blocks, small = [], []
for i in range(100):
    blocks.append(np.full((200, 60, 80, 3), i, np.uint8))
    small.append(np.ones(20000))  # the loader's other allocations between the blocks
size = sum(b.nbytes for b in blocks)
before = rss()
out = sd._stack(blocks, trim_bytes=32 << 20)
assert out[-1, 0, 0, 0] == 99
print((rss() - before) / size)
"""


@pytest.mark.skipif(not Path("/proc/self/statm").exists(),
                    reason="reads resident memory from /proc, trims glibc's heap")
@pytest.mark.parametrize("trim", [True, False])
def test_frame_stacking_does_not_hold_the_frames_twice(trim: bool) -> None:
    """2000 arm episodes once held 23.7 GB resident for 11.6 GB of frames: the freed
    per-episode blocks stayed on the C heap. The same pattern at 290 MB, in a fresh
    process, with the trim and (the known-bad case) without it."""
    import subprocess

    root = Path(__file__).resolve().parents[2]
    r = subprocess.run([sys.executable, "-c", _STACK_RSS, "on" if trim else "off"], cwd=root,
                       capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": str(root)})
    assert r.returncode == 0, r.stderr[-2000:]
    grown = float(r.stdout.split()[-1])
    if trim:
        assert grown < 0.35, grown
    else:  # the stacked copy comes on top of the freed blocks
        assert grown > 0.65, grown


def test_incremental_features_match_the_loader() -> None:
    rng = np.random.default_rng(0)
    n = 50
    t = np.cumsum(rng.uniform(0.015, 0.025, n))
    s = {"t_device": t + 5.0, "enc_rad": np.cumsum(rng.uniform(0, 0.3, n)) + 100,
         "yaw_rate": rng.normal(size=n), "accel": rng.normal(size=(n, 2)), "vbat": 8 - 0.01 * np.arange(n)}
    batch = telemetry_features(s, t)
    tr = TelemetryTracker()
    for i in range(n):
        row = tr.update({k: v[i] for k, v in s.items()})
        row2 = tr.update({k: v[i] for k, v in s.items()})  # the same sample again: unchanged
        assert np.allclose(row, batch[i], atol=1e-4) and np.array_equal(row, row2)


def test_evaluation_runs_in_worker_processes_like_in_process(data_path: Path) -> None:
    cfg = tiny_cfg()
    data = load_dataset([data_path], cfg)
    from student.policy import checkpoint_dict

    ck = checkpoint_dict(StudentModule(cfg, *data.telemetry_stats()).policy, cfg)
    here = Evaluator(0, FAKE_ENV).evaluate(ck, 4, 100, action_noise=0.05)
    os.environ["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])
    with Evaluator(2, FAKE_ENV) as ev:
        there = ev.evaluate(ck, 4, 100, action_noise=0.05)
    assert here.episodes == there.episodes
    assert [e["distractor"] for e in here.episodes] == [False, True, False, True]


def test_same_seed_gives_the_same_episode_in_simulation() -> None:
    """CarTaskEnv + a student policy: same seed, same frames, telemetry and actions."""
    os.environ.setdefault("MUJOCO_GL", "egl")
    from realsim.robots.rc_car.scene import CarTaskEnv

    torch.manual_seed(0)
    cfg = tiny_cfg()
    from student.model import StudentPolicy

    model = StudentPolicy(cfg).eval()
    env = CarTaskEnv(image_size=(120, 160))

    def trace(seed: int) -> str:
        h = hashlib.sha256()
        runner = PolicyRunner(model, cfg)
        obs = env.reset(seed, distractor=True)
        runner.reset()
        for _ in range(60):
            a = runner.act(obs.telemetry, obs.frame_jpeg)
            h.update(a.tobytes())
            h.update(repr(sorted((k, np.asarray(v).tolist()) for k, v in obs.telemetry.items())).encode())
            if obs.frame_jpeg is not None:
                h.update(obs.frame_jpeg)
            obs = env.step(a)
        return h.hexdigest()

    try:
        assert trace(5) == trace(5)
        assert trace(5) != trace(6)
    finally:
        env.close()


def test_run_episode_is_deterministic_on_the_stand_in_env(data_path: Path) -> None:
    cfg = tiny_cfg()
    model = StudentModule(cfg, np.zeros(5), np.ones(5)).policy.eval()
    r = [run_episode(PolicyRunner(model, cfg), FakeEnv(), 7, True, action_noise=0.1) for _ in range(2)]
    assert r[0] == r[1]


def test_model_from_checkpoint_roundtrip_of_history_inputs(data_path: Path) -> None:
    cfg = tiny_cfg(history=4)
    data = load_dataset([data_path], cfg)
    assert data.tel.shape[1] == 5 and data.past_actions.shape[1] == 4
    # the first sample of an episode has zero past actions and its telemetry clamped to the first
    first = np.flatnonzero(np.diff(np.r_[-1, data.episode]) != 0)
    assert np.all(data.past_actions[first] == 0)
    from student.policy import checkpoint_dict

    m = StudentModule(cfg, *data.telemetry_stats()).policy
    m2 = model_from_checkpoint(checkpoint_dict(m, cfg))
    assert torch.equal(m2.tel_std, m.tel_std)


def test_crop_band_input_shape_and_content() -> None:
    """crop_rows cuts camera rows first, then resizes at the band's own aspect ratio."""
    from realsim.errors import UserError
    from student.config import input_height
    from student.features import preprocess_jpeg

    cfg = StudentConfig(image_width=160, crop_rows=(32, 152))
    assert cfg.image_height == 60 == input_height(160, (32, 152))
    assert StudentConfig(image_width=80, crop_rows=None).image_height == 60
    img = preprocess_jpeg(cone_image(160.0, size=20), 160, (32, 152))
    assert img.shape == (60, 160, 3)
    # the orange block spans camera rows 110..130 -> band rows 78..98 -> input rows 39..49
    orange = (img[..., 0].astype(int) - img[..., 2]) > 100
    rows = np.flatnonzero(orange.any(1))
    assert 36 <= rows.min() and rows.max() <= 51, rows
    assert StudentConfig.from_dict(cfg.as_dict()) == cfg
    with pytest.raises(UserError, match="crop_rows"):
        StudentConfig(crop_rows=(100, 50))


def test_a_checkpoint_from_before_crop_rows_keeps_the_whole_frame() -> None:
    from student.policy import checkpoint_dict

    cfg = tiny_cfg(crop_rows=None)
    ck = checkpoint_dict(StudentModule(cfg, np.zeros(5), np.ones(5)).policy, cfg)
    del ck["config"]["crop_rows"]  # as written before the field existed
    model = model_from_checkpoint(ck)
    assert ck["config"]["crop_rows"] is None and model.cfg.image_height == 24


def test_training_threads_reads_the_machine_now_not_the_last_minute(monkeypatch: pytest.MonkeyPatch) -> None:
    """All cores unless other processes keep half of them busy *now*: a job that has just
    finished still weighs on the 1-minute load average, and once made a whole training
    run single-threaded on an idle machine."""
    import student.train as st

    monkeypatch.setattr(st.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(st.os, "getloadavg", lambda: (2.0, 2.0, 2.0))  # a teach run just ended
    monkeypatch.setattr(st.time, "sleep", lambda s: None)

    def tasks(seq: list[int | None]) -> None:
        it = iter(seq)
        monkeypatch.setattr(st, "_running_tasks", lambda: next(it))

    monkeypatch.setattr(st, "_own_running_threads", lambda: 1)
    tasks([1, 1, 2, 1, 1])  # this process alone, one blip of another task
    assert st.busy_cores() == 0.0
    tasks([1, 1, 2, 1, 1])
    assert st.training_threads(0) == 2
    tasks([2, 3, 2, 2, 3])  # another job holds a core: don't oversubscribe
    assert st.training_threads(0) == 1
    tasks([None])  # no /proc: the load average decides
    assert st.training_threads(0) == 1
    assert st.training_threads(3) == 3  # asked for is what you get


def test_busy_cores_does_not_count_this_process_s_own_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Read mid-training, torch's own spinning threads are runnable tasks too; counted as
    other work they would make a run drop itself to one thread."""
    import student.train as st

    monkeypatch.setattr(st.time, "sleep", lambda s: None)
    monkeypatch.setattr(st, "_running_tasks", lambda: 3)
    monkeypatch.setattr(st, "_own_running_threads", lambda: 3)  # all three are ours
    assert st.busy_cores() == 0.0
    monkeypatch.setattr(st, "_own_running_threads", lambda: 1)  # two are someone else's
    assert st.busy_cores() == 2.0


def test_own_running_threads_reads_this_process() -> None:
    import student.train as st

    assert 1 <= st._own_running_threads() <= max(1, len(list(Path("/proc/self/task").glob("*"))))


def test_training_threads_are_reread_at_every_epoch(monkeypatch: pytest.MonkeyPatch) -> None:
    """A core busy at the start must not pin the whole run to one thread: each epoch start
    reads the machine again (threads=0), and an explicit thread count is left alone."""
    from types import SimpleNamespace

    import student.train as st

    said: list[str] = []
    readings = iter([1, 2, 2])
    monkeypatch.setattr(st, "training_threads", lambda asked: next(readings))
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)  # as the start-time reading left it
        cb = st.EpochThreads(0, said.append)
        for epoch in range(3):
            cb.on_train_epoch_start(SimpleNamespace(current_epoch=epoch, world_size=1), None)
            assert torch.get_num_threads() == (1 if epoch == 0 else 2)
        assert len(said) == 1 and "2 training thread(s)" in said[0]
        st.EpochThreads(1, said.append).on_train_epoch_start(
            SimpleNamespace(current_epoch=3, world_size=1), None)
        assert torch.get_num_threads() == 2 and len(said) == 1  # asked for 1: not re-read
    finally:
        torch.set_num_threads(before)


def test_running_tasks_counts_this_process() -> None:
    import student.train as st

    n = st._running_tasks()
    if not Path("/proc/loadavg").exists():
        pytest.skip("no /proc")
    assert n is not None and n >= 1


def test_ema_weight_warms_up_then_holds_the_decay() -> None:
    from student.train import ema_weight

    assert ema_weight(0.999, 0) == pytest.approx(0.75)  # the first steps fade fast
    assert ema_weight(0.999, 2) == pytest.approx(3 / 6)
    assert ema_weight(0.999, 10_000) == pytest.approx(1e-3)  # then the decay itself
    assert ema_weight(0.0, 5) == 1.0  # decay 0: the newest weights alone


def test_ema_checkpoint_is_the_moving_average_not_the_last_weights(data_path: Path, tmp_path: Path) -> None:
    """With ema_decay the selected checkpoint holds the average the callback kept, which
    differs from the trained weights; without it, the trained weights themselves."""
    from student.train import EmaWeights

    cfg = tiny_cfg(epochs=2, eval_every=2, ema_decay=0.9, final_eval_episodes=0)
    seen: dict[str, object] = {}

    class Spy(L.Callback):
        def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
            assert isinstance(pl_module, StudentModule)
            seen["ema"] = pl_module.ema
            seen["raw"] = {k: v.clone() for k, v in pl_module.policy.state_dict().items()}
            seen["avg"] = {k: v.clone() for k, v in pl_module.eval_policy.state_dict().items()}

    import student.train as T

    orig = T.EpochThreads
    T.EpochThreads = lambda *a: Spy()  # type: ignore[assignment,misc]
    try:
        train_student([data_path], tmp_path / "e.pt", cfg, env_spec=FAKE_ENV, log=lambda m: None,
                      final_eval=False)
    finally:
        T.EpochThreads = orig  # type: ignore[misc]
    assert isinstance(seen["ema"], EmaWeights)
    raw, avg = seen["raw"], seen["avg"]
    saved = torch.load(tmp_path / "e.pt", weights_only=True)["state_dict"]
    conv = next(k for k in raw if k.endswith("weight") and raw[k].ndim == 4)
    assert not torch.allclose(raw[conv], avg[conv]), "the average differs from the last weights"
    assert torch.equal(saved[conv], avg[conv]), "the checkpoint holds the average"
    assert torch.equal(saved["tel_mean"], raw["tel_mean"]), "statistics copied, not averaged"

    with pytest.raises(Exception, match="ema_decay"):
        tiny_cfg(ema_decay=1.0)

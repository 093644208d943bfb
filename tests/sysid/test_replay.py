"""`replay`: log format out, episode for episode, equal to the simulator."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from realsim.logs import LogReader
from sysid.cli import main
from sysid.data import load_logs, make_segments


def test_replay_matches_sim(tmp_path: Path, synth_log: Path, adapter) -> None:
    out = tmp_path / "pred.h5"
    assert main(["replay", "rc_car", "--log", str(synth_log), "--out", str(out)]) == 0
    eps = load_logs([synth_log], adapter)
    sims = adapter.replay_batch([adapter.nominal], [s.inp for s in make_segments(eps, adapter)], 2)[0]
    with LogReader(out) as r, LogReader(synth_log) as src:
        assert r.source == "sim" and r.robot == "rc_car"
        assert r.episode_names == src.episode_names
        for name, sim in zip(r.episode_names, sims, strict=True):
            a, b = r.episode(name), src.episode(name)
            assert a.complete
            np.testing.assert_array_equal(a.sensors.t, b.sensors.t)
            np.testing.assert_array_equal(a.command.t, b.command.t)
            np.testing.assert_allclose(a.sensors["yaw_rate"], sim["yaw_rate"])
            np.testing.assert_allclose(a.sensors["accel"], sim["accel"])
            assert a.sensors["enc_rad"][0] == b.sensors["enc_rad"][0]

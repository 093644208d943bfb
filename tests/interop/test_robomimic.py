"""robomimic HDF5 export, checked field by field against robomimic's documented layout
(robomimic itself pulls in heavy dependencies and is not installed here)."""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np

from realsim.interop.robomimic import export_robomimic
from realsim.logs import LogReader, control_timeline


def test_layout_real(arm_log: Path, tmp_path: Path) -> None:
    out = tmp_path / "arm.hdf5"
    export_robomimic([arm_log], out, fps=50)
    with h5py.File(out, "r") as f, LogReader(arm_log) as r:
        data = f["data"]
        env_args = json.loads(data.attrs["env_args"])
        assert {"env_name", "env_type", "env_kwargs"} <= set(env_args)
        assert env_args["env_kwargs"]["robot"] == "arm"
        demos = sorted(data, key=lambda k: int(k.split("_")[1]))
        assert demos == ["demo_0", "demo_1"]
        assert data.attrs["total"] == sum(int(data[d].attrs["num_samples"]) for d in demos)
        for i, d in enumerate(demos):
            g = data[d]
            n = int(g.attrs["num_samples"])
            assert {"actions", "obs", "next_obs", "states", "rewards", "dones"} <= set(g)
            assert g["actions"].shape == (n, 6) and g["actions"].dtype == np.float32
            assert np.all(np.abs(g["actions"][()]) <= 1.0)
            assert g["obs/qpos"].shape == (n, 6) and g["obs/voltage"].shape == (n,)
            assert g["obs/front_image"].shape == (n, 24, 32, 3)
            assert g["obs/front_image"].dtype == np.uint8
            assert set(g["obs"]) == set(g["next_obs"])
            np.testing.assert_array_equal(g["next_obs/qpos"][:-1], g["obs/qpos"][1:])
            assert g["states"].shape[0] == n and g.attrs["states_source"] == "sensors"
            assert g["dones"][()].tolist() == [0] * (n - 1) + [1]
            ep = r.episode(i)
            assert g["rewards"][-1] == (1.0 if ep.success == 1 else 0.0)
            t0 = ep.sensors.t[0]
            tl = control_timeline(ep, 50.0, t0=t0, t1=t0 + (n - 1) / 50.0)
            np.testing.assert_allclose(g["obs/qpos"][()], tl["qpos"], atol=1e-6)
            np.testing.assert_allclose(g["actions"][()], tl["action"], atol=1e-7)


def test_sim_states_are_privileged(arm_sim_log: Path, tmp_path: Path) -> None:
    out = tmp_path / "sim.hdf5"
    export_robomimic([arm_sim_log], out, images=False)
    with h5py.File(out, "r") as f:
        g = f["data/demo_0"]
        assert g.attrs["states_source"] == "privileged"
        assert g["states"].shape[1] == 9
        assert json.loads(g.attrs["states_names"])[-3:] == ["cube_pos_0", "cube_pos_1", "cube_pos_2"]
        assert "front_image" not in g["obs"]

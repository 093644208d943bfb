"""robomimic HDF5 out of realsim logs.

Layout (robomimic's "Dataset Structure", docs/datasets/overview)::

    data                      attrs: total (samples in all demos), env_args (JSON:
                              env_name, env_type, env_kwargs)
    data/demo_<i>             attrs: num_samples; one demo per complete episode, in order
        actions     (N, A)    float32: realsim's command/action, already in [-1, 1]
                              (what robomimic's policies assume), held on each tick
        obs/<field> (N, ...)  float32: every sensor field of the log in SI units
                              (arm: qpos, qvel, load, voltage, temperature; car:
                              enc_rad, yaw_rate, accel, vbat)
        obs/<cam>_image (N, H, W, 3) uint8 RGB: the latest camera frame at each tick
        next_obs/<key>            obs shifted by one (the last row repeated)
        states      (N, D)    float32: sim logs: the privileged series (full
                              simulator state) concatenated; real logs have none, so
                              the robot-legal sensor vector stands in, for every
                              demo when the logs mix the two (attr ``states_source``
                              says which; ``states_names`` names the columns)
        rewards     (N,)      float32: 1 at the last step of a successful episode, else 0
        dones       (N,)      int64: 1 at the last step

``env_args.env_type`` is 2 (robomimic's GYM_TYPE): no robomimic environment
wraps realsim, so robomimic can train from the file but not roll a policy out;
evaluate with realsim's own simulator. ``env_kwargs`` carries the robot, the
source, the rate and the names of every column.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from realsim.errors import UserError
from realsim.interop.table import (
    SKIP_FIELDS,
    FrameCache,
    Rows,
    env_matrix,
    episode_rows,
    finite_or_zero,
    flatten,
    guess_fps,
    open_logs,
    warn,
)

GYM_TYPE = 2  # robomimic.envs.env_base.EnvType.GYM_TYPE


def _obs(rows: Rows, images: bool) -> dict[str, np.ndarray]:
    T = len(rows)
    obs = {k: finite_or_zero(v).reshape(T, *np.shape(v)[1:]).astype(np.float32)
           for k, v in sorted(rows.sensors.items())
           if k not in SKIP_FIELDS and np.asarray(v).dtype.kind in "biuf"}
    if images:
        for cam, idx in rows.frames.items():
            cache = FrameCache(rows.cameras[cam])
            first = cache.rgb(int(idx[0]))
            cache.size = (first.shape[1], first.shape[0])
            obs[f"{cam}_image"] = np.stack([cache.rgb(int(i)) for i in idx]).astype(np.uint8)
    return obs


def export_robomimic(paths: Sequence[str | Path], out: str | Path, fps: int | None = None,
                     images: bool = True) -> dict[str, Any]:
    """Write the complete episodes of ``paths`` (one robot) to robomimic HDF5 ``out``.

    Returns ``env_args``. One-line UserError for bad input.
    """
    import h5py

    out = Path(out)
    if out.exists():
        raise UserError(f"{out}: already exists; choose another --out")
    if not out.parent.is_dir():
        raise UserError(f"--out {out}: no such folder {out.parent}")
    with contextlib.ExitStack() as stack:
        robot, episodes = open_logs(stack, paths)
        fps = int(fps) if fps else guess_fps(episodes)
        if fps <= 0:
            raise UserError(f"--fps must be positive, got {fps}")
        total = 0
        kwargs: dict[str, Any] = {"robot": robot, "rate_hz": fps,
                                  "sources": [str(p) for p in paths]}
        tmp = out.with_name(out.name + ".partial")
        try:
            with h5py.File(tmp, "w") as f:
                data = f.create_group("data")
                all_rows = [episode_rows(ep, fps) for ep in episodes]
                widths = {env_matrix(r)[0].shape[1] for r in all_rows}
                privileged = all(r.env for r in all_rows) and len(widths) == 1
                if any(r.env for r in all_rows) and not privileged:
                    warn("states: not every episode has the same privileged data; "
                         "the sensor vector stands in for all")
                for i, (ep, rows) in enumerate(zip(episodes, all_rows, strict=True)):
                    T = len(rows)
                    g = data.create_group(f"demo_{i}")
                    g.attrs["num_samples"] = T
                    g.attrs["realsim_episode"] = ep.name
                    g.attrs["realsim_driver"] = ep.driver
                    g.create_dataset("actions", data=finite_or_zero(rows.action).astype(np.float32))
                    obs = _obs(rows, images)
                    for k, v in obs.items():
                        comp = {"compression": "gzip", "compression_opts": 4} if v.ndim == 4 else {}
                        g.create_dataset(f"obs/{k}", data=v, **comp)
                        nxt = np.concatenate([v[1:], v[-1:]]) if T else v
                        g.create_dataset(f"next_obs/{k}", data=nxt, **comp)
                    if privileged:
                        states, names = env_matrix(rows)
                        g.attrs["states_source"] = "privileged"
                    else:
                        vec = {k: v for k, v in obs.items() if v.ndim <= 2}
                        states, names = flatten(vec, sorted(vec), T)
                        g.attrs["states_source"] = "sensors"
                    g.attrs["states_names"] = json.dumps(names)
                    g.create_dataset("states", data=finite_or_zero(states).astype(np.float32))
                    rew = np.zeros(T, np.float32)
                    done = np.zeros(T, np.int64)
                    if T:
                        rew[-1] = 1.0 if ep.success == 1 else 0.0
                        done[-1] = 1
                    g.create_dataset("rewards", data=rew)
                    g.create_dataset("dones", data=done)
                    total += T
                    if i == 0:
                        kwargs["obs_keys"] = list(obs)
                        kwargs["action_dim"] = int(rows.action.shape[1])
                data.attrs["total"] = total
                env_args = {"env_name": f"realsim-{robot}", "env_type": GYM_TYPE,
                            "env_kwargs": kwargs}
                data.attrs["env_args"] = json.dumps(env_args)
            tmp.replace(out)
        finally:
            tmp.unlink(missing_ok=True)
    return env_args

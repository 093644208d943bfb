"""`realsim replay`: each episode's recorded commands, open loop, in the simulator.

Commands act at their recorded times (through the latency model), the robot
starts at rest in the state the episode's first sensor sample shows (the car at
the origin, the arm in its first measured pose), and the simulated sensors the
robot adapter names (``replay_fields``) are written on the log's own sensor
timestamps. The car: ``enc_rad`` continuing from the first logged value; ``vbat``,
``ack`` and ``flags`` copied from the log (not simulated). The arm: ``qpos``,
``qvel``, ``load``, ``temperature`` simulated, ``voltage`` the logged one.
Output: the log format, source="sim", same episode names.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from realsim.errors import UserError
from realsim.logs import LogReader, LogWriter
from sysid.data import load_logs, make_segments
from sysid.robot_adapter import get_adapter


def replay_log(robot: str, log: str, out: str, params: str | None = None,
               residual: str | None = None, nthread: int = 2) -> Path:
    """Replay every complete episode of ``log`` into ``out``. Returns ``out``."""
    ad = get_adapter(robot)
    values = {**ad.nominal, **(ad.load_params(params) if params else {})}
    if residual is not None and not Path(residual).is_file():
        raise UserError(f"no such file: {residual}")
    episodes = load_logs([log], ad)
    segs = make_segments(episodes, ad, 0.0)
    if residual is None:
        sims = ad.replay_batch([values], [s.inp for s in segs], nthread)[0]
    else:  # the hybrid simulator every consumer shares (fitted params + residual)
        from realsim.sim import load_simulator

        sims = load_simulator(robot, values, residual).replay([s.inp for s in segs], nthread)
    dst = Path(out)
    if dst.exists() and dst.resolve() == Path(log).resolve():
        raise UserError(f"{out}: would overwrite the input log")
    if dst.exists():
        dst.unlink()
    with LogReader(log) as r, LogWriter(dst, robot=robot, source="sim",
                                        attrs={"replay_of": str(log), "params": str(params or "nominal")}) as w:
        for e, sim in zip(episodes, sims, strict=True):
            src = r.episode(e.name)
            ep = w.begin_episode(driver=f"replay:{src.driver}",
                                 seed=src.seed, attrs={"replay_of": e.name})
            ep.add_commands(src.command.t, src.command["seq"], src.command["action"])
            m = len(src.sensors)
            ep.add_sensor_block(src.sensors.t, np.full(m, np.nan), **ad.replay_fields(sim, src.sensors))
            ep.close()
    _rename_check(dst, [e.name for e in episodes])
    return dst


def _rename_check(path: Path, names: list[str]) -> None:
    """The writer numbers episodes from 0; rename to the source names if they differ."""
    import h5py

    with h5py.File(path, "a") as f:
        g = f["episodes"]
        have = sorted(g)
        if have == names:
            return
        for i, old in enumerate(have):
            g.move(old, f"__tmp{i}")
        for i, new in enumerate(names):
            g.move(f"__tmp{i}", new)

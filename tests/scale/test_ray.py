"""Teacher generation and closed-loop evaluation on a local Ray instance give the same
episodes for the same seeds as the local process pool.

Skipped, with the reason, when Ray is not installed (it is in the dev extra).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install -e '.[ray]')")

from realsim.distributed import RayExecutor  # noqa: E402
from realsim.logs import LogReader  # noqa: E402
from teacher.generate import TeachConfig, teach  # noqa: E402
from teacher.ray_backend import teach_ray  # noqa: E402

CFG = TeachConfig(seed=5, image_size=(60, 80), camera_fps=10.0)


@pytest.fixture(scope="module")
def local_ray() -> Iterator[Any]:
    """A local Ray instance of 2 CPUs for this module."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield ray
    ray.shutdown()


def _episodes(path: Path) -> list[dict[str, Any]]:
    with LogReader(path) as r:
        out = []
        for e in r.episodes(privileged=True):
            out.append({"attrs": {k: e.attrs[k] for k in ("teach_index", "teach_seed", "teach_config")},
                        "seed": e.seed, "success": e.success, "score": e.score,
                        "command": {k: np.asarray(e.command[k]) for k in ("t", "action")},
                        "sensors": {k: np.asarray(e.sensors[k]) for k in ("t", "enc_rad", "yaw_rate", "accel")},
                        "jpeg": list(e.cameras["front"].jpeg),
                        "privileged": {k: np.asarray(v) for k, v in e.privileged.items()}})
        return out


def test_teacher_on_ray_writes_the_local_pools_episodes(tmp_path: Path, local_ray: Any) -> None:
    here = teach(tmp_path / "pool.h5", 3, CFG, workers=2, progress=False)
    there = teach_ray(tmp_path / "ray.h5", 3, CFG, workers=2, progress=False)
    assert (here.written, there.written) == (3, 3) and here.successes == there.successes
    a, b = _episodes(tmp_path / "pool.h5"), _episodes(tmp_path / "ray.h5")
    assert [e["attrs"]["teach_index"] for e in b] == [0, 1, 2]
    for x, y in zip(a, b, strict=True):
        assert x["attrs"] == y["attrs"] and x["seed"] == y["seed"]
        assert (x["success"], x["score"]) == (y["success"], y["score"])
        assert x["jpeg"] == y["jpeg"] and len(x["jpeg"]) > 3
        for group in ("command", "sensors", "privileged"):
            for k in x[group]:
                np.testing.assert_array_equal(x[group][k], y[group][k], err_msg=f"{group}/{k}")
    # resuming on Ray continues the file the pool wrote
    more = teach_ray(tmp_path / "pool.h5", 4, CFG, workers=2, progress=False)
    assert (more.written, more.total) == (1, 4)


def test_closed_loop_evaluation_on_ray_matches_the_local_pool(local_ray: Any) -> None:
    import torch

    from student.config import StudentConfig
    from student.evaluate import Evaluator, _worker_init
    from student.model import StudentPolicy
    from student.policy import checkpoint_dict

    torch.manual_seed(0)
    cfg = StudentConfig(image_width=32, channels=(8, 16), feature_dim=32, hidden_dim=64, chunk_len=5,
                        execute_n=2, footprint_samples=0, threads=1)
    ck = checkpoint_dict(StudentPolicy(cfg).eval(), cfg)
    env_kwargs = {"image_size": (60, 80)}
    kw = {"action_noise": 0.05, "seconds": 1.0}
    with Evaluator(2, env_kwargs=env_kwargs) as ev:
        here = ev.evaluate(ck, 4, 100, **kw)
    with Evaluator(2, env_kwargs=env_kwargs) as ev:
        # what the one-line hook in Evaluator._get_pool does with backend="ray"
        ev._pool = RayExecutor(2, initializer=_worker_init)  # type: ignore[assignment]
        there = ev.evaluate(ck, 4, 100, **kw)
    assert here.episodes == there.episodes
    assert [e["seed"] for e in there.episodes] == [100, 101, 102, 103]
    assert all(e["steps"] > 10 for e in there.episodes)

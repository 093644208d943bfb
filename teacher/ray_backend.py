"""Teacher data generation on Ray (``pip install 'realsim[ray]'``).

The same episodes as the local process pool: each episode is
`teacher.generate.generate_episode(cfg, k)`, a pure function of the run's config
and the episode index (its seed is ``scene.episode_seed(cfg.seed, k)``), computed
here as a Ray task instead of in a spawned process. The parent stays the only
writer and writes in episode order with `teacher.generate.write_episode`, so the
file (and resuming it) is the local pool's, byte for byte in every dataset.

    from teacher.ray_backend import teach_ray
    teach_ray("data.h5", 5000, TeachConfig(seed=0), workers=64)   # RAY_ADDRESS or local

On a cluster every node needs realsim installed (and, with a residual, the
checkpoint at the same path); ``address`` or ``RAY_ADDRESS`` names the cluster,
otherwise a local Ray instance starts.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator
from typing import Any

from realsim.distributed import RayExecutor
from teacher import generate as gen
from teacher.generate import EpisodeRecord, TeachConfig, TeachSummary


def _episode(job: tuple[TeachConfig, int]) -> EpisodeRecord:
    """One episode on a Ray worker (the local pool's `_worker`)."""
    return gen.generate_episode(*job)


def _init_worker() -> None:
    """What the local pool's initializer sets, before mujoco is imported on the worker."""
    os.environ.setdefault("MUJOCO_GL", "egl")
    os.environ.setdefault("OMP_NUM_THREADS", "1")


def ray_records(cfg: TeachConfig, todo: list[int], workers: int,
                address: str | None = None) -> Iterator[EpisodeRecord]:
    """Episodes ``todo`` of the run ``cfg`` as Ray tasks, yielded in ``todo`` order.

    ``workers`` bounds the episodes in flight (2 x workers, so results never pile up in
    the object store ahead of the writer); Ray decides where they run. The signature
    is `teacher.generate._records`'s, plus ``address``.
    """
    ex = RayExecutor(max(1, workers), initializer=_init_worker, address=address)
    try:
        yield from ex.imap(_episode, [(cfg, k) for k in todo], window=2 * max(1, workers))
    finally:
        ex.shutdown(wait=False, cancel_futures=True)


def teach_ray(out: str | os.PathLike[str], episodes: int, cfg: TeachConfig | None = None,
              workers: int = 2, progress: bool = True,
              on_episode: Callable[[EpisodeRecord], None] | None = None,
              address: str | None = None) -> TeachSummary:
    """`teacher.generate.teach` with its episodes computed on Ray (module doc)."""
    records = functools.partial(ray_records, address=address)
    kw: dict[str, Any] = {"workers": workers, "progress": progress, "on_episode": on_episode}
    return gen.teach(out, episodes, cfg, records=records, **kw)

"""Scale-out on existing engines, shared by every stage: Lightning Trainer arguments for
more than one process, and executors that run picklable work locally or on Ray.

Lightning (student and residual training)::

    d = DistConfig(strategy="ddp", devices=2, accelerator="cpu")      # gloo on CPU
    trainer = L.Trainer(max_epochs=..., **trainer_kwargs(d))

`trainer_kwargs` returns ``accelerator``, ``devices``, ``num_nodes`` and ``strategy``
(a `DDPStrategy` with the process-group backend chosen for the accelerator: gloo on
CPU, nccl on CUDA). The default `DistConfig()` is one CPU process, exactly the
single-machine default of the trainers (``accelerator="cpu", devices=1``).

Executors (teacher episodes, closed-loop evaluation)::

    with make_executor("ray", workers=8, initializer=init) as ex:   # or "local"
        for rec in ex.imap(fn, items): ...                            # in input order

``"local"`` is a spawn-context `ProcessPoolExecutor`; ``"ray"`` a `RayExecutor` (needs
``pip install realsim[ray]``): the same functions run as Ray tasks on a local instance
or on the cluster at ``address`` / ``RAY_ADDRESS``. Work is pure functions of its
arguments (episodes are functions of their seeds), so the backend never changes a
result, only where it is computed.

This module imports neither lightning nor ray at import time.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from realsim.errors import UserError

T = TypeVar("T")
R = TypeVar("R")

BACKENDS = ("local", "ray")
STRATEGIES = ("auto", "ddp", "ddp_spawn", "ddp_fork", "fsdp", "deepspeed")


# ---------------------------------------------------------------- Lightning
@dataclass(frozen=True)
class DistConfig:
    """How a Lightning fit spreads over processes and machines.

    strategy: "auto" (one process) or a Lightning strategy name ("ddp": one process
    per device, launched by re-running the command; "ddp_spawn": processes spawned
    per fit, weights handed back; "fsdp"/"deepspeed" for models too large for one
    device). devices: devices per node ("auto", an int, or e.g. "0,1").
    num_nodes: machines (with "ddp" under SLURM/torchrun; see README). accelerator:
    "cpu", "gpu", "auto". backend: process-group backend (None: gloo on CPU, nccl on GPU).
    precision: Lightning precision ("32-true", "bf16-mixed", "16-mixed").
    """

    strategy: str = "auto"
    devices: int | str = 1
    num_nodes: int = 1
    accelerator: str = "cpu"
    backend: str | None = None
    precision: str | None = None


def trainer_kwargs(d: DistConfig | None = None) -> dict[str, Any]:
    """Keyword arguments for `lightning.Trainer` from ``d`` (module doc)."""
    d = d or DistConfig()
    if d.num_nodes < 1:
        raise UserError("--num-nodes must be >= 1")
    kw: dict[str, Any] = {"accelerator": d.accelerator, "devices": d.devices, "num_nodes": d.num_nodes}
    if d.precision:
        kw["precision"] = d.precision
    if d.strategy in ("auto", "", None):
        kw["strategy"] = "auto"
        return kw
    if d.strategy.startswith("ddp"):
        from lightning.pytorch.strategies import DDPStrategy

        backend = d.backend or ("gloo" if d.accelerator == "cpu" else None)
        start = {"ddp": "popen", "ddp_spawn": "spawn", "ddp_fork": "fork"}.get(d.strategy)
        if start is None:
            raise UserError(f"--strategy {d.strategy}: expected one of {', '.join(STRATEGIES)}")
        # find_unused_parameters=False: every parameter of both models takes part in the loss
        kw["strategy"] = DDPStrategy(process_group_backend=backend, start_method=start,
                                     find_unused_parameters=False)
        return kw
    kw["strategy"] = d.strategy  # fsdp, deepspeed, ...: Lightning's own defaults
    return kw


def add_distributed_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``--strategy --devices --num-nodes --accelerator --precision`` for a training verb."""
    g = p.add_argument_group("scale-out (Lightning)")
    g.add_argument("--strategy", default="auto",
                   help="Lightning strategy: auto (one process), ddp, ddp_spawn, fsdp, deepspeed")
    g.add_argument("--devices", default="1", help="devices per node: N, auto, or a list like 0,1")
    g.add_argument("--num-nodes", type=int, default=1, help="machines taking part (ddp)")
    g.add_argument("--accelerator", default="cpu", help="cpu, gpu or auto")
    g.add_argument("--precision", default=None, help="e.g. 32-true, bf16-mixed, 16-mixed")
    return p


def dist_from_args(a: argparse.Namespace) -> DistConfig:
    """`DistConfig` from the options `add_distributed_arguments` added (defaults if absent)."""
    dev: int | str = getattr(a, "devices", "1")
    if isinstance(dev, str) and dev.isdigit():
        dev = int(dev)
    return DistConfig(strategy=getattr(a, "strategy", "auto"), devices=dev,
                      num_nodes=getattr(a, "num_nodes", 1), accelerator=getattr(a, "accelerator", "cpu"),
                      precision=getattr(a, "precision", None))


def is_global_zero() -> bool:
    """True in the process that should write files (rank 0, or when not distributed)."""
    for var in ("RANK", "SLURM_PROCID", "LOCAL_RANK"):
        if var in os.environ:
            return os.environ[var] == "0" and os.environ.get("NODE_RANK", "0") in ("0", "")
    return True


class _NullWriter:
    """Stands in for a SummaryWriter on ranks other than 0: every call does nothing."""

    def __getattr__(self, _name: str) -> Callable[..., None]:
        return lambda *a, **k: None


def rank_zero_writer(logdir: str | os.PathLike[str]) -> Any:
    """A TensorBoard ``SummaryWriter`` on rank 0, a do-nothing stand-in on the other ranks
    (Lightning's own loggers already write from rank 0 only)."""
    if not is_global_zero():
        return _NullWriter()
    from torch.utils.tensorboard import SummaryWriter

    return SummaryWriter(str(logdir))


# ---------------------------------------------------------------- executors
def _run_on_worker(initializer: Callable[..., Any] | None, initargs: tuple[Any, ...],
                   fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Body of every Ray task: the initializer once per worker process, then ``fn``."""
    key = (getattr(initializer, "__module__", None), getattr(initializer, "__qualname__", None), initargs)
    if initializer is not None and key not in _INITIALISED:
        initializer(*initargs)
        _INITIALISED.add(key)
    return fn(*args, **kwargs)


_INITIALISED: set[Any] = set()
_REMOTE: dict[float, Any] = {}


def ensure_ray(address: str | None = None, num_cpus: int | None = None) -> Any:
    """The ``ray`` module, connected: an existing connection, else ``address`` /
    ``RAY_ADDRESS``, else a new local instance (``num_cpus``: its size)."""
    try:
        import ray
    except ImportError:
        raise UserError("the Ray backend needs Ray: pip install 'realsim[ray]'") from None
    if not ray.is_initialized():
        os.environ.setdefault("MUJOCO_GL", "egl")  # workers of a local instance inherit it
        ray.init(address=address or os.environ.get("RAY_ADDRESS"), num_cpus=num_cpus,
                 include_dashboard=False, log_to_driver=False, configure_logging=False)
    return ray


class RayExecutor(Executor):
    """A `concurrent.futures.Executor` whose calls are Ray tasks (``num_cpus`` each).

    ``max_workers`` bounds the tasks `imap` keeps in flight (None: twice the cluster's
    CPUs); `submit` leaves scheduling to Ray. ``initializer(*initargs)`` runs once in
    each Ray worker process before its first call, as in `ProcessPoolExecutor`.
    Functions and arguments must be importable/picklable on the workers (on a cluster:
    realsim installed on every node).
    """

    def __init__(self, max_workers: int | None = None, initializer: Callable[..., Any] | None = None,
                 initargs: tuple[Any, ...] = (), *, address: str | None = None,
                 num_cpus: float = 1.0) -> None:
        self.ray = ensure_ray(address)
        self.max_workers = max_workers
        self.initializer, self.initargs = initializer, tuple(initargs)
        if num_cpus not in _REMOTE:
            _REMOTE[num_cpus] = self.ray.remote(num_cpus=num_cpus, max_retries=2)(_run_on_worker)
        self._task = _REMOTE[num_cpus]
        self._refs: list[Any] = []

    def submit(self, fn: Callable[..., R], /, *args: Any, **kwargs: Any) -> Future[R]:
        """Run ``fn(*args, **kwargs)`` as a Ray task; a standard Future of its result."""
        ref = self._task.remote(self.initializer, self.initargs, fn, args, kwargs)
        self._refs.append(ref)
        return ref.future()

    def imap(self, fn: Callable[[T], R], items: Iterable[T], window: int | None = None) -> Iterator[R]:
        """``fn(item)`` for every item, yielded in input order, at most ``window`` in flight."""
        if window is None:
            window = self.max_workers or 2 * int(self.ray.cluster_resources().get("CPU", 1))
        window = max(1, window)
        pending: deque[Any] = deque()
        it = iter(items)
        try:
            for item in it:
                pending.append(self._task.remote(self.initializer, self.initargs, fn, (item,), {}))
                if len(pending) >= window:
                    yield self.ray.get(pending.popleft())
            while pending:
                yield self.ray.get(pending.popleft())
        finally:
            for ref in pending:  # abandoned early (an error, a KeyboardInterrupt)
                self.ray.cancel(ref, force=True)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Cancel unfinished tasks if ``cancel_futures``; wait for the rest if ``wait``."""
        if cancel_futures:
            for ref in self._refs:
                try:
                    self.ray.cancel(ref, force=True)
                except Exception:  # noqa: BLE001 - finished or already gone
                    pass
        elif wait and self._refs:
            self.ray.wait(self._refs, num_returns=len(self._refs))
        self._refs = []


class LocalExecutor(ProcessPoolExecutor):
    """A spawn-context `ProcessPoolExecutor` with the same ordered, bounded `imap`."""

    def __init__(self, max_workers: int | None = None, initializer: Callable[..., Any] | None = None,
                 initargs: tuple[Any, ...] = ()) -> None:
        super().__init__(max_workers, mp_context=mp.get_context("spawn"), initializer=initializer,
                         initargs=initargs)
        self.n = max_workers or os.cpu_count() or 1

    def imap(self, fn: Callable[[T], R], items: Iterable[T], window: int | None = None) -> Iterator[R]:
        """``fn(item)`` for every item, yielded in input order, at most ``window`` in flight."""
        window = max(1, window or 2 * self.n)
        pending: deque[Future[R]] = deque()
        try:
            for item in items:
                pending.append(self.submit(fn, item))
                if len(pending) >= window:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            for f in pending:
                f.cancel()


def make_executor(backend: str = "local", workers: int | None = None,
                  initializer: Callable[..., Any] | None = None, initargs: tuple[Any, ...] = (),
                  address: str | None = None) -> LocalExecutor | RayExecutor:
    """An executor of ``backend`` ("local" processes or "ray" tasks; module doc)."""
    if backend == "local":
        return LocalExecutor(workers, initializer, initargs)
    if backend == "ray":
        return RayExecutor(workers, initializer, initargs, address=address)
    raise UserError(f"--backend {backend!r}: expected one of {', '.join(BACKENDS)}")

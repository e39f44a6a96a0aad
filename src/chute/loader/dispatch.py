"""The torch side: a sampler that turns a plan into tasks, and the DataLoader that runs them.

``TaskSampler`` yields one ``BatchTask`` per batch of this rank, from a start batch, computing
ids in chunks of 64 batches (one vectorised plan lookup instead of 64). The DataLoader is built
with ``batch_size=None`` over the ``BatchBuilder``: each task is one whole batch, dealt to the
workers round-robin and returned in task order (``in_order=True``).
"""

from __future__ import annotations

import contextlib
import multiprocessing.connection
import signal
from collections.abc import Iterator
from typing import Any

from chute._internal.lazy_torch import require_torch
from chute.errors import LoaderTimeout, SourceChanged
from chute.loader.worker import BatchReport, BatchTask
from chute.plan import Plan, TablePlan

__all__ = ["TaskSampler", "make_dataloader", "next_batch", "shutdown_workers"]


class TaskSampler:
    """Turns the current plan into ``BatchTask``s, from a start batch, computed in chunks."""

    CHUNK = 64

    def __init__(self) -> None:
        self.plan: Plan | None = None
        self.rank = self.epoch = self.start = 0

    def set(self, plan: Plan, rank: int, epoch: int, start: int) -> None:
        self.plan, self.rank, self.epoch, self.start = plan, rank, epoch, start

    def __len__(self) -> int:
        return 0 if self.plan is None else self.plan.num_batches - self.start

    def __iter__(self) -> Iterator[BatchTask]:
        plan, rank, epoch, start = self.plan, self.rank, self.epoch, self.start
        if plan is None:
            return
        total = plan.num_batches
        if isinstance(plan, TablePlan) and plan.packed:  # rows (and pieces) travel with the ids
            for k in range(start, total):
                ids, rows, spans = plan.layout(rank, k)
                cuts = None if spans is None else spans.ravel().tolist()
                yield BatchTask(epoch, k, ids.tolist(), rows.tolist(), cuts)  # type: ignore[union-attr]
            return
        for lo in range(start, total, self.CHUNK):
            for j, ids in enumerate(plan.batches(rank, lo, min(total, lo + self.CHUNK))):
                yield BatchTask(epoch, lo + j, ids.tolist())


def passthrough(item: Any) -> Any:
    """The DataLoader's collate_fn: the builder has collated already."""
    return item


def make_dataloader(
    builder: Any,
    sampler: TaskSampler,
    *,
    num_workers: int,
    pin_memory: bool,
    timeout: float,
    prefetch_factor: int | None,
    persistent_workers: bool,
    multiprocessing_context: Any,
    seed: int,
) -> Any:
    torch = require_torch()
    from torch.utils.data import DataLoader

    extra: dict[str, Any] = {}
    if num_workers:
        extra = {
            "timeout": timeout,
            "prefetch_factor": prefetch_factor,
            "persistent_workers": persistent_workers,
            "multiprocessing_context": multiprocessing_context,
        }
    return DataLoader(
        builder,
        batch_size=None,
        sampler=sampler,
        num_workers=num_workers,
        collate_fn=passthrough,
        pin_memory=pin_memory,
        # the workers' torch seeds come from here, not from the global RNG the model uses
        generator=torch.Generator().manual_seed(seed),
        in_order=True,
        **extra,
    )


def next_batch(
    it: Iterator[Any], plan: Plan, rank: int, epoch: int, k: int, timeout: float
) -> tuple[dict[str, Any], BatchReport]:
    """Batch ``k`` from the DataLoader iterator; a worker timeout becomes ``LoaderTimeout``."""
    try:
        batch, report = next(it)
    except (RuntimeError, ConnectionError, EOFError) as exc:
        if _bus_error(it, exc):
            with contextlib.suppress(RuntimeError):  # torch's report of the same death
                shutdown_workers(it, kill=True)
            raise SourceChanged(
                f"rank {rank}: a DataLoader worker was killed by SIGBUS (a bus error) while "
                f"reading batch {k} of epoch {epoch}: a file it had memory-mapped was cut short "
                f"under the run (a cache chunk, an index or lengths file rewritten or truncated "
                f"while the run read it), or /dev/shm is full; check a cache with `chute "
                f"validate CACHE` and re-open the source"
            ) from exc
        if not isinstance(exc, RuntimeError) or "timed out" not in str(exc):
            raise
        shutdown_workers(it, kill=True)
        ids = plan.batch(rank, k).tolist()
        shown = ", ".join(map(str, ids[:8])) + (", ..." if len(ids) > 8 else "")
        raise LoaderTimeout(
            f"rank {rank}: batch {k} of epoch {epoch} (sample ids [{shown}]) was not ready "
            f"after timeout={timeout} s. A sample is probably hanging in the recipe or while "
            f"reading; set sample_timeout to skip slow samples, or raise timeout if batches "
            f"legitimately take this long."
        ) from exc
    if report.step != k or report.epoch != epoch:
        raise RuntimeError(
            f"internal error: expected batch {k} of epoch {epoch}, got batch {report.step} of "
            f"epoch {report.epoch}"
        )
    return batch, report


def _bus_error(it: Any, exc: BaseException) -> bool:
    """Whether a worker of ``it`` died of SIGBUS (torch names it, or its exit code says so).

    A lost connection (``ConnectionError``, ``EOFError``) is the main process meeting a worker
    that is dying: its exit is waited for (the first of them, at most 2 s), and the worker
    reaped, since its sentinel closes a moment before its exit code can be read.
    """
    if "Bus error" in str(exc):
        return True
    workers = list(getattr(it, "_workers", ()))
    try:
        if isinstance(exc, ConnectionError | EOFError) and workers:
            ready = multiprocessing.connection.wait([w.sentinel for w in workers], timeout=2.0)
            for w in workers:  # its sentinel closes as it exits; join() reaps it (exit code)
                if w.sentinel in ready:
                    w.join(timeout=2.0)
        # is_alive() reaps a dead worker, which sets its exit code
        return any(not w.is_alive() and w.exitcode == -signal.SIGBUS for w in workers)
    except RuntimeError as late:  # torch's SIGCHLD handler raises where the main thread is
        return "Bus error" in str(late)


def shutdown_workers(it: Any, kill: bool = False) -> None:
    """Stop the workers of a DataLoader iterator now (``kill``: do not wait for a stuck one)."""
    if kill:
        for worker in getattr(it, "_workers", ()):
            if worker.is_alive():
                worker.terminate()
    stop = getattr(it, "_shutdown_workers", None)
    if stop is not None:
        stop()

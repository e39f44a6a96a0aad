"""The ``local`` engine: chunks run in a pool of processes on this machine, with no orphans.

Workers report records as they go through one shared counter (the progress bar moves within a
chunk, not only when one ends). On Linux each worker asks the kernel to kill it when its parent
dies (``PR_SET_PDEATHSIG``), so a SIGKILLed ``chute preprocess`` leaves no worker behind still
writing, and the next run starts from what was committed. Under torchrun or SLURM each rank runs
its own ``LocalEngine`` over its share of the chunks.

Example:
    >>> with LocalEngine(workers=2) as engine:  # doctest: +SKIP
    ...     engine.run_chunks(job, [0, 1, 2], on_done=lambda k, record: print(k))
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from typing import Any, ClassVar, TypeVar

from chute._internal.pools import pool_context, process_map, process_pool, stop_pool
from chute.cache.engines.base import Engine, OnDone, Progress, run_chunk
from chute.cache.writer import ChunkJob
from chute.world import World

__all__ = ["LocalEngine", "default_workers", "die_with_parent", "run_chunks"]

R = TypeVar("R")
_PR_SET_PDEATHSIG = 1
_WORKER: dict[str, Any] = {}


def default_workers() -> int:
    """This machine's usable cores, divided among the ranks launched on it."""
    return max(1, machine_cores() // World.detect().local_world_size)


def machine_cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


class LocalEngine(Engine):
    """Chunks in a pool of processes on this machine (the default engine).

    Args:
        workers: processes for chunks (default: this machine's cores divided by the ranks
            launched on it, ``LOCAL_WORLD_SIZE``).
    """

    name: ClassVar[str] = "local"

    def __init__(self, workers: int | None = None):
        self.workers = workers or default_workers()

    def run_chunks(
        self,
        job: ChunkJob,
        chunks: Sequence[int],
        *,
        on_done: OnDone,
        progress: Progress | None = None,
    ) -> None:
        run_chunks(job, chunks, workers=self.workers, on_done=on_done, progress=progress)

    def map(
        self, fn: Callable[[Any], R], items: Sequence[Any], *, limit: int | None = None
    ) -> Iterator[R]:
        """In a process pool of ``limit`` processes (default: ``workers``)."""
        return process_map(fn, items, workers=limit or self.workers)

    def describe(self) -> str:
        return f"local, {self.workers} process{'es' if self.workers > 1 else ''}"


def die_with_parent() -> None:
    """Linux: have the kernel SIGKILL this process when its parent dies (else: nothing)."""
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)


def _init(job: ChunkJob, counter: Any) -> None:
    die_with_parent()
    _WORKER["job"], _WORKER["counter"] = job, counter


def _count(n: int) -> None:
    counter = _WORKER["counter"]
    with counter.get_lock():
        counter.value += n


def _run(k: int) -> dict[str, Any]:
    return run_chunk(_WORKER["job"], k, _count)


def run_chunks(
    job: ChunkJob,
    chunks: Sequence[int],
    *,
    workers: int,
    on_done: OnDone,
    progress: Progress | None = None,
) -> None:
    """Build ``chunks`` (in this order) with ``workers`` processes; ``on_done`` per chunk.

    ``on_done`` runs in this process as chunks complete (in any order); an exception it raises,
    or one from a chunk, stops the pool (running chunks finish, queued ones are cancelled) and
    propagates. An interrupt (``KeyboardInterrupt``) ends the workers at once, running chunks
    included (``stop_pool``), and propagates. Chunks committed before that stay committed.
    """
    report = progress or (lambda n: None)
    if workers <= 1 or len(chunks) <= 1:
        for k in chunks:
            on_done(k, run_chunk(job, k, report))
        return
    ctx = pool_context()
    counter = ctx.Value("q", 0)
    pool = process_pool(min(workers, len(chunks)), _init, (job, counter), context=ctx)
    futures: dict[Future[dict[str, Any]], int] = {}
    try:
        futures = {pool.submit(_run, k): k for k in chunks}
        seen = 0
        while futures:
            done, _ = wait(futures, timeout=0.2, return_when=FIRST_COMPLETED)
            now = counter.value
            report(now - seen)
            seen = now
            for future in sorted(done, key=futures.__getitem__):
                k = futures.pop(future)
                on_done(k, future.result())
    except KeyboardInterrupt:
        stop_pool(pool)  # the workers never saw it (SIGINT to this process alone): end them
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)

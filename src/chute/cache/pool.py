"""Chunks run in a pool of processes, with a live progress count and no orphans.

Workers report records as they go through one shared counter (the progress bar moves within a
chunk, not only when one ends). On Linux each worker asks the kernel to kill it when its parent
dies (``PR_SET_PDEATHSIG``), so a SIGKILLed ``chute preprocess`` leaves no worker behind still
writing, and the next run starts from what was committed.

Example:
    >>> done = []
    >>> run_chunks(job, [0, 1, 2], workers=2, on_done=lambda k, r: done.append(k))  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from typing import Any

from chute._internal.pools import pool_context, process_pool
from chute.cache.writer import ChunkJob

__all__ = ["die_with_parent", "run_chunks"]

Progress = Callable[[int], None]
_PR_SET_PDEATHSIG = 1
_WORKER: dict[str, Any] = {}


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
    return _WORKER["job"].run(k, _count)


def run_chunks(
    job: ChunkJob,
    chunks: Sequence[int],
    *,
    workers: int,
    on_done: Callable[[int, dict[str, Any]], None],
    progress: Progress | None = None,
) -> None:
    """Build ``chunks`` (in this order) with ``workers`` processes; ``on_done`` per chunk.

    ``on_done`` runs in this process as chunks complete (in any order); an exception it raises,
    or one from a chunk, stops the pool (running chunks finish, queued ones are cancelled) and
    propagates. Chunks committed before that stay committed.
    """
    report = progress or (lambda n: None)
    if workers <= 1 or len(chunks) <= 1:
        for k in chunks:
            on_done(k, job.run(k, report))
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
    finally:
        pool.shutdown(wait=True, cancel_futures=True)

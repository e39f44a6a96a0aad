"""Process pools shared by validate, preprocess, the lengths pass and the pixel store.

A parent interrupted while it waits for its workers ends them with ``stop_pool`` rather than
waiting for tasks that may never end (SIGINT sent to the parent alone, as ``timeout`` does,
reaches no worker at all).

Example:
    >>> list(process_map(abs, [-1, 2, -3], workers=1))
    [1, 2, 3]
"""

from __future__ import annotations

import multiprocessing
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from multiprocessing.context import BaseContext
from typing import Any, TypeVar

from chute._internal.spelling import Spelling, current_spelling, spelling

__all__ = ["pool_context", "process_map", "process_pool", "stop_pool"]

R = TypeVar("R")


def pool_context() -> BaseContext:
    """The start method for chute's process pools: ``fork`` on Linux, else ``spawn``.

    Fork starts fast and shares the parent's imports and memory maps; chute's pools run only
    chute code, which holds no locks or threads at fork time.
    """
    method = "fork" if sys.platform.startswith("linux") else "spawn"
    return multiprocessing.get_context(method)


def process_pool(
    workers: int,
    initializer: Callable[..., None] | None = None,
    initargs: tuple[Any, ...] = (),
    *,
    context: BaseContext | None = None,
) -> ProcessPoolExecutor:
    """A pool of ``workers`` processes whose error messages spell parameters as this one does.

    Example:
        >>> with process_pool(1) as pool:
        ...     pool.submit(sum, [1, 2]).result()
        3
    """
    return ProcessPoolExecutor(
        max_workers=workers,
        mp_context=context or pool_context(),
        initializer=_enter,
        initargs=(current_spelling(), initializer, initargs),
    )


def process_map(
    fn: Callable[..., R], items: Sequence[Any], *, workers: int, shared: tuple[Any, ...] = ()
) -> Iterator[R]:
    """``fn(*shared, item)`` for every item, in order, in up to ``workers`` processes (1: here).

    ``shared`` (a source, a recipe) goes to each worker process once, when it starts, not with
    every item.

    Example:
        >>> list(process_map(divmod, [7, 9], workers=1, shared=(20,)))
        [(2, 6), (2, 2)]
    """
    if workers <= 1 or len(items) <= 1:
        for item in items:
            yield fn(*shared, item)
        return
    with process_pool(min(workers, len(items)), _hold, (fn, shared)) as pool:
        try:
            yield from pool.map(_call_held, items)
        except KeyboardInterrupt:
            stop_pool(pool)
            raise


def stop_pool(pool: ProcessPoolExecutor, grace: float = 5.0) -> None:
    """End ``pool`` now: cancel what is queued and end its workers, never wait for their tasks.

    Each worker gets SIGTERM, then SIGKILL if it still runs ``grace`` seconds later, and is
    joined; then the pool's manager thread, which sees its workers gone and ends. For an
    interrupt of the parent: its workers did not see it, and a normal shutdown waits for
    their tasks, which may take minutes or never end.

    Example:
        >>> pool = process_pool(1)
        >>> _ = pool.submit(time.sleep, 60)
        >>> t0 = time.monotonic(); stop_pool(pool); time.monotonic() - t0 < 10
        True
    """
    # no public way to the workers before Python 3.14 (terminate_workers)
    workers = list((getattr(pool, "_processes", None) or {}).values())
    manager = getattr(pool, "_executor_manager_thread", None)
    pool.shutdown(wait=False, cancel_futures=True)
    for p in workers:
        p.terminate()
    deadline = time.monotonic() + grace
    for p in workers:
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join(1.0)
    if manager is not None:
        # Until it ends, the interpreter's exit would wake it through a pipe it closed when
        # its workers died (an "Exception ignored" traceback on Python 3.11).
        manager.join(max(1.0, deadline - time.monotonic()))


_HELD: dict[str, Any] = {}  # in a worker: process_map's function and shared arguments


def _hold(fn: Callable[..., Any], shared: tuple[Any, ...]) -> None:
    _HELD["fn"], _HELD["shared"] = fn, shared


def _call_held(item: Any) -> Any:
    return _HELD["fn"](*_HELD["shared"], item)


def _enter(how: Spelling, initializer: Callable[..., None] | None, args: tuple[Any, ...]) -> None:
    # the worker keeps this spelling for its lifetime (the pool's workers serve one job)
    spelling(how).__enter__()
    if initializer is not None:
        initializer(*args)

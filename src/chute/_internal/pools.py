"""Process pools shared by validate, preprocess, the lengths pass and the pixel store.

Example:
    >>> list(process_map(abs, [-1, 2, -3], workers=1))
    [1, 2, 3]
"""

from __future__ import annotations

import multiprocessing
import sys
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from multiprocessing.context import BaseContext
from typing import Any, TypeVar

from chute._internal.spelling import Spelling, current_spelling, spelling

__all__ = ["pool_context", "process_map", "process_pool"]

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


def process_map(fn: Callable[[Any], R], items: Sequence[Any], *, workers: int) -> Iterator[R]:
    """``fn(item)`` for every item, in order, in up to ``workers`` processes (1: here)."""
    if workers <= 1 or len(items) <= 1:
        yield from map(fn, items)
        return
    with process_pool(min(workers, len(items))) as pool:
        yield from pool.map(fn, items)


def _enter(how: Spelling, initializer: Callable[..., None] | None, args: tuple[Any, ...]) -> None:
    # the worker keeps this spelling for its lifetime (the pool's workers serve one job)
    spelling(how).__enter__()
    if initializer is not None:
        initializer(*args)

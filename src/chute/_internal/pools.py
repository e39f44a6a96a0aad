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
        yield from pool.map(_call_held, items)


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

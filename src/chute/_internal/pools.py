"""Process-pool plumbing shared by validate, preprocess and length passes.

Example:
    >>> process_map(abs, [-1, 2, -3], workers=1)
    [1, 2, 3]
"""

from __future__ import annotations

import multiprocessing
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from multiprocessing.context import BaseContext
from typing import Any, TypeVar

__all__ = ["pool_context", "process_map"]

R = TypeVar("R")


def pool_context() -> BaseContext:
    """The start method for chute's process pools: ``fork`` on Linux, else ``spawn``.

    Fork starts fast and shares the parent's imports and memory maps; chute's pools run only
    chute code, which holds no locks or threads at fork time.
    """
    method = "fork" if sys.platform.startswith("linux") else "spawn"
    return multiprocessing.get_context(method)


def process_map(fn: Callable[[Any], R], items: Sequence[Any], *, workers: int) -> list[R]:
    """``[fn(item) for item in items]`` in up to ``workers`` processes (in order; 1: here)."""
    if workers <= 1 or len(items) <= 1:
        return [fn(item) for item in items]
    with ProcessPoolExecutor(min(workers, len(items)), mp_context=pool_context()) as pool:
        return list(pool.map(fn, items))

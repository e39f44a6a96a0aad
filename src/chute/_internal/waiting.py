"""Waiting for another process's result: poll with a growing pause, give up after a timeout.

Local ranks other than 0 wait this way for what local rank 0 writes once per node (the lengths
cache, the content hashes), instead of computing it again beside it.

Example:
    >>> tries = iter([None, None, 42])
    >>> poll(lambda: next(tries), timeout=5.0, first=0.001)
    42
    >>> poll(lambda: None, timeout=0.01, first=0.001) is None
    True
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

__all__ = ["poll"]

T = TypeVar("T")


def poll(
    read: Callable[[], T | None], timeout: float, *, first: float = 0.05, most: float = 2.0
) -> T | None:
    """``read()`` until it returns something; ``None`` once ``timeout`` seconds have passed.

    The pause between tries doubles from ``first`` to ``most`` seconds: a result written in a
    second is seen at once, one written in an hour costs a read every two seconds.
    """
    deadline = time.monotonic() + timeout
    delay = first
    while True:
        found = read()
        if found is not None:
            return found
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        time.sleep(min(delay, left))
        delay = min(most, delay * 2)

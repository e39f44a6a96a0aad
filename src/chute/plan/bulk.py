"""Array steps of 100M-sample plans that keep memory to a few bytes per sample.

Length-aware plans handle every sample of an epoch; at 100M samples one int64 array is 800 MB,
so these helpers work in chunks of at most ``CHUNK`` samples and keep ids in 32 bits where they
fit::

    order (lazy: a shuffle) ──► chunk of 4M ids ──► lengths ──► sort / count / place
                                                                  into one int32 array

Nothing here depends on how many chunks there are: results equal those of the one-shot numpy
versions (tested), so plans stay pure functions of (lengths, seed, epoch, world).

Example:
    >>> take_segments(np.array([10, 11, 12, 13, 14]), np.array([3, 0]), np.array([2, 1])).tolist()
    [13, 14, 10]
"""

from __future__ import annotations

import itertools
import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

import numpy as np

from chute.plan.table import gather_segments

T = TypeVar("T")
R = TypeVar("R")

__all__ = [
    "CHUNK",
    "TASK",
    "argsort_desc",
    "id_dtype",
    "ordered_map",
    "place_desc",
    "rank_desc",
    "sort_desc",
    "spans",
    "take_segments",
    "valid_ids",
    "worker_threads",
]

# Samples handled per step: 4M int64 temporaries are 32 MB.
CHUNK = 1 << 22
# Samples per task when steps run on several threads (numpy releases the GIL in its loops).
TASK = 1 << 20
MAX_THREADS = 8


def worker_threads() -> int:
    """Threads for a plan's array work: the cores this process may use, at most 8.

    Example:
        >>> 1 <= worker_threads() <= MAX_THREADS
        True
    """
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(MAX_THREADS, cores))


def ordered_map(fn: Callable[[T], R], items: Iterable[T]) -> Iterator[R]:
    """``map(fn, items)`` on ``worker_threads()`` threads, results in order, few in flight.

    For numpy work that releases the GIL; at most ``threads + 1`` results wait unread, so a
    slow consumer bounds the memory. Results do not depend on the number of threads.

    Example:
        >>> list(ordered_map(abs, [-1, 2, -3]))
        [1, 2, 3]
    """
    threads = worker_threads()
    if threads < 2:
        yield from map(fn, items)
        return
    with ThreadPoolExecutor(threads) as pool:
        pending: deque[Future[R]] = deque()
        for item in items:
            pending.append(pool.submit(fn, item))
            if len(pending) > threads:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


def spans(n: int, unit: int, size: int | None = None) -> list[tuple[int, int]]:
    """``[lo, hi)`` ranges covering ``0 .. n``, each a multiple of ``unit`` (about ``TASK``).

    Example:
        >>> spans(10, 3, size=5)
        [(0, 3), (3, 6), (6, 9), (9, 10)]
    """
    step = max(1, (TASK if size is None else size) // unit) * unit
    return [(lo, min(n, lo + step)) for lo in range(0, n, step)]


def id_dtype(num_samples: int) -> Any:
    """``int32`` when every id ``< num_samples`` fits, else ``int64``.

    Example:
        >>> id_dtype(100_000_000).__name__, id_dtype(2**31 + 1).__name__
        ('int32', 'int64')
    """
    return np.int32 if num_samples <= 2**31 else np.int64


def valid_ids(length: np.ndarray) -> np.ndarray:
    """Ids of the samples whose length is ``>= 0``, ascending, in ``id_dtype``; chunked.

    Example:
        >>> valid_ids(np.array([3, -1, 0, 5])).tolist()
        [0, 2, 3]
    """
    n = len(length)
    parts = []
    for lo in range(0, n, CHUNK):
        part = np.flatnonzero(length[lo : lo + CHUNK] >= 0)
        parts.append((part + lo).astype(id_dtype(n)))
    return np.concatenate(parts) if parts else np.empty(0, dtype=id_dtype(n))


def take_segments(
    src: np.ndarray, starts: np.ndarray, sizes: np.ndarray, out: np.ndarray | None = None
) -> np.ndarray:
    """``src[starts[i] : starts[i] + sizes[i]]`` for every ``i``, concatenated (chunked).

    The same as ``src[gather_segments(starts, sizes)]`` without its two int64 temporaries the
    size of the result.
    """
    starts = np.asarray(starts, dtype=np.int64)
    sizes = np.asarray(sizes, dtype=np.int64)
    ends = np.cumsum(sizes)
    total = int(ends[-1]) if len(ends) else 0
    if out is None:
        out = np.empty(total, dtype=src.dtype)
    cuts = [0]
    while cuts[-1] < len(starts):  # segment ranges of about TASK values each
        lo = cuts[-1]
        done = int(ends[lo - 1]) if lo else 0
        cuts.append(min(len(starts), max(lo + 1, int(np.searchsorted(ends, done + TASK)))))

    def copy(span: tuple[int, int]) -> None:
        lo, hi = span
        done = int(ends[lo - 1]) if lo else 0
        at = gather_segments(starts[lo:hi], sizes[lo:hi])
        out[done : done + len(at)] = src[at]

    for _ in ordered_map(copy, itertools.pairwise(cuts)):
        pass
    return out


def sort_desc(ids: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """``ids`` ordered by ``keys`` descending, equal keys in their given order (stable).

    ``keys`` are non-negative integers; below 2**16 they sort by radix, in linear time.

    Example:
        >>> sort_desc(np.array([7, 8, 9, 6]), np.array([1, 5, 1, 5])).tolist()
        [8, 6, 7, 9]
    """
    return ids[argsort_desc(keys)]


def argsort_desc(keys: np.ndarray) -> np.ndarray:
    """A stable argsort of non-negative integer ``keys``, largest first (radix below 2**16).

    Example:
        >>> argsort_desc(np.array([1, 5, 1, 5])).tolist()
        [1, 3, 0, 2]
    """
    if not len(keys):
        return np.empty(0, dtype=np.int64)
    top = int(keys.max())
    flipped = top - keys.astype(np.int64)
    return np.argsort(flipped.astype(np.uint16 if top < 2**16 else np.int64), kind="stable")


def place_desc(
    parts: Iterable[tuple[np.ndarray, ...]], histogram: np.ndarray, out: np.ndarray
) -> np.ndarray:
    """A counting sort: ids by key, largest first, equal keys in the order they come.

    ``parts``: chunks in order, each ``rank_desc(ids, keys, top)`` (the chunk sorted, which
    may run on other threads); ``histogram[k]``: how many ids of all chunks have key ``k``;
    ``out``: room for all of them. Linear time, no temporary beyond a chunk.

    Example:
        >>> h = np.bincount([1, 3, 3, 1])
        >>> parts = [rank_desc(np.array([7, 8]), np.array([1, 3]), 3),
        ...          rank_desc(np.array([9, 6]), np.array([3, 1]), 3)]
        >>> place_desc(parts, h, np.empty(4, dtype=np.int32)).tolist()
        [8, 9, 7, 6]
    """
    histogram = np.asarray(histogram, dtype=np.int64)
    fill = _above(histogram)  # where each key's run starts in out: after all larger keys
    for ids, ranked, count in parts:
        if not len(ranked):
            continue
        within = np.arange(len(ranked), dtype=np.int64) - _above(count)[ranked]
        out[fill[ranked] + within] = ids
        fill += count
    return out


def rank_desc(ids: np.ndarray, keys: np.ndarray, top: int) -> tuple[np.ndarray, ...]:
    """One chunk for ``place_desc``: ids and keys sorted by key, and the count of each key.

    Largest key first, equal keys in their given order; counts of keys ``0 .. top``.

    Example:
        >>> [a.tolist() for a in rank_desc(np.array([7, 8]), np.array([1, 3]), 3)]
        [[8, 7], [3, 1], [0, 1, 0, 1]]
    """
    perm = argsort_desc(keys)
    return ids[perm], keys[perm], np.bincount(keys, minlength=top + 1)


def _above(count: np.ndarray) -> np.ndarray:
    """``sum(count[k + 1:])`` for every ``k``."""
    return np.cumsum(count[::-1])[::-1] - count

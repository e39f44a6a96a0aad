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

import contextlib
import itertools
import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from chute.plan.table import gather_segments

if TYPE_CHECKING:
    from chute.plan.order import Order

T = TypeVar("T")
R = TypeVar("R")

__all__ = [
    "CHUNK",
    "TASK",
    "argsort_desc",
    "id_dtype",
    "lookup",
    "lookup_table",
    "map_multiset",
    "ordered_map",
    "place_desc",
    "rank_desc",
    "side_tasks",
    "sort_desc",
    "spans",
    "take_segments",
    "task_size",
    "valid_ids",
    "worker_threads",
]

# Samples handled per step: 4M int64 temporaries are 32 MB.
CHUNK = 1 << 22
# Samples per task when steps run on several threads (numpy releases the GIL in its loops).
TASK = 1 << 20
MAX_THREADS = 8
# Mean segment length from which ``take_segments`` copies slice by slice: one Python step per
# segment costs less than the int64 positions of its values beyond this.
SLICED = 256


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


def task_size() -> int:
    """Samples per task of ``ordered_map``: ``TASK`` on up to 4 threads, half of it on 8.

    ``ordered_map`` has a task on every thread and up to ``threads + 1`` results waiting, each
    holding its samples' temporaries; with tasks of ``4 * TASK / threads`` that stays about
    what 4 threads hold, so a plan's memory does not grow with the cores (a 100M mixture's
    packed plan on 8 threads peaked at 1,196 MB with ``TASK`` each, on 16 cores; 1,004 MB on
    2). Not smaller: on 8 threads (2 cores), tasks of ``TASK / 4`` took 10-24% longer than
    ``TASK / 2`` or ``TASK`` (``benchmarks/bench_plan_tasks.py``). Plans do not depend on it
    (tests build them with tasks of a few hundred).

    Example:
        >>> TASK // 2 <= task_size() <= TASK
        True
    """
    return max(TASK // 2, 4 * TASK // max(4, worker_threads()))


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


@contextlib.contextmanager
def side_tasks() -> Iterator[Callable[..., None]]:
    """``submit(fn, *args)``: ``fn(*args)`` on ``worker_threads()`` threads, all done on exit.

    For independent numpy steps whose effect is a write (into disjoint parts of one array),
    handed out by a loop that goes on meanwhile. At most ``2 * threads`` wait, so the loop
    cannot run ahead with their temporaries; the first error is raised on exit (or at the
    submit that waits for it), the steps still queued cancelled. With one thread each runs at
    once, in the caller.

    Example:
        >>> out = np.zeros(4, dtype=np.int64)
        >>> with side_tasks() as submit:
        ...     for k in range(4):
        ...         submit(out.__setitem__, k, k * k)
        >>> out.tolist()
        [0, 1, 4, 9]
    """
    threads = worker_threads()
    if threads < 2:
        yield lambda fn, *args: fn(*args)
        return
    with ThreadPoolExecutor(threads) as pool:
        pending: deque[Future[Any]] = deque()

        def submit(fn: Callable[..., Any], *args: Any) -> None:
            pending.append(pool.submit(fn, *args))
            while len(pending) > 2 * threads:
                pending.popleft().result()

        try:
            yield submit
            while pending:
                pending.popleft().result()
        finally:
            for future in pending:
                future.cancel()


def spans(n: int, unit: int, size: int | None = None) -> list[tuple[int, int]]:
    """``[lo, hi)`` ranges covering ``0 .. n``, each a multiple of ``unit`` (``task_size()``).

    Example:
        >>> spans(10, 3, size=5)
        [(0, 3), (3, 6), (6, 9), (9, 10)]
    """
    step = max(1, (task_size() if size is None else size) // unit) * unit
    return [(lo, min(n, lo + step)) for lo in range(0, n, step)]


def id_dtype(num_samples: int) -> Any:
    """``int32`` when every id ``< num_samples`` fits, else ``int64``.

    Example:
        >>> id_dtype(100_000_000).__name__, id_dtype(2**31 + 1).__name__
        ('int32', 'int64')
    """
    return np.int32 if num_samples <= 2**31 else np.int64


def lookup_table(values: np.ndarray) -> np.ndarray:
    """``values`` copied into memory in the narrowest of int16 / int32 that holds them.

    For the random lookups of a plan build (the length of every shuffled id): at 100M samples
    each lookup into a memory-mapped int32 file of 400 MB is a cache and TLB miss in 4 KB pages;
    the same values as int16 in numpy's own memory (which it asks the kernel to back with 2 MB
    pages) are half the bytes in 1/512 of the pages, and the lookups take about 0.6x the time.
    The copy is sequential and costs a tenth of one pass of lookups. Values that fit neither
    type, an array already of the narrowest type in memory, and arrays of less than ``CHUNK``
    values are returned as they are.

    Example:
        >>> lookup_table(np.arange(5, dtype=np.int64)).dtype.name  # small: as it is
        'int64'
    """
    n = len(values)
    if n < CHUNK or values.dtype.kind not in "iu":
        return values
    ends = list(ordered_map(lambda span: _min_max(values[span[0] : span[1]]), spans(n, 1)))
    lo, hi = min(a for a, _ in ends), max(b for _, b in ends)
    fits = [t for t in (np.int16, np.int32) if np.iinfo(t).min <= lo and hi <= np.iinfo(t).max]
    if not fits or (values.dtype == fits[0] and not isinstance(values, np.memmap)):
        return values  # nothing narrower, or already narrow in memory
    out = np.empty(n, dtype=fits[0])

    def copy(span: tuple[int, int]) -> None:
        out[span[0] : span[1]] = values[span[0] : span[1]]

    for _ in ordered_map(copy, spans(n, 1)):
        pass
    return out


def _min_max(values: np.ndarray) -> tuple[int, int]:
    return int(values.min()), int(values.max())


def lookup(table: np.ndarray, ids: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``table[ids]`` for ids known to lie in ``[0, len(table))`` (ids of a plan's order).

    ``numpy.take`` with ``intp`` indices and ``mode="clip"``: no bounds check and no buffer
    (``mode="raise"`` with ``out`` buffers the result; int32 indices are converted anyway),
    about 1.5x faster than ``table[ids]`` on 100M random ids.

    Example:
        >>> lookup(np.array([5, 6, 7]), np.array([2, 0], dtype=np.int32)).tolist()
        [7, 5]
    """
    return np.take(table, np.asarray(ids, dtype=np.intp), out=out, mode="clip")


def map_multiset(fn: Callable[[np.ndarray], Any], table: np.ndarray, order: Order) -> Iterator[Any]:
    """``fn(table[ids]) * times`` for each part of ``order``'s ids as a multiset, on threads.

    For what does not depend on the order (a sum of lengths, counts by length): the parts
    (``Order.multiset_parts``) cost a fraction of the order's own arithmetic over a mixture.
    ``table``: the lengths (``lookup_table``).

    Example:
        >>> from chute.plan.order import IdOrder
        >>> table = np.array([5, 6, 7])
        >>> sum(map_multiset(lambda lens: int(lens.sum()), table, IdOrder(np.array([2, 0, 2]))))
        19
    """

    def one(part: Callable[[], tuple[np.ndarray, int]]) -> Any:
        ids, times = part()
        return fn(lookup(table, ids)) * times

    return ordered_map(one, order.multiset_parts(task_size(), id_dtype(len(table))))


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
    size of the result: segments of ``SLICED`` values or more on average (a budget plan's
    steps, thousands of samples each) are copied as slices, shorter ones gathered in chunks.
    """
    starts = np.asarray(starts, dtype=np.int64)
    sizes = np.asarray(sizes, dtype=np.int64)
    ends = np.cumsum(sizes)
    total = int(ends[-1]) if len(ends) else 0
    if out is None:
        out = np.empty(total, dtype=src.dtype)
    if total >= SLICED * len(starts):  # long segments: one slice copy each, no positions
        at = 0
        for start, size in zip(starts.tolist(), sizes.tolist(), strict=True):
            out[at : at + size] = src[start : start + size]
            at += size
        return out
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


def argsort_desc(keys: np.ndarray, top: int | None = None) -> np.ndarray:
    """A stable argsort of non-negative integer ``keys``, largest first (radix below 2**16).

    ``top``: a bound on the keys, if known (saves a pass to find it; the order is the same).

    Example:
        >>> argsort_desc(np.array([1, 5, 1, 5])).tolist()
        [1, 3, 0, 2]
    """
    if not len(keys):
        return np.empty(0, dtype=np.int64)
    top = int(keys.max()) if top is None else int(top)
    if top < 2**16:  # flipped into uint16 in one pass: numpy sorts those by radix
        flipped = np.empty(len(keys), dtype=np.uint16)
        np.subtract(np.int64(top), keys, out=flipped, casting="unsafe")
        return np.argsort(flipped, kind="stable")
    return np.argsort(top - keys.astype(np.int64), kind="stable")


def place_desc(
    parts: Iterable[tuple[np.ndarray, ...]], histogram: np.ndarray, out: np.ndarray
) -> np.ndarray:
    """A counting sort: ids by key, largest first, equal keys in the order they come.

    ``parts``: chunks in order, each ``rank_desc(ids, keys, top)`` (the chunk sorted, which
    may run on other threads); ``histogram[k]``: how many ids of all chunks have key ``k``;
    ``out``: room for all of them. Linear time, no temporary beyond a chunk: a chunk's run of
    key ``k`` lands where the earlier chunks' runs of ``k`` end, found from the counts alone.

    Example:
        >>> h = np.bincount([1, 3, 3, 1])
        >>> parts = [rank_desc(np.array([7, 8]), np.array([1, 3]), 3),
        ...          rank_desc(np.array([9, 6]), np.array([3, 1]), 3)]
        >>> place_desc(parts, h, np.empty(4, dtype=np.int32)).tolist()
        [8, 9, 7, 6]
    """
    histogram = np.asarray(histogram, dtype=np.int64)
    fill = _above(histogram)  # where each key's run starts in out: after all larger keys
    for ids, count in parts:
        if not len(ids):
            continue
        present = np.flatnonzero(count)[::-1]  # the chunk's keys, largest first, as sorted
        out[gather_segments(fill[present], count[present])] = ids
        fill += count
    return out


def rank_desc(ids: np.ndarray, keys: np.ndarray, top: int) -> tuple[np.ndarray, ...]:
    """One chunk for ``place_desc``: ids sorted by key, and the count of each key.

    Largest key first, equal keys in their given order; counts of keys ``0 .. top``.

    Example:
        >>> [a.tolist() for a in rank_desc(np.array([7, 8]), np.array([1, 3]), 3)]
        [[8, 7], [0, 1, 0, 1]]
    """
    return ids[argsort_desc(keys, top)], np.bincount(keys, minlength=top + 1)


def _above(count: np.ndarray) -> np.ndarray:
    """``sum(count[k + 1:])`` for every ``k``."""
    return np.cumsum(count[::-1])[::-1] - count

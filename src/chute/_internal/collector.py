"""``fewer_collections``: Python's cyclic garbage collector kept out of a hot loop.

Building a chunk allocates millions of short-lived containers (records, messages, id lists,
sample dicts), none of them in reference cycles, which reference counting frees. With the
default threshold (a young-generation pass every 700 net allocations) the collector still runs
~1,200 times per 40,000 records and rescans the long-lived objects of the process (the
tokenizer's tables, the sources' indexes) in its older passes: about 9% of a preprocess
worker's time (``benchmarks/profile_preprocess.py``, its ``gc`` part). Inside
the block the objects that exist already are frozen (never scanned: they live as long as the
process) and a young pass runs every ``young`` allocations; cycles are still collected, later.

Example:
    >>> import gc
    >>> before = gc.get_threshold()
    >>> with fewer_collections():
    ...     gc.get_threshold()[0]
    20000
    >>> gc.get_threshold() == before
    True
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

__all__ = ["fewer_collections"]


@contextlib.contextmanager
def fewer_collections(young: int = 20_000) -> Iterator[None]:
    """Freeze what exists and collect the young generation every ``young`` allocations."""
    threshold = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(max(young, threshold[0]), *threshold[1:])
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        gc.unfreeze()

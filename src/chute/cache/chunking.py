"""How many records a chunk holds when ``cache.chunk_size`` is left out.

A chunk is the unit of parallel work, of commits and of resumption, and its size shapes the
cache's files (it is in the fingerprint), so the default depends on the record count alone:
never on workers, ranks or the machine, and every rank of a build computes the same value::

    records      chunk size                    chunks
    <  128,000   2,000 (the floor)             1 .. 64
    128k - 640k  ceil(records / 64)            64 (4 for each of 16 workers)
    >= 640,000   10,000 (the ceiling)          64 and more

Below 640,000 records, 10,000-record chunks are too few to keep 16 workers busy (200,000
records: 20 chunks, a second wave a quarter full); the floor keeps a chunk's fixed work
(its files and commit record, tens of milliseconds) a few percent of its seconds of
tokenizing. From 640,000 records up the default is the 10,000 it always was, so caches
built before this rule keep their fingerprint; a smaller cache already in ``--out`` keeps
the chunk size it was started with (``chunk_size_for``), so it resumes.

Example:
    >>> default_chunk_size(200_000), default_chunk_size(5_000), default_chunk_size(10**8)
    (3125, 2000, 10000)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["MAX_CHUNK", "MIN_CHUNK", "TARGET_CHUNKS", "chunk_size_for", "default_chunk_size"]

MAX_CHUNK = 10_000
MIN_CHUNK = 2_000
# 16 workers with 4 chunks each: the last wave is at most a quarter of the work.
TARGET_CHUNKS = 64


def default_chunk_size(records: int) -> int:
    """Records per chunk for a source of ``records`` records (see the module docstring)."""
    return max(MIN_CHUNK, min(MAX_CHUNK, -(-records // TARGET_CHUNKS)))


def chunk_size_for(records: int, given: int | None, existing: Mapping[str, Any] | None) -> int:
    """The chunk size of a build: ``given``, else the build's in ``--out``, else the default.

    ``existing`` is the ``plan.json`` already in the output directory (``None``: none). Its
    chunk size is kept when it covers as many records, so a build started with an older
    default resumes instead of being refused as another config.

    Example:
        >>> chunk_size_for(200_000, None, {"records": 200_000, "chunk_size": 10_000})
        10000
        >>> chunk_size_for(200_000, 500, {"records": 200_000, "chunk_size": 10_000})
        500
    """
    if given is not None:
        return given
    if existing is not None and existing.get("records") == records:
        size = existing.get("chunk_size")
        if isinstance(size, int) and not isinstance(size, bool) and size > 0:
            return size
    return default_chunk_size(records)

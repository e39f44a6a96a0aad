"""How many records a chunk holds when ``cache.chunk_size`` is left out.

A chunk is the unit of parallel work, of commits and of resumption, and its size shapes the
cache's files (it is in the fingerprint), so the default depends on the record count alone:
never on workers, ranks or the machine, and every rank of a build computes the same value::

    records      chunk size                         chunks
    <  128,000   2,000 (the floor)                  1 .. 64
    128k - 640k  ceil(records / 64)                 64 (4 for each of 16 workers)
    >= 640,000   at most 10,000, as large as fits   a multiple of 16, 64 and more

The chunk count is a multiple of 16 from 128,000 to 99.8M records (beyond, a chunk or so
off one, over hundreds of waves where the last one's fill no longer matters), so 16, 8, 4 or 2
workers each get as many chunks and no last wave runs part-empty: 1M records in 100 chunks of
10,000 ran 7 waves on 16 workers, the last a quarter full; 112 chunks of 8,929 run 7 full
waves (measured on a 16-core host: 11% less time at 8 workers, within the runs' spread at 16;
docs/benchmarks.md). The floor keeps a chunk's fixed work (its files and commit record, tens
of milliseconds) a few percent of its seconds of tokenizing. A cache already in ``--out`` keeps
the chunk size it was started with (``chunk_size_for``), so a build started under an earlier
default (10,000 from 640,000 records up) resumes.

Example:
    >>> default_chunk_size(200_000), default_chunk_size(5_000), default_chunk_size(10**6)
    (3125, 2000, 8929)
    >>> default_chunk_size(10**8)  # 10,000 chunks: a multiple of 16 already
    10000
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "CHUNK_MULTIPLE",
    "MAX_CHUNK",
    "MIN_CHUNK",
    "TARGET_CHUNKS",
    "chunk_size_for",
    "default_chunk_size",
]

MAX_CHUNK = 10_000
MIN_CHUNK = 2_000
# 16 workers with 4 chunks each: the last wave is at most a quarter of the work.
TARGET_CHUNKS = 64
# Chunk counts from 128k records up are multiples of this: whole waves on 16, 8, 4, 2 workers.
CHUNK_MULTIPLE = 16


def default_chunk_size(records: int) -> int:
    """Records per chunk for a source of ``records`` records (see the module docstring)."""
    if records < MIN_CHUNK * TARGET_CHUNKS:
        return MIN_CHUNK
    fewest = max(TARGET_CHUNKS, -(-records // MAX_CHUNK))
    chunks = -(-fewest // CHUNK_MULTIPLE) * CHUNK_MULTIPLE
    return -(-records // chunks)


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

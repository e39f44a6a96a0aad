r"""Data files in object storage, under the same index and reader as local files.

A remote JSONL or JSON-array file works exactly as a local one; only how its bytes arrive
differs::

    index (once per object identity)                 records
    ────────────────────────────────                 ────────────────────────────────────
    HEAD ──► identity (size, ETag)                   source[i] ──► (start, end) from the index
    sidecar in the local index cache, keyed by             │
    the URL and checked against the identity               ▼
    miss: the object is scanned once with parallel   BlockCache: blocks of block_size,
    ranged requests (JSON arrays: spooled to a        LRU up to cache_bytes, sequential
    temporary file, scanned, deleted)                 read-ahead ──► ranged GET (If-Match)

Compressed objects (``.gz``, ``.zst``) follow the rule for compressed files: decompressed once
into the local cache, then read locally. Each process (a DataLoader worker, a pool process)
opens its own connection and its own block cache; a source pickles as its URLs, indexes and
options.

Example:
    >>> src = JsonlSource("s3://bucket/train-*.jsonl")  # doctest: +SKIP
    >>> len(src), src[10].location  # doctest: +SKIP
    (120000, 's3://bucket/train-000.jsonl:11')
"""

from __future__ import annotations

import mmap
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import numpy as np

from chute._internal.objects import RemoteFile, RemoteIdentity, open_binary
from chute._internal.remote import RemoteOptions
from chute.sources.blocks import BlockCache
from chute.sources.scan_lines import Pread

__all__ = ["RemoteBytes", "block_cache", "remote_pread", "spooled_array"]

T = TypeVar("T")


def block_cache(options: RemoteOptions) -> BlockCache:
    """The block cache of one source (shared by its files) in one process."""
    return BlockCache(options.block_size, options.cache_bytes, options.readahead)


class RemoteBytes:
    """The bytes of one indexed remote object, read through a block cache.

    Args:
        url: the object.
        identity: the identity its index was built for (a replaced object: ``SourceChanged``).
        options: timeouts, retries.
        cache: the source's block cache.
    """

    def __init__(
        self, url: str, identity: RemoteIdentity, options: RemoteOptions, cache: BlockCache
    ):
        self.file = RemoteFile(url, options, identity)
        self.size = identity.size
        self.cache = cache

    def pread(self, n: int, offset: int) -> bytes:
        return self.cache.read(self.file.url, self.file.pinned_read, self.size, offset, offset + n)


def remote_pread(url: str, options: RemoteOptions) -> tuple[Pread, int]:
    """``(pread, size)`` of an object for a scan: stateless ranged requests, safe from threads."""
    remote = RemoteFile(url, options)
    return (lambda n, offset: remote.read_range(offset, min(remote.size, offset + n))), remote.size


def spooled_array(
    url: str, options: RemoteOptions, folder: Path, scan: Callable[[np.ndarray], T]
) -> T:
    """``scan(data)`` of the whole object as a uint8 array, spooled to a temporary file.

    A JSON array's structure needs the whole file in one scan; the copy lives only while the
    index is built (``scan`` must not keep a view of ``data``).
    """
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryFile(dir=folder, prefix=".spool-") as tmp:
        with open_binary(url, options) as src:
            while block := src.read(1 << 22):
                tmp.write(block)
        tmp.flush()
        if os.fstat(tmp.fileno()).st_size == 0:
            return scan(np.empty(0, dtype=np.uint8))
        with mmap.mmap(tmp.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            data = np.frombuffer(mm, dtype=np.uint8)
            try:
                return scan(data)
            finally:
                del data  # release the buffer before the map closes

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

With ``RemoteOptions(cache_limit=...)`` a file is instead downloaded whole into a bounded folder
shared by the machine's processes (``chute.sources.file_cache``) and read locally
(``CachedBytes``); a file that cannot fit now is read through the block cache as above.

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

import hashlib
import mmap
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, TypeVar

import numpy as np

from chute._internal.files import cache_root
from chute._internal.objects import RemoteFile, RemoteIdentity, open_binary
from chute.remote_options import RemoteOptions
from chute.sources.blocks import BlockCache
from chute.sources.file_cache import FileCache
from chute.sources.scan_lines import Pread

__all__ = [
    "CachedBytes",
    "RemoteBytes",
    "block_cache",
    "file_cache",
    "remote_bytes",
    "remote_pread",
    "spooled_array",
]

# After a file could not get room in the local cache, its reads go remote this long before
# asking again (asking costs a lock and a listing of the folder).
_RETRY_ROOM_S = 1.0
_DOWNLOAD_CHUNK = 8 << 20

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


def file_cache(
    options: RemoteOptions, cache_dir: str | os.PathLike[str] | None
) -> FileCache | None:
    """This process's view of the machine's bounded folder of remote files, if a limit is set."""
    if options.cache_limit is None:
        return None
    return FileCache(cache_root(cache_dir) / "remote-files", options.cache_limit)


def remote_bytes(
    url: str,
    identity: RemoteIdentity,
    options: RemoteOptions,
    blocks: BlockCache,
    files: FileCache | None,
) -> RemoteBytes:
    """How one indexed remote file is read: a local whole copy when a cache limit is set."""
    if files is None:
        return RemoteBytes(url, identity, options, blocks)
    return CachedBytes(url, identity, options, blocks, files)


class CachedBytes(RemoteBytes):
    """The bytes of one remote file from its whole local copy (bounded, shared folder).

    The copy is downloaded on the first read (``If-Match`` the indexed identity, so a replaced
    object raises ``SourceChanged``); while the folder has no room for it, reads are ranged
    requests through the block cache, as without a limit.
    """

    def __init__(
        self,
        url: str,
        identity: RemoteIdentity,
        options: RemoteOptions,
        cache: BlockCache,
        files: FileCache,
    ):
        super().__init__(url, identity, options, cache)
        self.files = files
        text = f"{url}\n{sorted(identity.to_json().items())}"
        self.key = hashlib.blake2b(text.encode(), digest_size=16).hexdigest()
        self._retry_at = 0.0

    def pread(self, n: int, offset: int) -> bytes:
        data = self._local_pread(n, offset)
        return data if data is not None else super().pread(n, offset)

    def read_once(self, n: int, offset: int) -> bytes:
        """``n`` bytes at ``offset`` (fewer only where the object ends), read once.

        From the local copy when the folder has room for it (downloading it whole first);
        else one ranged request of exactly these bytes (``If-Match``), not through the block
        cache: a tar shard's media member is read once per epoch, and blocks around it
        would only be fetched and thrown away.
        """
        n = max(0, min(n, self.size - offset))
        data = self._local_pread(n, offset)
        return data if data is not None else self.file.pinned_read(offset, offset + n)

    def _local_pread(self, n: int, offset: int) -> bytes | None:
        """The bytes from the pinned local copy, or ``None`` while the folder has no room."""
        if time.monotonic() < self._retry_at:
            return None
        with self.files.thread_lock:
            local = self.files.acquire(self.key, self.size, self._download)
            if local is not None:
                parts = [local.pread(n, offset)]
                got = len(parts[0])
                while 0 < got < n:  # one pread returns at most ~2 GiB
                    more = local.pread(n - got, offset + got)
                    if not more:
                        break
                    parts.append(more)
                    got += len(more)
                return parts[0] if len(parts) == 1 else b"".join(parts)
        self._retry_at = time.monotonic() + _RETRY_ROOM_S
        return None

    def _download(self, dst: BinaryIO) -> None:
        for lo in range(0, self.size, _DOWNLOAD_CHUNK):
            dst.write(self.file.pinned_read(lo, min(self.size, lo + _DOWNLOAD_CHUNK)))


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

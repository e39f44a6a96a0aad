r"""A bounded cache of fixed-size blocks of remote objects, with sequential read-ahead.

Records of a remote file are read with ranged requests. A request costs a round trip (tens of
milliseconds on S3) whatever its size up to about a megabyte, so reads are rounded out to
blocks of ``block_size`` bytes and the blocks kept, least recently used first out, up to
``cache_bytes``: neighbouring records then cost nothing. A reader that moves forward through
the object (``records_between``, a preprocessing pass) gets growing requests, doubling up to
``readahead`` bytes, so a sequential pass makes few large requests::

    read [lo, hi) ──► blocks b0..b1 ──► missing runs ──► one ranged request per run
                                         (sequential: the last run grows by the read-ahead)

Counters (``requests``, ``bytes_fetched``, ``hits``) make read amplification measurable:
``bytes_fetched / bytes_returned``.

Example:
    >>> data = bytes(range(256)) * 40
    >>> cache = BlockCache(block_size=1024, cache_bytes=4096, readahead=4096)
    >>> fetch = lambda lo, hi: data[lo:hi]
    >>> cache.read("x", fetch, len(data), 1100, 1200) == data[1100:1200]
    True
    >>> cache.requests, cache.bytes_fetched
    (1, 1024)
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable

__all__ = ["BlockCache"]

Fetch = Callable[[int, int], bytes]


class BlockCache:
    """Blocks of many objects, bounded in bytes, for one process.

    Args:
        block_size: bytes per block (the smallest request).
        cache_bytes: the most bytes of blocks kept.
        readahead: the largest request a sequential reader grows to.
    """

    def __init__(self, block_size: int, cache_bytes: int, readahead: int):
        self.block_size = block_size
        self.capacity = max(1, cache_bytes // block_size)
        self.max_ahead = max(1, readahead // block_size)
        self._blocks: OrderedDict[tuple[Hashable, int], bytes] = OrderedDict()
        self._last: dict[Hashable, int] = {}  # per object: the last block read
        self._ahead: dict[Hashable, int] = {}  # per object: the current read-ahead, in blocks
        self.requests = 0
        self.bytes_fetched = 0
        self.bytes_returned = 0
        self.hits = 0

    def __getstate__(self) -> dict[str, int]:
        # A worker starts with an empty cache of the same shape (blocks are per process).
        return {
            "block_size": self.block_size,
            "cache_bytes": self.capacity * self.block_size,
            "readahead": self.max_ahead * self.block_size,
        }

    def __setstate__(self, state: dict[str, int]) -> None:
        self.__init__(**state)  # type: ignore[misc]

    def read(self, key: Hashable, fetch: Fetch, size: int, lo: int, hi: int) -> bytes:
        """Bytes ``[lo, hi)`` of the object ``key`` of ``size`` bytes (``fetch(a, b)`` reads it)."""
        hi = min(hi, size)
        if hi <= lo:
            return b""
        bs = self.block_size
        first, last = lo // bs, (hi - 1) // bs
        self.bytes_returned += hi - lo
        if last - first + 1 > self.capacity:  # larger than the cache: read it through
            return self._fetch(fetch, lo, hi)
        sequential = self._last.get(key, -2) in (first - 1, first)
        ahead = min(self.max_ahead, 2 * self._ahead.get(key, 1)) if sequential else 1
        self._ahead[key] = ahead
        self._last[key] = last
        blocks = self._blocks
        missing = [b for b in range(first, last + 1) if (key, b) not in blocks]
        self.hits += (last - first + 1) - len(missing)
        runs = _runs(missing)
        if runs and sequential:  # grow the last run forward by the read-ahead
            end_block = (size - 1) // bs
            a, b = runs[-1]
            grown = min(end_block, b + ahead - 1, a + self.capacity - 1)
            while b < grown and (key, b + 1) not in blocks:
                b += 1
            runs[-1] = (a, b)
        for a, b in runs:
            data = self._fetch(fetch, a * bs, min(size, (b + 1) * bs))
            for k in range(a, b + 1):
                blocks[(key, k)] = data[(k - a) * bs : (k - a + 1) * bs]
        parts = []
        for k in range(first, last + 1):
            blocks.move_to_end((key, k))
            block = blocks[(key, k)]
            parts.append(block[max(0, lo - k * bs) : hi - k * bs])
        while len(blocks) > self.capacity:
            blocks.popitem(last=False)
        return b"".join(parts)

    def _fetch(self, fetch: Fetch, lo: int, hi: int) -> bytes:
        """Bytes ``[lo, hi)`` (fewer only where the object ends): a part answer asks for the rest."""
        data = fetch(lo, hi)
        self.requests += 1
        if 0 < len(data) < hi - lo:  # a store (or a read cap) may answer part of a large range
            parts, got = [data], lo + len(data)
            while got < hi:
                more = fetch(got, hi)
                self.requests += 1
                if not more:
                    break
                parts.append(more)
                got += len(more)
            data = b"".join(parts)
        self.bytes_fetched += len(data)
        return data

    @property
    def amplification(self) -> float:
        """Bytes fetched per byte returned (1.0: nothing wasted)."""
        return self.bytes_fetched / self.bytes_returned if self.bytes_returned else 0.0


def _runs(blocks: list[int]) -> list[tuple[int, int]]:
    """Consecutive block numbers as inclusive ``(first, last)`` runs."""
    runs: list[tuple[int, int]] = []
    for b in blocks:
        if runs and runs[-1][1] == b - 1:
            runs[-1] = (runs[-1][0], b)
        else:
            runs.append((b, b))
    return runs

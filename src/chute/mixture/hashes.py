r"""Content hashes of every record of a source: one parallel pass, cached like the lengths.

``content_hashes(source, format)`` reads each record, converts it with the format adapter and
hashes its normalised content (``chute.formats.content``): no template, no tokenizer, so it runs
at the speed of JSON parsing. The result (one ``uint64`` per record) is cached under
``<cache root>/hashes/`` keyed by the source's fingerprint, the format options and
``CONTENT_VERSION``. The pass writes into that file (a temporary, renamed when complete) and
returns it as a memory map, as a validation split or a duplicate check after the first reads it
back: no record costs this process 8 bytes of its own memory::

    records ──chunks──► workers: parse, adapter, normalise, blake2b-64 ──► hashes[lo:hi]

Example:
    >>> import tempfile, pathlib
    >>> from chute.sources import JsonlSource
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "d.jsonl"
    >>> _ = path.write_text('{"text": "a"}\n{"text": "b"}\n{"text": " a "}\n')
    >>> h = content_hashes(JsonlSource(path), "text", workers=1, cache=False)
    >>> bool(h[0] == h[2]), bool(h[0] == h[1])
    (True, False)
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from chute._internal.files import atomic_array, cache_root, warn_once, writable_folder
from chute._internal.pools import process_map
from chute._internal.progress import ProgressArg
from chute._internal.progress import progress as progress_of
from chute._internal.waiting import building, wait_for_local_rank_zero
from chute.formats import FormatSpec
from chute.formats.content import CONTENT_VERSION, reader_for, record_hash

log = logging.getLogger("chute.mixture")

__all__ = ["content_hashes", "hashes_key"]

MIN_CHUNK, MAX_CHUNK = 5_000, 200_000


def hashes_key(source: Any, spec: FormatSpec) -> str | None:
    """The cache key of (source, format), or ``None`` when the source has no fingerprint."""
    fingerprint = getattr(source, "fingerprint", None)
    if not callable(fingerprint):
        return None
    blob = orjson.dumps(
        {
            "format": "chute.hashes",
            "version": CONTENT_VERSION,
            "source": fingerprint(),
            "spec": spec.to_json(),
        },
        option=orjson.OPT_SORT_KEYS | orjson.OPT_SERIALIZE_NUMPY,
    )
    return hashlib.blake2b(blob, digest_size=16).hexdigest()


def content_hashes(
    source: Any,
    format: FormatSpec | str = "auto",
    *,
    workers: int | None = None,
    cache: bool = True,
    cache_dir: str | os.PathLike[str] | None = None,
    progress: ProgressArg = None,
    desc: str = "hashes",
    local_rank: int = 0,
    wait_timeout: float = 3600.0,
) -> np.ndarray:
    """One content hash (``uint64``) per record of ``source`` (see the module docstring).

    Args:
        source: a ``JsonlSource`` (or any source of ``Record`` values).
        format: how records are read (a ``FormatSpec`` or a format name).
        workers: processes (default: all cores).
        cache: read and write the hashes cache.
        cache_dir: the cache root (default ``$CHUTE_CACHE_DIR`` or ``~/.cache/chute``).
        progress: as for every long step (``chute._internal.progress``).
        desc: the progress label (e.g. the dataset's name).
        local_rank: this process's rank within its node; ranks other than 0 wait for local
            rank 0 to write the cache instead of computing it again (as the lengths pass does).
        wait_timeout: seconds a waiting rank waits before it gives up.

    Raises:
        ConfigError: a waiting rank waited ``wait_timeout`` seconds.
    """
    spec = format if isinstance(format, FormatSpec) else FormatSpec(format)
    key = hashes_key(source, spec) if cache else None
    path = cache_root(cache_dir) / "hashes" / f"{key}.npy" if key else None
    n = len(source)
    if path is not None:
        hit = _read_cached(path, n)
        if hit is not None:
            return hit
        if not writable_folder(path.parent):
            # read-only or not ours: every process hashes for itself, in memory
            warn_once(
                log,
                "cannot write content hashes under %s (read-only or not ours): computing them "
                "in memory; set CHUTE_CACHE_DIR to a writable folder to keep them",
                path.parent,
            )
            path = None
        elif local_rank != 0:
            cached = path
            return wait_for_local_rank_zero(
                lambda: _read_cached(cached, n),
                path,
                wait_timeout,
                "the content hashes",
                "them once beforehand (`chute validate --overlap` caches them)",
            )
    count = max(1, workers or os.cpu_count() or 1)
    chunk = max(MIN_CHUNK, min(MAX_CHUNK, -(-n // (count * 8)))) if n else 1
    bounds = [(lo, min(n, lo + chunk)) for lo in range(0, n, chunk)]

    def fill(out: np.ndarray) -> None:
        with progress_of(n, desc, enabled=progress) as bar:
            for lo, block in _run(source, spec, bounds, count):
                out[lo : lo + len(block)] = block
                bar.update(len(block))

    if path is None:
        out = np.empty(n, dtype=np.uint64)
        fill(out)
        return out
    # computed into the cache file itself (a temporary renamed when complete) and read back as
    # a memory map: 100M records hold no 800 MB of hashes in this process's own memory
    with building(path), atomic_array(path, np.uint64, (n,)) as out:
        fill(out)
    return np.load(path, mmap_mode="r")


def _read_cached(path: Path, n: int) -> np.ndarray | None:
    """The cached hashes of ``n`` records at ``path`` (a memory map), or ``None``.

    An unreadable or mis-sized file counts as absent: computed again and replaced.
    """
    if not path.is_file():
        return None
    try:
        hit = np.load(path, mmap_mode="r")
    except (OSError, ValueError):
        return None
    return hit if hit.dtype == np.uint64 and hit.shape == (n,) else None


def _run(
    source: Any, spec: FormatSpec, bounds: list[tuple[int, int]], workers: int
) -> Iterator[tuple[int, np.ndarray]]:
    return process_map(_chunk, bounds, workers=workers, shared=(source, spec))


def _chunk(source: Any, spec: FormatSpec, bounds: tuple[int, int]) -> tuple[int, np.ndarray]:
    lo, hi = bounds
    reader = reader_for(spec)
    records: Callable[[int, int], Any] | None = getattr(source, "records_between", None)
    items = records(lo, hi) if callable(records) else (source[i] for i in range(lo, hi))
    return lo, np.fromiter((record_hash(reader, r) for r in items), dtype=np.uint64, count=hi - lo)

"""The lengths cache: one ``.npy`` (memory-mapped on read) and a JSON sidecar per (source, recipe).

Files live under ``<cache root>/lengths/`` (``$CHUTE_CACHE_DIR``, else ``~/.cache/chute``)::

    lengths/3f2a...c1.npy    int32, shape (5, n): length, image_tokens, status, first_trained,
                             longest
    lengths/3f2a...c1.json   key inputs (source and recipe fingerprints), reject kinds, tally

The name is a hash of the source's fingerprint (each file's size, mtime and edge hash), the
recipe's fingerprint (tokenizer, template, max_length, policies, ...) and ``LENGTHS_VERSION``,
so a changed file or recipe option gives a new key: a stale entry is never read, only left
behind. The array is computed into a temporary file, fsynced and renamed; the sidecar is written
the same way afterwards, so a sidecar always points at a complete array. Two processes racing on
one key write identical bytes; the last rename wins.

Example:
    >>> cache_key({"kind": "jsonl", "records": 2}, None)[:8]  # doctest: +SKIP
    '5be0c7a1'
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from chute._internal.files import atomic_array, atomic_file, cache_root
from chute.errors import RejectTally
from chute.lengths.base import ROWS, Lengths

__all__ = ["LENGTHS_VERSION", "cache_key", "cache_paths", "read_cached", "write_cached"]

# Bump when the same source and recipe would give different lengths or a different layout.
LENGTHS_VERSION = 3  # 2: a fourth row, first_trained; 3: a fifth, longest (preference pairs)
FORMAT = "chute.lengths"


def cache_key(source_fingerprint: Any, recipe_fingerprint: Any) -> str:
    """The hex key of a (source, recipe) pair."""
    blob = orjson.dumps(
        {
            "format": FORMAT,
            "version": LENGTHS_VERSION,
            "source": source_fingerprint,
            "recipe": recipe_fingerprint,
        },
        option=orjson.OPT_SORT_KEYS | orjson.OPT_SERIALIZE_NUMPY,
    )
    return hashlib.blake2b(blob, digest_size=16).hexdigest()


def cache_paths(key: str, cache_dir: str | os.PathLike[str] | None = None) -> tuple[Path, Path]:
    """``(array path, sidecar path)`` of ``key``."""
    folder = cache_root(cache_dir) / "lengths"
    return folder / f"{key}.npy", folder / f"{key}.json"


def read_cached(key: str, cache_dir: str | os.PathLike[str] | None = None) -> Lengths | None:
    """The cached lengths of ``key`` (memory-mapped), or ``None`` when absent or unusable."""
    array_path, meta_path = cache_paths(key, cache_dir)
    try:
        meta = orjson.loads(meta_path.read_bytes())
        data = np.load(array_path, mmap_mode="r")
    except (OSError, ValueError):
        return None
    if (
        not isinstance(meta, dict)
        or meta.get("format") != FORMAT
        or meta.get("version") != LENGTHS_VERSION
        or meta.get("key") != key
        or data.dtype != np.int32
        or data.shape != (ROWS, meta.get("samples"))
    ):
        return None
    tally = RejectTally()
    tally.counts.update(meta.get("by_reason", {}))
    tally.examples = {k: list(v) for k, v in meta.get("examples", {}).items()}
    return Lengths(
        data[0],
        data[1],
        data[2],
        kinds=tuple(meta.get("kinds", ())),
        tally=tally,
        key=key,
        first_trained=data[3],
        longest=data[4],
    )


def write_cached(
    key: str,
    n: int,
    fill: Any,
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    describe: dict[str, Any] | None = None,
) -> Lengths:
    """Compute into a temporary memory map with ``fill(out) -> (kinds, tally)``, then publish.

    Args:
        key: the cache key.
        n: samples in the source.
        fill: fills the ``(ROWS, n)`` int32 array it is given; returns the reject kinds and tally.
        cache_dir: the cache root (default ``$CHUTE_CACHE_DIR`` or ``~/.cache/chute``).
        describe: extra JSON-able fields for the sidecar (the fingerprints behind the key).
    """
    array_path, meta_path = cache_paths(key, cache_dir)
    t0 = time.perf_counter()
    with atomic_array(array_path, np.int32, (ROWS, n)) as out:
        kinds, tally = fill(out)
        del out
    meta = {
        "format": FORMAT,
        "version": LENGTHS_VERSION,
        "key": key,
        "samples": n,
        "kinds": list(kinds),
        "by_reason": dict(tally.counts),
        "examples": tally.examples,
        "seconds": round(time.perf_counter() - t0, 3),
        **(describe or {}),
    }
    try:
        with atomic_file(meta_path) as f:
            f.write(orjson.dumps(meta, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_INDENT_2))
    except BaseException:
        array_path.unlink(missing_ok=True)  # an array without its sidecar is never read
        raise
    cached = read_cached(key, cache_dir)
    if cached is None:  # pragma: no cover - only if the cache folder is removed underneath us
        raise OSError(f"the lengths cache {array_path} vanished right after it was written")
    return cached

"""Validation hold-outs chosen by content, not position: stable when files are re-ordered or split.

A dataset's ``val`` picks records by their content hash (``chute.formats.content``), a uniform
64-bit value that depends on what a record says and nothing else:

* a fraction ``f`` holds out every record whose hash is below ``f x 2^64``;
* a count ``k`` holds out the records with the ``k`` smallest hashes (a few more when records
  with the same content straddle the cut: copies are never split between train and val).

So re-ordering, re-sharding or concatenating the files changes nothing, exact duplicates inside
a dataset fall on the same side, and the hold-outs of two datasets with the same fraction agree
on content they share. Nothing held out is ever dealt for training: the train pool is the
complement (``Loader(..., split="val")`` deals the hold-out, each record once per epoch).

Example:
    >>> hashes = np.array([5, 2**63, 7, 2**64 - 1, 5], dtype=np.uint64)
    >>> held_out(hashes, 0.25).tolist()            # below 2^62: the two 5s and the 7
    [True, False, True, False, True]
    >>> held_out(hashes, 1).tolist()               # the smallest hash, with its copy
    [True, False, False, False, True]
"""

from __future__ import annotations

import numpy as np

from chute.errors import ConfigError

__all__ = ["held_out", "split_ids"]

SPLITS = ("train", "val")


def held_out(hashes: np.ndarray, val: float | int | None) -> np.ndarray:
    """One flag per record: whether ``val`` holds it out (see the module docstring)."""
    hashes = np.asarray(hashes, dtype=np.uint64)
    if not val:
        return np.zeros(len(hashes), dtype=bool)
    if isinstance(val, float):
        if not 0 < val < 1:
            raise ConfigError(f"val must be a fraction in (0, 1) or a count, got {val!r}")
        cut = np.uint64(min(int(val * 2.0**64), 2**64 - 1))
        return hashes < cut
    k = int(val)
    if k >= len(hashes):
        return np.ones(len(hashes), dtype=bool)
    kth = np.partition(hashes, k - 1)[k - 1]
    return hashes <= kth


def split_ids(
    hashes: np.ndarray, val: float | int | None, split: str, rows: np.ndarray | None = None
) -> np.ndarray | None:
    """The local ids of ``split`` (``"train"`` or ``"val"``), or ``None`` for every id.

    ``rows``: for a cache, the record index of each row (rejected records have no row); the
    ids returned are then row numbers.
    """
    if split not in SPLITS:
        raise ConfigError(f"split must be one of {SPLITS}, got {split!r}", param="split")
    if not val:
        if split == "val":
            return np.empty(0, dtype=np.int64)
        return None
    flags = held_out(hashes, val)
    if rows is not None:
        flags = flags[np.asarray(rows, dtype=np.int64)]
    ids = np.flatnonzero(flags if split == "val" else ~flags)
    return ids.astype(np.int32) if len(ids) and int(ids[-1]) < 2**31 else ids

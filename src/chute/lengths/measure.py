"""``lengths_of``: every sample's length under a recipe, computed once by a parallel pass and cached.

Re-exported by ``chute.lengths``; see its docstring for the whole picture.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable
from typing import Any

import numpy as np
import orjson

from chute._internal.files import CANNOT_WRITE, warn_once, writable_folder
from chute._internal.progress import ProgressArg
from chute._internal.progress import progress as progress_of
from chute._internal.waiting import building, wait_for_local_rank_zero
from chute.errors import ConfigError
from chute.lengths.base import ROWS, STATUS_OK, STATUS_REJECTED, STATUS_TRUNCATED, Lengths
from chute.lengths.compute import compute_lengths
from chute.lengths.pieces import Pieces, PieceTable, split_lengths
from chute.lengths.store import (
    LENGTHS_VERSION,
    cache_key,
    cache_paths,
    read_cached,
    write_cached,
)
from chute.recipe.contract import as_recipe

__all__ = [
    "LENGTHS_VERSION",
    "STATUS_OK",
    "STATUS_REJECTED",
    "STATUS_TRUNCATED",
    "Lengths",
    "PieceTable",
    "Pieces",
    "compute_lengths",
    "lengths_key",
    "lengths_of",
    "split_lengths",
]

log = logging.getLogger("chute.lengths")


def lengths_key(source: Any, recipe: Any) -> tuple[str | None, dict[str, Any]]:
    """The cache key of (source, recipe), or ``None`` when either has no fingerprint."""
    source_fp = _fingerprint(source)
    if recipe is None:
        recipe_fp: Any = {"kind": "pretokenized"}
    else:
        recipe_fp = _fingerprint(recipe)
    if source_fp is None or recipe_fp is None:
        return None, {}
    return cache_key(source_fp, recipe_fp), {"source": source_fp, "recipe": recipe_fp}


def _fingerprint(obj: Any) -> Any:
    fn = getattr(obj, "fingerprint", None)
    if not callable(fn):
        return None
    return orjson.loads(orjson.dumps(fn(), option=orjson.OPT_SERIALIZE_NUMPY))


def lengths_of(
    source: Any,
    recipe: Callable[[Any], Any] | None = None,
    *,
    workers: int | None = None,
    cache: bool = True,
    cache_dir: str | os.PathLike[str] | None = None,
    progress: ProgressArg = None,
    local_rank: int = 0,
    wait_timeout: float = 3600.0,
    desc: str = "lengths",
) -> Lengths:
    """The ``Lengths`` of every sample of ``source`` under ``recipe`` (see the module docstring).

    Args:
        source: a ``JsonlSource``, a chute cache, or any map-style dataset.
        recipe: ``recipe(record) -> sample``; ``None``: records are pre-tokenized samples.
        workers: processes for the lengths pass (default: all cores).
        cache: read and write the lengths cache (``False``: always compute, store nothing).
        cache_dir: the cache root (default ``$CHUTE_CACHE_DIR`` or ``~/.cache/chute``).
        progress: ``None``: a bar on a terminal, else a log line now and then, on rank 0
            (``chute._internal.progress``); ``False``: silent; or called with the number of
            records done.
        local_rank: this process's rank within its node; ranks other than 0 wait for local
            rank 0 to write the cache instead of computing it again.
        wait_timeout: seconds a waiting rank waits before it gives up.
        desc: the progress label (a mixture's passes name their dataset).

    Raises:
        ConfigError: the source's own lengths do not match its size, or the wait timed out.
    """
    own = getattr(source, "lengths", None)
    if own is not None:
        lens = Lengths.of(own() if callable(own) else own)
        if len(lens) != len(source):
            raise ConfigError(
                f"{type(source).__name__}.lengths has {len(lens)} entries but the source has "
                f"{len(source)} samples; rebuild the source's lengths"
            )
        longest = getattr(source, "longest", None)  # a cache of preference pairs
        if longest is not None and lens.longest is None:
            lens = dataclasses.replace(lens, longest=np.asarray(longest), sequences=2)
        # a cache's image tokens per sample: what plans balance as patches and stats show
        # (its manifest's total says whether there are any, without a pass over the array)
        manifest = getattr(source, "manifest", None)
        if (
            lens.image_tokens is None
            and isinstance(manifest, dict)
            and manifest.get("image_tokens")
        ):
            lens = dataclasses.replace(lens, image_tokens=np.asarray(source.image_tokens))
        return lens
    contract = as_recipe(recipe)
    lens = _per_record(
        source, contract, workers, cache, cache_dir, progress, local_rank, wait_timeout, desc
    )
    if contract is None:
        return lens
    if contract.task == "preference":
        lens = dataclasses.replace(lens, sequences=2)
    if contract.overflow == "split" and contract.max_length is not None:
        lens = split_lengths(lens, contract.max_length, contract.stride)
    return lens


def _per_record(
    source: Any,
    recipe: Any,
    workers: int | None,
    cache: bool,
    cache_dir: Any,
    progress: ProgressArg,
    local_rank: int,
    wait_timeout: float,
    desc: str,
) -> Lengths:
    """The lengths of every record under ``recipe``: cached, or computed (and cached)."""
    key, describe = lengths_key(source, recipe) if cache else (None, {})
    hit = read_cached(key, cache_dir) if key is not None else None
    if hit is not None:
        return hit
    if key is not None and not _can_keep(cache_dir):
        key = None  # every rank of the node computes its own (it cannot be shared through files)
    if key is None:
        with progress_of(len(source), desc, enabled=progress) as bar:
            out, kinds, tally = compute_lengths(
                source, recipe, workers=workers, progress=bar.update
            )
        return Lengths(
            out[0],
            out[1],
            out[2],
            kinds=tuple(kinds),
            tally=tally,
            first_trained=out[3],
            longest=out[4],
        )
    if local_rank != 0:
        return _wait_for(key, cache_dir, wait_timeout)
    n = len(source)
    log.info(
        "computing the lengths of %d records (cached as %s)", n, cache_paths(key, cache_dir)[0]
    )

    def fill(out: Any) -> tuple[list[str], Any]:
        with progress_of(n, desc, enabled=progress) as bar:
            _, kinds, tally = compute_lengths(
                source, recipe, workers=workers, out=out, progress=bar.update
            )
        return kinds, tally

    try:
        # held while computing: a waiting rank tells this process at work from one that died
        with building(cache_paths(key, cache_dir)[0]):
            return write_cached(key, n, fill, cache_dir=cache_dir, describe=describe)
    except OSError as exc:
        if exc.errno not in CANNOT_WRITE:
            raise
        folder = cache_paths(key, cache_dir)[0].parent
        # the other ranks of the node wait for this file: stop with the fix rather than leave
        # them waiting (under torchrun, one rank's error ends the job)
        raise OSError(
            exc.errno,
            f"cannot write the lengths cache of {n:,} records under {folder} "
            f"({exc.strerror}; it takes about {ROWS * 4 * n / 1e6:,.1f} MB): free space there, or "
            f"set CHUTE_CACHE_DIR to a folder with room",
        ) from exc


def _can_keep(cache_dir: Any) -> bool:
    """Whether lengths can be kept under the cache folder; warns once where they cannot."""
    folder = cache_paths("probe", cache_dir)[0].parent
    if writable_folder(folder):
        return True
    warn_once(
        log,
        "cannot write lengths under %s (read-only or not ours): every process computes them "
        "and keeps them in memory; set CHUTE_CACHE_DIR to a writable folder to compute them "
        "once per node",
        folder,
    )
    return False


def _wait_for(key: str, cache_dir: Any, timeout: float) -> Lengths:
    return wait_for_local_rank_zero(
        lambda: read_cached(key, cache_dir),
        cache_paths(key, cache_dir)[0],
        timeout,
        "the lengths cache",
        "the lengths once beforehand (`chute stats ...` caches them)",
    )

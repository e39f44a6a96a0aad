"""The lengths pass: run the recipe over every record of a source, in parallel, keep the counts.

The source is cut into chunks of consecutive records; a pool of processes (fork on Linux, like
``chute.recipe.validate``) runs the recipe over each chunk with ``recipe.batch`` (the tokenizer works
back to back) and sends back three small int32 arrays per chunk. Results are written straight
into the output array (a memory map when the result is cached), so the main process holds no
per-record Python objects::

    records 0 .. n-1 ──chunks──► worker: judge(recipe, 256 records) ──► length, image_tokens,
                                         (recipe.batch + the sample       status, first trained
                                          contract)                       (+ reject kinds)
                                                     │
    out[:, lo:hi] ◄──────────────────────────────────┘  (in chunk order, whatever finished first)

A sample counts as valid exactly when the loader would accept it: ``chute.recipe.outcome.judge``
decides, as it does for validate and preprocess. The position of each sample's first trained
token is kept, so ``chute stats`` can apply any ``max_length`` later exactly as the recipe would.

Example:
    >>> data = [{"input_ids": [1, 2, 3]}, {"input_ids": []}, {"input_ids": [4]}]
    >>> out, kinds, tally = compute_lengths(data, None, workers=1)
    >>> out[0].tolist(), kinds, dict(tally.counts)
    ([3, -1, 1], ['empty_sample'], {'empty_sample': 1})
    >>> out[4].tolist()  # each sample's longest sequence (a preference pair's longer side)
    [3, -1, 1]
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from chute._internal.pools import process_map
from chute.errors import RejectTally, SampleError
from chute.lengths.base import ROWS, STATUS_OK, STATUS_REJECTED, STATUS_TRUNCATED
from chute.recipe.contract import as_recipe
from chute.recipe.outcome import first_trained, judge, preflight

__all__ = ["compute_lengths"]

# Records handed to recipe.batch at once (its measured sweet spot), and chunk size bounds.
BATCH = 256
MIN_CHUNK, MAX_CHUNK = 2_000, 100_000

ChunkResult = tuple[int, np.ndarray, list[str], RejectTally]


def compute_lengths(
    source: Any,
    recipe: Callable[[Any], Any] | None,
    *,
    workers: int | None = None,
    out: np.ndarray | None = None,
    progress: Callable[[int], None] | None = None,
) -> tuple[np.ndarray, list[str], RejectTally]:
    """Lengths, image tokens and status of every record of ``source``.

    Args:
        source: ``len`` and ``source[i]``; a ``JsonlSource`` is read in sequential blocks.
        recipe: ``recipe(record) -> sample`` (``recipe.batch`` is used when present);
            ``None``: records are pre-tokenized samples.
        workers: processes (default: all cores; 1 runs in this process).
        out: a ``(ROWS, len(source))`` int32 array to fill (e.g. a memory map); default: new.
        progress: called with the number of records done as chunks finish.

    Returns:
        ``(out, kinds, tally)``: rows ``length`` (-1 rejected), ``image_tokens``, ``status``
        ``first_trained`` and ``longest`` (see ``chute.lengths.base``); the reject kinds by code; the
        reject tally.
    """
    recipe = as_recipe(recipe)  # a function too: read as an SFT recipe (recipe/contract.py)
    preflight(recipe, source)  # a recipe that cannot work fails now, not after a chunk
    n = len(source)
    if out is None:
        out = np.empty((ROWS, n), dtype=np.int32)
    workers = max(1, workers or os.cpu_count() or 1)
    chunk = max(MIN_CHUNK, min(MAX_CHUNK, -(-n // (workers * 8)))) if n else 1
    bounds = [(lo, min(n, lo + chunk)) for lo in range(0, n, chunk)]
    kinds: list[str] = []
    tally = RejectTally()
    for lo, block, chunk_kinds, chunk_tally in _run(source, recipe, bounds, workers):
        hi = lo + block.shape[1]
        codes = block[2]
        if chunk_kinds:  # chunk-local reject kinds -> global codes
            rejected = np.flatnonzero(codes >= STATUS_REJECTED)
            for pos, kind in zip(rejected.tolist(), chunk_kinds, strict=True):
                if kind not in kinds:
                    kinds.append(kind)
                codes[pos] = STATUS_REJECTED + kinds.index(kind)
        out[:, lo:hi] = block
        tally.merge(chunk_tally)
        if progress is not None:
            progress(hi - lo)
    return out, kinds, tally


def _run(
    source: Any, recipe: Any, bounds: list[tuple[int, int]], workers: int
) -> Iterator[ChunkResult]:
    return process_map(_chunk, bounds, workers=workers, shared=(source, recipe))


def _records(source: Any, lo: int, hi: int) -> Iterator[Any]:
    between = getattr(source, "records_between", None)
    if callable(between):
        yield from between(lo, hi)
    else:
        for i in range(lo, hi):
            yield source[i]


def _chunk(source: Any, recipe: Any, bounds: tuple[int, int]) -> ChunkResult:
    """Lengths of records ``lo .. hi-1``; rejects carry chunk-local kind names."""
    lo, hi = bounds
    block = np.zeros((ROWS, hi - lo), dtype=np.int32)
    kinds: list[str] = []
    tally = RejectTally()
    pending: list[Any] = []
    pos = 0

    def flush() -> None:
        nonlocal pos
        for result in judge(recipe, pending):
            if isinstance(result, SampleError):
                if result.path is None:
                    result.with_location(f"{type(source).__name__}[{lo + pos}]", None)
                tally.add(result)
                kinds.append(result.kind)
                block[:, pos] = (-1, 0, STATUS_REJECTED, 0, -1)
            else:
                image = result.get("num_image_tokens", 0) or 0
                status = STATUS_TRUNCATED if result.get("truncated") else STATUS_OK
                n = len(result["input_ids"])
                # pre-tokenized samples are taken as they are (the loader checks no labels)
                labels = result.get("labels") if recipe is not None else None
                first = first_trained(labels) if labels is not None else 0
                chosen = result.get("chosen_length")  # a preference pair: its longer side
                longest = n if chosen is None else max(int(chosen), n - int(chosen))
                block[:, pos] = (n, int(image), status, first, longest)
            pos += 1
        pending.clear()

    for item in _records(source, lo, hi):
        pending.append(item)
        if len(pending) == BATCH:
            flush()
    if pending:
        flush()
    return lo, block, kinds, tally

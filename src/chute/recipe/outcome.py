"""What a record becomes: kept, truncated, dropped, or rejected by kind, decided in one place.

Every entry point (``chute validate``, ``chute stats``, ``chute preprocess``, the Loader and its
lengths pass) turns records into samples with ``judge`` / ``sample_of`` (the recipe, then the
sample contract that the loader enforces), so a record is the same thing everywhere.

``max_length`` is decided by ``overflow_outcome``, elementwise on ints or arrays: the recipe
applies it to one sample's tokens, and ``chute stats`` to a whole lengths array (lengths measured
once without a ``max_length``, so any ``--max-length`` is answered without tokenizing again)::

    length <= max_length ............................................ KEPT
    length >  max_length, overflow="drop" ........................... TOO_LONG      (too_long)
    length >  max_length, overflow="truncate" ....................... TRUNCATED
    no trained token before the cut (first_trained >= kept length) .. NOTHING_TRAINED
                                                                      (no_trainable_tokens)

A truncation never splits an image: the cut moves back to the image's start. That cannot
change the outcome, because trained tokens are never image tokens: a first trained token before
``max_length`` lies before the image that straddles it.

Example:
    >>> overflow_outcome([5, 9, 9, 9], [0, 2, 8, 2], 8, "truncate").tolist()
    [0, 1, 3, 1]
    >>> overflow_outcome(9, 2, 8, "drop") == TOO_LONG
    True
    >>> [type(x).__name__ for x in judge(None, [{"input_ids": [1, 2]}, {"input_ids": "x"}])]
    ['dict', 'SampleError']
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from chute.errors import SampleError, as_sample_error
from chute.recipe.contract import RecipeContract, as_recipe
from chute.sample.contract import as_tokenized, bad_values, check_sample, location_of

__all__ = [
    "KEPT",
    "NOTHING_TRAINED",
    "OUTCOME_KINDS",
    "TOO_LONG",
    "TRUNCATED",
    "SampleCheck",
    "first_trained",
    "judge",
    "overflow_outcome",
    "preflight",
    "probe_records",
    "sample_of",
]

KEPT, TRUNCATED, TOO_LONG, NOTHING_TRAINED = 0, 1, 2, 3
# The reject kind of each outcome that rejects.
OUTCOME_KINDS = {TOO_LONG: "too_long", NOTHING_TRAINED: "no_trainable_tokens"}
IGNORE = -100


def overflow_outcome(length: Any, first: Any, max_length: int | None, overflow: str) -> Any:
    """What ``max_length`` does to samples, elementwise (see the module docstring).

    Args:
        length: tokens per sample.
        first: position of each sample's first trained token (its length when none is).
        max_length: the limit (``None``: none).
        overflow: ``truncate`` or ``drop``.

    Returns:
        ``KEPT``, ``TRUNCATED``, ``TOO_LONG`` or ``NOTHING_TRAINED`` per sample.
    """
    if isinstance(length, int) and isinstance(first, int):  # one sample: the recipe's hot path
        over1 = max_length is not None and length > max_length
        if overflow == "drop" and over1:
            return TOO_LONG
        if first >= (min(length, max_length) if max_length is not None else length):
            return NOTHING_TRAINED
        return TRUNCATED if over1 else KEPT
    length = np.asarray(length)
    first = np.asarray(first)
    over = length > max_length if max_length is not None else np.zeros(length.shape, bool)
    kept = np.minimum(length, max_length) if max_length is not None else length
    out = np.where(over, TRUNCATED, KEPT)
    out = np.where(first >= kept, NOTHING_TRAINED, out)
    if overflow == "drop":
        out = np.where(over, TOO_LONG, out)
    return out


def first_trained(labels: Any) -> int:
    """The position of the first trained label (not -100), or ``len(labels)`` when none is."""
    trained = np.asarray(labels) != IGNORE
    if not trained.size:
        return 0
    first = int(trained.argmax())  # the first True; 0 when there is none
    return first if trained[first] else trained.size


def sample_of(recipe: Callable[[Any], Any] | None, item: Any) -> dict[str, Any]:
    """The sample of one record, its shapes checked (``check_sample``).

    Token values are checked per batch (``bad_values``), as ``judge`` does per sample.

    Raises:
        SampleError: the record is rejected (its kind says why).
    """
    return check_sample(recipe(item) if recipe is not None else as_tokenized(item))


def judge(recipe: RecipeContract | None, items: Sequence[Any]) -> list[Any]:
    """Each item's sample (contract-checked) or its ``SampleError`` (located), in order.

    ``recipe.batch`` runs (a ``Recipe``'s tokenizer then encodes back to back; see
    ``chute.recipe.contract``); ``None`` takes items as pre-tokenized samples. Job-level errors
    (``ChuteError``: a bad configuration, a file that changed) are raised, not counted.
    """
    raw = _batch(recipe, items)
    out: list[Any] = []
    shaped: list[int] = []  # positions of the samples whose shapes passed
    for item, result in zip(items, raw, strict=True):
        try:
            if isinstance(result, BaseException):
                raise result
            sample = check_sample(result if recipe is not None else as_tokenized(result))
            shaped.append(len(out))
            out.append(sample)
        except Exception as exc:
            path, line = location_of(item)
            out.append(as_sample_error(exc, path, line))
    # token values in one vectorised pass over the batch (per sample only where one is bad)
    for j, error in bad_values([out[k] for k in shaped]):
        k = shaped[j]
        path, line = location_of(items[k])
        out[k] = as_sample_error(error, path, line)
    return out


def _batch(recipe: RecipeContract | None, items: Sequence[Any]) -> list[Any]:
    if recipe is not None:
        try:
            return list(recipe.batch(list(items)))
        except Exception as exc:
            as_sample_error(exc, None, None)  # re-raises job-level errors (ChuteError)
        # something raised outside the batch's per-record guards: one record at a time
    return [_call(recipe, item) for item in items]


def _call(recipe: Any, item: Any) -> Any:
    """``recipe(item)`` (the item itself without a recipe); an error is returned, not raised."""
    if recipe is None:
        return item
    try:
        return recipe(item)
    except Exception as exc:  # judged (and job-level errors re-raised) by judge
        return exc


class SampleCheck:
    """``judge`` as a picklable check (``chute validate``): one record, or a batch of them.

    ``validate_source`` calls ``batch`` where a check has one: the recipe then encodes a batch
    back to back, as ``chute preprocess`` does, instead of one call per record.

    Example:
        >>> SampleCheck(None)({"input_ids": [1, 2]})["input_ids"].tolist()
        [1, 2]
        >>> [type(x).__name__ for x in SampleCheck(None).batch([{"input_ids": [1]}, 7])]
        ['dict', 'SampleError']
    """

    def __init__(self, recipe: Any):
        self.recipe = as_recipe(recipe)  # a function too (a Recipe, a mixture's recipe, ...)

    def __call__(self, record: Any) -> dict[str, Any]:
        result = judge(self.recipe, [record])[0]
        if isinstance(result, SampleError):
            raise result
        return result

    def batch(self, records: Sequence[Any]) -> list[Any]:
        """Each record's sample or its ``SampleError`` (``judge``); job-level errors raise."""
        return judge(self.recipe, records)

    def __repr__(self) -> str:
        return repr(self.recipe)


def preflight(check: Any, source: Any, *, per_file: int = 8, limit: int = 64) -> None:
    """Raise a job-level error met in the first records of each file, before a long pass.

    ``check`` runs over the first records of each of ``source``'s files; a ``ConfigError``
    (e.g. media the recipe cannot count, a media token missing from the vocabulary) is raised.
    Bad records are ignored here (the pass counts them); only what would stop the pass is
    raised, so it stops in a second instead of after its first chunk, and before anything is
    written. Best effort: a configuration problem first met later still stops the pass there.

    Args:
        check: ``check(record)``: a ``Recipe``, ``SampleCheck`` or any per-record check.
        source: a ``JsonlSource`` (its files are probed one by one) or any map-style dataset.
        per_file: records probed at the start of each file.
        limit: records probed in all.
    """
    if check is None:
        return
    for record in probe_records(source, per_file=per_file, limit=limit):
        try:
            check(record)
        except Exception as exc:
            path, line = location_of(record)
            as_sample_error(exc, path, line)  # re-raises job-level errors (ChuteError)


def probe_records(source: Any, *, per_file: int = 8, limit: int = 64) -> Iterator[Any]:
    """The first records of each of ``source``'s files (``per_file`` each, ``limit`` in all).

    Example:
        >>> list(probe_records(list(range(100)), limit=3))
        [0, 1, 2]
    """
    for lo, hi in _probe_ranges(source, per_file, limit):
        between = getattr(source, "records_between", None)
        yield from between(lo, hi) if callable(between) else (source[i] for i in range(lo, hi))


def _probe_ranges(source: Any, per_file: int, limit: int) -> list[tuple[int, int]]:
    sizes = [len(f) for f in getattr(source, "files", ())] or [len(source)]
    out, start, budget = [], 0, limit
    for size in sizes:
        take = min(size, per_file, budget)
        if take > 0:
            out.append((start, start + take))
            budget -= take
        start += size
    return out

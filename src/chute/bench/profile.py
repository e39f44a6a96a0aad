"""Where one sample's time goes: reading and parsing, the recipe, media, collation.

The stages run one after another over the same samples in this process (no workers), so each
stage's share of the per-sample time says what to make cheaper when the loader is too slow: a
recipe (template + tokenizer) that dominates is what an offline token cache removes; decoding
images that dominates is what a pre-decoded media cache removes.

Example:
    >>> from chute.collate import Collate
    >>> data = [{"input_ids": [1] * (1 + i % 4)} for i in range(32)]
    >>> prof = profile_stages(data, None, Collate(), ids=range(32), batch_size=8)
    >>> prof.samples, prof.rejected, sorted(prof.shares())
    (32, 0, ['collate', 'media', 'read', 'recipe'])
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from chute.sample.contract import as_tokenized, check_sample
from chute.sources.record import Record

__all__ = ["StageProfile", "profile_stages"]

STAGES = ("read", "recipe", "media", "collate")


@dataclass
class StageProfile:
    """Seconds spent in each stage over ``samples`` samples (one process, no workers).

    Attributes:
        samples: samples read.
        rejected: samples the recipe (or media stage) rejected; they count in ``read`` and in
            the stage that rejected them.
        seconds: stage name -> seconds, for ``read`` (``source[i]`` and JSON parsing),
            ``recipe`` (format, template, tokenizer), ``media`` (decoding and transforms; 0
            without a media stage) and ``collate``.
    """

    samples: int
    rejected: int
    seconds: dict[str, float]

    def per_sample_us(self) -> dict[str, float]:
        """Microseconds per sample in each stage."""
        n = max(1, self.samples)
        return {k: 1e6 * v / n for k, v in self.seconds.items()}

    def shares(self) -> dict[str, float]:
        """Each stage's share of the total (0..1; all 0 when nothing was timed)."""
        total = sum(self.seconds.values())
        return {k: (v / total if total > 0 else 0.0) for k, v in self.seconds.items()}

    def to_json(self) -> dict[str, Any]:
        return {
            "samples": self.samples,
            "rejected": self.rejected,
            "seconds": self.seconds,
            "per_sample_us": self.per_sample_us(),
            "shares": self.shares(),
        }


def profile_stages(
    source: Any,
    recipe: Callable[[Any], Any] | None,
    collate: Callable[[list[dict[str, Any]]], Any],
    *,
    ids: Iterable[int],
    batch_size: int,
    media: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    warmup: int = 4,
) -> StageProfile:
    """Time each stage over the samples ``ids`` of ``source``.

    Args:
        source: ``source[i]`` gives a record (or a tokenized sample when ``recipe`` is None).
        recipe: ``recipe(record) -> sample``, or ``None`` for pre-tokenized sources.
        collate: ``collate(samples)``, timed over chunks of ``batch_size``.
        ids: which samples to read (e.g. the first batches of the plan).
        batch_size: samples per collated chunk.
        media: ``media(sample) -> sample`` that loads the sample's media, if any.
        warmup: samples run once before timing (template compilation, caches).
    """
    ids = [int(i) for i in ids]
    if not ids:
        raise ValueError("ids must name at least one sample to profile")
    convert = recipe if recipe is not None else as_tokenized
    for i in ids[:warmup]:  # compile templates, warm tokenizer caches
        try:
            convert(_read(source, i))
        except Exception:
            continue
    clock = time.perf_counter
    t = clock()
    items = [_read(source, i) for i in ids]
    read_s = clock() - t

    samples: list[dict[str, Any]] = []
    rejected = 0
    t = clock()
    for item in items:
        try:
            samples.append(check_sample(convert(item)))
        except Exception:
            rejected += 1
    recipe_s = clock() - t

    media_s = 0.0
    if media is not None:
        kept = []
        t = clock()
        for sample in samples:
            try:
                kept.append(media(sample))
            except Exception:
                rejected += 1
        media_s = clock() - t
        samples = kept

    t = clock()
    for lo in range(0, len(samples), batch_size):
        collate(samples[lo : lo + batch_size])
    collate_s = clock() - t
    return StageProfile(
        samples=len(ids),
        rejected=rejected,
        seconds={"read": read_s, "recipe": recipe_s, "media": media_s, "collate": collate_s},
    )


def _read(source: Any, i: int) -> Any:
    item = source[i]
    if isinstance(item, Record):
        # parsing is lazy: count it as reading; a bad record is the recipe's to reject
        with contextlib.suppress(Exception):
            item.data  # noqa: B018
    return item

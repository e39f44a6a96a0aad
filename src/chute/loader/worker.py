"""What runs in a DataLoader worker: one planned batch in, one collated batch and its report out.

The main process sends a ``BatchTask`` (epoch, step, the batch's global sample ids); the worker
reads each record, runs the recipe under the watchdog, skips and records bad samples, collates
what is left and returns ``(batch, BatchReport)``. The report travels with the batch, so the main
process sees every reject of every worker, in stream order, whatever the worker timing.

Example:
    >>> from chute.collate import Collate
    >>> data = [{"input_ids": [1, 2]}, {"input_ids": "oops"}, {"input_ids": [3]}]
    >>> build = BatchBuilder(data, recipe=None, collate=Collate())
    >>> batch, report = build[BatchTask(epoch=0, step=0, ids=[0, 1, 2])]
    >>> batch["sample_ids"].tolist(), report.bad, [e.kind for e in report.errors]
    ([0, 2], [1], ['wrong_type'])
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from chute._internal.lazy_torch import require_torch
from chute.collate.packed import row_sample_ids
from chute.collate.slices import packed_inside
from chute.errors import ConfigError, SampleError, as_sample_error
from chute.loader.transport import share_one_storage
from chute.loader.watchdog import SampleTimeout, Watchdog
from chute.media.augment import SampleDraw
from chute.recipe.outcome import sample_of
from chute.recipe.recipe import Recipe
from chute.sample.contract import bad_values, check_sample, location_of
from chute.sample.rejects import item_reject_entry

__all__ = ["BatchBuilder", "BatchReport", "BatchTask", "piece_of"]


def piece_of(sample: dict[str, Any], start: int, end: int) -> dict[str, Any]:
    """Tokens ``[start, end)`` of a sample (split packing), with ``piece_start`` recorded."""
    if start == 0 and end >= len(sample["input_ids"]):
        return sample
    out = dict(sample)
    out["input_ids"] = sample["input_ids"][start:end]
    if sample.get("labels") is not None:
        out["labels"] = sample["labels"][start:end]
    out["piece_start"] = start
    return out


class BatchTask(NamedTuple):
    """One batch to build: its place in the stream and the global ids of its samples.

    ``ids`` is a list of ints (it pickles several times faster than a small numpy array, and a
    task crosses a process boundary for every batch). Packed plans add ``rows``, the number of
    samples in each row (``ids`` lists them row by row), and split packing ``spans``: the token
    range ``[start, end)`` of each id, flattened (``[s0, e0, s1, e1, ...]``).
    """

    epoch: int
    step: int
    ids: list[int]
    rows: list[int] | None = None
    spans: list[int] | None = None


@dataclass
class BatchReport:
    """What happened while building one batch, sent back with it.

    Attributes:
        planned: samples the plan put in the batch.
        bad: positions (in plan order) of the rejected samples; empty for a clean batch, which
            keeps the common case cheap to send and to account for.
        errors: the ``SampleError`` of each rejected sample, in the order of ``bad``.
        rejects: rejects-file entries (``chute.sample.rejects.reject_entry`` format), when asked for.
        topped_up: rows added by repeating valid samples (``top_up=True``).
        seconds: time spent building the batch in the worker.
    """

    epoch: int
    step: int
    planned: int
    bad: list[int] = field(default_factory=list)
    errors: list[SampleError] = field(default_factory=list)
    rejects: list[dict[str, Any]] | None = None
    topped_up: int = 0
    seconds: float = 0.0

    @property
    def ok(self) -> np.ndarray:
        """One flag per planned sample, in plan order (False = rejected)."""
        flags = np.ones(self.planned, dtype=bool)
        flags[self.bad] = False
        return flags

    def __reduce__(self) -> tuple[Any, ...]:
        # A plain tuple pickles in a fraction of a dataclass's time; one crosses per batch.
        fields = (self.epoch, self.step, self.planned, self.bad, self.errors, self.rejects)
        return (BatchReport, (*fields, self.topped_up, self.seconds))


def refuse_media_longer_than_a_row(sample: dict[str, Any], row: int) -> None:
    """Reject a sample with media that a packed row of ``row`` tokens would have to cut.

    The packed collate cuts a sample longer than its row (the plan gives it a row of its own);
    through an image's tokens that cut leaves more pixels than tokens for them, and the model
    stops ("Image features and image tokens do not match"). The recipe's own truncation stops
    before an image instead, which is what the fix names.
    """
    n = len(sample["input_ids"])
    if n <= row:
        return
    kinds = [k for k in ("images", "videos", "audios") if sample.get(k)]
    if kinds:
        raise SampleError(
            "media_too_long_for_row",
            f"{n} tokens with its {' and '.join(kinds)}, more than a packed row's "
            f"max_length={row}: a row cannot be cut through media, so the sample is left out; "
            f"raise plan_options max_length, or set the recipe's max_length to {row} (its "
            f"truncation stops before an image)",
        )


def refuse_media_without_stage(sample: dict[str, Any]) -> None:
    """Raise ``ConfigError`` for a sample with media when the loader has no media stage."""
    kinds = [key for key in ("images", "videos", "audios") if sample.get(key)]
    if kinds:
        where = f"{sample.get('path')}:{sample.get('line')}" if sample.get("path") else "a sample"
        raise ConfigError(
            f"{where} references {' and '.join(kinds)}, but the Loader has no media stage (none "
            f"was built: the first records had no media), so its media tokens would reach the "
            f"model without pixels; pass media=MediaStage(...) (or a transform) to load them, "
            f"or media=False to train on the text alone"
        )


class BatchBuilder:
    """The map-style "dataset" the DataLoader sees: ``builder[task] -> (batch, report)``.

    Args:
        source: ``len`` + ``source[i]`` (a ``JsonlSource``, a cache, any map-style dataset).
        recipe: ``recipe(item) -> sample``; ``None`` treats each item as a tokenized sample.
        collate: ``collate(samples) -> dict of tensors``; must accept an empty list. The
            builder sets ``batch["sample_ids"]`` itself, from the plan.
        sample_timeout: seconds one sample may take (``None``: no watchdog).
        top_up: refill a batch that lost samples with repeats of its valid samples.
        keep_rejects: build rejects-file entries for the main process to write.
        media: ``media(sample) -> sample`` run after the recipe inside the guarded step (a
            ``chute.media.MediaStage``: decodes and checks images), or ``None``.
        media_guard: without a media stage, stop (``ConfigError``) at a sample that references
            media rather than deliver its media tokens without pixels.
        seed: the seed of the media stage's augmentation (``MediaStage(augment=...)``): each
            sample's draw is keyed by ``(seed, epoch, sample id)``, never by the worker.
    """

    def __init__(
        self,
        source: Any,
        recipe: Callable[[Any], Any] | None,
        collate: Callable[..., dict[str, Any]],  # (samples) or, for packed rows, (samples, rows=)
        *,
        sample_timeout: float | None = None,
        top_up: bool = False,
        keep_rejects: bool = False,
        media: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        media_guard: bool = False,
        seed: int = 0,
    ):
        self.source = source
        self.recipe = recipe
        self.collate = collate
        self.sample_timeout = sample_timeout
        self.top_up = top_up
        self.keep_rejects = keep_rejects
        self.media = media
        self.media_guard = media_guard
        self.seed = seed
        self.augment = getattr(media, "augment", None)
        packed = packed_inside(collate)
        self.row = None if packed is None else packed.max_length
        # coordinates in the text follow the draw only through a recipe that knows them (a
        # mixture's recipe hands it to each dataset's)
        self._recipe_draws = self.augment is not None and (
            isinstance(recipe, Recipe) or callable(getattr(recipe, "widest_coordinates", None))
        )
        self._watchdog = Watchdog(sample_timeout)
        self._name = type(source).__name__
        self._pid = -1

    def __getstate__(self) -> dict[str, Any]:
        # Workers started with spawn / forkserver receive a pickled copy: no module objects,
        # and the per-process setup runs again there.
        state = {k: v for k, v in self.__dict__.items() if k not in ("_torch", "_in_worker")}
        state["_pid"] = -1
        return state

    def _enter_process(self) -> None:
        """Once per process: inside a DataLoader worker the watchdog keeps its handler."""
        self._pid = os.getpid()
        self._torch = torch = require_torch()
        self._in_worker = torch.utils.data.get_worker_info() is not None
        self._watchdog.keep_handler = self._in_worker

    def __getitem__(self, task: BatchTask) -> tuple[dict[str, Any], BatchReport]:
        t0 = time.perf_counter()
        if self._pid != os.getpid():
            self._enter_process()
        ids = task.ids
        report = BatchReport(task.epoch, task.step, len(ids))
        source, dog = self.source, self._watchdog
        recipe = self.recipe
        spans = task.spans
        media = self.media
        samples: list[dict[str, Any]] = []
        positions: list[int] = []  # plan position of each sample in `samples`
        items: list[Any] = []  # and the item it came from (for locating later rejects)
        rejected: list[tuple[int, SampleError, Any]] = []
        with dog.guarding():
            for j, index in enumerate(ids):
                item = None
                try:
                    with dog:
                        item = source[index]
                        if self.augment is not None:
                            sample = self._augmented(item, task.epoch, index)
                        elif media is not None:
                            sample = media(sample_of(recipe, item))  # as every entry point judges
                        else:
                            sample = sample_of(recipe, item)
                        if media is None and self.media_guard:
                            refuse_media_without_stage(sample)
                        if spans is not None:
                            sample = piece_of(sample, spans[2 * j], spans[2 * j + 1])
                        if self.row is not None:
                            refuse_media_longer_than_a_row(sample, self.row)
                except SampleTimeout:
                    rejected.append((j, self._timed_out(item, index), item))
                except Exception as exc:  # a ChuteError (a changed file) is re-raised here
                    path, line = location_of(item)
                    error = as_sample_error(exc, path, line)
                    rejected.append((j, self._locate(error, item, index), item))
                else:
                    samples.append(sample)
                    positions.append(j)
                    items.append(item)
        for pos, error in reversed(bad_values(samples)):
            j, item = positions.pop(pos), items.pop(pos)
            del samples[pos]
            rejected.append((j, self._locate(error, item, ids[j]), item))
        sample_ids = [ids[j] for j in positions]
        if rejected:
            rejected.sort(key=lambda r: r[0])
            report.bad = [j for j, _, _ in rejected]
            report.errors = [error for _, error, _ in rejected]
            if self.keep_rejects:
                report.rejects = [self._entry(item, ids[j], e) for j, e, item in rejected]
            if self.top_up and samples:
                report.topped_up = len(ids) - len(samples)
                fill = [j % len(samples) for j in range(report.topped_up)]
                samples += [samples[j] for j in fill]
                sample_ids += [sample_ids[j] for j in fill]
        if task.rows is None:
            batch = self.collate(samples)
        else:  # packed: the valid samples of each row, rows that lost every sample dropped
            row_of = np.repeat(np.arange(len(task.rows)), task.rows)
            sizes = np.bincount(row_of[positions], minlength=len(task.rows)).tolist()
            batch = self.collate(samples, rows=sizes)
            batch["row_sample_ids"] = self._torch.from_numpy(row_sample_ids(sample_ids, sizes))
        batch["sample_ids"] = self._torch.from_numpy(np.array(sample_ids or [-1], dtype=np.int64))
        if self._in_worker:
            batch = share_one_storage(batch)
        report.seconds = time.perf_counter() - t0
        return batch, report

    def _augmented(self, item: Any, epoch: int, index: int) -> dict[str, Any]:
        """The sample with its augmentation, drawn once per (seed, epoch, sample id).

        The draw moves the coordinates in the text (the recipe) and the pixels (the media
        stage) alike.
        """
        media: Any = self.media
        draw = SampleDraw(media.augment, self.seed, epoch, index, media.image)
        if self._recipe_draws:
            sample = check_sample(self.recipe(item, draw=draw))  # type: ignore[call-arg,misc]
        else:
            sample = sample_of(self.recipe, item)
        return media(sample, draw)

    def _timed_out(self, item: Any, index: int) -> SampleError:
        error = SampleError(
            "sample_timeout",
            f"processing took longer than sample_timeout={self.sample_timeout} s; the sample "
            f"was skipped (a hanging recipe, or a pathological record)",
        )
        return self._locate(error, item, index)

    def _locate(self, error: SampleError, item: Any, index: int) -> SampleError:
        if error.path is None:
            path, line = location_of(item)
            error.with_location(path or f"{self._name}[{index}]", line)
        return error

    def _entry(self, item: Any, index: int, error: SampleError) -> dict[str, Any]:
        return item_reject_entry(item, index, error)

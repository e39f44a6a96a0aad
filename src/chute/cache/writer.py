"""One chunk of a cache: run the recipe over its records, write its files, commit it.

A chunk is records ``[k * chunk_size, (k + 1) * chunk_size)`` of the sources, whatever the
number of workers or ranks, so its bytes depend on its records and the recipe only. Its files
are committed in this order, each atomically (``layout.publish``)::

    chunks/000007.rejects.jsonl   (only when records were rejected)
    chunks/000007.<suffix>        (files of extra stages, if any)
    chunks/000007.arrow           the samples (Arrow IPC stream, one record batch)
    chunks/000007.json            the commit record: counts, file sizes and hashes

The commit record comes last, so a chunk whose record exists has all its files; a run killed
before that leaves at most temporary files (or files the next run rewrites with equal bytes).
Before the first file and again before the record, the build's ``plan.json`` must still be this
build's (``chute.cache.claim.hold``), and the record names the build (``build_digest``), so a
chunk of one build never passes for a chunk of another.

Example:
    >>> job = ChunkJob(source, recipe, "/data/cache", chunk_size=10_000, dtype="uint16",
    ...                file_starts=[0])  # doctest: +SKIP
    >>> job.run(0)["samples"]  # doctest: +SKIP
    9987
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson
import pyarrow as pa

from chute.cache.claim import fingerprint_parts, hold
from chute.cache.fingerprint import digest
from chute.cache.layout import Layout
from chute.cache.schema import chunk_batch, integers
from chute.cache.stages import ChunkStage
from chute.errors import RejectTally, SampleError
from chute.recipe.contract import as_recipe
from chute.recipe.outcome import judge
from chute.recipe.windows import untrained_window
from chute.sample.rejects import reject_entry
from chute.sources.record import Record

__all__ = ["ChunkJob", "file_entry", "serialize"]

# Records handed to ``recipe.batch`` at once: the tokenizer then encodes back to back.
BATCH_RECORDS = 256


def serialize(batch: pa.RecordBatch) -> pa.Buffer:
    """A record batch as an Arrow IPC stream (what ``datasets`` memory-maps), in memory."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue()


def file_entry(name: str, data: Any) -> dict[str, Any]:
    """What a commit record says about one file: name, size and blake2b of its bytes."""
    view = memoryview(data)
    return {
        "name": name,
        "bytes": view.nbytes,
        "blake2b": hashlib.blake2b(view, digest_size=16).hexdigest(),
    }


@dataclass
class ChunkJob:
    """Everything a worker needs to build any chunk; picklable (sources and recipes are).

    Args:
        source: the ``JsonlSource`` over the config's files.
        recipe: the ``Recipe`` (any ``chute.recipe.contract.RecipeContract``).
        root: the cache directory.
        chunk_size: records per chunk.
        dtype: the token id dtype name (``uint16`` or ``int32``).
        file_starts: the global index of each source file's first record.
        stages: extra stages (columns and files per chunk).
        plan: the bytes of the build's ``plan.json``: checked before each chunk is written
            and committed, and the build named in each commit record (empty: neither, for
            a job run outside a build).
    """

    source: Any
    recipe: Any
    root: str
    chunk_size: int
    dtype: str
    file_starts: Sequence[int]
    stages: list[ChunkStage] = field(default_factory=list)
    plan: bytes = b""

    def __post_init__(self) -> None:
        self.recipe = as_recipe(self.recipe)  # the contract: what the writer reads of it

    @functools.cached_property
    def _build(self) -> dict[str, Any]:
        """What each commit record says of its build (nothing without a plan)."""
        if not self.plan:
            return {}
        fingerprint = orjson.loads(self.plan)["fingerprint"]
        return {"build_digest": digest(fingerprint), "build_parts": fingerprint_parts(fingerprint)}

    def _hold(self, layout: Layout, k: int) -> None:
        if self.plan:
            hold(layout, self.plan, chunk=k)

    @property
    def _splits(self) -> bool:
        return bool(self.recipe.overflow == "split")

    def bounds(self, k: int) -> tuple[int, int]:
        lo = k * self.chunk_size
        return lo, min(len(self.source), lo + self.chunk_size)

    def run(self, k: int, progress: Callable[[int], None] | None = None) -> dict[str, Any]:
        """Build, write and commit chunk ``k``; returns its commit record."""
        layout = Layout(self.root)
        lo, hi = self.bounds(k)
        samples: list[dict[str, Any]] = []
        rejects: list[bytes] = []
        tally = RejectTally()
        flags: list[bool] = []
        batch: list[Record] = []
        untrained = 0  # windows of split records with no trained token: left out, counted
        for record in self.source.records_between(lo, hi):
            batch.append(record)
            if len(batch) == BATCH_RECORDS:
                untrained += self._take(batch, samples, rejects, tally, flags)
                if progress is not None:
                    progress(len(batch))
                batch = []
        if batch:
            untrained += self._take(batch, samples, rejects, tally, flags)
            if progress is not None:
                progress(len(batch))
        extra: dict[str, Any] = {}
        files: dict[str, Any] = {}
        for stage in self.stages:
            extra.update(stage.columns(samples))
            files.update(stage.files(k, samples))
        columns = chunk_batch(samples, np.dtype(self.dtype), np.asarray(self.file_starts), extra)
        arrow = serialize(columns)
        entries: dict[str, Any] = {}
        self._hold(layout, k)  # never a file over another build's chunk
        if rejects:
            blob = b"".join(rejects)
            layout.publish(layout.rejects_part(k), blob)
            entries["rejects"] = file_entry(layout.rejects_part(k).name, blob)
        for suffix, data in sorted(files.items()):
            layout.publish(layout.extra(k, suffix), data)
            entries[suffix] = file_entry(layout.extra(k, suffix).name, data)
        layout.publish(layout.chunk(k), arrow)
        entries["arrow"] = file_entry(layout.chunk(k).name, arrow)
        record = self._record(k, lo, hi, samples, columns, tally, flags, entries)
        record["untrained_windows"] = untrained
        self._hold(layout, k)  # the record makes the chunk count: this build's, still
        layout.publish(layout.record(k), orjson.dumps(record, option=orjson.OPT_SORT_KEYS) + b"\n")
        return record

    def _take(
        self,
        records: list[Record],
        samples: list[dict[str, Any]],
        rejects: list[bytes],
        tally: RejectTally,
        flags: list[bool],
    ) -> int:
        """Add ``records``' samples (or rejects); returns the windows left out untrained."""
        untrained = 0
        for record, out in zip(records, self._process(records), strict=True):
            if isinstance(out, SampleError):
                error = out.with_location(record.path, record.line)
                tally.add(error)
                rejects.append(orjson.dumps(reject_entry(record, error)) + b"\n")
                flags.append(False)
                continue
            flags.append(True)
            if not self._splits:
                samples.append(out)
                continue
            # overflow="split": a long record becomes several samples (its windows), those
            # with no trained token left out (a long prompt's; the record itself is valid)
            for piece in self.recipe.pieces(out):
                if untrained_window(piece) is None:
                    samples.append(piece)
                else:
                    untrained += 1
        return untrained

    def _process(self, records: list[Record]) -> list[Any]:
        # the same judgement as validate, stats and the Loader (chute.recipe.outcome)
        return judge(self.recipe, records)

    def _record(
        self,
        k: int,
        lo: int,
        hi: int,
        samples: list[dict[str, Any]],
        columns: pa.RecordBatch,
        tally: RejectTally,
        flags: list[bool],
        files: dict[str, Any],
    ) -> dict[str, Any]:
        # counts from the chunk's columns (one pass each, not one per sample)
        lengths = integers(columns.column("length")).astype(np.int64)
        # the list's values between its first and last offset: what flatten() gives, without
        # importing pyarrow.compute (0.1 s in every worker)
        spans = columns.column("label_spans")
        bounds = integers(spans.offsets)
        runs = integers(spans.values)[bounds[0] : bounds[-1]] if len(bounds) else bounds[:0]
        trained = int((runs[1::2].astype(np.int64) - runs[0::2]).sum())
        return {
            "chunk": k,
            "records": [lo, hi],
            "samples": len(samples),
            "rejected": tally.total,
            "by_reason": dict(sorted(tally.counts.items())),
            "examples": {kind: tally.examples[kind] for kind in sorted(tally.examples)},
            "longest_bad_run": _longest_run(flags),
            "tokens": int(lengths.sum()),
            "trained_tokens": trained,
            "image_tokens": sum(int(s["num_image_tokens"]) for s in samples),
            "truncated": sum(bool(s["truncated"]) for s in samples),
            "longest": int(lengths.max(initial=0)),
            "files": files,
            **self._build,
        }


def _longest_run(flags: list[bool]) -> int:
    longest = run = 0
    for ok in flags:
        run = 0 if ok else run + 1
        longest = max(longest, run)
    return longest

r"""Check every record of a source in parallel; count rejects by reason; write a rejects file.

The check is any picklable callable ``check(record)`` that raises ``SampleError`` for a bad
record. The default only parses JSON and requires an object; ``SampleCheck(recipe)`` judges each
record as every other entry point does (``chute.recipe.outcome``: the recipe, then the sample
contract), so ``chute validate --tokenizer ...`` counts what preprocess and the Loader count. A
check that returns a sample marked ``truncated`` is counted in ``truncated``.

Example:
    >>> import tempfile, pathlib
    >>> from chute import JsonlSource
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "a.jsonl").write_text('{"a": 1}\n{oops\n[1]\n')
    >>> report = validate_source(JsonlSource(d / "a.jsonl", cache_dir=d), workers=1)
    >>> report.valid, report.rejected, dict(report.tally.counts)
    (1, 2, {'bad_json': 1, 'not_an_object': 1})
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from chute._internal.collector import fewer_collections
from chute._internal.files import atomic_file
from chute._internal.pools import process_map
from chute._internal.progress import ProgressArg
from chute._internal.progress import progress as progress_of
from chute.errors import RejectTally, SampleError, as_sample_error
from chute.recipe.outcome import preflight
from chute.sample.rejects import reject_entry
from chute.sources.record import MAX_RECORD_BYTES, Record, check_size

__all__ = ["ValidationReport", "check_json_object", "validate_source"]

Check = Callable[[Record], Any]


def check_json_object(record: Record, max_record_bytes: int | None = MAX_RECORD_BYTES) -> None:
    """The basic check: the record parses as JSON and is an object.

    A record larger than ``max_record_bytes`` is rejected as ``record_too_large`` first,
    unread (its size comes from the index), as the recipe rejects it.
    """
    check_size(record, max_record_bytes)
    data = record.data
    if not isinstance(data, dict):
        raise SampleError(
            "not_an_object",
            f"expected a JSON object, got a JSON {_json_type(data)}",
            path=record.path,
            line=record.line,
        )


def _json_type(value: Any) -> str:
    return {list: "array", str: "string", int: "number", float: "number", bool: "boolean"}.get(
        type(value), "null" if value is None else type(value).__name__
    )


@dataclass
class ValidationReport:
    """What ``validate_source`` found."""

    records: int = 0
    valid: int = 0
    truncated: int = 0
    tally: RejectTally = field(default_factory=RejectTally)
    blank_lines: int = 0
    seconds: float = 0.0
    rejects_path: str | None = None

    @property
    def rejected(self) -> int:
        return self.tally.total

    def to_json(self) -> dict[str, Any]:
        return {
            "records": self.records,
            "valid": self.valid,
            "truncated": self.truncated,
            "rejected": self.rejected,
            "blank_lines": self.blank_lines,
            "by_reason": dict(self.tally.counts),
            "examples": self.tally.examples,
            "seconds": round(self.seconds, 4),
            "rejects_file": self.rejects_path,
        }


def validate_source(
    source: Any,
    check: Check = check_json_object,
    *,
    workers: int | None = None,
    rejects: str | os.PathLike[str] | None = None,
    progress: ProgressArg = None,
) -> ValidationReport:
    """Run ``check`` over every record of ``source`` in ``workers`` processes.

    Args:
        source: a ``JsonlSource`` (anything with ``len``, ``records_between`` and pickling).
        check: raises ``SampleError`` for a bad record.
        workers: processes (default: all cores; 1 runs in this process).
        rejects: write every rejected record, in source order, to this JSONL file.
        progress: ``None``: a bar on a terminal, else a log line now and then, on rank 0
            (``chute._internal.progress``); ``False``: silent; or called with the number of
            records checked as chunks finish.
    """
    t0 = time.perf_counter()
    preflight(check, source)  # a check that cannot work fails now, not in every worker
    n = len(source)
    workers = max(1, workers or os.cpu_count() or 1)
    chunk = max(1000, min(200_000, -(-n // (workers * 8)))) if n else 1
    bounds = [(lo, min(n, lo + chunk)) for lo in range(0, n, chunk)]
    report = ValidationReport(records=n, blank_lines=getattr(source, "blank_lines", 0))
    parts_dir = Path(tempfile.mkdtemp(prefix="chute-rejects-")) if rejects else None
    try:
        with progress_of(n, "validate", enabled=progress) as bar:
            for k, (valid, truncated, tally) in enumerate(
                _run(source, check, bounds, workers, parts_dir)
            ):
                report.valid += valid
                report.truncated += truncated
                report.tally.merge(tally)
                bar.update(bounds[k][1] - bounds[k][0])
        if rejects is not None and parts_dir is not None:
            with atomic_file(rejects) as out:
                for k in range(len(bounds)):
                    part = parts_dir / f"{k:08d}.jsonl"
                    if part.exists():
                        with open(part, "rb") as src_part:
                            shutil.copyfileobj(src_part, out)
            report.rejects_path = os.fspath(rejects)
    finally:
        if parts_dir is not None:
            shutil.rmtree(parts_dir, ignore_errors=True)
    report.seconds = time.perf_counter() - t0
    return report


def _run(
    source: Any, check: Check, bounds: list[tuple[int, int]], workers: int, parts_dir: Path | None
) -> Iterator[tuple[int, int, RejectTally]]:
    tasks = [(k, lo, hi) for k, (lo, hi) in enumerate(bounds)]
    return process_map(_check_chunk, tasks, workers=workers, shared=(source, check, parts_dir))


def _check_chunk(
    source: Any, check: Check, parts_dir: Path | None, task: tuple[int, int, int]
) -> tuple[int, int, RejectTally]:
    k, lo, hi = task
    tally = RejectTally()
    valid = truncated = 0
    out: BinaryIO | None = None
    try:
        # as a preprocess chunk runs: no cyclic collection rescanning the tokenizer's tables
        with fewer_collections():
            for record, result in _checked(source.records_between(lo, hi), check):
                if isinstance(result, Exception):
                    error = as_sample_error(result, record.path, record.line)  # job-level: raised
                    tally.add(error)
                    if parts_dir is not None:
                        if out is None:
                            out = open(parts_dir / f"{k:08d}.jsonl", "wb")  # noqa: SIM115
                        out.write(orjson.dumps(reject_entry(record, error)) + b"\n")
                else:
                    valid += 1
                    truncated += isinstance(result, dict) and bool(result.get("truncated"))
    finally:
        if out is not None:
            out.close()
    return valid, truncated, tally


def _checked(records: Iterator[Record], check: Check) -> Iterator[tuple[Record, Any]]:
    """Each record with what ``check`` made of it: its result, or the exception it raised.

    A check with a ``batch`` method (``SampleCheck``, ``MediaCheck``) gets ``BATCH`` records at
    a time, so a recipe encodes them back to back as ``chute preprocess`` does (one call per
    record cost about a fifth more CPU: 143 against 121 CPU-s for 1M records, in
    docs/benchmarks.md).
    """
    batch = getattr(check, "batch", None)
    if not callable(batch):
        for record in records:
            try:
                yield record, check(record)
            except Exception as exc:
                yield record, exc
        return
    while group := list(itertools.islice(records, BATCH)):
        yield from zip(group, batch(group), strict=True)


BATCH = 256  # records per call of a check's ``batch`` (as the cache writer's batches)

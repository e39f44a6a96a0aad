"""What an engine is: it runs a build's chunks somewhere and reports each one back.

The build (``chute.cache.build``) decides *what* is built: the plan, this rank's uncommitted
chunks, the error budget, the manifest. An engine decides *where* each chunk runs: a pool of
processes on this machine (``local``) or tasks on a Ray cluster (``ray``). Every engine runs
the same ``run_chunk(job, k)``, which builds chunk ``k`` and commits it with the cache's commit
protocol into the shared output directory, so a cache's bytes do not depend on the engine::

    build.preprocess ──► engine.run_chunks(job, [k, ...]) ──► run_chunk(job, k) in a worker
          ▲                        │                                 │ chunks/<k>.* committed
          └──── on_done(k, record) ┘ (in this process, as chunks end) ┘

    finalize ──► stage.finish(...) ──► engine.map(fn, items)   (e.g. decoding every image)

A chunk that cannot be built (not a bad record: those are counted skips) raises an error naming
the chunk, its records and, when one record is to blame, its ``path:line``: a job-level error
keeps its type (``SourceChanged``, ``ConfigError``), anything else is a ``ChunkFailed``.

Example:
    >>> from chute.cache.engines import LocalEngine
    >>> with LocalEngine(workers=1) as engine:
    ...     list(engine.map(abs, [-1, 2, -3]))
    [1, 2, 3]
"""

from __future__ import annotations

import abc
import copy
from collections.abc import Callable, Iterator, Sequence
from types import TracebackType
from typing import Any, ClassVar, TypeVar

from chute._internal.collector import fewer_collections
from chute.cache.writer import BATCH_RECORDS, ChunkJob
from chute.errors import ChunkFailed, ChuteError, as_sample_error

__all__ = ["Engine", "OnDone", "Progress", "chunk_failure", "chunk_label", "run_chunk"]

R = TypeVar("R")
OnDone = Callable[[int, dict[str, Any]], None]
Progress = Callable[[int], None]

_RESUME = (
    "The chunks committed so far are kept: fix the cause and run the same command again; it "
    "resumes at the first uncommitted chunk."
)


class Engine(abc.ABC):
    """Runs chunks of a build (and a stage's finishing tasks); a context manager.

    Subclasses start what they need lazily (a build whose chunks are all committed starts
    nothing) and release it in ``close``.
    """

    name: ClassVar[str] = "engine"
    # seconds it took to start (or connect to) what runs the chunks; None: nothing to start
    startup_seconds: float | None = None

    @abc.abstractmethod
    def run_chunks(
        self,
        job: ChunkJob,
        chunks: Sequence[int],
        *,
        on_done: OnDone,
        progress: Progress | None = None,
    ) -> None:
        """Build and commit ``chunks`` (submitted in this order).

        ``on_done(k, record)`` runs in this process as each chunk completes (in any order) and
        ``progress(n)`` as records are processed. An exception from a chunk (``ChunkFailed``)
        or from ``on_done`` stops the run and propagates; committed chunks stay committed.
        """

    @abc.abstractmethod
    def map(
        self, fn: Callable[[Any], R], items: Sequence[Any], *, limit: int | None = None
    ) -> Iterator[R]:
        """``fn(item)`` for every item as independent tasks (``limit`` at once), in order.

        Results are yielded as they complete, in the items' order (a consumer can show
        progress); stopping early starts nothing more (tasks already running finish).
        """

    def describe(self) -> str:
        """Where the work runs, for reports (e.g. ``local, 8 processes``)."""
        return self.name

    def close(self) -> None:
        """Release what the engine started (nothing by default)."""
        return None

    def __enter__(self) -> Engine:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


def run_chunk(job: ChunkJob, k: int, progress: Progress | None = None) -> dict[str, Any]:
    """Build and commit chunk ``k`` of ``job``; its commit record.

    Raises:
        ChuteError: a job-level error met in the chunk (a ``SourceChanged``, a ``ConfigError``
            first met past the preflight, ...), of its own type, its message naming the chunk
            and, when one record is to blame, its ``path:line``.
        ChunkFailed: anything else that stopped the chunk (a bug, a full disk), named alike.
    """
    done = 0

    def count(n: int) -> None:
        nonlocal done
        done += n
        if progress is not None:
            progress(n)

    try:
        with fewer_collections():
            return job.run(k, count)
    except Exception as exc:
        if getattr(exc, "chunk", None) is not None:
            raise  # already names its chunk
        raise chunk_failure(job, k, exc, records_done=done) from exc


def chunk_label(job: ChunkJob, k: int) -> str:
    """``chunk 7 (records 70,000-79,999)``."""
    lo, hi = job.bounds(k)
    return f"chunk {k} (records {lo:,}-{hi - 1:,})"


def chunk_failure(
    job: ChunkJob, k: int, cause: BaseException | str, *, records_done: int | None = None
) -> ChuteError:
    """The error for chunk ``k``: its records, the record to blame, the cause.

    A job-level error (a ``ChuteError``) keeps its type (callers catch a ``ConfigError`` or a
    ``SourceChanged`` as such), its message prefixed with the chunk; anything else becomes a
    ``ChunkFailed``. Either has ``chunk`` and ``record`` attributes.

    Args:
        job: the build's job.
        k: the chunk.
        cause: the exception (or a description of what happened to the task).
        records_done: records of the chunk processed before it failed (they came through), or
            ``None`` when unknown; the batch after them is searched for the record to blame.
    """
    lo, hi = job.bounds(k)
    record = None
    if records_done is not None and lo + records_done < hi:
        start = lo + records_done
        record = _first_failing_record(job, start, min(hi, start + BATCH_RECORDS))
    at = f" at {record}" if record else ""
    if isinstance(cause, ChuteError):
        error = copy.copy(cause)  # the same type and attributes (a ConfigError's param)
        error.args = (f"{chunk_label(job, k)} failed{at}: {cause}\n{_RESUME}",)
        error.chunk, error.record = k, record  # type: ignore[attr-defined]
        return error
    what = cause if isinstance(cause, str) else f"{type(cause).__name__}: {cause}"
    return ChunkFailed(f"{chunk_label(job, k)} failed{at}: {what}\n{_RESUME}", k, record)


def _first_failing_record(job: ChunkJob, lo: int, hi: int) -> str | None:
    """``path:line`` of the first record in ``[lo, hi)`` that stops the job, if one does.

    A record stops the job when the recipe raises a job-level error for it (a bad record
    is a counted skip instead). Only runs after a failure, over one batch of records.
    """
    try:
        for record in job.source.records_between(lo, hi):
            try:
                job.recipe(record)
            except Exception as exc:
                try:
                    as_sample_error(exc, record.path, record.line)  # a counted skip
                except Exception:
                    return f"{record.path}:{record.line}"
    except Exception:  # the records cannot even be read again: no single record to name
        return None
    return None

"""The ``ray`` engine: a build's chunks as Ray tasks, so preprocessing scales past one machine.

::

    chute preprocess train.yaml --out /shared/cache --engine ray --address auto

The driver (the process running ``chute preprocess``) plans the build exactly as with the local
engine (fingerprint, ``plan.json``, the chunks still to build), then only submits and waits:
each chunk is one Ray task running ``run_chunk(job, k)``, which reads the chunk's records,
tokenizes them and commits ``chunks/<k>.*`` into the output directory with the usual commit
protocol. So:

* the cache is byte-identical to a local build (the same chunks, the same writer);
* a task whose worker dies (killed, out of memory, its node lost) is retried by Ray
  (``max_retries``) and writes the same bytes again;
* a driver killed at any moment leaves committed chunks, and the same command resumes at the
  first uncommitted one;
* the driver tokenizes nothing: it puts the job in the object store once, keeps a counter of
  records done (an actor using no CPU) for the progress bar, and runs the error budget and the
  report as chunks complete. Finishing stages fan out too (``map``: the pixel store's decoding).

Why tasks and not a Ray Data pipeline: a chunk is the unit of commit and resume, and its bytes
must not depend on how the work was partitioned. Ray Data cuts its own blocks and streams rows
through the object store to a sink, so the cache would depend on block boundaries and every
token would travel through the pipeline; one task per chunk keeps the bytes and the commit
protocol, and memory stays bounded: at most ``2 x CPUs`` tasks (or ``workers``) are in flight,
each holding one chunk.

What the cluster must provide: every node sees the sources, the tokenizer and media files and
the output directory at the same paths (a shared filesystem), and runs this chute (installed in
its image, or through ``runtime_env``). A worker reopens the sources' indexes on its own node
(``$CHUTE_CACHE_DIR``) and checks each file's size, mtime and edge hash against the driver's
before it builds anything.

Example:
    >>> engine = RayEngine(address="auto", workers=64)  # doctest: +SKIP
    >>> preprocess("train.yaml", out="/shared/cache", engine=engine)  # doctest: +SKIP
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, ClassVar, TypeVar

from chute._internal.spelling import Spelling, current_spelling, spelling
from chute.cache.engines.base import Engine, OnDone, Progress, chunk_failure, run_chunk
from chute.cache.engines.local import machine_cores
from chute.cache.fingerprint import differences, sources_fingerprint
from chute.cache.writer import ChunkJob
from chute.errors import CacheError, ChuteError, SourceChanged

__all__ = ["RayEngine", "import_ray", "init_arguments"]

log = logging.getLogger("chute.cache")

R = TypeVar("R")
_POLL_SECONDS = 0.25
_RESIZE_SECONDS = 10.0
_DRAIN_SECONDS = 600.0  # the longest a failed run waits for its running tasks to finish
_HELD: dict[str, Any] = {}  # in a Ray worker process: the job of the build it serves


def import_ray() -> Any:
    """The ``ray`` module, or an ImportError naming the extra that installs it."""
    try:
        import ray
    except ImportError as exc:
        raise ImportError(
            f"cache.engine ray (--engine ray) needs Ray: pip install 'chute[ray]' "
            f"(import failed: {exc})"
        ) from None
    return ray


def init_arguments(address: str | None, workers: int | None) -> dict[str, Any]:
    """What ``ray.init`` gets: the usual address conventions, or a new local Ray.

    ``address`` is passed on as Ray reads it (``auto``, ``host:6379``, ``ray://host:10001``).
    Without one, ``RAY_ADDRESS`` (set by ``ray job submit``) is used when set; otherwise a new
    local Ray is started with ``workers`` CPUs (default: this machine's cores), never one found
    lying around.

    Example:
        >>> init_arguments("ray://head:10001", None)
        {'address': 'ray://head:10001'}
    """
    if address is None and not os.environ.get("RAY_ADDRESS"):
        return {"address": "local", "num_cpus": workers or machine_cores()}
    return {"address": address}


class RayEngine(Engine):
    """Chunks as Ray tasks on a Ray cluster (or a local Ray started for the build).

    Ray is started (or connected to) on first use and shut down by ``close`` only when this
    engine started it; a process where Ray is already initialized keeps its connection.

    Args:
        address: the cluster (``auto``, ``host:port``, ``ray://host:10001``); default:
            ``RAY_ADDRESS``, else a new local Ray with ``workers`` CPUs.
        workers: chunk tasks in flight at most (default: twice the cluster's CPUs, read again
            every 10 s so a growing cluster fills); for a new local Ray also its CPUs (default:
            this machine's cores).
        runtime_env: Ray runtime environment of the tasks (e.g. ``{"pip": ["chute"]}`` or
            ``{"py_modules": [...]}``) where the workers' Python lacks chute.
        max_retries: times Ray runs a task again after its worker died (an exception raised by
            the chunk itself is not retried: it would fail again).
    """

    name: ClassVar[str] = "ray"

    def __init__(
        self,
        address: str | None = None,
        *,
        workers: int | None = None,
        runtime_env: Mapping[str, Any] | None = None,
        max_retries: int = 3,
    ):
        self.address = address
        self.workers = workers
        self.runtime_env = dict(runtime_env or {})
        self.max_retries = max_retries
        self.startup_seconds: float | None = None
        self._ray: Any = None
        self._owned = False
        self._how = ""

    # -- the cluster ------------------------------------------------------------------------

    def _start(self) -> Any:
        if self._ray is not None:
            return self._ray
        ray = import_ray()
        t0 = time.perf_counter()
        if ray.is_initialized():
            self._how = "using this process's Ray connection"
        else:
            arguments = init_arguments(self.address, self.workers)
            ray.init(**arguments)
            self._owned = True
            self._how = "started" if arguments["address"] == "local" else "connected"
        self.startup_seconds = time.perf_counter() - t0
        self._ray = ray
        return ray

    def _options(self, name: str) -> dict[str, Any]:
        options: dict[str, Any] = {
            "name": name,
            "num_cpus": 1,
            "max_retries": self.max_retries,
            "retry_exceptions": False,
        }
        if self.runtime_env:
            options["runtime_env"] = self.runtime_env
        return options

    def _window(self) -> int:
        if self.workers:
            return self.workers
        return 2 * max(1, int(self._start().cluster_resources().get("CPU", 1)))

    def describe(self) -> str:
        if self._ray is None:
            return "ray (not started: nothing to run)"
        cpus = int(self._ray.cluster_resources().get("CPU", 0))
        try:
            where = self._ray.get_runtime_context().gcs_address
        except Exception:  # Ray Client (ray://) has no GCS address on this side
            where = self.address or os.environ.get("RAY_ADDRESS", "?")
        how = f"{self._how} in {self.startup_seconds or 0:.1f} s" if self._owned else self._how
        return f"ray at {where}, {cpus} CPUs ({how})"

    def close(self) -> None:
        if self._owned and self._ray is not None:
            self._ray.shutdown()
        self._ray, self._owned = None, False

    # -- chunks -----------------------------------------------------------------------------

    def run_chunks(
        self,
        job: ChunkJob,
        chunks: Sequence[int],
        *,
        on_done: OnDone,
        progress: Progress | None = None,
    ) -> None:
        if not chunks:
            return
        ray = self._start()
        token = uuid.uuid4().hex
        box = [ray.put(_JobSpec.of(job))]  # in a list: tasks fetch it once per process
        counter_options: dict[str, Any] = {"num_cpus": 0}  # it only counts
        if self.runtime_env:
            counter_options["runtime_env"] = self.runtime_env
        # records done within running chunks, for the bar; no bar, no counter (one process less)
        counter = (
            None if progress is None else ray.remote(_Counter).options(**counter_options).remote()
        )
        task = ray.remote(_chunk_task)
        how = current_spelling()
        window, sized = self._window(), time.monotonic()
        waiting = collections.deque(chunks)
        running: dict[Any, int] = {}
        finished_records = 0
        shown = 0
        try:
            while waiting or running:
                if time.monotonic() - sized > _RESIZE_SECONDS:  # an autoscaling cluster grows
                    window, sized = self._window(), time.monotonic()
                while waiting and len(running) < window:
                    k = waiting.popleft()
                    options = self._options(f"chute chunk {k}")
                    ref = task.options(**options).remote(token, box, counter, k, how)
                    running[ref] = k
                ready, _ = ray.wait(list(running), num_returns=len(running), timeout=_POLL_SECONDS)
                for ref in sorted(ready, key=running.__getitem__):
                    k = running.pop(ref)
                    record = self._chunk_result(ray, ref, job, k)
                    finished_records += record["records"][1] - record["records"][0]
                    on_done(k, record)
                if progress is not None and counter is not None:
                    now = finished_records + ray.get(counter.among.remote(list(running.values())))
                    progress(now - shown)
                    shown = now
        finally:
            _drain(ray, list(running))
            if counter is not None:
                ray.kill(counter)

    def _chunk_result(self, ray: Any, ref: Any, job: ChunkJob, k: int) -> dict[str, Any]:
        try:
            return ray.get(ref)
        except ray.exceptions.RayTaskError as exc:
            cause = exc.cause
            log.debug("chunk %d failed on Ray:\n%s", k, exc)
            if isinstance(cause, ChuteError):
                raise cause from None  # named in the worker (the chunk, or the node)
            raise chunk_failure(job, k, cause if cause is not None else str(exc)) from None
        except ray.exceptions.RayError as exc:
            raise chunk_failure(job, k, _lost(exc, self.max_retries)) from None

    # -- other tasks ------------------------------------------------------------------------

    def map(
        self, fn: Callable[[Any], R], items: Sequence[Any], *, limit: int | None = None
    ) -> Iterator[R]:
        """As Ray tasks, at most ``limit`` in flight (default: twice the cluster's CPUs)."""
        if not items:
            return
        ray = self._start()
        task = ray.remote(_call)
        how = current_spelling()
        window = limit or self._window()
        name = getattr(fn, "__name__", "task")
        done: dict[int, Any] = {}  # results that came back before those before them
        running: dict[Any, int] = {}
        submitted = given = 0
        try:
            while given < len(items):
                while submitted < len(items) and len(running) < window:
                    options = self._options(f"chute {name} {submitted}")
                    running[task.options(**options).remote(fn, items[submitted], how)] = submitted
                    submitted += 1
                ready, _ = ray.wait(list(running), num_returns=1)
                for ref in ready:
                    done[running.pop(ref)] = self._task_result(ray, ref, name)
                while given in done:
                    yield done.pop(given)
                    given += 1
        finally:
            _drain(ray, list(running))

    def _task_result(self, ray: Any, ref: Any, name: str) -> Any:
        try:
            return ray.get(ref)
        except ray.exceptions.RayTaskError as exc:
            cause = exc.cause if exc.cause is not None else exc
            raise CacheError(f"a {name} task failed on Ray: {cause}") from None
        except ray.exceptions.RayError as exc:
            raise CacheError(f"a {name} task failed: {_lost(exc, self.max_retries)}") from None


def _drain(ray: Any, refs: list[Any]) -> None:
    """Wait until the tasks of ``refs`` have finished; they are not cancelled.

    As the local pool does, a failed run returns only once none of its tasks still runs (a
    chunk still writing could meet the same command, run again at once, building it anew);
    tasks are submitted only as the window frees, so nothing is queued. Cancelling instead was
    tried: Ray 2.60's ``ray.cancel`` of running tasks can crash the driver (a CHECK failure in
    ``TaskManager::CompletePendingTask`` when a cancelled task's reply arrives), seen in CI.
    """
    if not refs:
        return
    log.info("waiting for %d running Ray task(s) to finish", len(refs))
    _, left = ray.wait(refs, num_returns=len(refs), timeout=_DRAIN_SECONDS)
    if left:
        log.warning("%d Ray task(s) still running after %.0f s", len(left), _DRAIN_SECONDS)


def _lost(exc: BaseException, retries: int) -> str:
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return (
        f"its Ray task failed {retries + 1} time(s) ({type(exc).__name__}: {first}): a worker "
        f"died (killed, out of memory) or its node was lost; raise max_retries or check the "
        f"Ray dashboard and logs"
    )


# -- what runs in the workers -------------------------------------------------------------


@dataclasses.dataclass
class _JobSpec:
    """A job as it travels to Ray workers: its source reopened on the worker's node.

    A source pickles its indexes as paths in the driver's index cache, which other nodes do
    not have; the worker opens (or builds) them in its own, then checks that every file is the
    one the driver planned for (size, mtime and edge hash; for a URL, size and ETag).
    """

    job: ChunkJob
    paths: list[str]
    options: dict[str, Any]  # how the driver opened the source (index cache, remote options)
    sources: dict[str, Any]

    @classmethod
    def of(cls, job: ChunkJob) -> _JobSpec:
        source = job.source
        options = {"cache_dir": getattr(source, "cache_dir", None)}
        if getattr(source, "remote", None) is not None:
            options["remote"] = source.remote
        return cls(
            job=dataclasses.replace(job, source=None),
            paths=[str(p) for p in source.paths],
            options=options,
            sources=sources_fingerprint(source, whole=False),
        )

    def open(self) -> ChunkJob:
        from chute.sources import open_source

        source = open_source(self.paths, **self.options)
        diffs = differences(self.sources, sources_fingerprint(source, whole=False))
        if diffs:
            shown = "; ".join(f"{name}: driver {a!r}, here {b!r}" for name, a, b in diffs[:5])
            raise SourceChanged(
                f"the sources on node {socket.gethostname()} are not the files the driver "
                f"planned for ({shown}); every node must see the same sources at the same "
                f"paths (a shared filesystem, or the same URLs)"
            )
        return dataclasses.replace(self.job, source=source)


def _held_job(token: str, box: list[Any]) -> ChunkJob:
    if _HELD.get("token") != token:
        import ray

        job = ray.get(box[0]).open()
        _HELD.clear()  # a worker serves one build at a time: drop the previous one's job
        _HELD.update(token=token, job=job)
    return _HELD["job"]


def _chunk_task(token: str, box: list[Any], counter: Any, k: int, how: Spelling) -> dict[str, Any]:
    done = 0

    def count(n: int) -> None:
        nonlocal done
        done += n
        if counter is not None:
            counter.set.remote(k, done)  # fire and forget: ordered per worker, never waited on

    with spelling(how):  # error messages name parameters as the driver's front end does
        return run_chunk(_held_job(token, box), k, count)


def _call(fn: Callable[[Any], R], item: Any, how: Spelling) -> R:
    with spelling(how):
        return fn(item)


class _Counter:
    """Records done per running chunk (an actor): the driver's progress bar moves within chunks.

    A chunk's count is set, not added, so a retried chunk starts again from zero.
    """

    def __init__(self) -> None:
        self.done: dict[int, int] = {}

    def set(self, k: int, n: int) -> None:
        self.done[k] = n

    def among(self, chunks: list[int]) -> int:
        """Records done in ``chunks`` (the running ones); forgets every other chunk."""
        self.done = {k: self.done[k] for k in chunks if k in self.done}
        return sum(self.done.values())

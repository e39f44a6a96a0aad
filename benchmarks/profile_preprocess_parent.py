"""Where ``chute preprocess`` would serialise at 16 workers, measured on a 2-core machine.

A machine with 2 cores cannot run 16 workers, so this measures the parts instead and schedules
them: one ``preprocess`` with ``--workers 2`` (in this process, the local engine) records

- the fixed cost before the first chunk starts (config, source index, fingerprint, claim, pool),
- each chunk's time in its worker (the first chunk of each worker apart: it loads the
  tokenizer), and the worker that ran it; with the worker's CPU seconds over the chunk and
  the time its ``fsync`` calls took, so a chunk slower at 16 workers than at one shows
  whether it waited (wall above CPU) and how much of that was the disk's flushes,
- the parent's time per chunk (``on_done``: commit bookkeeping, error budget, progress),
- the fixed cost after the last chunk (finalize: global files, manifest).

Then, for N workers, the chunks are list-scheduled in submission order onto N workers (each
paying the measured first-chunk overhead once), the parent's per-chunk work runs serially
beside them, and the fixed costs add: the predicted time, its speedup over one worker, and
which part bounds it. Usage::

    .venv/bin/python benchmarks/profile_preprocess_parent.py --records 200000
    .venv/bin/python benchmarks/profile_preprocess_parent.py --records 200000 --dir D \
        --warm-only D/cache-<pid of the first>   # one warm run in a fresh process

On a host with the cores, ``--workers 16`` profiles a real 16-worker run the same way (the
prediction then schedules chunk times measured at 16 workers).
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import save, time_fsyncs
from bench_scale import MAX_LENGTH, TOKENIZER, write_records

LOG = "BENCH_CHUNK_LOG"


# The steps ``preprocess`` takes before its first chunk, by the name it calls them under.
PHASES = (
    "load_config",
    "open_source",
    "preflight",
    "sources_fingerprint",
    "prepare_dir",
    "establish",
    "committed_records",
    "make_engine",
)


def instrument() -> dict[str, Any]:
    """Wrap the chunk runner (workers), ``on_done`` (parent) and the steps before the pool."""
    from chute.cache import build, config
    from chute.cache.engines import local

    parent: dict[str, Any] = {"on_done": [], "pool_start": None, "phases": {}}

    def timed_step(name: str, fn: Any) -> Any:
        def step(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent = parent["phases"].get(name, 0.0) + time.perf_counter() - t0
                parent["phases"][name] = spent

        return step

    for name in PHASES:
        setattr(build, name, timed_step(name, getattr(build, name)))
    config.RecipeConfig.build = timed_step("recipe_build", config.RecipeConfig.build)
    original_run_chunk = local.run_chunk
    original_run_chunks = local.run_chunks
    flushes = time_fsyncs()  # this process's and its forked workers': read around each chunk

    def run_chunk(job: Any, k: int, report: Any) -> Any:
        flushed, calls, cpu = flushes["seconds"], flushes["calls"], time.process_time()
        t0 = time.time()
        record = original_run_chunk(job, k, report)
        row = {
            "k": k,
            "pid": os.getpid(),
            "t0": t0,
            "t1": time.time(),
            "cpu": time.process_time() - cpu,
            "fsync": flushes["seconds"] - flushed,
            "fsync_calls": int(flushes["calls"] - calls),
        }
        with open(os.environ[LOG], "a") as f:
            f.write(json.dumps(row) + "\n")
        return record

    def run_chunks(job: Any, chunks: Any, *, workers: int, on_done: Any, progress: Any = None):
        def timed(k: int, record: Any) -> None:
            t0 = time.perf_counter()
            on_done(k, record)
            parent["on_done"].append(time.perf_counter() - t0)

        parent["pool_start"] = time.time()
        return original_run_chunks(job, chunks, workers=workers, on_done=timed, progress=progress)

    local.run_chunk = run_chunk
    local.run_chunks = run_chunks
    return parent


def median_of(rows: list[dict[str, Any]], skip: set[int], value: Any) -> float:
    """The median of ``value(row)`` over the chunk rows not in ``skip`` (ids of first chunks)."""
    values = sorted(value(r) for r in rows if id(r) not in skip) or [0.0]
    return round(values[len(values) // 2], 4)


def schedule(steady: list[float], warm: float, workers: int) -> float:
    """Makespan of chunks (their steady times, in submission order) on ``workers``.

    List scheduling, as the pool hands out chunks: each to the first free worker; a worker's
    first chunk also pays ``warm`` (starting it and loading the tokenizer).
    """
    heap = [(0.0, w, True) for w in range(workers)]
    end = 0.0
    for c in steady:
        free, w, cold = heapq.heappop(heap)
        done = free + c + (warm if cold else 0.0)
        end = max(end, done)
        heapq.heappush(heap, (done, w, False))
    return end


def profile_run(
    paths: list[Path],
    root: Path,
    chunk_size: int | None,
    parent: dict[str, Any],
    workers: int = 2,
) -> dict[str, Any]:
    """One ``preprocess`` of ``paths`` into ``root/out`` with ``workers``, measured."""
    from chute.cache.build import preprocess

    log = root / f"chunks-{os.getpid()}-{time.time_ns()}.jsonl"
    os.environ[LOG] = str(log)
    parent.update(on_done=[], pool_start=None, phases={})
    recipe = {"tokenizer": str(TOKENIZER), "template": "chatml", "max_length": MAX_LENGTH}
    cache = {} if chunk_size is None else {"chunk_size": chunk_size}
    # the previous run's output goes before the clock starts: a new build finds none to delete
    shutil.rmtree(root / "out", ignore_errors=True)
    t0 = time.time()
    report = preprocess(
        sources=[str(p) for p in paths],
        recipe=recipe,
        cache=cache,
        out=root / "out",
        workers=workers,
        overwrite=True,
        progress=False,
    )
    t_end = time.time()
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    starts = min(r["t0"] for r in rows)
    last = max(r["t1"] for r in rows)
    by_pid: dict[int, list[dict[str, Any]]] = {}
    for r in sorted(rows, key=lambda r: r["t0"]):
        by_pid.setdefault(r["pid"], []).append(r)
    first = [v[0]["t1"] - v[0]["t0"] for v in by_pid.values()]
    rest = [r["t1"] - r["t0"] for v in by_pid.values() for r in v[1:]]
    median = sorted(rest)[len(rest) // 2] if rest else 0.0
    warm = max(0.0, sum(first) / len(first) - median)
    firsts = {id(v[0]) for v in by_pid.values()}
    steady = [
        r["t1"] - r["t0"] - (warm if id(r) in firsts else 0.0)
        for r in sorted(rows, key=lambda r: r["k"])
    ]
    on_done = parent["on_done"]
    setup = starts - t0
    pool = (parent["pool_start"] or t0) - t0
    finalize = t_end - last
    result: dict[str, Any] = {
        "records": report.samples + report.rejected,
        "chunk_size": report.manifest.get("chunk_size"),
        "chunks": len(rows),
        "workers": workers,
        f"wall_seconds_{workers}_workers": round(t_end - t0, 2),
        "fixed": {
            "before_pool": round(pool, 3),
            "before_first_chunk": round(setup, 3),
            "after_last_chunk": round(finalize, 3),
            "steps_before_pool": {k: round(v, 3) for k, v in parent["phases"].items()},
        },
        "worker_first_chunk_seconds": [round(x, 3) for x in first],
        # when each worker began its first chunk, from the pool's creation: the workers are
        # forked one after another, so the last starts later by that spread
        "worker_first_start_seconds": sorted(
            round(v[0]["t0"] - (parent["pool_start"] or t0), 3) for v in by_pid.values()
        ),
        "worker_chunk_seconds_median": round(median, 3),
        "worker_warm_up_seconds": round(warm, 3),
        # the steady chunks (each worker's first apart): CPU, the wait (wall less CPU) and the
        # fsyncs' share of the wall time
        "worker_chunk_cpu_seconds_median": median_of(rows, firsts, lambda r: r["cpu"]),
        "worker_chunk_wait_seconds_median": median_of(
            rows, firsts, lambda r: r["t1"] - r["t0"] - r["cpu"]
        ),
        "worker_chunk_fsync_ms_median": median_of(rows, firsts, lambda r: 1000 * r["fsync"]),
        "worker_chunk_fsync_calls": max(r["fsync_calls"] for r in rows),
        "parent_per_chunk_ms": round(1000 * sum(on_done) / max(1, len(on_done)), 3),
        "parent_total_seconds": round(sum(on_done), 3),
        "prediction": {},
    }
    one = setup + max(schedule(steady, warm, 1), sum(on_done)) + finalize
    for workers in (1, 2, 4, 8, 16):
        span = schedule(steady, warm, workers)
        serial = sum(on_done)  # the parent's share cannot overlap itself
        total = setup + max(span, serial) + finalize
        result["prediction"][str(workers)] = {
            "seconds": round(total, 2),
            "speedup_vs_1": round(one / total, 2),
            "efficiency": round(one / total / workers, 2),
            "chunks_makespan": round(span, 2),
            "chunks_efficiency": round(schedule(steady, warm, 1) / span / workers, 2),
            "parent_serial": round(serial, 3),
            "fixed": round(setup + finalize, 2),
        }
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument(
        "--chunk-size", default="auto", help="records per chunk, or auto (the default rule)"
    )
    ap.add_argument("--workers", type=int, default=2, help="the profiled run's workers")
    ap.add_argument("--dir", help="where the records go (default: a temp dir)")
    ap.add_argument("--name", default="preprocess_parent", help="the results file's name")
    ap.add_argument(
        "--warm-only",
        help="a chute cache folder an earlier run filled (source index, compiled tables): "
        "measure one warm run in this fresh process, without a cold run before it",
    )
    args = ap.parse_args()
    chunk_size = None if args.chunk_size == "auto" else int(args.chunk_size)
    root = Path(args.dir or tempfile.mkdtemp(prefix="profile-parent-"))
    root.mkdir(parents=True, exist_ok=True)
    paths = write_records(root, args.records)
    command = " ".join(["benchmarks/profile_preprocess_parent.py", *sys.argv[1:]])
    if args.warm_only:
        # a warm run as a new `chute preprocess` process is: the parent the workers fork from
        # has done nothing before (a second run in one process forks them from a parent that
        # still holds the first run's memory)
        os.environ["CHUTE_CACHE_DIR"] = args.warm_only
        parent = instrument()
        result = {
            "warm_caches": profile_run(paths, root, chunk_size, parent, args.workers),
            "command": command,
        }
        print("saved", save(args.name, result))
        return
    os.environ["CHUTE_CACHE_DIR"] = str(root / f"cache-{os.getpid()}")  # empty: cold first run
    parent = instrument()
    result = {
        # the first run pays the one-time work (the source index, compiling the tokenizer's
        # tables); the second finds both cached, as every later run over these files does
        "empty_caches": profile_run(paths, root, chunk_size, parent, args.workers),
        "warm_caches": profile_run(paths, root, chunk_size, parent, args.workers),
        "command": command,
    }
    print("saved", save(args.name, result))


if __name__ == "__main__":
    main()

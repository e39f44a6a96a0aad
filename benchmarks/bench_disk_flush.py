"""What a durable chunk commit costs on this disk, alone and with N writers at once.

``chute preprocess`` commits each chunk as a worker finishes it: the Arrow file written to a
temporary name, ``fsync``, renamed, the folder ``fsync``-ed, then the same for its small
commit record (``chute.cache.storage.publish``). With 16 workers those commits overlap. On a
shared or network disk each ``fsync`` may wait for the others' data (one journal, one queue),
which shows as a chunk slower in wall time but not in CPU time. This replays the commits alone:
``--writers`` processes at once, each committing ``--files`` files of ``--mb`` MB (random
bytes) the way a chunk is committed, ``--gap`` seconds apart (a chunk's tokenizing: workers
that start together with equal chunks commit in waves, all at about the same moment), and
reports the wall time of each commit and of its ``fsync`` calls, per writer count. Usage::

    .venv/bin/python benchmarks/bench_disk_flush.py --dir D --writers 1,16 --mb 6 --gap 1.5

``--mb`` defaults to 6 (a chunk of 8,929 alpaca records with Qwen3 is about that). Results:
``benchmarks/results/NAME.json``.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import save, time_fsyncs
from chute.cache.storage import publish


def commit_files(
    folder: str, files: int, mb: float, gap: float, seed: int
) -> list[dict[str, float]]:
    """Commit ``files`` files of ``mb`` MB as a chunk is committed, ``gap`` s apart; timings."""
    os.makedirs(folder, exist_ok=True)
    data = os.urandom(int(mb * 1e6))  # incompressible, so no layer below can shortcut it
    flushes = time_fsyncs()  # in this pool process only
    rows = []
    for k in range(files):
        time.sleep(gap if k else 0.0)  # the next chunk's tokenizing (a sleep: no CPU taken)
        flushed = flushes["seconds"]
        t0 = time.perf_counter()
        publish(Path(folder) / f"{seed:03d}-{k:04d}.arrow", data)
        publish(Path(folder) / f"{seed:03d}-{k:04d}.json", b'{"chunk": %d}\n' % k)
        rows.append({"commit_s": time.perf_counter() - t0, "fsync_s": flushes["seconds"] - flushed})
    return rows


def run(root: Path, writers: int, files: int, mb: float, gap: float) -> dict[str, Any]:
    """``writers`` processes committing at once into one folder (as the chunks do)."""
    folder = root / f"chunks-{writers}"
    shutil.rmtree(folder, ignore_errors=True)
    os.sync()  # nothing of an earlier step left to write back
    t0 = time.perf_counter()
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(writers) as pool:
        per = pool.starmap(commit_files, [(str(folder), files, mb, gap, w) for w in range(writers)])
    wall = time.perf_counter() - t0
    rows = [r for rs in per for r in rs]
    shutil.rmtree(folder, ignore_errors=True)

    def stats(key: str) -> dict[str, float]:
        values = sorted(r[key] for r in rows)
        pick = lambda q: round(1000 * values[min(len(values) - 1, int(q * len(values)))], 1)  # noqa: E731
        return {"median_ms": pick(0.5), "p90_ms": pick(0.9), "max_ms": pick(1.0)}

    return {
        "writers": writers,
        "files_each": files,
        "mb_each": mb,
        "gap_seconds": gap,
        "wall_seconds": round(wall, 3),
        "mb_per_second": round(writers * files * mb / max(1e-9, wall - (files - 1) * gap), 1),
        "commit": stats("commit_s"),
        "fsync": stats("fsync_s"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", required=True, help="a folder on the disk to measure")
    ap.add_argument("--writers", default="1,16", help="writer counts, in the order run")
    ap.add_argument("--files", type=int, default=8, help="commits per writer")
    ap.add_argument("--mb", type=float, default=6.0, help="MB per committed file")
    ap.add_argument("--gap", type=float, default=0.0, help="seconds between a writer's commits")
    ap.add_argument("--name", default="disk_flush", help="the results file's name")
    args = ap.parse_args()
    root = Path(args.dir)
    root.mkdir(parents=True, exist_ok=True)
    results = []
    for writers in (int(w) for w in args.writers.split(",")):
        row = run(root, writers, args.files, args.mb, args.gap)
        print(row, flush=True)
        results.append(row)
    save(args.name, {"dir": str(root), "runs": results})


if __name__ == "__main__":
    main()

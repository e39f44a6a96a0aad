"""Where a ``packed`` plan at 100M lengths spends its wall time: placing the ids, then packing.

One process builds the plan ``--rounds`` times (``bench_scale.py``'s 100M lognormal lengths and
planner, ``--mix`` over its three-dataset mixture) and times two steps of each build by wall
clock and by the calling thread's own CPU (``time.thread_time``):

- ``place_desc``: the ids sorted by size, chunk by chunk as the plans' threads produce them
  (each chunk of the epoch's order, its lengths looked up and sorted); the main thread places
  each chunk and otherwise waits for the next one;
- ``pack_sorted``: best-fit decreasing over the size histogram, writing each id into its row.

A thread CPU far below the wall time means the thread waited (for the producers, or for the
writes handed to other threads). Each round builds twice: with best-fit's writes in its own loop
(``loop``, as before ``side_tasks``) and handed to the threads (``threads``, the default).
Usage::

    .venv/bin/python benchmarks/profile_packed_steps.py --dir D --mix --rounds 3

``D`` is where ``bench_scale.py`` keeps ``lognormal_100000000.npy`` (written if absent).
Results: ``benchmarks/results/NAME.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_scale
from _common import save

SAMPLES = 100_000_000
WORLD = 8


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", required=True, help="where the 100M lengths are (or go)")
    ap.add_argument("--mix", action="store_true", help="over the three-dataset mixture")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--name", default="packed_steps", help="the results file's name")
    args = ap.parse_args()
    import chute.plan.pack as pack
    import chute.plan.packed as packed

    path = Path(args.dir) / f"lognormal_{SAMPLES}.npy"
    if not path.is_file():
        bench_scale.write_lognormal(path, SAMPLES, clip=bench_scale.MAX_LENGTH)
    lens = np.load(path, mmap_mode="r")
    _ = int(np.count_nonzero(lens >= 0))  # the lengths' pages, as a loader has them
    spent: dict[str, list[float]] = {}

    def timed(name: str) -> None:
        inner = getattr(packed, name)

        def step(*a: Any, **k: Any) -> Any:
            t, c = time.perf_counter(), time.thread_time()
            try:
                return inner(*a, **k)
            finally:
                spent[name] = [round(time.perf_counter() - t, 3), round(time.thread_time() - c, 3)]

        setattr(packed, name, step)

    timed("place_desc")
    timed("pack_sorted")
    threaded = pack.side_tasks

    @contextlib.contextmanager
    def in_the_loop() -> Iterator[Callable[..., None]]:
        yield lambda fn, *args: fn(*args)  # each write step at once, as before side_tasks

    builds = []
    for i in range(args.rounds):
        for writes, tasks in (("loop", in_the_loop), ("threads", threaded)):
            pack.side_tasks = tasks
            planner = bench_scale.planner("packed", lens, big=True)
            if args.mix:
                planner = bench_scale.mixture_of(planner, lens)
            t0 = time.perf_counter()
            plan = planner.build(len(lens), epoch=0, world_size=WORLD)
            row = {
                "round": i + 1,
                "writes": writes,
                "build_seconds": round(time.perf_counter() - t0, 3),
                "batches": plan.num_batches,
                **{f"{k}_wall_and_thread_cpu": v for k, v in spent.items()},
            }
            print(row, flush=True)
            builds.append(row)
            del plan, planner
    save(args.name, {"samples": SAMPLES, "mix": args.mix, "builds": builds})


if __name__ == "__main__":
    main()

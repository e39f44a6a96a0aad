"""What planning one dataset through ``MixturePlanner(inner)`` costs (issue 29: one path).

A Loader over one dataset plans through a pass-through ``MixturePlanner``; this measures, in one
run and interleaved, building a plan of ``--samples`` samples and reading every batch of rank 0
with the inner planner alone and through the wrapper, for the random and the grouped plan, plus
the Loader's per-dataset counting of one batch (``DatasetBooks.add``, now run for one dataset too).

    python benchmarks/bench_one_dataset_plan.py --samples 5000000 --repeats 6
"""

from __future__ import annotations

import argparse
import gc
import time
from collections.abc import Callable

import numpy as np

from chute.collate import Collate
from chute.loader.mixture_binding import DatasetBooks
from chute.mixture.opened import OpenedMixture
from chute.plan import GroupedPlanner, Planner, RandomPlanner
from chute.plan.mixture_planner import MixturePlanner


def _epoch(planner: Planner, n: int, epoch: int, world: int) -> float:
    t0 = time.perf_counter()
    plan = planner.build(n, epoch=epoch, world_size=world)
    for start in range(0, plan.num_batches, 4096):
        plan.batches(0, start, min(plan.num_batches, start + 4096))
    return time.perf_counter() - t0


def _best(fn: Callable[[], float], repeats: int) -> float:
    return min(fn() for _ in range(repeats))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=5_000_000)
    parser.add_argument("--world", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    n = args.samples
    rng = np.random.default_rng(0)
    lengths = rng.integers(16, 2048, size=n).astype(np.int32)
    rows = []
    for name, make in (
        ("random", lambda: RandomPlanner(8, seed=0)),
        ("grouped", lambda: GroupedPlanner(8, seed=0, lengths=lengths)),
    ):
        # fresh planners per run (their own caches of built plans would hide the build)
        alone: list[float] = []
        wrapped: list[float] = []
        for r in range(args.repeats):  # interleaved, each first in turn: the same machine
            runs = [(alone, False), (wrapped, True)]
            for times, wrap in runs if r % 2 else runs[::-1]:
                gc.collect()  # the previous plan's arrays are gone before the next build
                planner = MixturePlanner(make()) if wrap else make()
                times.append(_epoch(planner, n, r, args.world))
        rows.append((name, min(alone), min(wrapped)))
    # the per-batch counting, beside what building the same batch costs (the padded collate)
    samples = [{"input_ids": np.arange(1 + i * 100, dtype=np.int64)} for i in range(8)]
    collate = Collate()
    batch = collate(samples)
    books = DatasetBooks(OpenedMixture.of_one(None, None))
    ids = np.arange(8, dtype=np.int64)
    costs = {"collate": [], "books": []}
    for _ in range(args.repeats):
        for name, step in (
            ("collate", lambda: collate(samples)),
            ("books", lambda: books.add(lambda: ids, len(ids), [], batch)),
        ):
            t0 = time.perf_counter()
            for _ in range(5_000):
                step()
            costs[name].append((time.perf_counter() - t0) / 5_000)
    book, made = min(costs["books"]), min(costs["collate"])
    print(
        f"{n:,} samples, {args.world} ranks, best of {args.repeats} (build + every batch of rank 0)"
    )
    print(f"{'plan':10} {'inner alone':>12} {'MixturePlanner':>15} {'ratio':>6}")
    for name, a, w in rows:
        print(f"{name:10} {a:11.3f}s {w:14.3f}s {w / a:6.3f}")
    print(
        f"per batch of 8 samples (padded to 701 tokens): DatasetBooks.add {book * 1e6:.1f} us, "
        f"the padded Collate {made * 1e6:.1f} us (ratio {book / made:.3f})"
    )


if __name__ == "__main__":
    main()

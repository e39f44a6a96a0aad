"""What planning one dataset through ``MixturePlanner(inner)`` costs (issue 29: one path).

A Loader over one dataset plans through a pass-through ``MixturePlanner``; this measures, in one
run and interleaved, building a plan of ``--samples`` samples and reading every batch of rank 0
with the inner planner alone and through the wrapper, for the random and the grouped plan, plus
the Loader's per-dataset counting of one batch (``DatasetBooks.add``, now run for one dataset too).

    python benchmarks/bench_one_dataset_plan.py --samples 5000000
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

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
        for r in range(args.repeats):  # interleaved: before and after see the same machine
            alone.append(_epoch(make(), n, r, args.world))
            wrapped.append(_epoch(MixturePlanner(make()), n, r, args.world))
        rows.append((name, min(alone), min(wrapped)))
    books = DatasetBooks(OpenedMixture.of_one(None, None))
    ids = np.arange(8, dtype=np.int64)
    batch = {"attention_mask": np.ones((8, 1024), dtype=np.int64), "sample_ids": ids}
    count = 20_000
    t0 = time.perf_counter()
    for _ in range(count):
        books.add(ids, [], batch)
    per_batch = (time.perf_counter() - t0) / count
    print(
        f"{n:,} samples, {args.world} ranks, best of {args.repeats} (build + every batch of rank 0)"
    )
    print(f"{'plan':10} {'inner alone':>12} {'MixturePlanner':>15} {'ratio':>6}")
    for name, a, w in rows:
        print(f"{name:10} {a:11.3f}s {w:14.3f}s {w / a:6.3f}")
    print(f"DatasetBooks.add, one batch of 8 x 1024 (mask counted): {per_batch * 1e6:.1f} us")


if __name__ == "__main__":
    main()

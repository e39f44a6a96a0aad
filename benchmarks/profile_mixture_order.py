"""What a mixture's order costs per position, and its multiset's parts, at 100M lengths.

A length-aware plan over a mixture reads the epoch's order (a shuffle of the slots, each slot's
dataset, then a second shuffle for the slots of down-sampled datasets) and, for its totals, the
order's ids as a multiset (``Order.multiset_parts``). This times both over ``bench_scale.py``'s
three-dataset mixture of the 100M lognormal lengths, on one thread:

- nanoseconds per position of one 1M-position range (best of ``--repeats``): the slots' plain
  shuffle alone, and the whole order (the ids);
- CPU seconds to compute every multiset part once (each of ``--repeats`` runs).

``PYTHONPATH=<another tree's src>`` runs another version with the same script (before/after).
Usage::

    .venv/bin/python benchmarks/profile_mixture_order.py --dir D --name mixture_order_after
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import save

SAMPLES = 100_000_000
RANGE = 1 << 20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", help="where the lengths go (default: a temp dir)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--name", default="mixture_order")
    args = ap.parse_args()
    import bench_scale
    from chute.plan.budget import BudgetPlanner

    root = Path(args.dir or tempfile.mkdtemp(prefix="mixture-order-"))
    lengths = root / f"lognormal_{SAMPLES}.npy"
    bench_scale.write_lognormal(lengths, SAMPLES)
    lens = np.load(lengths, mmap_mode="r")
    order = bench_scale.mixture_of(BudgetPlanner(32 * 4096, lengths=lens), lens).selection.order(0)
    lo = 37 * RANGE  # a range inside the epoch, away from its ends

    def best_ns(fn: object) -> float:
        times = []
        for _ in range(max(10, args.repeats)):
            t0 = time.perf_counter()
            fn()  # type: ignore[operator]
            times.append(time.perf_counter() - t0)
        return round(min(times) * 1e9 / RANGE, 2)

    slots_ns = best_ns(lambda: order._slots.take_range(lo, lo + RANGE))
    order_ns = best_ns(lambda: order.take_range(lo, lo + RANGE))
    parts_cpu = []
    for _ in range(args.repeats):
        c0 = time.process_time()
        for part in order.multiset_parts(RANGE, np.int32):
            part()
        parts_cpu.append(round(time.process_time() - c0, 2))
    result = {
        "positions": len(order),
        "chute": str(Path(__import__("chute").__file__).parent),
        "slots_shuffle_ns_per_position": slots_ns,
        "order_ns_per_position": order_ns,
        "multiset_parts_cpu_seconds": parts_cpu,
        "command": " ".join(["benchmarks/profile_mixture_order.py", *sys.argv[1:]]),
    }
    print("saved", save(args.name, result))


if __name__ == "__main__":
    main()

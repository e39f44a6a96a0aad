"""Bytes one ``(hash, record)`` pair costs at the peak of counting its partition.

The duplicate check sizes its partitions from this cost (``chute.mixture.overlap._PAIR_PEAK``):
a partition of ``n`` pairs must count within ``max_memory``. Measured with ``tracemalloc`` over
one partition of 200k pairs: built, sorted (``_sorted``) and counted (``_Tally.add``), for
hashes all distinct, every content exactly twice (the most runs) and random repeats. Usage::

    .venv/bin/python benchmarks/profile_overlap_pairs.py --name overlap_pairs
    PYTHONPATH=<other src> .venv/bin/python benchmarks/profile_overlap_pairs.py --name ...
"""

from __future__ import annotations

import argparse
import sys
import tracemalloc
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import save


def bytes_per_pair(hashes: np.ndarray) -> float:
    from chute.mixture import overlap

    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    pairs = overlap._pairs(hashes, 0, 0)
    h, r = overlap._sorted(pairs)
    del pairs
    overlap._Tally(1, 5).add(h, r)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return round((peak - base) / len(hashes), 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pairs", type=int, default=200_000)
    ap.add_argument("--name", default="overlap_pairs")
    args = ap.parse_args()
    n = args.pairs
    rng = np.random.default_rng(0)
    table = rng.integers(0, 2**63, size=n, dtype=np.uint64)
    cases = {
        "distinct": table,
        "every_content_twice": rng.permutation(np.repeat(table[: n // 2], 2)),
        "random_repeats": table[rng.integers(0, n // 2, n)],
    }
    result = {"pairs": n, "bytes_per_pair": {k: bytes_per_pair(v.copy()) for k, v in cases.items()}}
    print("saved", save(args.name, result))


if __name__ == "__main__":
    main()

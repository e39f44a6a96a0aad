"""One plan build at 100M lengths, this tree against another, in pairs: the ratio pair by pair.

On a shared machine the speed drifts by 20% between runs of the same code; two versions timed
in separate runs minutes apart cannot be told apart by less than that. Here each pair runs the
two versions back to back (``A B A B ...``), each build in a fresh process, and the ratio is
taken per pair, so drift between pairs cancels.

Usage::

    git worktree add /tmp/before <commit>
    .venv/bin/python benchmarks/bench_plan_pairs.py --before /tmp/before/src --plan packed
    .venv/bin/python benchmarks/bench_plan_pairs.py --before /tmp/before/src --plan budget --mix

The lengths are ``bench_scale.py``'s (100M lognormal lengths, written once under ``--dir``),
the planners and the three-dataset mixture too. Each process loads the lengths, builds the
plan for 8 ranks and prints its wall and CPU seconds and a digest of the plan (the two
versions must deal the same batches: checked). Peak RSS is the process's. Results:
``benchmarks/results/plan_pairs_<plan>[_mix].json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import save

SAMPLES = 100_000_000


def build_once(plan: str, mix: bool, lengths: str) -> None:
    """In a fresh process: load the lengths, build one plan, print its figures as JSON."""
    import resource
    import time

    import numpy as np

    import bench_scale

    lens = np.load(lengths, mmap_mode="r")
    _ = int(np.count_nonzero(lens >= 0))  # the lengths' pages, as a loader has them
    planner = bench_scale.planner(plan, lens, True)
    if mix:
        planner = bench_scale.mixture_of(planner, lens)
    c0, t0 = time.process_time(), time.perf_counter()
    built = planner.build(len(lens), epoch=0, world_size=bench_scale.WORLD)
    figures = {
        "seconds": round(time.perf_counter() - t0, 2),
        "cpu_seconds": round(time.process_time() - c0, 2),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "digest": bench_scale.plan_digest(built),
        "chute": str(Path(__import__("chute").__file__).parent),
    }
    print(json.dumps(figures))


def run(src: str | None, plan: str, mix: bool, lengths: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    if src:
        env["PYTHONPATH"] = src
    cmd = [sys.executable, __file__, "--one", "--plan", plan, "--lengths", str(lengths)]
    proc = subprocess.run(
        cmd + (["--mix"] if mix else []), capture_output=True, text=True, env=env, check=True
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", help="the other tree's src/ (its PYTHONPATH); required")
    ap.add_argument("--plan", choices=("grouped", "budget", "packed"), default="packed")
    ap.add_argument("--mix", action="store_true", help="over the three-dataset mixture")
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--dir", help="where the lengths go (default: a temp dir)")
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--lengths", help=argparse.SUPPRESS)
    ap.add_argument("--name", help="the results file's name (default: plan_pairs_<plan>[_mix])")
    args = ap.parse_args()
    if args.one:
        build_once(args.plan, args.mix, args.lengths)
        return
    if not args.before:
        ap.error("--before is required: the src/ of the tree to compare with")
    import bench_scale

    root = Path(args.dir or tempfile.mkdtemp(prefix="bench-pairs-"))
    lengths = root / f"lognormal_{SAMPLES}.npy"
    bench_scale.write_lognormal(lengths, SAMPLES)
    run(None, args.plan, args.mix, lengths)  # a warm-up: the lengths in the page cache
    pairs = []
    for k in range(args.pairs):
        after = run(None, args.plan, args.mix, lengths)
        before = run(args.before, args.plan, args.mix, lengths)
        if after["digest"] != before["digest"]:
            raise SystemExit(f"pair {k}: the two versions built different plans")
        pair = {"after": after, "before": before}
        for key in ("seconds", "cpu_seconds", "peak_rss_mb"):
            pair[f"ratio_{key}"] = round(after[key] / before[key], 3)
        pairs.append(pair)
        print(k, json.dumps({key: v for key, v in pair.items() if key.startswith("ratio")}))

    def median(side: str, key: str) -> float:
        if side == "ratio":
            return round(statistics.median(p[f"ratio_{key}"] for p in pairs), 3)
        return round(statistics.median(p[side][key] for p in pairs), 2)

    results = {
        "plan": args.plan + (" over the mixture" if args.mix else ""),
        "samples": SAMPLES,
        "pairs": pairs,
        "median": {
            side: {key: median(side, key) for key in ("seconds", "cpu_seconds", "peak_rss_mb")}
            for side in ("after", "before", "ratio")
        },
        "load_average": os.getloadavg(),
        "command": " ".join(["benchmarks/bench_plan_pairs.py", *sys.argv[1:]]),
    }
    name = args.name or f"plan_pairs_{args.plan}{'_mix' if args.mix else ''}"
    print("saved", save(name, results))


if __name__ == "__main__":
    main()

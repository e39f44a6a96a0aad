"""A plan build at 100M lengths with the plans' tasks as ``task_size()`` makes them, or another size.

Usage::

    .venv/bin/python benchmarks/bench_plan_tasks.py --kind mix_packed --threads 8 --rounds 2

Plans split their array work into tasks of ``chute.plan.bulk.task_size()`` samples on
``worker_threads()`` threads (``2 * TASK / threads``, at least ``TASK / 8``). This builds one
plan (``bench_scale``'s planners and mixture, 100M lognormal lengths, 8 ranks) in a fresh
process per build, alternating tasks of the default size with tasks of ``--fixed`` samples
(default ``TASK``, the size before tasks shrank with the threads), ``--rounds`` times each:
wall and CPU seconds of the build, and with ``--memory`` the numpy peak of a build traced by
``tracemalloc`` (traced builds run slower: their time is not reported). ``--threads N`` makes
the plan use N threads whatever the cores (its affinity mask read as N cores): on 2 cores, 8
threads show the memory of an 8-core build, not its time. Each build's digest is printed: the
same plan for every task size. Results: ``benchmarks/results/<name>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import save

CHILD = r"""
import json, os, sys, time
threads, task, kind, path, memory = sys.argv[1:6]
if int(threads):
    os.sched_getaffinity = lambda pid: set(range(int(threads)))
sys.path.insert(0, os.environ["BENCH_DIR"])
import numpy as np
from bench_scale import mixture_of, plan_digest, planner
from chute.plan import bulk
if int(task):
    bulk.task_size = lambda: int(task)
lens = np.load(path, mmap_mode="r")
_ = int(np.count_nonzero(lens >= 0))
plan_of = planner(kind.replace("mix_", ""), lens, True)
if kind.startswith("mix_"):
    plan_of = mixture_of(plan_of, lens)
out = {"threads": bulk.worker_threads(), "task": bulk.task_size()}
if memory == "1":
    import tracemalloc
    tracemalloc.start()
    plan = plan_of.build(len(lens), epoch=0, world_size=8)
    out["numpy_peak_mb"] = round(tracemalloc.get_traced_memory()[1] / 2**20, 1)
else:
    c, t = time.process_time(), time.perf_counter()
    plan = plan_of.build(len(lens), epoch=0, world_size=8)
    out["seconds"] = round(time.perf_counter() - t, 2)
    out["cpu_seconds"] = round(time.process_time() - c, 2)
out["digest"] = plan_digest(plan)
print(json.dumps(out))
"""


def build(threads: int, task: int, kind: str, lengths: Path, memory: bool) -> dict[str, Any]:
    cmd = [sys.executable, "-c", CHILD, str(threads), str(task), kind, str(lengths)]
    env = {**os.environ, "BENCH_DIR": str(Path(__file__).resolve().parent)}
    proc = subprocess.run(
        [*cmd, "1" if memory else "0"], capture_output=True, text=True, env=env, check=True
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    from bench_scale import write_lognormal
    from chute.plan.bulk import TASK

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kind", default="mix_packed", help="grouped|budget|packed, mix_ for mixture")
    ap.add_argument("--threads", type=int, default=0, help="threads the plan uses (0: the cores)")
    ap.add_argument("--fixed", type=int, default=TASK, help="the other task size (samples)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--memory", action="store_true", help="also one traced build of each")
    ap.add_argument("--samples", type=float, default=1e8)
    ap.add_argument("--dir", default="/tmp/bench-plan-tasks")
    ap.add_argument("--name", default="plan_tasks")
    args = ap.parse_args()
    root = Path(args.dir)
    root.mkdir(parents=True, exist_ok=True)
    lengths = root / f"lognormal_{int(args.samples)}.npy"
    write_lognormal(lengths, int(args.samples))
    sides = {"default": 0, "fixed": args.fixed}
    result: dict[str, Any] = {"kind": args.kind, "rounds": {s: [] for s in sides}}
    for _ in range(args.rounds):
        for side, task in sides.items():
            got = build(args.threads, task, args.kind, lengths, memory=False)
            result["rounds"][side].append(got)
            print(side, got, flush=True)
    if args.memory:
        for side, task in sides.items():
            got = build(args.threads, task, args.kind, lengths, memory=True)
            result[f"memory_{side}"] = got
            print(side, got, flush=True)
    digests = {r["digest"] for rows in result["rounds"].values() for r in rows}
    result["same_plan"] = len(digests) == 1
    result["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
    save(args.name, result)


if __name__ == "__main__":
    main()

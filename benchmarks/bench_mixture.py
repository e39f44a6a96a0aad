"""Mixtures: the epoch plan of 10 datasets totalling 100M samples, and the duplicate check.

Plan (``--plan``): lengths of 100M samples over 10 datasets (sizes from 1M to 30M, 1% rejected,
``-1``) are written to a ``.npy`` once and memory-mapped, as the lengths cache is. Each step runs
in a fresh process (peak RSS is per process): the selection and the plan (weights, repeat,
samples, max_samples; the rejected ids left out of every pool), every batch of one rank, the
whole epoch order, an elastic re-plan, and what users write instead: per dataset
``rng.choice`` (with replacement when upsampling), concatenated, ``rng.permutation``.

Overlap (``--overlap``): 10M short alpaca-like records (1% exact copies, spread over two
files) are checked by ``find_duplicates`` (normalised content hashes, partitioned sort), in
memory and spilled to disk under a small memory cap; against a Python ``dict`` of the MD5 of
each raw line (what a quick script does: exact bytes only, memory growing with the data).

    .venv/bin/python benchmarks/bench_mixture.py              # both, full size
    .venv/bin/python benchmarks/bench_mixture.py --quick      # 1M / 200k, for a smoke run
    .venv/bin/python benchmarks/bench_mixture.py --overlap --overlap-records 30000000 \
        --overlap-steps chute_spilled --name overlap_30m   # one step at another size
    .venv/bin/python benchmarks/bench_mixture.py --overlap --overlap-common 0.5 \
        --overlap-steps chute_spilled --name overlap_common   # half the records one content
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import save

SIZES_M = (30, 20, 15, 10, 8, 6, 5, 3, 2, 1)  # millions of samples per dataset: 100M in all


def peak_rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def anon_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return round(int(line.split()[1]) / 1024, 1)
    return float("nan")


# -- the plan ----------------------------------------------------------------------------------


def write_lengths(path: Path, sizes: list[int]) -> None:
    rng = np.random.default_rng(0)
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.int32, shape=(sum(sizes),))
    step = 1 << 24
    for lo in range(0, len(out), step):
        hi = min(len(out), lo + step)
        block = rng.integers(16, 4096, hi - lo, dtype=np.int32)
        block[rng.random(hi - lo) < 0.01] = -1
        out[lo:hi] = block
    out.flush()


def shares(sizes: list[int]) -> list[Any]:
    from chute.plan.mixture_selection import Share

    out = []
    for k, n in enumerate(sizes):
        name = f"d{k}"
        if k < 6:
            out.append(Share(name, n, weight=float(len(sizes) - k)))
        elif k == 6:
            out.append(Share(name, n, repeat=2.5))
        elif k == 7:
            out.append(Share(name, n, samples=n // 3))
        elif k == 8:
            out.append(Share(name, n, weight=1.0, max_samples=n // 2))
        else:
            out.append(Share(name, n, samples=3 * n))  # upsampled with repeats
    return out


def plan_step(step: str, lengths_path: str, sizes: list[int], batch: int, world: int) -> dict:
    from chute.plan import RandomPlanner, continue_epoch
    from chute.plan.mixture_planner import MixturePlanner
    from chute.plan.mixture_selection import Selection, valid_pools

    out: dict[str, Any] = {"step": step}
    t0 = time.perf_counter()
    if step == "numpy_baseline":  # per dataset rng.choice, concatenated, one permutation
        rng = np.random.default_rng(0)
        lengths = np.load(lengths_path, mmap_mode="r")
        offsets = np.concatenate([[0], np.cumsum(sizes)])
        # the same counts as chute's (over the valid samples), so both draw as many
        sel = Selection(shares(sizes), seed=0, pools=valid_pools(None, sizes, lengths))
        parts = []
        for d, count in enumerate(sel.counts.tolist()):
            valid = np.flatnonzero(lengths[offsets[d] : offsets[d + 1]] >= 0)
            parts.append(offsets[d] + rng.choice(valid, count, replace=count > len(valid)))
        ids = np.concatenate(parts)
        ids = ids[rng.permutation(len(ids))]
        out["samples"] = len(ids)
    else:
        lengths = np.load(lengths_path, mmap_mode="r")
        pools = valid_pools(None, sizes, lengths)
        sel = Selection(shares(sizes), seed=0, pools=pools)
        planner = MixturePlanner(RandomPlanner(batch, seed=0), sel)
        plan = planner.build(len(lengths), epoch=0, world_size=world)
        out["samples"] = len(sel)
        out["batches_per_rank"] = plan.num_batches
        if step == "one_rank_epoch":
            total = 0
            for lo in range(0, plan.num_batches, 64):
                for ids in plan.batches(0, lo, min(plan.num_batches, lo + 64)):
                    total += ids.size
            out["ids"] = total
        elif step == "materialize":
            ids = plan.order.materialize()
            out["checksum"] = int(ids[:1000].sum())
        elif step == "elastic":
            rest = continue_epoch(
                planner, len(lengths), epoch=0, segments=[(world, 1000)], world_size=3
            )
            out["batches_per_rank_after"] = rest.num_batches
    out["seconds"] = round(time.perf_counter() - t0, 3)
    out["peak_rss_mb"] = peak_rss_mb()
    out["anon_mb"] = anon_mb()
    return out


def run_plan(args: argparse.Namespace) -> dict[str, Any]:
    scale = 1_000_000 if not args.quick else 10_000
    sizes = [m * scale for m in SIZES_M]
    tmp = Path(tempfile.mkdtemp(prefix="chute-bench-mixture-"))
    path = tmp / "lengths.npy"
    write_lengths(path, sizes)
    steps = ["none", "build", "one_rank_epoch", "materialize", "elastic", "numpy_baseline"]
    results: dict[str, Any] = {}
    for step in steps:
        best: dict[str, Any] | None = None
        for _ in range(1 if step == "none" else args.repeat):
            cmd = [
                sys.executable,
                __file__,
                "--plan-step",
                step,
                "--lengths",
                str(path),
                "--sizes",
                ",".join(map(str, sizes)),
            ]
            got = json.loads(subprocess.check_output(cmd, text=True).strip().splitlines()[-1])
            if best is None or got["seconds"] < best["seconds"]:
                best = got
        results[step] = best
    path.unlink()
    tmp.rmdir()
    return {
        "samples_total": sum(sizes),
        "datasets": len(sizes),
        "sizes": sizes,
        "batch_size": 32,
        "world_size": 8,
        "steps": results,
    }


# -- the overlap check ----------------------------------------------------------------------------


def write_records(folder: Path, n: int, common: float = 0.0) -> list[Path]:
    """``n`` records, 1% exact copies of earlier ones; ``common``: that share all record 0."""
    rng = np.random.default_rng(1)
    copies = set(rng.choice(n, n // 100, replace=False).tolist())
    # a share of the records all one content (empty answers, a boilerplate reply): one
    # partition of the check then holds most of the pairs
    same = rng.random(n) < common if common else np.zeros(0, dtype=bool)
    paths = [folder / "part-0.jsonl", folder / "part-1.jsonl"]
    files = [open(p, "wb") for p in paths]  # noqa: SIM115
    for i in range(n):
        j = int(rng.integers(0, i)) if i in copies and i else i  # an exact copy of record j
        if common and same[i]:
            j = 0
        line = json.dumps(
            {
                "instruction": f"Question number {j} about topic {j % 977}?",
                "input": "",
                "output": f"Answer {j}: " + "lorem ipsum " * (j % 7),
            }
        )
        files[i % 2].write(line.encode() + b"\n")
    for f in files:
        f.close()
    return paths


def overlap_step(step: str, paths: list[str], n: int) -> dict[str, Any]:
    out: dict[str, Any] = {"step": step, "records": n}
    t0 = time.perf_counter()
    if step == "md5_dict":
        seen: dict[bytes, int] = {}
        dups = 0
        for p in paths:
            with open(p, "rb") as f:
                for line in f:
                    key = hashlib.md5(line.rstrip(b"\n")).digest()
                    if key in seen:
                        dups += 1
                    else:
                        seen[key] = 1
        out["duplicates"] = dups
    else:
        import tracemalloc

        from chute.mixture.hashes import content_hashes
        from chute.mixture.overlap import Group, find_duplicates
        from chute.sources import open_source

        memory = (256 << 20) if step == "chute" else (16 << 20)
        source = open_source(paths)  # as find_duplicates({"data": paths}) opens it
        # the hash pass (2 processes) apart, then the check over the cached hashes with its
        # allocations traced (tracing the pass would slow its Python work)
        content_hashes(source, "auto", progress=False)
        out["hash_seconds"] = round(time.perf_counter() - t0, 3)
        tracemalloc.start()
        t1 = time.perf_counter()
        report = find_duplicates([Group("data", source)], max_memory=memory, progress=False)
        out["check_seconds"] = round(time.perf_counter() - t1, 3)
        out["check_traced_peak_mb"] = round(tracemalloc.get_traced_memory()[1] / 2**20, 1)
        out["rss_anon_mb_after"] = anon_mb()  # this process's own pages, the maps' apart
        tracemalloc.stop()
        out["duplicates"] = report.duplicates
        out["partitions"] = report.partitions
    out["seconds"] = round(time.perf_counter() - t0, 3)
    out["records_per_s"] = round(n / out["seconds"])
    out["peak_rss_mb"] = peak_rss_mb()
    out["children_peak_rss_mb"] = round(
        resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1
    )
    return out


def run_overlap(args: argparse.Namespace) -> dict[str, Any]:
    n = args.overlap_records or (10_000_000 if not args.quick else 200_000)
    folder = Path(tempfile.mkdtemp(prefix="chute-bench-overlap-"))
    paths = write_records(folder, n, args.overlap_common)
    results: dict[str, Any] = {}
    # each step in a fresh process with a fresh chute cache: the hashes are computed every time
    for step in args.overlap_steps.split(","):
        env = {**os.environ, "CHUTE_CACHE_DIR": tempfile.mkdtemp(prefix="chute-cache-")}
        cmd = [
            sys.executable,
            __file__,
            "--overlap-step",
            step,
            "--paths",
            ",".join(map(str, paths)),
            "--records",
            str(n),
        ]
        got = subprocess.check_output(cmd, text=True, env=env).strip().splitlines()[-1]
        results[step] = json.loads(got)
    for p in paths:
        p.unlink()
    folder.rmdir()
    return {"records": n, "common": args.overlap_common, "bytes": None, "steps": results}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--plan", action="store_true", help="only the plan benchmark")
    ap.add_argument("--overlap", action="store_true", help="only the overlap benchmark")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--overlap-records", type=int, help="records of the overlap check (10M)")
    ap.add_argument(
        "--overlap-steps", default="chute,chute_spilled,md5_dict", help="which overlap steps"
    )
    ap.add_argument(
        "--overlap-common",
        type=float,
        default=0.0,
        help="share of the overlap records that are one same content (default 0)",
    )
    ap.add_argument("--name", help="the results file's name (default mixture)")
    ap.add_argument("--plan-step")
    ap.add_argument("--overlap-step")
    ap.add_argument("--lengths")
    ap.add_argument("--sizes")
    ap.add_argument("--paths")
    ap.add_argument("--records", type=int)
    args = ap.parse_args()
    if args.plan_step:
        if args.plan_step == "none":  # the interpreter with numpy and chute imported
            import chute.plan.mixture_planner  # noqa: F401

            print(json.dumps({"step": "none", "seconds": 0.0, "peak_rss_mb": peak_rss_mb()}))
            return
        sizes = [int(s) for s in args.sizes.split(",")]
        print(json.dumps(plan_step(args.plan_step, args.lengths, sizes, 32, 8)))
        return
    if args.overlap_step:
        print(json.dumps(overlap_step(args.overlap_step, args.paths.split(","), args.records)))
        return
    load = os.getloadavg()
    report: dict[str, Any] = {"load_before": load}
    if not args.overlap:
        report["plan"] = run_plan(args)
    if not args.plan:
        report["overlap"] = run_overlap(args)
    report["load_after"] = os.getloadavg()
    save(args.name or ("mixture" if not args.quick else "mixture_quick"), report)


if __name__ == "__main__":
    main()

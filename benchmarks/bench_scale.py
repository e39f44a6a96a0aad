"""Every pass over the data at growing sizes: time, peak RSS and how each grows.

Usage::

    .venv/bin/python benchmarks/bench_scale.py                        # 100k and 1M records,
                                                                      # plans at 100M lengths
    .venv/bin/python benchmarks/bench_scale.py --records 1000000,10000000 --steps index,plans
    .venv/bin/python benchmarks/bench_scale.py --quick                # 20k / 100k, 1M lengths

Records are alpaca-derived (LLaMA-Factory's ``alpaca_en_demo`` and ``alpaca_zh_demo`` rows
with a fresh ``id`` each, as ``bench_preprocess`` writes them), in two JSONL files under a temp
directory (``--dir``), never the repository. Every step runs in a fresh process with its own
empty chute cache (``CHUTE_CACHE_DIR``), so each pass is measured cold; its peak RSS is the
process's high-water mark (``VmHWM``) and, for steps with worker processes, the largest
worker's (``RUSAGE_CHILDREN``). Steps:

- ``index``: ``JsonlSource(paths)``: the byte-offset index of every file;
- ``validate``: ``chute validate`` with the Qwen3 tokenizer (tiktoken fast path) and template
  ``chatml``, ``--workers 2``;
- ``lengths``: the Loader's lengths pass (``chute.lengths.lengths_of``), 2 workers;
- ``preprocess``: ``chute preprocess`` of both files, ``--workers 2``;
- ``plan_grouped`` / ``plan_budget`` / ``plan_packed``: a plan build over those lengths
  (8 ranks; batch 16, budget 16 x 2,048 tokens, rows of 2,048 x 8 per rank);
- ``mix_grouped`` / ``mix_budget`` / ``mix_packed``: the same plans over a mixture of three
  datasets cut from those lengths (60% / 30% / 10% of the ids; weights 0.6 and 0.4, the third
  repeated twice), the order a ``MixturePlanner`` deals;
- ``epoch_ids``: the ids of every batch of rank 0 for one epoch of the packed plan;
- ``overlap``: ``chute validate --overlap`` (exact duplicates within and between the files).

Lengths only (``--plan-samples``, default 100M): lognormal lengths (median ~245 tokens, clipped
to 4,096), written to a ``.npy`` once and memory-mapped as the lengths cache is; each plan
built for 8 ranks (``grouped`` batch 32, ``budget`` 32 x 4,096 tokens, ``packed`` rows of 4,096
x 8): build time, peak RSS, and the numpy memory the build allocated at its peak
(``tracemalloc``), which is what a rank adds beyond the interpreter and the lengths. The time
is of a build on its own; the memory of a second build under ``tracemalloc`` (tracing slows a
build by 20-75%, so its time is kept apart as ``traced_seconds``), checked to be the same
plan. ``mix_*`` steps run there too: the same plans over the three-dataset mixture.

With ``--synthetic-lengths`` the plan steps at a size whose lengths step is not run use
lognormal lengths as above (clipped to 2,048, the recipe's ``max_length``), so plans at 10M
records need no hours of tokenizing; the results say so (``lengths_used``).

With ``--drop-caches`` (root on Linux only) the kernel's page cache is emptied before each step,
so a pass that reads the records reads them from the disk, not from the memory the writing left
them in; each step records whether that happened (``page_cache``).

Growth is ``time(10x) / time(x)``: 10.0 is linear; ``cpu`` is the same ratio of CPU seconds
(the step's process and its workers, user + system), which a shared machine's load moves less. Results: ``benchmarks/results/scale.json``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import SHARED_DATA, save

TOKENIZER = SHARED_DATA / "tokenizers/qwen3/tokenizer.json"
MAX_LENGTH = 2048
WORLD = 8
STEPS = (
    "index",
    "validate",
    "lengths",
    "preprocess",
    "plan_grouped",
    "plan_budget",
    "plan_packed",
    "mix_grouped",
    "mix_budget",
    "mix_packed",
    "epoch_ids",
    "overlap",
)
CLI = [sys.executable, "-c", "import sys; from chute.cli import main; sys.exit(main())"]


def peak_rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def children_peak_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1)


def process_cpu_seconds() -> float:
    """CPU seconds (user + system) of this process and its ended workers: on a shared machine
    a step's CPU time grows with its work, its wall time also with the load."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    workers = resource.getrusage(resource.RUSAGE_CHILDREN)
    return round(own.ru_utime + own.ru_stime + workers.ru_utime + workers.ru_stime, 2)


# -- data ------------------------------------------------------------------------------------


def write_records(folder: Path, n: int) -> list[Path]:
    """``n`` alpaca records in two files (a fresh ``id`` each, so no two are equal)."""
    rows: list[Any] = []
    for name in ("llama-factory/alpaca_en_demo.json", "llama-factory/alpaca_zh_demo.json"):
        rows += orjson.loads((SHARED_DATA / name).read_bytes())
    lines = [orjson.dumps({k: r[k] for k in ("instruction", "input", "output")}) for r in rows]
    paths = [folder / f"alpaca_{n}_{part}.jsonl" for part in (0, 1)]
    if all(p.is_file() for p in paths):
        return paths
    rng = random.Random(n)
    half = n // 2
    for part, path in enumerate(paths):
        count = half if part == 0 else n - half
        with open(path, "wb") as f:
            for i in range(count):
                line = lines[(i * 7 + part) % len(lines)]
                f.write(line[:-1] + b',"id":%d}\n' % rng.randrange(10**12))
    return paths


def write_lognormal(path: Path, n: int, clip: int = 4096) -> None:
    if path.is_file():
        return
    rng = np.random.default_rng(0)
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.int32, shape=(n,))
    for lo in range(0, n, 1 << 24):
        hi = min(n, lo + (1 << 24))
        out[lo:hi] = np.clip(rng.lognormal(5.5, 1.0, hi - lo), 1, clip).astype(np.int32)
    out.flush()
    del out


# -- one step, in a fresh process ------------------------------------------------------------


def recipe() -> Any:
    from chute import Recipe

    return Recipe(tokenizer=str(TOKENIZER), template="chatml", max_length=MAX_LENGTH)


def planner(kind: str, lengths: Any, big: bool) -> Any:
    from chute.plan.budget import BudgetPlanner
    from chute.plan.grouped import GroupedPlanner
    from chute.plan.packed import PackedPlanner

    batch, row = (32, 4096) if big else (16, MAX_LENGTH)
    if kind == "grouped":
        return GroupedPlanner(batch, lengths=lengths)
    if kind == "budget":
        return BudgetPlanner(batch * row, lengths=lengths)
    return PackedPlanner(row, batch_size=8, lengths=lengths)


def mixture_of(inner: Any, lens: np.ndarray) -> Any:
    """``inner`` over a mixture of three datasets cut from ``lens`` (60% / 30% / 10%)."""
    from chute.plan.mixture_planner import MixturePlanner
    from chute.plan.mixture_selection import Selection, Share, valid_pools

    n = len(lens)
    sizes = [n * 6 // 10, n * 3 // 10, n - n * 6 // 10 - n * 3 // 10]
    shares = [
        Share("a", sizes[0], weight=0.6),
        Share("b", sizes[1], weight=0.4),
        Share("c", sizes[2], repeat=2),
    ]
    return MixturePlanner(inner, Selection(shares, seed=4, pools=valid_pools(None, sizes, lens)))


def run_step(step: str, paths: list[str], n: int, lengths_npy: str | None) -> dict[str, Any]:
    """One step in this (fresh) process; returns its figures."""
    out: dict[str, Any] = {}
    t0 = time.perf_counter()
    if step == "index":
        from chute import JsonlSource

        out["records"] = len(JsonlSource(paths))
    elif step in ("validate", "overlap"):
        args = ["validate", *paths, "--workers", "2", "--json", "--quiet"]
        if step == "validate":
            args += ["--tokenizer", str(TOKENIZER), "--template", "chatml"]
            args += ["--max-length", str(MAX_LENGTH)]
        else:
            args += ["--overlap"]
        proc = subprocess.run([*CLI, *args], capture_output=True, text=True, check=False)
        if proc.returncode not in (0, 1):
            raise RuntimeError(proc.stderr[-2000:])
        report = json.loads(proc.stdout)
        out["records"] = report.get("records", report.get("total"))
    elif step == "lengths":
        from chute import JsonlSource
        from chute.lengths import lengths_of

        lens = lengths_of(JsonlSource(paths), recipe(), workers=2, progress=False)
        out["records"] = len(lens)
        np.save(os.environ["BENCH_LENGTHS_OUT"], np.asarray(lens.length))
    elif step == "preprocess":
        work = Path(tempfile.mkdtemp(prefix="scale-pre-", dir=os.environ["CHUTE_CACHE_DIR"]))
        cfg = work / "config.json"
        rec = {"tokenizer": str(TOKENIZER), "template": "chatml", "max_length": MAX_LENGTH}
        cfg.write_text(json.dumps({"sources": paths, "recipe": rec}))
        args = ["preprocess", str(cfg), "--out", str(work / "cache"), "--workers", "2"]
        proc = subprocess.run(
            [*CLI, *args, "--json", "--quiet"], capture_output=True, text=True, check=False
        )
        if proc.returncode:
            raise RuntimeError(proc.stderr[-2000:])
        out["records"] = json.loads(proc.stdout)["samples"]
    elif step.startswith(("plan_", "mix_")) or step == "epoch_ids":
        assert lengths_npy is not None
        lens = np.load(lengths_npy, mmap_mode="r")
        big = len(lens) > 50_000_000
        kind = "packed" if step == "epoch_ids" else step.split("_", 1)[1]
        plan_of = planner(kind, lens, big)
        if step.startswith("mix_"):
            plan_of = mixture_of(plan_of, lens)
        import tracemalloc

        if step == "epoch_ids":
            plan = plan_of.build(len(lens), epoch=0, world_size=WORLD)
            t0 = time.perf_counter()
            out["batches"] = plan.num_batches
            out["ids"] = sum(len(plan.batch(0, k)) for k in range(plan.num_batches))
        else:
            _ = int(np.count_nonzero(lens >= 0))  # the lengths' pages, as a loader has them
            base = peak_rss_mb()
            # timed on its own: tracing every allocation slows a build by 20-75% (measured)
            c0, t0 = time.process_time(), time.perf_counter()
            plan = plan_of.build(len(lens), epoch=0, world_size=WORLD)
            out["seconds"] = round(time.perf_counter() - t0, 2)
            out["build_cpu_seconds"] = round(time.process_time() - c0, 2)
            digest = plan_digest(plan)
            del plan
            plan_of = planner(kind, lens, big)  # a new planner: a planner keeps its last plan
            if step.startswith("mix_"):
                plan_of = mixture_of(plan_of, lens)
            # then built again (plans are pure: the same plan) with its allocations traced
            tracemalloc.start()
            t1 = time.perf_counter()
            plan = plan_of.build(len(lens), epoch=0, world_size=WORLD)
            out["traced_seconds"] = round(time.perf_counter() - t1, 2)
            out["numpy_peak_mb"] = round(tracemalloc.get_traced_memory()[1] / 2**20, 1)
            out["held_mb"] = round(tracemalloc.get_traced_memory()[0] / 2**20, 1)
            tracemalloc.stop()
            assert plan_digest(plan) == digest, "the second build made another plan"
            out["rss_before_mb"] = base
            from chute.plan.efficiency import padding_report

            if len(lens) <= 10_000_000:
                out["efficiency"] = round(padding_report(plan, lens).efficiency, 4)
            out["batches"] = plan.num_batches
            out["rows"] = plan.stats.get("rows")
            out["bound"] = plan.stats.get("bound")
            out["cpu_seconds"] = round(time.process_time(), 2)
    else:
        raise SystemExit(f"unknown step {step!r}")
    out.setdefault("seconds", round(time.perf_counter() - t0, 2))
    out["peak_rss_mb"] = peak_rss_mb()
    out["workers_peak_rss_mb"] = children_peak_mb()
    out["process_cpu_seconds"] = process_cpu_seconds()
    return out


def drop_page_cache() -> bool:
    """Write back and drop the kernel's clean pages (root on Linux); whether it happened."""
    os.sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    except OSError:
        return False
    return True


def plan_digest(plan: Any) -> str:
    """A digest of rank 0's first and last batches (enough to tell two builds apart)."""
    import hashlib

    h = hashlib.sha256(str(plan.num_batches).encode())
    for k in sorted({0, plan.num_batches // 2, plan.num_batches - 1}):
        h.update(np.asarray(plan.batch(0, k), dtype=np.int64).tobytes())
    return h.hexdigest()[:16]


def spawn(step: str, paths: list[Path], n: int, lengths_npy: Path | None, cache: Path) -> dict:
    env = {**os.environ, "CHUTE_CACHE_DIR": str(cache), "PYTHONHASHSEED": "0"}
    if lengths_npy is not None:
        env["BENCH_LENGTHS_OUT"] = str(lengths_npy)
    cmd = [sys.executable, __file__, "--step", step, "--n", str(n), "--paths", *map(str, paths)]
    if lengths_npy is not None:
        cmd += ["--lengths", str(lengths_npy)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if proc.returncode:
        return {"error": proc.stderr[-1500:], "seconds": round(time.perf_counter() - t0, 1)}
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["process_seconds"] = round(time.perf_counter() - t0, 2)
    return result


# -- the driver ------------------------------------------------------------------------------


def growth(results: dict[str, dict[str, Any]], sizes: list[int]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for a, b in itertools.pairwise(sizes):
        for step in STEPS:
            x, y = results.get(str(a), {}).get(step), results.get(str(b), {}).get(step)
            if not x or not y or "error" in x or "error" in y or not x.get("seconds"):
                continue
            out.setdefault(step, {})[f"{a}->{b}"] = {
                "time": round(y["seconds"] / max(x["seconds"], 1e-3), 2),
                **(
                    {
                        "cpu": round(
                            y["process_cpu_seconds"] / max(x["process_cpu_seconds"], 1e-3), 2
                        )
                    }
                    if "process_cpu_seconds" in x and "process_cpu_seconds" in y
                    else {}
                ),
                "peak_rss": round(y["peak_rss_mb"] / x["peak_rss_mb"], 2),
            }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", default="100000,1000000", help="sizes, comma separated")
    ap.add_argument("--steps", default=",".join(STEPS), help="which steps")
    ap.add_argument("--plan-samples", type=float, default=1e8, help="lengths-only plan size")
    ap.add_argument("--dir", help="where the records go (default: a temp dir)")
    ap.add_argument("--quick", action="store_true", help="20k and 100k records, 1M lengths")
    ap.add_argument("--name", default="scale")
    ap.add_argument(
        "--synthetic-lengths",
        action="store_true",
        help="plan steps without the lengths step: lognormal lengths (clipped to max_length)",
    )
    ap.add_argument(
        "--drop-caches",
        action="store_true",
        help="empty the page cache before each step (root on Linux): reads come from the disk",
    )
    ap.add_argument("--step", help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--paths", nargs="*", help=argparse.SUPPRESS)
    ap.add_argument("--lengths", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.step:  # a child: one step, one JSON line
        print(json.dumps(run_step(args.step, args.paths or [], args.n, args.lengths)))
        return
    sizes = [20_000, 100_000] if args.quick else [int(float(x)) for x in args.records.split(",")]
    steps = [s for s in args.steps.split(",") if s]
    big = int(1e6 if args.quick else args.plan_samples)
    root = Path(args.dir or tempfile.mkdtemp(prefix="bench-scale-"))
    root.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"records": {}, "plans_lengths_only": {}}
    for n in sizes:
        lengths_npy = root / f"lengths_{n}.npy"
        # plan steps over synthetic lengths read no records: write none (10M: 1.4 GB)
        lengths_only = args.synthetic_lengths and all(
            s.startswith(("plan_", "mix_")) or s == "epoch_ids" for s in steps
        )
        paths = [] if lengths_only else write_records(root, n)
        per: dict[str, Any] = {}
        for step in steps:
            needs_lengths = step.startswith(("plan_", "mix_")) or step == "epoch_ids"
            if needs_lengths and not lengths_npy.is_file() and args.synthetic_lengths:
                write_lognormal(lengths_npy, n, clip=MAX_LENGTH)
                per["lengths_used"] = "lognormal (--synthetic-lengths), not tokenized"
            if needs_lengths and not lengths_npy.is_file():
                per[step] = {"skipped": "needs the lengths step first"}
                continue
            cache = Path(tempfile.mkdtemp(prefix=f"cache-{step}-", dir=root))
            dropped = drop_page_cache() if args.drop_caches else False
            per[step] = spawn(step, paths, n, lengths_npy, cache)
            per[step]["page_cache"] = "dropped before the step" if dropped else "as left"
            print(n, step, json.dumps(per[step])[:300], flush=True)
            subprocess.run(["rm", "-rf", str(cache)], check=False)
        results["records"][str(n)] = per
    results["growth"] = growth(results["records"], sizes)
    if big and any(s.startswith(("plan_", "mix_")) for s in steps):
        lens_path = root / f"lognormal_{big}.npy"
        write_lognormal(lens_path, big)
        kinds = [s.split("_", 1)[1] for s in steps if s.startswith("plan_")]
        kinds += [s for s in steps if s.startswith("mix_")]
        for kind in kinds:
            cache = Path(tempfile.mkdtemp(prefix="cache-big-", dir=root))
            step = kind if kind.startswith("mix_") else f"plan_{kind}"
            got = spawn(step, [], big, lens_path, cache)
            results["plans_lengths_only"][kind] = {"samples": big, **got}
            print(big, kind, json.dumps(got)[:300], flush=True)
    results["load_average"] = os.getloadavg()
    results["command"] = " ".join(["benchmarks/bench_scale.py", *sys.argv[1:]])
    print("saved", save(args.name, results))


if __name__ == "__main__":
    main()

"""How ``chute preprocess`` scales with ``--workers`` on one machine, and what the machine allows.

Usage::

    .venv/bin/python benchmarks/bench_preprocess_workers.py --records 1000000 --workers 16,8,1
    .venv/bin/python benchmarks/bench_preprocess_workers.py --quick      # 20k records, 2 and 1

Records are ``bench_scale``'s (alpaca-derived JSONL, two files), the recipe its own (Qwen3
tokenizer, ``chatml``, ``max_length`` 2,048). A first run (``--workers`` the largest) fills
the chute cache (source index, compiled tokenizer tables; over the ``--dir`` of an earlier run
the cache is warm already, and the results say so); then each worker count runs as a fresh
``chute preprocess ... --json`` process over that warm cache into an output folder deleted
(and synced) before the clock starts, as a user's second run would; with ``--chunk-sizes``
each worker count runs once per ``cache.chunk_size`` given, alternating. Each run records
its wall time seen from outside, the ``seconds`` preprocess reports for itself, and the CPU
seconds of the process tree (``bench_scale.process_cpu_seconds``): CPU per record that grows with the
workers is contention (shared cores, memory, clock), not a serial part. Before the first run,
every package a ``chute preprocess`` imports is compiled to ``.pyc`` (``compile_imports``), so
that a source tree or wheels installed with ``--no-compile`` cost what an installed chute costs;
``--no-compile`` skips that.

**The machine's own ceiling**: ``--ceiling`` runs N copies of a fixed CPU-bound job at once
(pure Python, then Qwen3's tokenizer through ``tokenizers`` on alpaca text), each in its own
process with nothing shared, for N in the worker counts: N copies' throughput over one
copy's is the most any N-process program can scale there (hyper-threads share a core, a
busy package lowers its clock). ``lscpu``'s topology is recorded beside it.

Results: ``benchmarks/results/<name>.json`` (default ``preprocess_workers``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import save
from bench_scale import MAX_LENGTH, TOKENIZER, process_cpu_seconds, write_records

# As the ``chute`` console script runs: its name makes ``main`` end the process without the
# interpreter's teardown (``chute.cli.main``); under a plain ``python -c`` each run also paid
# that teardown, which users of the ``chute`` program never do.
CLI = [
    sys.executable,
    "-c",
    "import sys; sys.argv[0] = 'chute'; from chute.cli import main; sys.exit(main())",
]


def run_preprocess(config: Path, out: Path, workers: int) -> dict[str, Any]:
    """One ``chute preprocess`` as its own process; the output folder is gone before it."""
    shutil.rmtree(out, ignore_errors=True)
    os.sync()  # the previous run's pages written back before this one's clock
    cpu0, t0 = process_cpu_seconds(), time.perf_counter()
    args = ["preprocess", str(config), "--out", str(out), "--workers", str(workers)]
    proc = subprocess.run([*CLI, *args, "--json", "--quiet"], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode:
        raise RuntimeError(proc.stderr[-2000:])
    report = json.loads(proc.stdout)
    return {
        "workers": workers,
        "wall_seconds": round(wall, 2),
        "preprocess_seconds": report.get("seconds"),
        "program_seconds": round(wall - (report.get("seconds") or 0.0), 2),
        "cpu_seconds": round(process_cpu_seconds() - cpu0, 1),
        "samples": report.get("samples"),
        "chunks": report.get("chunks"),
        "records_per_s": round((report.get("samples", 0) + report.get("rejected", 0)) / wall),
    }


# Lists the top-level packages a small ``chute preprocess`` imports (run in a fresh process).
IMPORTED_PACKAGES = r"""
import json, sys, sysconfig
from chute.cli import app
try:
    app(sys.argv[1:])
except SystemExit:
    pass
folders = set()
for module in list(sys.modules.values()):
    path = getattr(module, "__file__", None) or ""
    top = (getattr(module, "__name__", "") or "").split(".")[0]
    if path.endswith(".py") and not path.startswith(sysconfig.get_paths()["stdlib"]):
        root = sys.modules.get(top)
        folder = getattr(root, "__path__", None)
        folders.add(list(folder)[0] if folder else path)
print(json.dumps(sorted(folders)))
"""


def compile_imports(root: Path, config: dict[str, Any]) -> dict[str, Any]:
    """Compile every package a ``chute preprocess`` imports, as ``pip install`` would have.

    A chute run from a source tree (``PYTHONPATH=src``) or wheels installed with
    ``--no-compile`` have no ``.pyc`` files; where ``PYTHONDONTWRITEBYTECODE`` is set, every
    process then compiles each module it imports (about 0.5 s of a run for chute's alone on
    2 cores, docs/benchmarks.md), which an installed chute never pays and which would count
    in the program's fixed cost and the efficiency. A small run lists the packages; they are
    compiled once, here, in parallel; a folder that cannot be written is counted, not fatal.
    """
    import compileall

    small = root / "compile-probe.jsonl"
    with open(config["sources"][0], "rb") as f:
        small.write_bytes(b"".join(line for _, line in zip(range(200), f, strict=False)))
    probe = root / "compile-probe.json"
    probe.write_text(json.dumps({**config, "sources": [str(small)], "cache": {}}))
    out = root / "compile-probe-out"
    shutil.rmtree(out, ignore_errors=True)
    args = ["preprocess", str(probe), "--out", str(out), "--workers", "1", "--quiet"]
    proc = subprocess.run(
        [sys.executable, "-c", IMPORTED_PACKAGES, *args], capture_output=True, text=True
    )
    shutil.rmtree(out, ignore_errors=True)
    if proc.returncode:
        raise RuntimeError(proc.stderr[-2000:])
    folders = json.loads(proc.stdout.strip().splitlines()[-1])
    failed = [
        folder
        for folder in folders
        if not (
            compileall.compile_dir(folder, quiet=2, workers=0)
            if os.path.isdir(folder)
            else compileall.compile_file(folder, quiet=2)
        )
    ]
    return {
        "PYTHONDONTWRITEBYTECODE": os.environ.get("PYTHONDONTWRITEBYTECODE", ""),
        "packages": len(folders),
        "not_compiled": failed,
    }


CEILING_JOB = r"""
import sys, time
kind, n = sys.argv[1], int(sys.argv[2])
if kind == "python":
    t0 = time.perf_counter()
    total = 0
    for i in range(n):
        total += i * i % 7
else:
    import orjson
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(sys.argv[3])
    rows = orjson.loads(open(sys.argv[4], "rb").read())
    texts = [r["instruction"] + r["input"] + r["output"] for r in rows]
    tok.encode(texts[0])
    t0 = time.perf_counter()
    for i in range(n):
        tok.encode(texts[i % len(texts)])
print(time.perf_counter() - t0)
"""


def ceiling(counts: list[int]) -> dict[str, Any]:
    """N copies of one CPU-bound job at once: their throughput over one copy's."""
    from _common import SHARED_DATA

    alpaca = SHARED_DATA / "llama-factory/alpaca_en_demo.json"
    jobs = {"python": ["python", "10000000"], "tokenizer": ["tok", "4000"]}
    out: dict[str, Any] = {}
    for name, argv in jobs.items():
        rows: dict[str, Any] = {}
        for n in sorted(set(counts)):
            cmd = [sys.executable, "-c", CEILING_JOB, *argv, str(TOKENIZER), str(alpaca)]
            procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) for _ in range(n)]
            times = [float(p.communicate()[0]) for p in procs]
            rows[str(n)] = {"seconds_mean": round(sum(times) / n, 3), "seconds_max": max(times)}
        one = rows["1"]["seconds_mean"] if "1" in rows else None
        for copies, row in rows.items():
            if one:
                row["throughput_vs_1"] = round(int(copies) * one / row["seconds_mean"], 2)
                row["efficiency"] = round(one / row["seconds_mean"], 2)
        out[name] = rows
    return out


def topology() -> dict[str, Any]:
    try:
        text = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    except OSError:
        return {}
    keep = ("CPU(s)", "Thread(s) per core", "Core(s) per socket", "Socket(s)", "Model name")
    rows = (line.split(":", 1) for line in text.splitlines() if ":" in line)
    return {k.strip(): v.strip() for k, v in rows if k.strip() in keep}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--workers", default="16,8,1", help="worker counts, in the order run")
    ap.add_argument("--repeat", default="", help="worker counts run a second time at the end")
    ap.add_argument(
        "--chunk-sizes",
        default="auto",
        help="cache.chunk_size values, comma separated (auto: the default rule); every worker "
        "count runs with each, alternating",
    )
    ap.add_argument("--ceiling", action="store_true", help="also N copies of a CPU-bound job")
    ap.add_argument("--dir", help="where records, cache and outputs go (default: a temp dir)")
    ap.add_argument("--deadline", type=float, default=0, help="skip runs after this many s")
    ap.add_argument("--quick", action="store_true", help="20k records, workers 2 and 1")
    ap.add_argument(
        "--no-compile",
        action="store_true",
        help="leave the imported packages as they are (each run may compile them)",
    )
    ap.add_argument("--name", default="preprocess_workers")
    args = ap.parse_args()
    if args.quick:
        args.records, args.workers = 20_000, "2,1"
    counts = [int(w) for w in args.workers.split(",")]
    again = [int(w) for w in args.repeat.split(",") if w]
    start = time.perf_counter()
    root = Path(args.dir or tempfile.mkdtemp(prefix="pre-workers-"))
    root.mkdir(parents=True, exist_ok=True)
    os.environ["CHUTE_CACHE_DIR"] = str(root / "chute-cache")
    paths = write_records(root, args.records)
    recipe = {"tokenizer": str(TOKENIZER), "template": "chatml", "max_length": MAX_LENGTH}
    configs: dict[str, Path] = {}
    for size in args.chunk_sizes.split(","):
        configs[size] = root / f"config-{size}.json"
        cache = {} if size == "auto" else {"chunk_size": int(size)}
        body = {"sources": [str(p) for p in paths], "recipe": recipe, "cache": cache}
        configs[size].write_text(json.dumps(body))
    first_config = next(iter(configs.values()))
    result: dict[str, Any] = {"records": args.records, "topology": topology(), "runs": []}
    if not args.no_compile:
        base = {"sources": [str(p) for p in paths], "recipe": recipe}
        result["compiled"] = compile_imports(root, base)
    if args.ceiling:
        result["ceiling"] = ceiling(counts)
        save(args.name, result)
    cold = not (root / "chute-cache").exists()
    result["first_run"] = run_preprocess(first_config, root / "out", max(counts))
    result["first_run"]["chute_cache"] = "empty" if cold else "warm"
    save(args.name, result)
    for workers in counts + again:
        if args.deadline and time.perf_counter() - start > args.deadline:
            result.setdefault("skipped", []).append(workers)
            continue
        for size, config in configs.items():
            run = run_preprocess(config, root / "out", workers)
            result["runs"].append({"chunk_size": size, **run})
        one = [r for r in result["runs"] if r["workers"] == 1]
        if one:
            wall = min(r["wall_seconds"] for r in one)
            inner = min(r["preprocess_seconds"] for r in one)
            for r in result["runs"]:
                r["speedup_vs_1"] = round(wall / r["wall_seconds"], 2)
                r["efficiency"] = round(wall / r["wall_seconds"] / r["workers"], 2)
                # the same inside preprocess(): without the program's start and imports
                r["inner_efficiency"] = round(inner / r["preprocess_seconds"] / r["workers"], 2)
        save(args.name, result)


if __name__ == "__main__":
    main()

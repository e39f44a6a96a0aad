"""The fixed cost of one ``chute preprocess``, step by step, from the process's start to its exit.

A small input (``--records``, default 1,000, cut into two chunks so the pool of 2 workers
starts) keeps the chunks from hiding what every run pays whatever its size: starting Python,
importing chute, the config, the source index, loading the tokenizer (parsing
``tokenizer.json``, loading or compiling the tiktoken tables, the checks against
``tokenizers``), the fingerprint, the claim on the output directory, starting the pool, and
after the last chunk the finalize step and the exit.

Each run is a fresh process: ``chute preprocess`` run by its own entry point (``chute.cli.main``,
``sys.argv[0] == "chute"``, so it exits as the program does), with the steps below wrapped to
write a timestamp when they start and end (the wrappers are installed before the command runs;
workers are forked, so theirs are too). ``--runs`` runs go back to back; the first one with
``--cold`` finds an empty chute cache (no source index, no compiled tables), the others a
warm one. Usage::

    .venv/bin/python benchmarks/bench_preprocess_fixed.py --runs 3 --cold --name fixed_after

``--src DIR`` runs another checkout's ``src`` (e.g. ``git archive`` of ``main`` in ``/tmp``)
with the same script, for before/after in one session; ``DIR`` may be a ``PYTHONPATH`` of
several folders (``/tmp/typer-0.29:/tmp/before/src``: another version of a dependency first). ``--vs DIR --pairs N`` runs both in one
invocation, in pairs: each pair one warm run of ``DIR``'s ``src`` and one of this tree's (or
``--src``), the order swapped every pair, so a machine's drift hits both sides alike; the
ratios are taken per pair. Results: ``benchmarks/results/NAME.json`` and a table on stdout
(milliseconds from the process's start).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import save
from bench_scale import MAX_LENGTH, TOKENIZER, write_records

# (module, attribute, step): functions timed where ``preprocess`` looks them up. A step
# missing in a checkout (the code before or after a change) is skipped, not an error.
WRAPPED = (
    ("chute.cache.build", "preprocess", "preprocess (all of it)"),
    ("chute.cache.build", "load_config", "config"),
    ("chute.cache.config.RecipeConfig", "build", "recipe build (tokenizer, template)"),
    ("chute.tokenize.hf.HFTokenizer", "from_path", "tokenizer load"),
    ("chute.tokenize.hf", "_parse", "tokenizer.json parsed by tokenizers"),
    ("chute.tokenize.engine", "file_sha256", "tokenizer.json hashed"),
    ("chute.tokenize.engine", "_load", "compiled tables loaded"),
    ("chute.tokenize.engine", "_compile", "tables compiled and checked"),
    ("chute.tokenize.engine", "check_probes", "probes against tokenizers"),
    ("chute.cache.build", "make_stages", "stages"),
    ("chute.cache.build", "open_source", "source index"),
    ("chute.cache.build", "preflight", "preflight (first records)"),
    ("chute.cache.build", "_hashed_sources", "sources fingerprint"),
    ("chute.recipe.recipe.Recipe", "fingerprint", "recipe fingerprint"),
    ("chute.cache.build", "prepare_dir", "prepare --out"),
    ("chute.cache.build", "establish", "claim"),
    ("chute.cache.build", "committed_records", "committed chunks"),
    ("chute.cache.build", "make_engine", "engine"),
    ("chute.cache.engines.local", "run_chunks", "chunks (pool)"),
    ("chute.cache.engines.local", "process_pool", "pool created"),
    ("chute.cache.build", "keep_config", "config.yaml kept"),
    ("chute.cache.build", "finish", "finalize"),
)
WORKER = ("chute.cache.engines.local", "run_chunk")

CHILD = r"""
import sys, time, json, os
T_START = time.time()
events = open(sys.argv[1], "a", buffering=1)
def note(name, t0, t1):
    events.write(json.dumps({"step": name, "t0": t0, "t1": t1, "pid": os.getpid()}) + "\n")
note("python started", T_START, T_START)
t0 = time.time()
import chute.cli
note("import chute.cli", t0, time.time())
import importlib, functools
def wrap(owner, attr, name):
    fn = owner.__dict__[attr]
    kind = type(fn)
    inner = fn.__func__ if kind in (classmethod, staticmethod) else fn
    @functools.wraps(inner)
    def timed(*a, **k):
        t0 = time.time()
        try:
            return inner(*a, **k)
        finally:
            note(name, t0, time.time())
    setattr(owner, attr, kind(timed) if kind in (classmethod, staticmethod) else timed)
def owner_of(path):
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for p in parts[i:]:
            obj = getattr(obj, p)
        return obj
WRAPPED, WORKER = json.loads(sys.argv[2])
for mod, attr, name in WRAPPED:
    owner = owner_of(mod)
    if attr in getattr(owner, "__dict__", {}):
        wrap(owner, attr, name)
wrap(owner_of(WORKER[0]), WORKER[1], "chunk (in a worker)")
sys.argv = ["chute", *sys.argv[3:]]
from chute.cli import main
main()
"""


def run_once(cfg: Path, out: Path, log: Path, src: str | None, workers: int) -> dict[str, Any]:
    """One ``chute preprocess`` in a fresh process; its steps as ``(name, start, end)`` ms."""
    env = dict(os.environ)
    if src:
        env["PYTHONPATH"] = src
    log.unlink(missing_ok=True)
    args = ["preprocess", str(cfg), "--out", str(out), "--workers", str(workers), "--quiet"]
    spec = json.dumps([WRAPPED, WORKER])
    t0 = time.time()
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(log), spec, *args],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    t_exit = time.time()
    if proc.returncode != 0:
        raise SystemExit(f"preprocess failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    main_pid = rows[0]["pid"]
    steps: list[tuple[str, float, float]] = []
    chunks = [r for r in rows if r["pid"] != main_pid or r["step"] == "chunk (in a worker)"]
    for r in rows:
        if r in chunks:
            continue
        steps.append((r["step"], ms(r["t0"] - t0), ms(r["t1"] - t0)))
    first = min((r["t0"] for r in chunks), default=t_exit)
    last = max((r["t1"] for r in chunks), default=t0)
    whole = next(r for r in rows if r["step"] == "preprocess (all of it)")
    return {
        "steps": sorted(steps, key=lambda s: s[1]),
        "chunks": [(ms(r["t0"] - t0), ms(r["t1"] - t0), r["pid"]) for r in chunks],
        "start_to_first_chunk_ms": ms(first - t0),
        "last_chunk_to_exit_ms": ms(t_exit - last),
        "fixed_ms": ms(first - t0 + t_exit - last),
        "total_ms": ms(t_exit - t0),
        # the library's share (``preprocess()`` called to returned, less its chunks) and the
        # program's (Python, imports and the CLI's argument parsing before it; the exit after)
        "library_fixed_ms": ms(first - whole["t0"] + whole["t1"] - last),
        "program_ms": ms(whole["t0"] - t0 + t_exit - whole["t1"]),
    }


def ms(seconds: float) -> float:
    return round(1000 * seconds, 1)


def show(label: str, run: dict[str, Any]) -> None:
    print(
        f"\n== {label}: start -> first chunk {run['start_to_first_chunk_ms']:.0f} ms, last "
        f"chunk -> exit {run['last_chunk_to_exit_ms']:.0f} ms, fixed {run['fixed_ms']:.0f} "
        f"ms (whole run {run['total_ms']:.0f} ms); of the fixed cost, preprocess() itself "
        f"{run['library_fixed_ms']:.0f} ms, the program around it {run['program_ms']:.0f} ms"
    )
    for name, a, b in run["steps"]:
        print(f"  {a:8.0f} {b:8.0f}  {b - a:7.0f} ms  {name}")
    for a, b, pid in run["chunks"]:
        print(f"  {a:8.0f} {b:8.0f}  {b - a:7.0f} ms  chunk in worker {pid}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=1000)
    ap.add_argument("--chunk-size", type=int, default=500, help="records per chunk")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--cold", action="store_true", help="the first run on an empty chute cache")
    ap.add_argument("--src", help="a checkout's src folder to run instead of this one's")
    ap.add_argument("--dir", help="work folder (default: a temp folder)")
    ap.add_argument("--name", default="preprocess_fixed", help="the results file's name")
    ap.add_argument("--vs", help="another checkout's src folder: warm runs of both, in pairs")
    ap.add_argument("--pairs", type=int, default=6, help="pairs of runs with --vs")
    args = ap.parse_args()
    root = Path(args.dir or tempfile.mkdtemp(prefix="fixed-"))
    root.mkdir(parents=True, exist_ok=True)
    paths = write_records(root, args.records)
    cfg = root / "preprocess.json"
    recipe = {"tokenizer": str(TOKENIZER), "template": "chatml", "max_length": MAX_LENGTH}
    sources = [str(p) for p in paths]
    cfg.write_text(
        json.dumps({"sources": sources, "recipe": recipe, "cache": {"chunk_size": args.chunk_size}})
    )
    chute_cache = root / "chute-cache"
    os.environ["CHUTE_CACHE_DIR"] = str(chute_cache)
    for tree in (args.src, args.vs, str(Path(__file__).resolve().parents[1] / "src")):
        # every tree compiled first: with PYTHONDONTWRITEBYTECODE set, a tree never imported
        # before would compile each module in every run and look 0.1-0.3 s slower
        # (a tree may be a PYTHONPATH of several folders, e.g. another typer before chute's src)
        for folder in (tree or "").split(os.pathsep):
            if folder:
                subprocess.run([sys.executable, "-m", "compileall", "-q", folder], check=True)
    if args.vs:
        compare(args, cfg, root)
        return
    runs = []
    for i in range(args.runs):
        if i == 0 and args.cold:
            subprocess.run(["rm", "-rf", str(chute_cache)], check=True)
        out = root / "out"
        subprocess.run(["rm", "-rf", str(out)], check=True)  # not --overwrite: no extra step
        run = run_once(cfg, out, root / "events.jsonl", args.src, args.workers)
        run["cold"] = i == 0 and args.cold
        show(f"run {i + 1}{' (empty chute cache)' if run['cold'] else ''}", run)
        runs.append(run)
    save_result(args, runs=runs)


def compare(args: argparse.Namespace, cfg: Path, root: Path) -> None:
    """``--vs``: warm runs of two checkouts in pairs, the order swapped every pair."""
    sides = {"before": args.vs, "after": args.src}
    for src in sides.values():  # fill the chute cache (index, tables) and warm the files
        run_once(cfg, root / "out", root / "events.jsonl", src, args.workers)
    keys = ("program_ms", "library_fixed_ms", "fixed_ms", "total_ms")
    pairs = []
    for i in range(args.pairs):
        pair: dict[str, Any] = {}
        for side in ("before", "after") if i % 2 == 0 else ("after", "before"):
            subprocess.run(["rm", "-rf", str(root / "out")], check=True)
            run = run_once(cfg, root / "out", root / "events.jsonl", sides[side], args.workers)
            pair[side] = {k: run[k] for k in keys}
        pair["after_over_before"] = {
            k: round(pair["after"][k] / pair["before"][k], 3) for k in keys
        }
        print(
            f"pair {i + 1}: "
            + ", ".join(f"{k} {pair['before'][k]:.0f} -> {pair['after'][k]:.0f}" for k in keys)
        )
        pairs.append(pair)
    summary = {
        side: {k: round(statistics.median(p[side][k] for p in pairs), 3) for k in keys}
        for side in ("before", "after", "after_over_before")
    }
    print("median:", json.dumps(summary))
    save_result(args, median=summary, pairs=pairs)


def save_result(args: argparse.Namespace, **figures: Any) -> None:
    """The results file: the command, the input's size, the machine's load, then ``figures``."""
    result = {
        "command": " ".join(["benchmarks/bench_preprocess_fixed.py", *sys.argv[1:]]),
        "records": args.records,
        "chunk_size": args.chunk_size,
        "workers": args.workers,
        "load_average": os.getloadavg(),
        **figures,
    }
    print("saved", save(args.name, result))


if __name__ == "__main__":
    main()

"""chute against the loaders people use today, on the same data, tokenizer, template and cores.

Usage:
    python benchmarks/bench_loaders.py                  # everything -> results/loaders.json
    python benchmarks/bench_loaders.py --quick          # 5,001 records, 1 repeat: a smoke test
    python benchmarks/bench_loaders.py --tools chute,naive --repeats 5 --skip-audit

Data: real instruction data from ../shared/data (LLaMA-Factory's alpaca_en_demo and
alpaca_zh_demo, FastChat's dummy_conversation: 2,499 records) normalised to ``messages`` JSONL
with a ``sample_id`` per line, repeated to ``--records`` (default 25,001: an odd count, as real datasets have, so
remainder handling shows). Tokenizer: Qwen3's
``tokenizer.json``; template: Qwen3's chat format (chute's built-in ``qwen3``; the others run
``_loaders_common.tokenize_messages``, checked to give the same ids and labels on every base
record). Loaders: ``_loaders_tools.py`` (each tool's code, as its users write it).

Two measurements, each in fresh processes (``_loaders_run.py``):

* **throughput**: one rank (world size 1), ``--workers`` DataLoader workers, batch size
  ``--batch-size``, one whole epoch per run; tools interleaved, ``--repeats`` rounds, medians.
  Time to first batch (loader construction to first batch in hand, imports excluded),
  samples/s and tokens/s after the first batch, CPU time per sample (the process and its
  workers), padding efficiency, peak memory (main RSS; PSS of main + workers).
  Tools that convert the data first also report that step (``prepare``), run once.
* **exact-once audit**: ``--world-size`` ranks (default 2) x ``--workers`` workers started
  together as torchrun would (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
  MASTER_PORT; a gloo process group), one epoch each, every batch's sample ids recorded; then
  duplicates, missing ids and batch counts per rank.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import save
from _loaders_common import WORK, check_same_tokens, write_data
from _loaders_tools import OUTPUTS, TOOLS

RUNNER = Path(__file__).resolve().parent / "_loaders_run.py"


def child_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        HF_HOME=str(WORK / "hf_home"),  # datasets' Arrow cache stays under benchmarks/data
        HF_DATASETS_OFFLINE="1",
        HF_HUB_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",  # as DataLoader workers force it anyway
        PYTHONWARNINGS="ignore",
        **extra,
    )
    return env


def run_tool(
    mode: str, tool: str, args: argparse.Namespace, data: Path, *, ids: bool = False, env=None
) -> Any:
    """Start ``_loaders_run.py`` for one tool on ``data``; returns the process and its files."""
    out = WORK / "runs" / f"{mode}-{tool}-{data.stem}-{env.get('RANK', '0') if env else '0'}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    work = data.parent / data.stem  # each data file has its own converted copies
    cmd = [sys.executable, str(RUNNER), mode, tool, "--data", str(data), "--work", str(work)]
    cmd += ["--out", str(out), "--batch-size", str(args.batch_size), "--workers", str(args.workers)]
    cmd += ["--ids"] if ids else []
    log = open(out.with_suffix(".log"), "w")  # noqa: SIM115 - closed by finish()
    env = dict(env or child_env(), CHUTE_CACHE_DIR=str(work / "chute_cache"))  # index, lengths
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    return proc, out, log


def finish(proc: Any, out: Path, log: Any, timeout: float = 3600) -> dict[str, Any]:
    try:
        rc = proc.wait(timeout=timeout)
    finally:
        log.close()
    if rc != 0 or not out.exists():
        tail = out.with_suffix(".log").read_text()[-3000:]
        raise RuntimeError(f"{out.stem} failed (exit {rc}):\n{tail}")
    return json.loads(out.read_text())


def prepare(tools: list[str], args: argparse.Namespace, data: Path) -> dict[str, Any]:
    """Run each offline tool's conversion of ``data`` once, from scratch, timed."""
    results = {}
    for name in tools:
        if not TOOLS[name].offline:
            continue
        shutil.rmtree(data.parent / data.stem / OUTPUTS[name], ignore_errors=True)
        if name == "xtuner":  # datasets caches load_dataset and map results: start cold
            shutil.rmtree(WORK / "hf_home", ignore_errors=True)
        print(f"prepare {name} ({data.name}) ...", flush=True)
        results[name] = finish(*run_tool("prepare", name, args, data))
        print(f"  {results[name]['prepare_s']:.1f} s", flush=True)
    return results


def throughput(tools: list[str], args: argparse.Namespace, data: Path) -> dict[str, Any]:
    timed = [t for t in tools if not TOOLS[t].audit_only]
    runs: dict[str, list[dict[str, Any]]] = {t: [] for t in timed}
    for rep in range(args.repeats):
        order = timed[rep % len(timed) :] + timed[: rep % len(timed)]  # interleave, rotate
        for name in order:
            r = finish(*run_tool("epoch", name, args, data))
            r.pop("mode", None)
            runs[name].append(r)
            rate = r["steady_samples"] / r["steady_s"]
            print(
                f"round {rep + 1}/{args.repeats} {name:>16}: {rate:8,.0f} samples/s, "
                f"first batch {r['first_batch_s']:.2f} s",
                flush=True,
            )
    return {name: summarise(rs) for name, rs in runs.items()}


def summarise(rs: list[dict[str, Any]]) -> dict[str, Any]:
    def med(f: Any) -> float:
        return statistics.median(f(r) for r in rs)

    last = rs[-1]
    return {
        "runs": len(rs),
        "first_batch_s": med(lambda r: r["first_batch_s"]),
        "import_s": med(lambda r: r["import_s"]),
        "samples_per_s": med(lambda r: r["steady_samples"] / r["steady_s"]),
        "samples_per_s_all": [round(r["steady_samples"] / r["steady_s"], 1) for r in rs],
        "tokens_per_s": med(
            lambda r: r["real_tokens"] * (r["steady_samples"] / r["samples"]) / r["steady_s"]
        ),
        "epoch_s": med(lambda r: r["epoch_s"]),
        "cpu_us_per_sample": med(lambda r: 1e6 * r["cpu_s"] / r["samples"]),
        "padding_efficiency": med(lambda r: r["real_tokens"] / r["padded_tokens"]),
        "peak_rss_main_mb": med(lambda r: r["memory"]["peak_rss_main_mb"] or 0.0),
        "peak_total_mb": med(lambda r: r["memory"]["peak_total_mb"] or 0.0),
        "samples": last["samples"],
        "batches": last["batches"],
        "real_tokens": last["real_tokens"],
        "padded_tokens": last["padded_tokens"],
    }


def versions() -> dict[str, str | None]:
    """Installed versions of every compared package (None: not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str | None] = {}
    for dist in ("chute", "torch", "tokenizers", "datasets", "mosaicml-streaming", "litdata"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            out[dist] = None
    return out


def dataset(records: int) -> Path:
    """The messages JSONL of ``records`` lines (written once, then reused)."""
    path = WORK / f"messages_{records}.jsonl"
    if not path.exists():
        write_data(path, records)
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def audit(tools: list[str], args: argparse.Namespace, data: Path, records: int) -> dict[str, Any]:
    """Every tool as ``world_size`` ranks started together; who delivered which sample ids."""
    results = {}
    for name in tools:
        print(
            f"audit {name} ({records:,} records): {args.world_size} ranks x {args.workers} workers",
            flush=True,
        )
        port = str(free_port())
        started = []
        for rank in range(args.world_size):
            env = child_env(
                RANK=str(rank),
                WORLD_SIZE=str(args.world_size),
                LOCAL_RANK=str(rank),
                LOCAL_WORLD_SIZE=str(args.world_size),
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=port,
            )
            started.append(run_tool("epoch", name, args, data, ids=True, env=env))
        ranks = [finish(*s) for s in started]
        results[name] = judge([r["ids"] for r in ranks], records)
        print(
            f"  {json.dumps({k: v for k, v in results[name].items() if k != 'examples'})}",
            flush=True,
        )
    return results


def judge(per_rank: list[list[list[int]]], n: int) -> dict[str, Any]:
    """Exact-once verdict from each rank's batches of sample ids."""
    seen = Counter(i for batches in per_rank for batch in batches for i in batch)
    delivered = sum(seen.values())
    dupes = {i: c for i, c in seen.items() if c > 1}
    missing = n - len([i for i in seen if 0 <= i < n])
    batches = [len(b) for b in per_rank]
    return {
        "delivered": delivered,
        "unique": len(seen),
        "duplicated_ids": len(dupes),
        "extra_deliveries": delivered - len(seen),
        "missing": missing,
        "batches_per_rank": batches,
        "samples_per_rank": [sum(len(x) for x in b) for b in per_rank],
        "equal_batches": len(set(batches)) == 1,
        "exact_once": delivered == n and not dupes and missing == 0,
        "examples": {"duplicated": sorted(dupes)[:5], "max_copies": max(seen.values(), default=0)},
    }


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--records", type=int, default=25_001)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--tools", default=",".join(TOOLS), help="comma-separated: " + ",".join(TOOLS))
    ap.add_argument("--skip-audit", action="store_true")
    ap.add_argument("--skip-throughput", action="store_true")
    ap.add_argument("--quick", action="store_true", help="5,001 records, 1 repeat")
    args = ap.parse_args()
    if args.quick:
        args.records, args.repeats = min(args.records, 5_001), 1
    wanted = [t.strip() for t in args.tools.split(",") if t.strip()]
    unknown = [t for t in wanted if t not in TOOLS]
    if unknown:
        ap.error(f"--tools: unknown {unknown}; choose from {list(TOOLS)}")
    skipped = {t: TOOLS[t].missing() for t in wanted if TOOLS[t].missing()}
    tools = [t for t in wanted if t not in skipped]
    for t, why in skipped.items():
        print(f"skipping {t}: {why}", flush=True)

    data = dataset(args.records)
    # the remainder case: one record more than a multiple of world x workers x batch size
    step = args.world_size * args.workers * args.batch_size
    remainder = step * max(1, args.records // 5 // step) + 1
    t0 = time.perf_counter()
    result: dict[str, Any] = {
        "data": {"file": str(data.relative_to(WORK.parent.parent)), "records": args.records},
        "settings": {
            k: getattr(args, k) for k in ("batch_size", "workers", "world_size", "repeats")
        },
        "tokenization_check": check_same_tokens(),
        "tools": {t: TOOLS[t].label for t in tools},
        "skipped": skipped,
        "versions": versions(),
        "load_average_start": os.getloadavg(),
    }
    print(f"same tokens as chute's recipe: {result['tokenization_check']}", flush=True)
    result["prepare"] = prepare(tools, args, data)
    if not args.skip_throughput:
        result["throughput"] = throughput(tools, args, data)
    if not args.skip_audit:
        result["audit"] = audit(tools, args, data, args.records)
        small = dataset(remainder)
        prepare(tools, args, small)
        result["audit_remainder"] = {"records": remainder, **audit(tools, args, small, remainder)}
    result["wall_s"] = time.perf_counter() - t0
    result["load_average_end"] = os.getloadavg()
    name = "loaders_quick" if args.quick else "loaders"
    save(name, result)
    print(tables(result))
    return 0


def tables(result: dict[str, Any]) -> str:
    """The markdown tables docs/benchmarks.md quotes."""
    lines = []
    tp = result.get("throughput", {})
    if tp:
        ref = tp.get("chute", {}).get("samples_per_s")
        lines += [
            "| loader | prepare s | first batch s | samples/s | chute vs it | tokens/s | CPU us/sample | padding eff | padded tokens / epoch | main RSS MB | total PSS MB |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for name, r in tp.items():
            prep = result["prepare"].get(name, {}).get("prepare_s")
            ratio = f"{ref / r['samples_per_s']:.2f}x" if ref and name != "chute" else ""
            lines.append(
                f"| {result['tools'][name]} | {prep:.1f} |"
                if prep
                else f"| {result['tools'][name]} | |"
            )
            lines[-1] += (
                f" {r['first_batch_s']:.2f} | {r['samples_per_s']:,.0f} | {ratio} | {r['tokens_per_s']:,.0f} |"
                f" {r['cpu_us_per_sample']:,.0f} | {100 * r['padding_efficiency']:.1f}% |"
                f" {r['padded_tokens'] / 1e6:.2f}M |"
                f" {r['peak_rss_main_mb']:,.0f} | {r['peak_total_mb']:,.0f} |"
            )
    for key in ("audit", "audit_remainder"):
        au = dict(result.get(key, {}))
        if not au:
            continue
        records = au.pop("records", result["data"]["records"])
        lines += [
            "",
            f"{records:,} records, {result['settings']['world_size']} ranks x "
            f"{result['settings']['workers']} workers:",
            "",
            "| loader | delivered | unique | duplicated ids | missing | batches per rank | exactly once, equal batches |",
            "|---|---|---|---|---|---|---|",
        ]
        for name, a in au.items():
            lines.append(
                f"| {result['tools'][name]} | {a['delivered']:,} | {a['unique']:,} | {a['duplicated_ids']:,} |"
                f" {a['missing']:,} | {' / '.join(map(str, a['batches_per_rank']))} |"
                f" {'yes' if a['exact_once'] and a['equal_batches'] else 'no'} |"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())

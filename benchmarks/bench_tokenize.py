"""The tiktoken fast path and Jinja skeletons: before and after, on one core and over processes.

Usage: ``.venv/bin/python benchmarks/bench_tokenize.py [--part recipe|loader|scaling|breakdown|all]
[--repeat 4] [--scaling-repeat 12] [--rounds 5] [--quick]`` (results: ``benchmarks/results/tokenize.json``).

Records: LLaMA-Factory's ``alpaca_en_demo.json`` (999 alpaca rows) and FastChat's
``dummy_conversation.json`` (500 ShareGPT rows of 2-6 turns), repeated ``--repeat`` times, held
as parsed records in memory (file reading is not measured). Tokenizers: Qwen3 and Llama 3.2
``tokenizer.json``; templates: the built-in one of each model, and the model's own Jinja
template (Qwen3's ``tokenizer_config.json``, Llama 3.2 Instruct's ``.jinja``).

Parts:

* **recipe** (pinned to one core): ``Recipe.batch`` of chunks of 250 records, *before*
  (``tokenizer_backend="hf"``, and for Jinja the two renders per record chute made before
  skeletons: the template's skeleton lookup is switched off), *after* (the default: tiktoken,
  skeletons) and *after on tokenizers* (``tokenizer_backend="hf"`` with skeletons), against
  tiktoken alone on the very texts the recipe renders
  (``encode_ordinary_batch``, its threads sharing the one core, and ``encode_ordinary`` in a
  loop), and ``tokenizers`` alone (``encode(...).ids``). The runs alternate on every chunk,
  ``--rounds`` times, and the fastest time of each chunk is kept.
* **loader**: an on-the-fly ``Loader(source, recipe, num_workers=2)`` epoch over a JSONL file
  of the same records (built-in template), before and after, alternating, best of ``--rounds``.
* **scaling**: ``Recipe.batch`` (after) over ``--scaling-repeat`` copies (default 12: ~18k
  records, a few seconds per run) in 1 worker process, then split over 2
  (a pool forked once with the recipe loaded, as ``chute preprocess`` and the Loader fork
  theirs), best of ``--rounds``; the ratio of throughputs against the ideal 2; each forked
  worker's memory after its share (RSS, and USS: pages it alone holds), and the RSS of a fresh
  interpreter that loaded the recipe on each engine (what a spawned worker starts from).
* **breakdown** (only with ``--part breakdown``; results ``tokenize_breakdown.json``): where a
  record's time goes on one core: a Jinja render (with and without span plans) against the
  built-in template's, and on ``bench_preprocess.py``'s alpaca data ``Recipe.batch`` against
  tiktoken's own encode of the rendered texts and the rendering alone.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import SHARED_DATA, save
from chute import JsonlSource, Loader, Recipe

TOKENIZERS = {
    "qwen3": ("tokenizers/qwen3/tokenizer.json", "qwen3", "tokenizers/qwen3/tokenizer_config.json"),
    "llama3.2": (
        "tokenizers/llama3.2/tokenizer.json",
        "llama3",
        "tokenizers/llama3.2/meta-llama-Llama-3.2-3B-Instruct.jinja",
    ),
}
DATE = {"date_string": "26 Jul 2024"}


def load_records(repeat: int) -> list[Any]:
    rows: list[Any] = []
    for name in ("llama-factory/alpaca_en_demo.json", "fastchat/dummy_conversation.json"):
        rows.extend(orjson.loads((SHARED_DATA / name).read_bytes()))
    return rows * repeat


def recipes(model: str, jinja: bool) -> tuple[Recipe, Recipe]:
    """``(before, after)`` recipes of one configuration (see the module docstring)."""
    path, builtin, template = TOKENIZERS[model]
    chosen = str(SHARED_DATA / template) if jinja else builtin
    before = Recipe(
        tokenizer=SHARED_DATA / path, template=chosen, template_vars=DATE, tokenizer_backend="hf"
    )
    if jinja:  # as before skeletons: the real rendering and the marker rendering, every record
        before.template._skeleton = lambda *a: None  # type: ignore[attr-defined]
    after = Recipe(tokenizer=SHARED_DATA / path, template=chosen, template_vars=DATE)
    if after.tokenizer.engine != "tiktoken":
        raise SystemExit(f"{model}: no fast path: {after.tokenizer.engine_note}")
    return before, after


def interleaved(
    runs: dict[str, Callable[[int, int], Any]], n: int, rounds: int, chunk: int = 250
) -> dict[str, float]:
    """Seconds per run over ``n`` items: chunks alternate between runs; best per chunk kept."""
    chunks = [(lo, min(n, lo + chunk)) for lo in range(0, n, chunk)]
    best = {name: [float("inf")] * len(chunks) for name in runs}
    for _ in range(rounds):
        for k, (lo, hi) in enumerate(chunks):
            for name, fn in runs.items():
                t0 = time.perf_counter()
                fn(lo, hi)
                best[name][k] = min(best[name][k], time.perf_counter() - t0)
    return {name: sum(times) for name, times in best.items()}


def recipe_part(records: list[Any], rounds: int) -> dict[str, Any]:
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # one core
    out: dict[str, Any] = {}
    for model in TOKENIZERS:
        for jinja in (False, True):
            name = f"{model} {'jinja' if jinja else 'built-in ' + TOKENIZERS[model][1]}"
            out[name] = measure_config(model, jinja, records, rounds)
            print(name, out[name], flush=True)
    for model in TOKENIZERS:
        builtin = out[f"{model} built-in {TOKENIZERS[model][1]}"]
        jinja_run = out[f"{model} jinja"]
        for side in ("before", "after"):
            jinja_run[f"jinja_vs_builtin_{side}"] = round(
                jinja_run["records_per_s"][side] / builtin["records_per_s"][side], 3
            )
    return out


def measure_config(model: str, jinja: bool, records: list[Any], rounds: int) -> dict[str, Any]:
    """One tokenizer and template: before, after, and the tokenizers alone on the same texts."""
    before, after = recipes(model, jinja)
    rendered = [after.render(r) for r in records]
    texts = [r.text for r in rendered]
    encoding = after.tokenizer._fast.encoding  # type: ignore[attr-defined]
    rust = before.tokenizer.rust  # type: ignore[attr-defined]
    tok = after.tokenizer
    path, _, _ = TOKENIZERS[model]
    # the engine alone changed: tokenizers, with skeletons (they are on with either engine)
    after_hf = Recipe(
        tokenizer=SHARED_DATA / path,
        template=after.template,
        template_vars=DATE,
        tokenizer_backend="hf",
    )
    for recipe in (before, after, after_hf):
        recipe.batch(records[:500])  # warm up (skeletons, probes)
    runs: dict[str, Callable[[int, int], Any]] = {
        "before": lambda lo, hi: before.batch(records[lo:hi]),
        "after": lambda lo, hi: after.batch(records[lo:hi]),
        "after_on_tokenizers": lambda lo, hi: after_hf.batch(records[lo:hi]),
        "after_encode_only": lambda lo, hi: [
            tok.encode_spans(r.text, r.spans) for r in rendered[lo:hi]
        ],
        "tiktoken_encode_ordinary_batch": lambda lo, hi: encoding.encode_ordinary_batch(
            texts[lo:hi]
        ),
        "tiktoken_encode_ordinary": lambda lo, hi: [
            encoding.encode_ordinary(t) for t in texts[lo:hi]
        ],
        "tokenizers_encode": lambda lo, hi: [
            rust.encode(t, add_special_tokens=False).ids for t in texts[lo:hi]
        ],
    }
    seconds = interleaved(runs, len(records), rounds)
    tt = seconds["tiktoken_encode_ordinary_batch"]
    return {
        "records_per_s": {name: round(len(records) / s) for name, s in seconds.items()},
        "after_vs_before": round(seconds["before"] / seconds["after"], 2),
        "after_overhead_vs_tiktoken_batch": round(seconds["after"] / tt - 1, 3),
        "after_encode_overhead_vs_tiktoken_batch": round(seconds["after_encode_only"] / tt - 1, 3),
        "after_vs_tiktoken_loop": round(seconds["tiktoken_encode_ordinary"] / seconds["after"], 3),
        "before_vs_tokenizers": round(seconds["tokenizers_encode"] / seconds["before"], 3),
        "after_on_tokenizers_vs_tokenizers": round(
            seconds["tokenizers_encode"] / seconds["after_on_tokenizers"], 3
        ),
        "us_per_record": {k: round(s / len(records) * 1e6, 1) for k, s in seconds.items()},
    }


def loader_part(records: list[Any], rounds: int, workers: int) -> dict[str, Any]:
    folder = Path(tempfile.mkdtemp(prefix="bench-tokenize-"))
    path = folder / "records.jsonl"
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    source = JsonlSource(path)
    out: dict[str, Any] = {}
    for model in TOKENIZERS:
        before, after = recipes(model, jinja=False)
        best = {"before": float("inf"), "after": float("inf")}
        steady = dict(best)
        for _ in range(rounds):
            for name, recipe in (("before", before), ("after", after)):
                loader = Loader(source, recipe, batch_size=16, seed=0, num_workers=workers)
                t0 = time.perf_counter()
                first = None
                samples = 0
                for batch in loader:
                    samples += len(batch["sample_ids"])
                    if first is None:
                        first = time.perf_counter()
                end = time.perf_counter()
                best[name] = min(best[name], end - t0)
                steady[name] = min(steady[name], end - (first or t0))
        out[model] = {
            "samples": samples,
            "samples_per_s": {k: round(samples / v) for k, v in best.items()},
            "samples_per_s_after_first_batch": {k: round(samples / v) for k, v in steady.items()},
            "after_vs_before": round(best["before"] / best["after"], 2),
        }
        print(model, out[model], flush=True)
    return out


_SHARED: dict[str, Any] = {}  # set before the pool forks: workers inherit the loaded recipe


def _share(bounds: tuple[int, int]) -> dict[str, float]:
    import psutil

    recipe, records = _SHARED["recipe"], _SHARED["records"]
    lo, hi = bounds
    t0 = time.perf_counter()
    for k in range(lo, hi, 250):
        recipe.batch(records[k : min(hi, k + 250)])
    seconds = time.perf_counter() - t0
    mem = psutil.Process().memory_full_info()
    return {"seconds": seconds, "rss_mb": mem.rss / 2**20, "uss_mb": mem.uss / 2**20}


def _fresh_memory(model: str, backend: str) -> float:
    """RSS (MiB) of a new interpreter once it has loaded the recipe: a spawned worker's floor."""
    src = str(Path(__file__).resolve().parents[1] / "src")
    tokenizer = str(SHARED_DATA / TOKENIZERS[model][0])
    template = TOKENIZERS[model][1]
    code = "\n".join(
        [
            f"import sys, psutil; sys.path.insert(0, {src!r})",
            "from chute import Recipe",
            f"r = Recipe(tokenizer={tokenizer!r}, template={template!r}, "
            f"tokenizer_backend={backend!r})",
            "r.batch([{'instruction': 'Say hi', 'output': 'Hi!'}])",
            "print(psutil.Process().memory_info().rss / 2**20)",
        ]
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def scaling_part(records: list[Any], rounds: int) -> dict[str, Any]:
    """Recipe.batch over all records on 1 worker, then split over 2 (pool forked once, warm)."""
    ctx = mp.get_context("fork")
    out: dict[str, Any] = {}
    n = len(records)
    for model in TOKENIZERS:
        for jinja in (False, True):
            _, after = recipes(model, jinja)
            after.batch(records[:500])  # skeletons made, probes run: before the fork
            _SHARED.update(recipe=after, records=records)
            best1, best2 = float("inf"), float("inf")
            shares: list[dict[str, float]] = []
            with ctx.Pool(2) as pool:
                pool.map(_share, [(0, 1), (1, 2)], chunksize=1)  # both workers started
                for _ in range(rounds):
                    t0 = time.perf_counter()
                    pool.map(_share, [(0, n)])
                    best1 = min(best1, time.perf_counter() - t0)
                    t0 = time.perf_counter()
                    shares = pool.map(_share, [(0, n // 2), (n // 2, n)], chunksize=1)
                    best2 = min(best2, time.perf_counter() - t0)
            name = f"{model} {'jinja' if jinja else 'built-in'}"
            out[name] = {
                "records": n,
                "records_per_s_1_process": round(n / best1),
                "records_per_s_2_processes": round(n / best2),
                "scaling_2_processes": round(best1 / best2, 2),
                "target_1_7": best1 / best2 >= 1.7,
                "forked_worker_rss_mb": [round(m["rss_mb"]) for m in shares],
                "forked_worker_uss_mb": [round(m["uss_mb"]) for m in shares],
            }
            print(name, out[name], flush=True)
        out[f"{model} fresh process rss_mb"] = {
            backend: round(_fresh_memory(model, backend)) for backend in ("hf", "auto")
        }
        print(model, out[f"{model} fresh process rss_mb"], flush=True)
    return out


def breakdown_part(records: list[Any], rounds: int) -> dict[str, Any]:
    """Where a record's time goes, on one core (microseconds per record, best of ``rounds``).

    *render*: a template's ``render`` of already converted conversations, Qwen3's Jinja
    template (skeletons and span plans; and with span plans switched off) against the built-in
    ``qwen3``. *preprocess data*: the first 10,000 alpaca records of ``bench_preprocess.py``'s
    data (English and Chinese) through ``Recipe.batch`` (ChatML), against tiktoken's
    ``encode_ordinary`` of the same rendered texts and the rendering alone.
    """
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # one core
    from chute.templates import jinja as jinja_module

    def best(fn: Callable[[], Any], n: int) -> float:
        times = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return round(min(times) / n * 1e6, 2)

    _, jinja = recipes("qwen3", True)
    _, builtin = recipes("qwen3", False)
    convs = [jinja.conversation(r) for r in records]
    jt, bt = jinja.template, builtin.template
    for conv in convs:  # skeletons and plans made
        jt.render(conv, jinja._ctx)
    out: dict[str, Any] = {"render_us": {}}
    render = out["render_us"]
    render["qwen3 jinja"] = best(lambda: [jt.render(c, jinja._ctx) for c in convs], len(convs))
    render["qwen3 built-in"] = best(lambda: [bt.render(c, builtin._ctx) for c in convs], len(convs))
    real = jinja_module._by_plan
    jinja_module._by_plan = lambda *a: None  # type: ignore[assignment]
    try:
        render["qwen3 jinja, no span plans"] = best(
            lambda: [jt.render(c, jinja._ctx) for c in convs], len(convs)
        )
    finally:
        jinja_module._by_plan = real  # type: ignore[assignment]

    from bench_preprocess import make_data

    alpaca, _, _ = make_data(100_000)
    with open(alpaca, "rb") as f:
        rows = [orjson.loads(next(f)) for _ in range(10_000)]
    recipe = Recipe(tokenizer=SHARED_DATA / TOKENIZERS["qwen3"][0], template="chatml")
    texts = [recipe.render(r).text for r in rows]
    encoding = recipe.tokenizer._fast.encoding  # type: ignore[attr-defined]
    chunks = [rows[i : i + 250] for i in range(0, len(rows), 250)]
    recipe.batch(rows[:500])
    out["preprocess_data_us"] = {
        "records": len(rows),
        "non_ascii_share": round(sum(not t.isascii() for t in texts) / len(texts), 2),
        "recipe_batch": best(lambda: [recipe.batch(c) for c in chunks], len(rows)),
        "tiktoken_encode_ordinary": best(
            lambda: [encoding.encode_ordinary(t) for t in texts], len(rows)
        ),
        "render": best(lambda: [recipe.render(r) for r in rows], len(rows)),
    }
    print(out, flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--part", default="all", choices=["recipe", "loader", "scaling", "breakdown", "all"]
    )
    ap.add_argument("--repeat", type=int, default=4, help="copies of the 1,499 records")
    ap.add_argument("--scaling-repeat", type=int, default=12, help="copies for the scaling part")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--workers", type=int, default=2, help="Loader workers")
    ap.add_argument("--quick", action="store_true", help="1 copy, 2 rounds (smoke test)")
    args = ap.parse_args()
    if args.quick:
        args.repeat, args.rounds, args.scaling_repeat = 1, 2, 1
    records = load_records(args.repeat)
    load = os.getloadavg()
    result: dict[str, Any] = {
        "data": f"alpaca_en_demo (999) + dummy_conversation (500) x{args.repeat}",
        "load_average_before": [round(x, 2) for x in load],
    }
    parts = ["recipe", "loader", "scaling"] if args.part == "all" else [args.part]
    if "loader" in parts:
        result["loader"] = loader_part(records, max(1, args.rounds // 2), args.workers)
    if "scaling" in parts:
        # long enough that forking and the pool's round trips are a small part of each run
        many = records * max(1, args.scaling_repeat // args.repeat)
        result["scaling"] = scaling_part(many, max(3, args.rounds // 2))
    if args.part == "breakdown":  # pins this process to one core
        result["breakdown"] = breakdown_part(load_records(1), max(5, args.rounds))
    if "recipe" in parts:  # last: it pins this process to one core
        result["recipe"] = recipe_part(records, args.rounds)
    result["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    save("tokenize" if args.part == "all" else f"tokenize_{args.part}", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Padding efficiency of every plan on real instruction data, next to XTuner's sampler; build times.

Usage: ``.venv/bin/python benchmarks/bench_padding.py [--quick] [--tile 52] [--seeds 3]``

Data: the nine text instruction sets of ``../shared/data`` (3,818 records: alpaca, ShareGPT,
tool calls, OpenAI messages; English and Chinese), through ``Recipe(tokenizer=Qwen3,
template="qwen3")``; lengths from ``chute.lengths.lengths_of`` (one parallel pass, cached).
Settings as in the issue: ``max_length`` 2048 (longer samples truncated), batch size 16 per
rank, world size 8. Two datasets:

* **real**: the 3,818 samples as they are (one XTuner mega-batch of 50 global batches holds
  6,400 samples, so here every grouping sorts the whole epoch);
* **tiled**: the same lengths repeated ``--tile`` times (~200k samples: 31 mega-batches), the
  scale where mega-batches matter. Only lengths are tiled; no text is invented.

Plans, one epoch each, averaged over ``--seeds`` seeds: random (fixed-size shuffled batches),
XTuner's LengthGroupedSampler re-implemented from its algorithm (``xtuner_length_grouped.py``;
mega-batches of 50 global batches, and its default multiplier), chute ``grouped``
(``group_size=50``), ``budget`` (``max_tokens = 16 x 2048``) and ``packed`` (best-fit
decreasing, rows of 2048). Efficiency = real tokens / tokens in padded rows.

Build time: 10M lengths drawn from the real distribution; each planner's ``build`` for one
epoch on 8 ranks, best of 3 (target: <= 10 s).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import SHARED_DATA, best_of, save
from chute import JsonlSource, Recipe
from chute.lengths import Lengths, lengths_of
from chute.plan import BudgetPlanner, GroupedPlanner, PackedPlanner, RandomPlanner
from chute.stats import padding_stats
from xtuner_length_grouped import xtuner_efficiency

INSTRUCTION_SETS = [
    "fastchat/dummy_conversation.json",
    "llama-factory/alpaca_en_demo.json",
    "llama-factory/alpaca_zh_demo.json",
    "llama-factory/glaive_toolcall_en_demo.json",
    "llama-factory/identity.json",
    "llama-factory/v1_sft_demo.jsonl",
    "torchtune/alpaca_tiny.json",
    "xtuner/resource/openai_sft.jsonl",
    "xtuner/resource/mllm_sft_text_example_data.jsonl",
]
MAX_LENGTH, BATCH, WORLD = 2048, 16, 8


def real_lengths() -> tuple[np.ndarray, dict[str, Any]]:
    source = JsonlSource([SHARED_DATA / name for name in INSTRUCTION_SETS])
    recipe = Recipe(tokenizer=SHARED_DATA / "tokenizers/qwen3/tokenizer.json", template="qwen3")
    t0 = time.perf_counter()
    fresh = lengths_of(source, recipe, cache=False)  # the parallel pass, all cores
    pass_seconds = time.perf_counter() - t0
    lengths_of(source, recipe)  # make sure the cache holds them
    t0 = time.perf_counter()
    cached = lengths_of(source, recipe)  # what every later run (and every rank) pays
    cached_seconds = time.perf_counter() - t0
    if not np.array_equal(fresh.length, cached.length):
        raise RuntimeError("the cached lengths differ from a fresh pass")
    summary = fresh.summary()
    summary.pop("examples")
    return np.asarray(fresh.length), {
        **summary,
        "pass_seconds": round(pass_seconds, 2),
        "records_per_second": round(len(fresh) / pass_seconds),
        "cached_seconds": round(cached_seconds, 4),
    }


def efficiencies(lengths: np.ndarray, seeds: int) -> dict[str, Any]:
    runs: dict[str, list[float]] = {}
    steps: dict[str, int] = {}
    n = len(lengths)
    for seed in range(seeds):
        stats = padding_stats(
            Lengths(lengths), max_length=MAX_LENGTH, batch_size=BATCH, world_size=WORLD, seed=seed
        )
        for name, report in stats["plans"].items():
            runs.setdefault(name, []).append(report["efficiency"])
            steps[name] = report["steps"]
        fed = np.minimum(lengths, MAX_LENGTH)
        for label, mult in (("xtuner_50", 50), ("xtuner_default", None)):
            x = xtuner_efficiency(
                fed, batch_size=BATCH, world_size=WORLD, seed=seed, mega_batch_mult=mult
            )
            runs.setdefault(label, []).append(x["efficiency"])
            steps[label] = x["steps"]
    default_mult = min(n // (BATCH * WORLD * 4), 50) or 1
    return {
        "samples": n,
        "tokens": int(np.minimum(lengths, MAX_LENGTH).sum()),
        "xtuner_default_mega_batch_mult": default_mult,
        "plans": {
            name: {
                "efficiency_mean": round(statistics.fmean(values), 4),
                "efficiency_min": round(min(values), 4),
                "efficiency_max": round(max(values), 4),
                "steps": steps[name],
            }
            for name, values in runs.items()
        },
        "packing_bound": stats["packing_bound"],
    }


def build_times(lengths: np.ndarray, count: int, repeat: int) -> dict[str, float]:
    rng = np.random.default_rng(0)
    big = rng.choice(np.minimum(lengths, MAX_LENGTH), size=count).astype(np.int32)
    lens = Lengths(big)
    factories = {  # a fresh planner per build: planners cache the plans they built
        "random": lambda: RandomPlanner(BATCH),
        "grouped": lambda: GroupedPlanner(BATCH, lengths=lens),
        "budget": lambda: BudgetPlanner(BATCH * MAX_LENGTH, lengths=lens),
        "packed": lambda: PackedPlanner(MAX_LENGTH, batch_size=BATCH, lengths=lens),
        "packed_split": lambda: PackedPlanner(
            MAX_LENGTH, batch_size=BATCH, split=True, lengths=lens
        ),
    }
    out = {}
    for name, factory in factories.items():
        out[name] = round(
            best_of(lambda f=factory: f().build(count, epoch=0, world_size=WORLD), repeat), 3
        )
        print(f"build {name}: {out[name]} s", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="1 seed, 1M lengths for build times")
    ap.add_argument("--tile", type=int, default=52)
    ap.add_argument("--seeds", type=int, default=3)
    args = ap.parse_args()
    seeds = 1 if args.quick else args.seeds
    lengths, info = real_lengths()
    print(f"lengths: {info}", flush=True)
    valid = lengths[lengths >= 0]
    result: dict[str, Any] = {
        "settings": {"max_length": MAX_LENGTH, "batch_size": BATCH, "world_size": WORLD},
        "data": INSTRUCTION_SETS,
        "lengths_pass": info,
        "real": efficiencies(valid, seeds),
    }
    print("real:", result["real"]["plans"], flush=True)
    result["tiled"] = {"tile": args.tile, **efficiencies(np.tile(valid, args.tile), seeds)}
    print("tiled:", result["tiled"]["plans"], flush=True)
    count = 1_000_000 if args.quick else 10_000_000
    result["build_seconds"] = {
        "lengths": count,
        **build_times(valid, count, 1 if args.quick else 3),
    }
    save("padding", result)


if __name__ == "__main__":
    main()

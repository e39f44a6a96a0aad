"""Vision work across ranks: per-step imbalance of tokens and image patches, balance off and on.

Usage: ``.venv/bin/python benchmarks/bench_balance.py [--quick] [--seeds 3] [--world 8]``

Data: a mixture of real records from ``../shared/data``, through chute's own mixture plans
(``chute.Mixture`` with ``repeat`` amounts, ``MixturePlanner`` over the epoch's selection):

* ``alpaca``: LLaMA-Factory's ``alpaca_en_demo.json`` (999 text instructions), ``repeat`` 10;
* ``mllm``: LLaMA-Factory's ``mllm_demo.json`` (6 conversations, 1-2 football photos each,
  300x168 px), ``repeat`` 100;
* ``llava_bench``: LLaVA-Bench (In-the-Wild): its 60 questions over 24 real photos and memes
  (up to 4800x3203 px) as LLaVA records, each answered with its image's caption from
  ``context.jsonl`` (the questions ship without answers; the captions are the benchmark's own
  text), ``repeat`` 60. The records are written to a temporary folder, never into the repo.

Lengths: ``Recipe(tokenizer=Qwen3, template="qwen3", image_tokens="qwen2-vl")`` per dataset
(one cached lengths pass): image tokens from the image headers by Qwen2-VL's rule (28-pixel
cells, 4 to 1280 tokens an image). 14,190 samples an epoch, 30% of them with images.

Plans, one epoch on ``--world`` ranks, each with ``balance`` off and ``balance=True``:
``packed`` rows of 4096 (batch size 1 and 4 rows per rank) and ``budget`` with ``max_tokens``
16384. Per step: the busiest rank's tokens (and image patches) over the mean across ranks;
reported as the mean and worst over steps, and over the epoch (sum of the busiest over sum of
the means: how much longer a step-synchronous run spends on that work than an even one). Mean
over ``--seeds`` seeds; padding efficiency and plan build time (best of the seeds) alongside.

Build time at scale: ``--build`` lengths (10M) drawn from the epoch's samples, one epoch on 64
ranks, packed (rows of 4096, 4 per rank) and budget (65536), balance off and on, best of 2.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import SHARED_DATA, best_of, save
from chute.mixture import Mixture, MixtureEntry, open_mixture
from chute.plan import BudgetPlanner, PackedPlanner, Planner, padding_report
from chute.plan.balance import imbalance_report

REPEATS = {"alpaca": 10, "mllm": 100, "llava_bench": 60}
PLANS = {
    "packed, rows of 4096, 1 row per rank": lambda lens, b, seed: PackedPlanner(
        4096, batch_size=1, seed=seed, lengths=lens, balance=b
    ),
    "packed, rows of 4096, 4 rows per rank": lambda lens, b, seed: PackedPlanner(
        4096, batch_size=4, seed=seed, lengths=lens, balance=b
    ),
    "budget, max_tokens 16384": lambda lens, b, seed: BudgetPlanner(
        16384, seed=seed, lengths=lens, balance=b
    ),
}


def llava_bench_records(folder: Path) -> Path:
    """LLaVA-Bench questions as LLaVA records, each answered with its image's caption."""
    bench = SHARED_DATA / "llava/llava_bench_in_the_wild"
    captions = {}
    for line in (bench / "context.jsonl").read_text().splitlines():
        row = json.loads(line)
        captions[row["image"]] = row["caption"]
    records = []
    for line in (bench / "questions.jsonl").read_text().splitlines():
        q = json.loads(line)
        records.append(
            {
                "id": q["id"],
                "image": q["image"],
                "conversations": [
                    {"from": "human", "value": "<image>\n" + q["text"]},
                    {"from": "gpt", "value": captions[q["image"]]},
                ],
            }
        )
    path = folder / "llava_bench.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def mixture(folder: Path) -> Mixture:
    d = SHARED_DATA
    tags = {"role_tag": "role", "content_tag": "content", "user_tag": "user"}
    return Mixture(
        [
            MixtureEntry(
                "alpaca", str(d / "llama-factory/alpaca_en_demo.json"), repeat=REPEATS["alpaca"]
            ),
            MixtureEntry(
                "mllm",
                str(d / "llama-factory/mllm_demo.json"),
                repeat=REPEATS["mllm"],
                format="sharegpt",
                columns={"messages": "messages", "images": "images"},
                tags={**tags, "assistant_tag": "assistant"},
                image_tokens="qwen2-vl",
            ),
            MixtureEntry(
                "llava_bench",
                str(llava_bench_records(folder)),
                repeat=REPEATS["llava_bench"],
                format="llava",
                media_root=str(d / "llava/llava_bench_in_the_wild/images"),
                image_tokens="qwen2-vl",
            ),
        ],
        recipe={"tokenizer": str(d / "tokenizers/qwen3"), "template": "qwen3"},
    )


def measure(opened: Any, lengths: Any, make: Any, balance: Any, seed: int, world: int) -> dict:
    inner = make(lengths, balance, seed)
    planner: Planner = opened.planner(inner, seed=seed)
    n = len(lengths)
    t0 = time.perf_counter()
    plan = planner.build(n, epoch=0, world_size=world)
    seconds = time.perf_counter() - t0
    report = imbalance_report(plan, lengths).to_json()
    padding = padding_report(plan, lengths.length, max_length=getattr(inner, "max_length", None))
    return {
        "steps": plan.num_batches,
        "efficiency": padding.efficiency,
        "tokens": report["tokens"],
        "patches": report["patches"],
        "unbalanced_steps": plan.stats.get("unbalanced_steps"),
        "seconds": seconds,
    }


def summarise(runs: list[dict]) -> dict:
    out: dict[str, Any] = {
        "steps": runs[0]["steps"],
        "efficiency": round(statistics.fmean(r["efficiency"] for r in runs), 5),
        "build_seconds": round(min(r["seconds"] for r in runs), 3),
    }
    for dim in ("tokens", "patches"):
        out[dim] = {
            k: round(statistics.fmean(r[dim][k] for r in runs), 3)
            for k in ("mean", "worst", "epoch")
        }
        out[dim]["worst_of_seeds"] = round(max(r[dim]["worst"] for r in runs), 3)
    if runs[0]["unbalanced_steps"] is not None:
        out["unbalanced_steps"] = round(statistics.fmean(r["unbalanced_steps"] for r in runs), 1)
    return out


def build_times(lengths: Any, ids: np.ndarray, count: int, repeat: int) -> dict[str, Any]:
    """Plan build time over ``count`` lengths drawn from the epoch's samples, 64 ranks."""
    from chute.lengths import Lengths

    pick = np.random.default_rng(0).choice(ids, size=count)
    big = Lengths(lengths.length[pick], image_tokens=np.asarray(lengths.image_tokens)[pick])
    factories = {
        "packed, rows of 4096, 4 rows per rank": lambda b: PackedPlanner(
            4096, batch_size=4, lengths=big, balance=b
        ),
        "budget, max_tokens 65536": lambda b: BudgetPlanner(65536, lengths=big, balance=b),
    }
    out: dict[str, Any] = {"lengths": count, "world_size": 64}
    for name, factory in factories.items():
        for label, balance in (("off", None), ("on", True)):
            seconds = best_of(
                lambda f=factory, b=balance: f(b).build(count, epoch=0, world_size=64), repeat
            )
            out[f"{name}, balance {label}"] = round(seconds, 2)
            print(f"build {name} balance {label}: {seconds:.2f} s", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="one seed")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--world", type=int, default=8)
    ap.add_argument("--build", type=int, default=10_000_000, help="lengths for build times")
    args = ap.parse_args()
    seeds = 1 if args.quick else args.seeds
    with tempfile.TemporaryDirectory() as tmp:
        opened = open_mixture(mixture(Path(tmp)), progress=False)
        lengths = opened.source.lengths()
        selection = opened.selection(lengths=lengths)
        ids = selection.order(0).materialize()
        image = np.asarray(lengths.image_tokens)[ids]
        data = {
            "datasets": {
                name: {"records": int(hi - lo), "repeat": REPEATS[name]}
                for name, lo, hi in zip(
                    opened.names, opened.offsets[:-1], opened.offsets[1:], strict=True
                )
            },
            "samples": len(ids),
            "with_images": int(np.count_nonzero(image > 0)),
            "tokens": int(lengths.length[ids].sum()),
            "image_tokens": int(image.sum()),
            "rejected": lengths.rejected,
        }
        print("data:", data, flush=True)
        results: dict[str, Any] = {}
        for name, make in PLANS.items():
            row = {}
            for label, balance in (("off", None), ("on", True)):
                runs = [
                    measure(opened, lengths, make, balance, seed, args.world)
                    for seed in range(seeds)
                ]
                row[label] = summarise(runs)
                print(name, label, row[label], flush=True)
            results[name] = row
        count = 1_000_000 if args.quick else args.build
        builds = build_times(lengths, ids, count, 1 if args.quick else 2)
    save(
        "balance",
        {
            "settings": {"world_size": args.world, "seeds": seeds, "balance": "True"},
            "data": data,
            "plans": results,
            "build_seconds": builds,
        },
    )


if __name__ == "__main__":
    main()

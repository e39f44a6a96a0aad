"""Preference pairs per second through the recipe, against SFT samples per second.

Usage: ``.venv/bin/python benchmarks/bench_preference.py [--repeat 4] [--rounds 5]``

Records: LLaMA-Factory's ``dpo_en_demo.json`` (300 ShareGPT ranking rows), repeated, held as
raw JSON bytes in memory. Tokenizer: Qwen3 ``tokenizer.json``, the built-in ``qwen3`` template.
One process, one thread.

* **pairs**: ``Recipe(task="preference").batch(records)``: both conversations read, rendered
  and encoded, plus the prompt's own encoding (TRL's boundary rule), one sample per pair;
* **SFT on the chosen side**: the same records with the rejected response dropped, read as
  ShareGPT SFT (``conversations`` + the chosen turn) by ``Recipe().batch``: one sequence each;
* **SFT on both sides**: both responses as two SFT records: the same tokens as a pair, the work
  a pipeline without pairs would do.

Records run in chunks of 250, the three alternating on each chunk, ``--rounds`` times, the
fastest time per chunk kept (the machine may be shared).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import SHARED_DATA, save
from chute import Recipe


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    tok = SHARED_DATA / "tokenizers" / "qwen3" / "tokenizer.json"
    rows = orjson.loads((SHARED_DATA / "llama-factory" / "dpo_en_demo.json").read_bytes())
    rows = rows * args.repeat
    pairs = [orjson.dumps(r) for r in rows]
    chosen = [orjson.dumps({"conversations": [*r["conversations"], r["chosen"]]}) for r in rows]
    both = [
        orjson.dumps({"conversations": [*r["conversations"], r[side]]})
        for r in rows
        for side in ("chosen", "rejected")
    ]
    pair_recipe = Recipe(tokenizer=tok, template="qwen3", task="preference")
    sft_recipe = Recipe(tokenizer=tok, template="qwen3", train_on="last")
    pair_tokens = sum(s["length"] for s in pair_recipe.batch([orjson.loads(r) for r in pairs]))
    runs = {
        "pairs": (pair_recipe, pairs, 1),
        "sft_chosen": (sft_recipe, chosen, 1),
        "sft_both_sides": (sft_recipe, both, 2),
    }
    chunk = 250
    starts = list(range(0, len(rows), chunk))
    best: dict[str, list[float]] = {name: [float("inf")] * len(starts) for name in runs}
    for recipe, raws, per in runs.values():
        recipe.batch([orjson.loads(r) for r in raws[: chunk * per]])  # warm up
    for _ in range(args.rounds):
        for k, lo in enumerate(starts):
            for name, (recipe, raws, per) in runs.items():
                part = raws[lo * per : (lo + chunk) * per]
                t0 = time.perf_counter()
                out = recipe.batch([orjson.loads(r) for r in part])
                best[name][k] = min(best[name][k], time.perf_counter() - t0)
                assert all(isinstance(s, dict) for s in out), name
    seconds = {name: sum(times) for name, times in best.items()}
    n = len(rows)
    result: dict[str, Any] = {
        "records": n,
        "pair_tokens_per_record": round(pair_tokens / n, 1),
        "pairs_per_s": round(n / seconds["pairs"], 1),
        "sft_chosen_samples_per_s": round(n / seconds["sft_chosen"], 1),
        "sft_both_sides_samples_per_s": round(2 * n / seconds["sft_both_sides"], 1),
        "ratio_pairs_vs_sft_chosen": round(seconds["sft_chosen"] / seconds["pairs"], 3),
        "ratio_pairs_vs_sft_both_sides": round(seconds["sft_both_sides"] / seconds["pairs"], 3),
        "rounds": args.rounds,
        "chunk": chunk,
    }
    save("preference", result)


if __name__ == "__main__":
    main()

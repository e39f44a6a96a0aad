"""Qwen-VL 3-D positions: recomputed at collate time from a sample's grids, or stored in the cache?

Usage: ``.venv/bin/python benchmarks/bench_mrope.py [--repeat 200] [--rounds 5]``

Samples: LLaMA-Factory's ``mllm_demo.json`` (6 conversations, 1-2 images each) through
``Recipe(image_tokens="qwen2-vl")`` with the Qwen3 tokenizer, repeated ``--repeat`` times. One
process, one thread, the fastest of ``--rounds`` passes.

* **recompute**: ``MRopePositions.layout`` (positions and token types) of each sample, from its media
  spans and grids (what a Loader over a cache does: the cache stores spans and grids already);
* **stored**: the same positions written once as an ``int32 (3, tokens)`` column of a
  memory-mapped file (what a cache would add), read back per sample and widened to int64 as the
  collate needs them; the column's bytes per token are reported beside the ids';
* **packed collate**: ``PackedCollate(4096)`` over the samples in rows of 4096 tokens, with and
  without ``positions=``: the share the positions add to collation.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import SHARED_DATA, save
from chute import Recipe, open_source
from chute.collate.packed import PackedCollate
from chute.media.positions import MRopePositions


def fastest(fn: Any, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    recipe = Recipe(tokenizer=SHARED_DATA / "tokenizers" / "qwen3", image_tokens="qwen2-vl")
    source = open_source(SHARED_DATA / "llama-factory" / "mllm_demo.json")
    samples = [recipe(source[i]) for i in range(len(source))] * args.repeat
    tokens = sum(len(s["input_ids"]) for s in samples)
    rule = MRopePositions("qwen2-vl")

    def recompute() -> None:
        for s in samples:
            rule.layout(s)

    with tempfile.TemporaryDirectory() as tmp:
        stored = np.concatenate([rule.positions(s) for s in samples], axis=1).astype(np.int32)
        column = Path(tmp) / "positions.bin"
        stored.tofile(column)
        ends = np.cumsum([len(s["input_ids"]) for s in samples])
        starts = ends - np.diff(np.concatenate([[0], ends]))
        mapped = np.memmap(column, dtype=np.int32, mode="r", shape=stored.shape)

        def read_stored() -> None:
            for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
                mapped[:, a:b].astype(np.int64)

        t_recompute = fastest(recompute, args.rounds)
        t_stored = fastest(read_stored, args.rounds)

    per_row = 4096
    rows: list[int] = []
    fill, count = 0, 0
    for s in samples:
        if fill + len(s["input_ids"]) > per_row:
            rows.append(count)
            fill, count = 0, 0
        fill += len(s["input_ids"])
        count += 1
    rows.append(count)
    plain = PackedCollate(per_row)
    with_positions = PackedCollate(per_row, positions=rule)
    t_plain = fastest(lambda: plain(samples, rows=rows), args.rounds)
    t_positions = fastest(lambda: with_positions(samples, rows=rows), args.rounds)
    result = {
        "samples": len(samples),
        "tokens": tokens,
        "recompute_us_per_sample": round(t_recompute / len(samples) * 1e6, 2),
        "stored_read_us_per_sample": round(t_stored / len(samples) * 1e6, 2),
        "stored_bytes_per_token": 12,
        "ids_bytes_per_token": 4,
        "packed_collate_ms": round(t_plain * 1e3, 2),
        "packed_collate_with_positions_ms": round(t_positions * 1e3, 2),
        "rows": len(rows),
    }
    print(result)
    save("mrope", result)


if __name__ == "__main__":
    main()

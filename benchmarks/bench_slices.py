"""Context- and sequence-parallel slices: what aligning costs, how even the zig-zag is, what a
rank builds and keeps.

Usage: ``.venv/bin/python benchmarks/bench_slices.py``

Data (``../shared/data``): LLaMA-Factory's ``wiki_demo.txt`` and ``c4_demo.jsonl`` (330
documents up to ~25k Qwen3 tokens), ``Recipe(overflow="split", max_length=32768)``, tokenized
once into a token cache in a temporary folder; and LLaMA-Factory's ``alpaca_en_demo.json`` (999
short instructions, template qwen3) at ``max_length`` 4096 for short samples.

1. **Alignment**: the packed plan with ``align`` 1 (no context parallelism), 4, 8, 16 (cp 2, 4,
   8): rows and real tokens per row.
2. **Balance of causal attention work over a cp group**: a token at position ``p`` attends to
   ``p + 1`` keys; per row, each rank's sum over its tokens, the busiest rank over the mean,
   for the zig-zag cut and for a contiguous one (every row of the 32k epoch).
3. **One 32k row**: the whole aligned batch (``PackedCollate(align=2 cp)``) and the cut
   (``ContextParallelCollate``) timed (best of 5), and the bytes of the tensors a rank's
   worker sends to its training process, whole against sliced.
4. **Loader**: batches per second over the cache, one process (no workers), whole rows against
   cp slices on one rank.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import SHARED_DATA, best_of, save
from chute import Loader, Recipe, World, open_source
from chute.cache import preprocess
from chute.collate import PackedCollate
from chute.collate.slices import ContextParallelCollate, zigzag_index
from chute.lengths import lengths_of
from chute.plan import PackedPlanner

MAX = 32768


def alignment(lengths: Any, max_length: int) -> list[dict[str, Any]]:
    out = []
    for align in (1, 4, 8, 16):
        planner = PackedPlanner(max_length, batch_size=1, align=align, lengths=lengths, seed=0)
        plan = planner.build(len(lengths), epoch=0, world_size=1)
        stats = plan.stats
        out.append(
            {
                "align": align,
                "rows": stats["rows"],
                "bound": stats["bound"],
                "real_tokens_per_row": round(stats["tokens"] / (stats["rows"] * max_length), 5),
            }
        )
    return out


def work_balance(batches: list[dict[str, Any]], cp: int) -> dict[str, float]:
    zig, flat = [], []
    for b in batches:
        cu = b["cu_seqlens_padded"].numpy()
        work = b["position_ids"].reshape(-1).numpy().astype(np.int64) + 1
        for row in range(b["input_ids"].shape[0]):
            lo, hi = row * MAX, (row + 1) * MAX
            inside = cu[(cu >= lo) & (cu <= hi)] - lo
            z = [work[lo:hi][zigzag_index(inside, cp, r)].sum() for r in range(cp)]
            c = [work[lo + r * MAX // cp : lo + (r + 1) * MAX // cp].sum() for r in range(cp)]
            zig.append(max(z) / np.mean(z))
            flat.append(max(c) / np.mean(c))
    return {
        "zigzag_max_over_mean": round(float(np.mean(zig)), 4),
        "zigzag_worst": round(float(np.max(zig)), 4),
        "contiguous_max_over_mean": round(float(np.mean(flat)), 4),
        "contiguous_worst": round(float(np.max(flat)), 4),
    }


def nbytes(batch: dict[str, Any]) -> int:
    return sum(v.numel() * v.element_size() for v in batch.values() if hasattr(v, "numel"))


def main() -> None:
    data = SHARED_DATA / "llama-factory"
    tok = SHARED_DATA / "tokenizers" / "qwen3"
    result: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        paths = [str(data / "wiki_demo.txt"), str(data / "c4_demo.jsonl")]
        options = {"max_length": MAX, "overflow": "split"}
        recipe = Recipe(tokenizer=tok, **options)  # type: ignore[arg-type]
        preprocess(
            {
                "sources": paths,
                "recipe": {"tokenizer": str(tok), **options},
                "out": tmp,
                "cache": {"chunk_size": 64, "workers": 1},
            }
        )
        whole = Loader(tmp, recipe, batch_size=1, seed=0, plan="packed", world=World(),
                       plan_options={"align": 8})  # fmt: skip
        lengths = whole.lengths
        result["windows"] = len(lengths)
        result["tokens"] = int(lengths.length[lengths.length > 0].sum())
        result["alignment_32k"] = alignment(lengths, MAX)
        short = Recipe(tokenizer=tok, template="qwen3", max_length=4096)
        short_lengths = lengths_of(open_source(data / "alpaca_en_demo.json"), short)
        result["alignment_alpaca_4096"] = alignment(short_lengths, 4096)

        def epoch(align: int) -> list[dict[str, Any]]:
            return list(Loader(tmp, recipe, batch_size=1, seed=0, plan="packed", world=World(),
                               plan_options={"align": align}))  # fmt: skip

        batches = epoch(8)
        result["balance"] = {
            f"cp{cp}": work_balance(batches if cp == 4 else epoch(2 * cp), cp) for cp in (2, 4, 8)
        }
        cache = whole.source
        row_ids = batches[0]["row_sample_ids"][0]
        samples = [cache[int(i)] for i in row_ids if i >= 0]
        rows = [len(samples)]
        full = PackedCollate(MAX, align=8)
        cut = ContextParallelCollate(full, 4, 1)
        whole_batch, sliced = full(samples, rows=rows), cut(samples, rows=rows)
        result["one_row"] = {
            "samples": len(samples),
            "whole_ms": round(1000 * best_of(lambda: full(samples, rows=rows), 5), 3),
            "whole_and_cut_cp4_ms": round(1000 * best_of(lambda: cut(samples, rows=rows), 5), 3),
            "whole_bytes": nbytes(whole_batch),
            "cp4_slice_bytes": nbytes(sliced),
        }
        for name, kw in (
            ("whole", {"plan_options": {"align": 8}}),
            ("cp4_slice", {"slices": "cp"}),
        ):
            world = World() if name == "whole" else World(1, 4, cp=4)
            loader = Loader(tmp, recipe, batch_size=1, seed=0, plan="packed", world=world, **kw)
            t0 = time.perf_counter()
            count = sum(1 for _ in loader)
            result.setdefault("loader_batches_per_s", {})[name] = round(
                count / (time.perf_counter() - t0), 2
            )
    save("slices", result)


if __name__ == "__main__":
    main()

"""Compute across ranks in long-context packing: per-step max/mean cost, balance off and on.

Usage: ``.venv/bin/python benchmarks/bench_cost_balance.py [--quick] [--seeds 3] [--world 8]``

Data: real text from ``../shared/data`` through the Qwen3 tokenizer, rows of 32,768 tokens:

* short SFT: LLaMA-Factory's ``alpaca_en_demo.json`` (999 instructions) and
  ``glaive_toolcall_en_demo.json`` (300 tool-call conversations), template ``qwen3``;
* web pages: its ``c4_demo.jsonl`` (300 pages, up to 8.9k tokens);
* long documents: its ``wiki_demo.txt`` holds 30 Wikipedia articles of up to 26.7k tokens, none
  of 32k; so the 30 documents here are ten consecutive articles each (article ``i`` to ``i+9``,
  cyclically; 64k to 87k tokens), written to a temporary folder (never into the repo) and cut
  by ``Recipe(overflow="split", max_length=32768)`` into 32k-token windows and a shorter end.

Every source is one lengths pass (``chute.lengths.lengths_of``, cached); each source's lengths
are then repeated (``REPEATS``, as distinct samples) for an epoch of ~1,100 rows where about
half the tokens are long documents' (1% of the samples), as in long-context fine-tuning mixes.

Cost per sample: ``a + b*n + c*n^2`` (``chute.plan.cost``), the default model (Llama-3-8B's
FLOP count: a 32k window costs 1.57x its tokens' dense share). Per step, the busiest rank's
cost over the mean across ranks: the mean and worst over steps, and over the epoch (sum of the
busiest over sum of the means: the time a run that waits for its slowest rank spends over an
even split's). Tokens alike, and padding efficiency. ``--world`` ranks, mean of ``--seeds``.

Plans, each an answer to "how do steps of equal compute come about":

* ``packed`` plain (``balance=None``) and ``balance="tokens"``: rows are ~32,768 tokens each,
  so tokens are even already, compute is not;
* ``packed, balance="cost"``: chute's option: the same rows, steps of rows of alike cost, each
  step's rows dealt to its ranks by cost;
* ``rows dealt by cost within random steps`` (4 rows per rank): plain packing's steps, each
  step's rows dealt to ranks by cost (``chute.plan.rebalance.deal_rows``), no grouping;
* ``global batch packed at once`` (as Megatron-Bridge packs a global batch): the shuffled
  samples fill one step's ``world x batch_size`` rows best-fit decreasing (those that do not fit
  wait for the next step), and the step's rows are dealt to ranks by cost;
* ``budget`` (``max_tokens`` 65,536 padded tokens a batch) without and with ``balance="cost"``.

Robustness: the cost-balanced plans measured under other models (``llama3-70b``'s FLOPs, and
the fit of ``bench_cost_model.py`` on this CPU, where attention weighs more), since the real
GPU's balance of attention and dense work is not the FLOP count's.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RESULTS_DIR, SHARED_DATA, save
from chute import JsonlSource, Recipe
from chute.lengths import Lengths, lengths_of
from chute.plan import BudgetPlanner, PackedPlanner, TablePlan, padding_report
from chute.plan.balance import Balance, imbalance_report
from chute.plan.cost import COST_MODELS, DEFAULT_COST, CostModel, sample_costs
from chute.plan.pack import pack_rows
from chute.plan.rebalance import deal_rows
from chute.plan.shuffle import Permutation

ROW = 32768
REPEATS = {"alpaca": 40, "glaive": 40, "c4": 20, "wiki_books": 8}
ARTICLES_PER_BOOK = 10


def wiki_books(folder: Path) -> Path:
    """30 long documents: articles i .. i+9 of wiki_demo.txt (cyclically), one per line (a
    text file's documents are its lines: the articles are joined by a space)."""
    articles = (SHARED_DATA / "llama-factory/wiki_demo.txt").read_text().splitlines()
    books = [
        " ".join(articles[(i + j) % len(articles)] for j in range(ARTICLES_PER_BOOK))
        for i in range(len(articles))
    ]
    path = folder / "wiki_books.txt"
    path.write_text("".join(book + "\n" for book in books))
    return path


def source_lengths(folder: Path) -> dict[str, Lengths]:
    d = SHARED_DATA / "llama-factory"
    tok = SHARED_DATA / "tokenizers/qwen3"
    sft = {"template": "qwen3", "max_length": ROW}
    split = {"max_length": ROW, "overflow": "split"}
    sources = {
        "alpaca": (d / "alpaca_en_demo.json", sft),
        "glaive": (d / "glaive_toolcall_en_demo.json", sft),
        "c4": (d / "c4_demo.jsonl", split),
        "wiki_books": (wiki_books(folder), split),
    }
    out = {}
    for name, (path, options) in sources.items():
        recipe = Recipe(tokenizer=tok, **options)  # type: ignore[arg-type]
        out[name] = lengths_of(JsonlSource(path), recipe, progress=False)
    return out


def epoch_lengths(per_source: dict[str, Lengths]) -> tuple[Lengths, dict[str, Any]]:
    parts, about = [], {}
    for name, lens in per_source.items():
        valid = lens.length[lens.length >= 0].astype(np.int64)
        parts.append(np.tile(valid, REPEATS[name]))
        about[name] = {
            "samples": int(valid.size),
            "tokens": int(valid.sum()),
            "max": int(valid.max()),
            "windows_of_32768": int(np.count_nonzero(valid == ROW)),
            "rejected": dict(lens.rejected),
            "repeat": REPEATS[name],
        }
    length = np.concatenate(parts)
    return Lengths(length.astype(np.int32)), about


def figures(loads: np.ndarray) -> dict[str, float]:
    """Busiest over mean per step, ``loads`` (steps, ranks): mean, worst, epoch (live steps)."""
    total = loads.sum(axis=1)
    live = total > 0
    busiest = loads[live].max(axis=1)
    ratio = busiest * loads.shape[1] / total[live]
    epoch = float(busiest.sum()) * loads.shape[1] / float(total[live].sum())
    return {"mean": float(ratio.mean()), "worst": float(ratio.max()), "epoch": epoch}


def from_report(plan: TablePlan, lens: Lengths, models: dict[str, CostModel]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "steps": plan.num_batches,
        "rows": int(plan.stats.get("rows", len(plan.ids))),
        "efficiency": padding_report(plan, lens.length, max_length=ROW).efficiency,
    }
    for label, model in models.items():
        report = imbalance_report(plan, lens, max_length=ROW, cost=model)
        assert report.cost is not None and report.tokens is not None
        out[f"cost[{label}]"] = dict(zip(("mean", "worst", "epoch"), report.cost, strict=True))
        out["tokens"] = dict(zip(("mean", "worst", "epoch"), report.tokens, strict=True))
    if "unbalanced_steps" in plan.stats:
        out["unbalanced_steps"] = plan.stats["unbalanced_steps"]
    return out


def rows_report(
    rows: list[np.ndarray], lens: Lengths, world: int, per_rank: int, models: dict[str, CostModel]
) -> dict[str, Any]:
    """Figures of rows (arrays of sample ids) dealt in steps of ``world x per_rank`` rows."""
    unit = world * per_rank
    steps = -(-len(rows) // unit)
    tokens = np.zeros((steps, world))
    out: dict[str, Any] = {"steps": steps, "rows": len(rows)}
    real = sum(int(lens.length[r].sum()) for r in rows)
    out["efficiency"] = real / (len(rows) * ROW)
    for label, model in models.items():
        cost = np.zeros((steps, world))
        for i, row in enumerate(rows):
            s, r = divmod(i, unit)
            cost[s, r // per_rank] += sample_costs(model, lens, row, ROW).sum()
            if label == "llama3-8b":
                tokens[s, r // per_rank] += int(lens.length[row].sum())
        out[f"cost[{label}]"] = figures(cost)
    out["tokens"] = figures(tokens)
    return out


def dealt_by_cost(plan: TablePlan, lens: Lengths, world: int, per_rank: int) -> list[np.ndarray]:
    """Plain packing's rows, each full step's rows dealt to its ranks by cost (no grouping)."""
    assert plan.row_bounds is not None
    rb = plan.row_bounds
    rows = [plan.ids[a:b].astype(np.int64) for a, b in itertools.pairwise(rb)]
    cost = np.array([[int(sample_costs(DEFAULT_COST, lens, r, ROW).sum())] for r in rows])
    order, _ = deal_rows(cost, world, per_rank, Balance((("cost", 1.0),), 0.0, DEFAULT_COST))
    return [rows[i] for i in order]


def global_batches(lens: Lengths, seed: int, world: int, per_rank: int) -> list[np.ndarray]:
    """Each step packed at once: the next shuffled samples fill ``world x per_rank`` rows by
    best-fit decreasing (those that do not fit wait), the rows dealt to ranks by cost."""
    unit = world * per_rank
    ids = lens.valid_ids()
    ids = ids[Permutation(len(ids), seed, 0).materialize()]
    size = np.minimum(lens.length.astype(np.int64), ROW)
    out: list[np.ndarray] = []
    waiting = np.empty(0, dtype=np.int64)
    at = 0
    balance = Balance((("cost", 1.0),), 0.0, DEFAULT_COST)
    while at < len(ids) or len(waiting):
        room = unit * ROW - int(size[waiting].sum())
        take = int(np.searchsorted(np.cumsum(size[ids[at:]]), room, side="right"))
        pool = np.concatenate([waiting, ids[at : at + take]])
        at += take
        members, counts = pack_rows(size[pool], ROW)
        bounds = np.concatenate([[0], np.cumsum(counts)])
        rows = [pool[members[a:b]] for a, b in itertools.pairwise(bounds)]
        # the fullest rows form the step; the rest wait (best-fit decreasing opens rows for
        # the shortest samples last, so those are the emptiest)
        fill = np.array([int(size[r].sum()) for r in rows])
        keep = np.sort(np.argsort(-fill, kind="stable")[:unit])
        rest = np.setdiff1d(np.arange(len(rows)), keep)
        step = [rows[i] for i in keep]
        waiting = np.concatenate([rows[i] for i in rest]) if len(rest) else np.empty(0, np.int64)
        if at >= len(ids) and len(step) < unit:  # the last step: what is left
            out += step
            break
        cost = np.array([[int(sample_costs(DEFAULT_COST, lens, r, ROW).sum())] for r in step])
        order, _ = deal_rows(cost, world, per_rank, balance)
        out += [step[i] for i in order]
    return out


def mean_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in runs[0].items():
        if isinstance(value, dict):
            out[key] = {k: round(statistics.fmean(r[key][k] for r in runs), 4) for k in value}
            out[key]["worst_of_seeds"] = round(max(r[key]["worst"] for r in runs), 4)
        else:
            out[key] = round(statistics.fmean(r[key] for r in runs), 5)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="one seed")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--world", type=int, default=8)
    ap.add_argument("--build", type=int, default=1_000_000, help="lengths for build times")
    args = ap.parse_args()
    seeds = 1 if args.quick else args.seeds
    world = args.world
    with tempfile.TemporaryDirectory() as tmp:
        per_source = source_lengths(Path(tmp))
    lens, about = epoch_lengths(per_source)
    n = len(lens)
    long_tokens = int(lens.length[lens.length == ROW].sum())
    data = {
        "sources": about,
        "samples": n,
        "tokens": int(lens.length.sum()),
        "windows_of_32768": int(np.count_nonzero(lens.length == ROW)),
        "tokens_in_documents_over_8k": int(lens.length[lens.length > 8192].sum()),
        "tokens_in_windows_of_32768": long_tokens,
    }
    print("data:", json.dumps(data), flush=True)
    models = {"llama3-8b": DEFAULT_COST, "llama3-70b": COST_MODELS["llama3-70b"]}
    fit_path = RESULTS_DIR / "cost_model.json"
    if fit_path.exists():  # this CPU's fit: attention weighs more than in the FLOP count
        fit = json.loads(fit_path.read_text())["fit"]
        models["cpu fit"] = CostModel(0.0, fit["b"], fit["c"], name="cpu fit")

    def packed(batch: int, balance: object, seed: int) -> TablePlan:
        plan = PackedPlanner(ROW, batch_size=batch, seed=seed, lengths=lens, balance=balance)
        built = plan.build(n, epoch=0, world_size=world)
        assert isinstance(built, TablePlan)
        return built

    def budget(balance: object, seed: int) -> TablePlan:
        plan = BudgetPlanner(2 * ROW, seed=seed, lengths=lens, balance=balance)
        built = plan.build(n, epoch=0, world_size=world)
        assert isinstance(built, TablePlan)
        return built

    cases: dict[str, Any] = {}
    for batch in (1, 4):
        cases[f"packed, {batch} row(s) per rank, balance off"] = lambda s, b=batch: from_report(
            packed(b, None, s), lens, models
        )
        cases[f"packed, {batch} row(s) per rank, balance='tokens'"] = lambda s, b=batch: (
            from_report(packed(b, "tokens", s), lens, models)
        )
        cases[f"packed, {batch} row(s) per rank, balance='cost'"] = lambda s, b=batch: from_report(
            packed(b, "cost", s), lens, models
        )
        if batch > 1:
            cases[f"packed, {batch} rows per rank, dealt by cost within random steps"] = (
                lambda s, b=batch: rows_report(
                    dealt_by_cost(packed(b, None, s), lens, world, b), lens, world, b, models
                )
            )
        cases[f"global batch packed at once, {batch} row(s) per rank, dealt by cost"] = (
            lambda s, b=batch: rows_report(
                global_batches(lens, s, world, b), lens, world, b, models
            )
        )
    cases["budget, max_tokens 65536, balance off"] = lambda s: from_report(
        budget(None, s), lens, models
    )
    cases["budget, max_tokens 65536, balance='cost'"] = lambda s: from_report(
        budget("cost", s), lens, models
    )
    results = {}
    for name, run in cases.items():
        t0 = time.perf_counter()
        results[name] = mean_of([run(seed) for seed in range(seeds)])
        print(f"{name} ({time.perf_counter() - t0:.1f} s):", json.dumps(results[name]), flush=True)
    builds = build_times(lens, 100_000 if args.quick else args.build)
    save(
        "cost_balance",
        {
            "settings": {"world_size": world, "seeds": seeds, "row": ROW, "repeats": REPEATS},
            "models": {k: {**m.to_json(), "crossover": m.crossover} for k, m in models.items()},
            "data": data,
            "plans": results,
            "build_seconds": builds,
        },
    )


def build_times(lens: Lengths, count: int) -> dict[str, Any]:
    """Packed plan build time over ``count`` lengths drawn from the epoch's, 64 ranks."""
    pick = np.random.default_rng(0).choice(len(lens), size=count)
    big = Lengths(lens.length[pick])
    out: dict[str, Any] = {"lengths": count, "world_size": 64}
    for label, balance in (("off", None), ("cost", "cost")):
        best = float("inf")
        for _ in range(2):
            planner = PackedPlanner(ROW, batch_size=4, lengths=big, balance=balance)
            t0 = time.perf_counter()
            planner.build(count, epoch=0, world_size=64)
            best = min(best, time.perf_counter() - t0)
        out[f"packed, 4 rows per rank, balance {label}"] = round(best, 2)
        print(f"build packed balance {label}: {best:.2f} s", flush=True)
    return out


if __name__ == "__main__":
    main()

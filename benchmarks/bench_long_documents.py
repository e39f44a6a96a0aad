"""Long documents: tokens kept by ``overflow="split"`` against truncation, and packing the windows.

Usage: ``.venv/bin/python benchmarks/bench_long_documents.py [--docs 1000] [--max-length 4096]``

Corpus: ``--docs`` generated documents (plain English-like text of common words), lengths drawn
log-uniformly between 1k and 100k Qwen3 tokens, one JSON line each, written once to
``benchmarks/data/``. Tokenizer: Qwen3 ``tokenizer.json``.

Measured, on the same lengths (one lengths pass, all cores, cached):

* tokens kept (trained) with ``overflow="truncate"`` (what LLaMA-Factory's ``cutoff_len`` and
  XTuner's ``max_length`` do to pretraining text) against ``overflow="split"`` with stride 0 and 1;
* packed efficiency (real tokens / row tokens, one epoch, ``plan="packed"``) of the windows, and
  the packing bound; the plan's build time;
* windows per second delivered by the Loader, from the JSONL (each window re-encodes its whole
  document) and from a token cache (``chute preprocess``, each document tokenized once);
* a whole epoch of windows from the JSONL over the first ``--epoch-docs`` documents, the Loader
  as it is (a later window of a document re-encodes only the pieces its first encoding was cut
  into: ``chute.recipe.restarts``) against every window encoding its whole document (what it
  did before; the recipe's ``RestartPoints`` given no room), interleaved, ``--epoch-rounds``;
* with ``--before REV``: ``chute preprocess`` (split, 2 workers) of the first ``--epoch-docs``
  documents by this chute and by chute at ``REV`` (a temporary git worktree), interleaved, best
  of ``--epoch-rounds`` (results: ``long_documents_preprocess.json``);
* with ``--search-share``: the share of encoding a long document (the 5 longest of the first
  200, whole, ``overflow="split"``, one process) spent searching where to cut it
  (``chute.tokenize.prefix.safe_prefix_end``), per engine (results:
  ``long_documents_search.json``, or ``--name``; runs against an older chute with
  ``PYTHONPATH=<its src>``).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import DATA_DIR, SHARED_DATA, save
from chute import Loader, Recipe, World
from chute.lengths import lengths_of, split_lengths
from chute.plan import PackedPlanner, packing_bound
from chute.sources import JsonlSource

WORDS = (  # common English words, about one Qwen3 token each
    "the", "of", "and", "to", "in", "is", "was", "for", "on", "that", "with", "as", "by", "at",
    "from", "his", "it", "an", "were", "are", "which", "this", "be", "or", "has", "had", "not",
    "but", "its", "first", "new", "one", "their", "they", "also", "after", "two", "been", "who",
    "more", "other", "time", "city", "world", "year", "state", "war", "team", "most", "some",
    "people", "used", "when", "school", "part", "only", "over", "about", "between", "three",
    "into", "during", "many", "out", "while", "may", "all", "can", "where", "there",
    "university", "film", "such", "known", "him", "began", "later", "would", "these", "several",
    "during", "music", "area", "game", "under", "years", "family",
)  # fmt: skip


def write_corpus(path: Path, docs: int, seed: int = 0) -> Path:
    """``docs`` documents of 1k-100k tokens (log-uniform); about 1.05 Qwen3 tokens per word."""
    if path.exists():
        return path
    rng = np.random.default_rng(seed)
    words = np.array(WORDS)
    sizes = np.exp(rng.uniform(np.log(1000), np.log(100_000), docs)).astype(int)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        for i, n in enumerate(sizes):
            body = " ".join(words[rng.integers(0, len(words), n)])
            f.write(orjson.dumps({"text": f"Document {i}. {body}."}) + b"\n")
    tmp.rename(path)
    return path


def windows_per_second(loader: Loader, batches: int) -> tuple[float, int]:
    it = iter(loader)
    next(it)  # the first batch: workers start, files open
    t0 = time.perf_counter()
    seen = 0
    for _ in range(batches):
        batch = next(it, None)
        if batch is None:
            break
        seen += int((batch["row_sample_ids"] >= 0).sum())
    return seen / (time.perf_counter() - t0), seen


def search_share(corpus: Path, tok: Path, m: int) -> dict[str, Any]:
    """Time in ``safe_prefix_end`` (outermost calls) over encoding whole long documents."""
    import importlib

    encode_module = importlib.import_module("chute.recipe.encode")  # the module, not the function
    with open(first_docs(corpus, 200), "rb") as f:
        docs = sorted((orjson.loads(line) for line in f), key=lambda d: -len(d["text"]))[:5]
    search = encode_module.safe_prefix_end
    spent = [0.0]

    def timed(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return search(*args, **kwargs)
        finally:
            spent[0] += time.perf_counter() - t0

    found: dict[str, Any] = {"docs": len(docs), "chars": [len(d["text"]) for d in docs]}
    encode_module.safe_prefix_end = timed  # encode's pieces call it from the module
    try:
        for backend in ("auto", "hf"):
            recipe = Recipe(tokenizer=tok, tokenizer_backend=backend, format="text",
                            max_length=m, overflow="split")  # fmt: skip
            recipe.process(docs[-1])  # warm: the first texts' checks against tokenizers
            best = None
            for _ in range(3):
                spent[0] = 0.0
                t0 = time.perf_counter()
                tokens = sum(len(recipe.process(d)["input_ids"]) for d in docs)
                total = time.perf_counter() - t0
                if best is None or total < best[0]:
                    best = (total, spent[0], tokens)
            assert best is not None
            found[recipe.tokenizer.engine] = {
                "seconds": round(best[0], 3),
                "search_seconds": round(best[1], 3),
                "search_share": round(best[1] / best[0], 3),
                "tokens": best[2],
            }
    finally:
        encode_module.safe_prefix_end = search
    return found


def first_docs(corpus: Path, docs: int) -> Path:
    subset = corpus.with_name(f"{corpus.stem}_first{docs}.jsonl")
    with open(corpus, "rb") as f, open(subset, "wb") as out:
        out.writelines(line for _, line in zip(range(docs), f, strict=False))
    return subset


def preprocess_part(docs: Path, tok: Path, m: int, before: str, rounds: int) -> dict[str, Any]:
    """``chute preprocess`` of ``docs`` (split) by this chute and by chute at ``before``."""
    from bench_preprocess import CLI, REPO, compile_chute, settle

    work = Path(tempfile.mkdtemp(prefix="bench-long-preprocess-"))
    tree = work / "before-tree"
    git = ["git", "-C", str(REPO), "worktree"]
    subprocess.run([*git, "add", "-q", "--detach", str(tree), before], check=True)
    recipe = {"tokenizer": str(tok), "format": "text", "max_length": m, "overflow": "split"}
    config = work / "chute.yaml"
    config.write_text(orjson.dumps({"sources": [str(docs)], "recipe": recipe}).decode())
    sides = {"chute": REPO / "src", "chute_before": tree / "src"}
    try:
        compile_chute(list(sides.values()))
        times: dict[str, list[float]] = {name: [] for name in sides}
        reports = {}
        for r in range(rounds):
            for name, src in sides.items():
                out = work / f"{name}{r}"
                settle()
                t0 = time.perf_counter()
                done = subprocess.run(
                    [sys.executable, "-c", CLI, "preprocess", str(config), "--out", str(out),
                     "--workers", "2", "--json", "--quiet"],
                    capture_output=True, text=True, check=True,
                    env={**os.environ, "PYTHONPATH": str(src)},
                )  # fmt: skip
                times[name].append(round(time.perf_counter() - t0, 2))
                reports[name] = orjson.loads(done.stdout)
    finally:
        subprocess.run([*git, "remove", "--force", str(tree)], check=False)
    same = {k: reports["chute"][k] == reports["chute_before"][k] for k in ("samples", "tokens")}
    assert all(same.values()), same  # the same windows and tokens
    best = {name: min(v) for name, v in times.items()}
    return {
        "before": before,
        "samples": reports["chute"]["samples"],
        "tokens": reports["chute"]["tokens"],
        "seconds": times,
        "tokens_per_s": {name: round(reports["chute"]["tokens"] / t) for name, t in best.items()},
        "ratio": round(best["chute_before"] / best["chute"], 2),
    }


def epoch_part(
    corpus: Path, tok: Path, m: int, docs: int, rounds: int, cache_dir: Path
) -> dict[str, Any]:
    """A whole epoch of windows from the JSONL, with and without the restart points."""
    source = JsonlSource(first_docs(corpus, docs), cache_dir=cache_dir)

    def run(restarts: bool) -> tuple[float, int, int]:
        recipe = Recipe(tokenizer=tok, format="text", max_length=m, overflow="split", stride=1)
        if not restarts:  # what it did before: every window encodes its whole document
            from chute.recipe.restarts import RestartPoints

            recipe._restarts = RestartPoints(capacity=0)
        loader = Loader(source, recipe, batch_size=8, plan="packed", world=World(0, 1), seed=0)
        windows = checksum = 0
        t0 = time.perf_counter()
        for batch in loader:
            windows += int((batch["row_sample_ids"] >= 0).sum())
            checksum += int(batch["input_ids"].sum()) + int(batch["labels"].sum())
        return time.perf_counter() - t0, windows, checksum

    run(True)  # the lengths pass (cached) and warm-up, outside the timing
    times: dict[str, list[float]] = {"restarts": [], "whole_document": []}
    counts = set()
    for _ in range(rounds):
        for name in times:
            seconds, windows, checksum = run(name == "restarts")
            times[name].append(round(seconds, 2))
            counts.add((windows, checksum))
    assert len(counts) == 1, counts  # both sides deliver the same batches (ids and labels)
    windows, _ = counts.pop()
    best = {name: min(v) for name, v in times.items()}
    return {
        "docs": docs,
        "windows": windows,
        "seconds": times,
        "windows_per_s": {name: round(windows / t, 1) for name, t in best.items()},
        "ratio": round(best["whole_document"] / best["restarts"], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--docs", type=int, default=1000)
    parser.add_argument("--max-length", type=int, default=4096)
    parser.add_argument("--batches", type=int, default=20, help="loader batches timed")
    parser.add_argument("--epoch-docs", type=int, default=60, help="documents of the epoch part")
    parser.add_argument("--epoch-rounds", type=int, default=1)
    parser.add_argument("--only-epoch", action="store_true", help="only the epoch part")
    parser.add_argument("--before", help="only: preprocess by this chute and by chute at REV")
    parser.add_argument("--search-share", action="store_true", help="only: the cut search's share")
    parser.add_argument("--name", help="the result file's name for --search-share")
    args = parser.parse_args()
    tok = SHARED_DATA / "tokenizers" / "qwen3" / "tokenizer.json"
    corpus = write_corpus(DATA_DIR / f"long_docs_{args.docs}.jsonl", args.docs)
    cache_dir = Path(os.environ.get("CHUTE_CACHE_DIR") or tempfile.mkdtemp())
    source = JsonlSource(corpus, cache_dir=cache_dir)
    m = args.max_length
    if args.search_share:
        found = search_share(corpus, tok, m)
        save(args.name or "long_documents_search", {"max_length": m, **found})
        return
    if args.before:
        docs = first_docs(corpus, args.epoch_docs)
        found = preprocess_part(docs, tok, m, args.before, args.epoch_rounds)
        save("long_documents_preprocess", {"docs": args.epoch_docs, "max_length": m, **found})
        return
    if args.only_epoch:
        epoch = epoch_part(corpus, tok, m, args.epoch_docs, args.epoch_rounds, cache_dir)
        save("long_documents_epoch", {"docs": args.docs, "max_length": m, "epoch": epoch})
        return
    whole = Recipe(tokenizer=tok, format="text", max_length=m, overflow="split")
    t0 = time.perf_counter()
    full = lengths_of(source, whole, cache_dir=cache_dir)  # per window; documents' own lengths:
    lengths_seconds = time.perf_counter() - t0
    table = full.pieces
    doc_len = np.array(
        [int(full.length[table.first[r] : table.first[r + 1]].sum()) for r in range(len(source))]
    )
    tokens = int(doc_len.sum())
    kept_truncate = int(np.minimum(doc_len, m).sum())
    result: dict[str, Any] = {
        "docs": len(source),
        "max_length": m,
        "tokens": tokens,
        "doc_tokens": {
            "min": int(doc_len.min()),
            "median": int(np.median(doc_len)),
            "max": int(doc_len.max()),
        },
        "lengths_pass_seconds": round(lengths_seconds, 2),
        "truncate": {
            "samples": len(source),
            "tokens_kept": kept_truncate,
            "share_kept": round(kept_truncate / tokens, 4),
        },
    }
    base = full.__class__(doc_len.astype(np.int32))
    for stride in (0, 1):
        windows = split_lengths(base, m, stride)
        fed = int(windows.length.sum())
        t0 = time.perf_counter()
        planner = PackedPlanner(m, batch_size=8, lengths=windows, seed=0)
        plan = planner.build(len(windows), epoch=0, world_size=8)
        seconds = time.perf_counter() - t0
        rows = plan.stats["rows"]
        result[f"split_stride{stride}"] = {
            "samples": len(windows),
            "tokens_fed": fed,
            "tokens_kept": tokens,  # every token in a window; stride repeats `stride` per cut
            "share_kept": 1.0,
            "repeated_context_tokens": fed - tokens,
            "packed_rows": rows,
            "packed_efficiency": round(fed / (rows * m), 5),
            "packing_bound_efficiency": round(fed / (packing_bound(windows.length, m) * m), 5),
            "plan_seconds": round(seconds, 3),
        }
    # the Loader: windows from the JSONL (whole document encoded per window) or from a cache
    recipe = Recipe(tokenizer=tok, format="text", max_length=m, overflow="split", stride=1)
    live = Loader(source, recipe, batch_size=8, plan="packed", world=World(0, 1), seed=0)
    rate_live, n_live = windows_per_second(live, args.batches)
    from chute.cache import preprocess

    out = Path(tempfile.mkdtemp()) / "cache"
    t0 = time.perf_counter()
    preprocess(
        sources=[str(corpus)],
        recipe={"tokenizer": str(tok), "format": "text", "max_length": m, "overflow": "split",
                "stride": 1},
        out=out,
        cache={"workers": os.cpu_count() or 1, "chunk_size": 50},
    )  # fmt: skip
    preprocess_seconds = time.perf_counter() - t0
    cached = Loader(out, recipe, batch_size=8, plan="packed", world=World(0, 1), seed=0)
    rate_cached, n_cached = windows_per_second(cached, args.batches * 10)
    result["loader"] = {
        "jsonl_windows_per_s": round(rate_live, 1),
        "jsonl_windows_timed": n_live,
        "cache_windows_per_s": round(rate_cached, 1),
        "cache_windows_timed": n_cached,
        "preprocess_seconds": round(preprocess_seconds, 1),
        "num_workers": 0,
    }
    result["epoch"] = epoch_part(corpus, tok, m, args.epoch_docs, args.epoch_rounds, cache_dir)
    save("long_documents", result)


if __name__ == "__main__":
    main()

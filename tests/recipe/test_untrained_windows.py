"""Windows of a split chat record that hold no trained token are left out and counted.

With ``overflow="split"`` a conversation whose prompt is longer than ``max_length`` became
windows of prompt alone: samples with no target, whose batches had a loss over no token (NaN
as Hugging Face's mean), while the same record truncated was rejected as no_trainable_tokens.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from cache_helpers import write_tokenizer
from chute import JsonlSource, Loader, Recipe, SampleError, World
from chute.cache import open_cache, preprocess
from chute.lengths import Pieces, lengths_of

pytest.importorskip("torch")

WORDS = ["the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog"]


def conversation(i: int, prompt_words: int, answer_words: int) -> dict[str, object]:
    rng = np.random.default_rng(i)
    prompt = " ".join(WORDS[k] for k in rng.integers(0, len(WORDS), prompt_words))
    answer = " ".join(WORDS[k] for k in rng.integers(0, len(WORDS), answer_words))
    return {
        "id": i,
        "messages": [
            {"role": "user", "content": f"q{i} {prompt}"},
            {"role": "assistant", "content": f"a{i} {answer}"},
        ],
    }


@pytest.fixture
def chats(tmp_path: Path) -> Path:
    # prompts of 5 to 300 words against windows of 64 tokens: long ones give prompt-only windows
    sizes = [5, 300, 20, 150, 8, 260, 40, 90]
    path = tmp_path / "chats.jsonl"
    path.write_text("".join(json.dumps(conversation(i, n, 12)) + "\n" for i, n in enumerate(sizes)))
    return path


@pytest.fixture(scope="module")
def tok(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tokenizer(tmp_path_factory.mktemp("tok") / "tok")


SPLIT = {"template": "chatml", "max_length": 64, "overflow": "split", "stride": 4}


def recipe(tok: Path) -> Recipe:
    return Recipe(tokenizer=tok, **SPLIT)


def trained_windows(source: JsonlSource, r: Recipe) -> set[tuple[int, int]]:
    """(line, window) of every window with a target, from the whole records cut here."""
    out = set()
    for item in source:
        for piece in r.pieces(r(item)):
            if (piece["labels"][1:] != -100).any():
                out.add((piece["line"], piece["window"]))
    return out


def test_a_prompt_only_window_is_refused_by_the_recipe(chats: Path, tok: Path) -> None:
    r = recipe(tok)
    record = JsonlSource(chats)[1]  # 300 words of prompt
    windows = r.pieces(r(record))
    assert len(windows) > 3 and not (windows[0]["labels"] != -100).any()
    with pytest.raises(SampleError, match=r"no_trainable_tokens: window 0 of \d+ holds no trained"):
        r(record.with_window(0))
    last = r(record.with_window(len(windows) - 1))  # the answer's window trains
    assert (last["labels"] != -100).any()


def test_the_loader_deals_every_trained_window_once_and_no_empty_one(
    chats: Path, tok: Path
) -> None:
    source, r = JsonlSource(chats), recipe(tok)
    expected = trained_windows(source, r)
    pieces = Pieces(source, lengths_of(source, r))
    assert len(pieces) > len(expected)  # some windows are prompt only
    seen: list[tuple[int, int]] = []
    for rank in range(2):
        loader = Loader(source, r, batch_size=2, plan="packed", world=World(rank, 2), seed=1)
        for batch in loader:
            assert int((batch["labels"][:, 1:] != -100).sum()) > 0  # no batch without a target
            for i in batch["sample_ids"].tolist():
                w = r(pieces[i])
                seen.append((w["line"], w["window"]))
        assert loader.excluded == {"no_trainable_tokens": len(pieces) - len(expected)}
    assert sorted(seen) == sorted(expected)  # each trained window exactly once


def test_a_cache_keeps_the_trained_windows_and_counts_the_others(
    chats: Path, tmp_path: Path, tok: Path
) -> None:
    source, r = JsonlSource(chats), recipe(tok)
    expected = trained_windows(source, r)
    cfg = {
        "sources": [str(chats)],
        "recipe": {"tokenizer": str(tok), **SPLIT},
        "cache": {"chunk_size": 4, "workers": 1},
        "out": str(tmp_path / "cache"),
    }
    report = preprocess(cfg)
    cache = open_cache(tmp_path / "cache")
    kept = {(cache[i]["line"], cache[i]["window"]) for i in range(len(cache))}
    assert kept == expected and len(cache) == len(expected)
    pieces = Pieces(source, lengths_of(source, r))
    left_out = len(pieces) - len(expected)
    assert report.rejected == 0  # the records are valid; their prompt-only windows are not kept
    assert cache.summary["untrained_windows"] == report.untrained_windows == left_out

"""What ``max_length`` cuts: ``truncation="right"`` (default), ``"left"`` and ``"turns"``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from chute import ConfigError, JsonlSource, Recipe, SampleError

QWEN = "tokenizers/qwen3"


def chat(exchanges: int, words: int = 12, answer: int | None = None) -> dict:
    messages = [{"role": "system", "content": "Be brief."}]
    for i in range(exchanges):
        messages.append({"role": "user", "content": f"Question {i}: " + "why " * words})
        reply = f"Answer {i}: " + "because " * (words if answer is None else answer)
        messages.append({"role": "assistant", "content": reply})
    return {"messages": messages}


def text_of(recipe: Recipe, sample: dict) -> str:
    return recipe.tokenizer.decode(sample["input_ids"].tolist())


def test_turns_drops_the_fewest_earliest_exchanges_and_keeps_the_system(shared_data: Path) -> None:
    recipe = Recipe(
        tokenizer=shared_data / QWEN, template="qwen3", max_length=120, truncation="turns"
    )
    whole = Recipe(tokenizer=shared_data / QWEN, template="qwen3")
    record = chat(6)
    sample = recipe.process(record)
    text = text_of(recipe, sample)
    assert sample["truncated"] and sample["length"] <= 120
    assert text.startswith("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nQuestion ")
    kept = [i for i in range(6) if f"Question {i}:" in text]
    assert kept == list(range(kept[0], 6)), "whole exchanges, the latest ones"
    # the fewest: keeping one more exchange would not fit
    longer = {"messages": [record["messages"][0], *record["messages"][1 + 2 * (kept[0] - 1) :]]}
    assert whole.process(longer)["length"] > 120
    fits = {"messages": [record["messages"][0], *record["messages"][1 + 2 * kept[0] :]]}
    assert sample["input_ids"].tolist() == whole.process(fits)["input_ids"].tolist()
    # a conversation that fits is untouched
    assert not recipe.process(chat(1))["truncated"]


def test_turns_cuts_the_last_exchange_on_the_right_when_it_alone_is_too_long(
    shared_data: Path,
) -> None:
    recipe = Recipe(
        tokenizer=shared_data / QWEN, template="qwen3", max_length=40, truncation="turns"
    )
    sample = recipe.process(chat(3, words=2, answer=40))
    text = text_of(recipe, sample)
    assert sample["length"] == 40 and "Question 2:" in text and "Question 1:" not in text
    assert text.startswith("<|im_start|>system\nBe brief.")


def test_left_truncation_keeps_the_end(shared_data: Path) -> None:
    right = Recipe(tokenizer=shared_data / QWEN, template="qwen3")
    left = Recipe(tokenizer=shared_data / QWEN, template="qwen3", max_length=30, truncation="left")
    record = chat(2)
    full = right.process(record)
    cut = left.process(record)
    assert cut["truncated"] and cut["length"] == 30
    assert cut["input_ids"].tolist() == full["input_ids"][-30:].tolist()
    assert cut["labels"].tolist() == full["labels"][-30:].tolist()


def test_left_truncation_never_cuts_an_image(tmp_path: Path) -> None:
    from recipe_helpers import tiny_tokenizer

    recipe = Recipe(
        tokenizer=tiny_tokenizer(), template="chatml", image_tokens=20, max_length=30,
        truncation="left", check_images=False,
    )  # fmt: skip
    record = {"messages": [
        {"role": "user", "content": "<image>hi"}, {"role": "assistant", "content": "a cat"}],
        "images": ["a.png"]}  # fmt: skip
    whole = Recipe(tokenizer=tiny_tokenizer(), template="chatml", image_tokens=20,
                   check_images=False).process(record, path=str(tmp_path / "d.jsonl"))  # fmt: skip
    start, end = whole["images"][0]["span"]
    assert whole["length"] - 30 > start  # the cut falls inside the image: moved past it
    cut = recipe.process(record, path=str(tmp_path / "d.jsonl"))
    assert cut["images"] == [] and cut["length"] == whole["length"] - end
    assert cut["input_ids"].tolist() == whole["input_ids"][end:].tolist()


def test_policies_are_checked(shared_data: Path) -> None:
    tok = shared_data / QWEN
    with pytest.raises(ConfigError, match="truncation: expected one of right, left, turns"):
        Recipe(tokenizer=tok, truncation="middle")
    with pytest.raises(ConfigError, match="truncation='turns' says which part a cut keeps"):
        Recipe(tokenizer=tok, max_length=8, overflow="drop", truncation="turns")
    recipe = Recipe(tokenizer=tok, template="qwen3", max_length=20, truncation="left")
    assert recipe.fingerprint()["truncation"] == "left"
    assert "truncation" not in Recipe(tokenizer=tok, template="qwen3").fingerprint()


def test_turns_on_real_multi_turn_data(shared_data: Path) -> None:
    """FastChat's dummy conversations (2-6 turns): every sample fits, none loses its last answer."""
    path = shared_data / "fastchat" / "dummy_conversation.json"
    recipe = Recipe(
        tokenizer=shared_data / QWEN, template="qwen3", max_length=64, truncation="turns"
    )
    plain = Recipe(tokenizer=shared_data / QWEN, template="qwen3")
    cut = 0
    for record in JsonlSource(path)[:120]:
        try:
            sample = recipe(record)
        except SampleError as exc:
            assert exc.kind == "no_trainable_tokens"
            continue
        assert sample["length"] <= 64
        last = json.loads(record.raw)["conversations"][-1]["value"]
        full = plain(record)
        if sample["truncated"]:
            cut += 1
        elif sample["length"] == full["length"]:
            assert np.array_equal(sample["input_ids"], full["input_ids"])
        if sample["length"] < 64:  # not cut on the right: the last answer is whole
            assert last.strip() in text_of(recipe, sample)
    assert cut > 10

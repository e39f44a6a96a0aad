"""Defaults that would train the wrong thing quietly: each is said once, with the option.

Preference pairs and KTO samples read with the default task: a DPO record's ``chosen`` and
``rejected`` (and a KTO record's ``label``) mean nothing to SFT, so the recipe warns once per
file, and a record rejected for having nothing to train names the task to pass instead of
advising ``train_on="all"`` (which would train on the prompts). And ``image_tokens="auto"`` on
Llama 3.2's vocabulary counts LLaVA's 576 tokens where Llama 3.2 Vision writes one.
"""

from __future__ import annotations

import logging

import pytest

from chute import Recipe
from chute.errors import SampleError
from recipe_helpers import tiny_tokenizer

PAIR = {
    "conversations": [{"from": "human", "value": "Which is better?"}],
    "chosen": {"from": "gpt", "value": "This one."},
    "rejected": {"from": "gpt", "value": "That one."},
}
KTO = {
    "messages": [
        {"role": "user", "content": "Hello?"},
        {"role": "assistant", "content": "Go away."},
    ],
    "label": False,
}


@pytest.fixture
def recipe() -> Recipe:
    return Recipe(tokenizer=tiny_tokenizer(), template="chatml")


def test_a_pair_read_as_sft_names_the_preference_task(
    recipe: Recipe, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="chute.recipe"):
        with pytest.raises(
            SampleError,
            match=r"no_trainable_tokens: no token is trained .*: "
            r"the records are preference pairs .*pass task='preference'$",
        ):
            recipe.process(PAIR, path="pairs-one.jsonl")
        (out,) = recipe.batch([PAIR])
        assert isinstance(out, SampleError) and "pass task='preference'" in out.message
        assert "train_on" not in out.message
    said = [r for r in caplog.records if "preference pairs" in r.getMessage()]
    assert len(said) == 2  # once for the file, once for records of no file (the batch)
    assert said[0].getMessage().startswith("pairs-one.jsonl: the records are preference pairs")
    # the right task trains them
    sample = Recipe(tokenizer=tiny_tokenizer(), template="chatml", task="preference").process(PAIR)
    assert sample["chosen_length"] > 0


def test_kto_samples_read_as_sft_are_trained_but_said(
    recipe: Recipe, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="chute.recipe"):
        for _ in range(3):
            assert recipe.process(KTO, path="kto-one.jsonl")["length"] > 0
    said = [r.getMessage() for r in caplog.records if "KTO samples" in r.getMessage()]
    assert said == [
        "kto-one.jsonl: the records are KTO samples, which task='sft' trains as plain SFT on "
        "their conversation alone: pass task='kto'"
    ]


def test_plain_sft_records_say_nothing(recipe: Recipe, caplog: pytest.LogCaptureFixture) -> None:
    plain = {"messages": KTO["messages"], "label": "a class name, not a KTO label"}
    with caplog.at_level(logging.WARNING, logger="chute.recipe"):
        recipe.process(plain, path="plain.jsonl")
        recipe.batch([{"instruction": "Hi", "output": "Hello", "chosen": "yes"}])
    assert not caplog.records


@pytest.mark.shared_data
def test_auto_image_tokens_on_llama_32s_vocabulary_names_its_one_token(
    shared_data, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    """576 (LLaVA-1.5's count) is what ``auto`` gives; Llama 3.2 Vision writes one token.

    Said at the first image counted: a text-only build said it too, for nothing.
    """
    from PIL import Image

    import chute._internal.files as files

    monkeypatch.setattr(files, "_WARNED", set())  # as in a fresh process
    tokenizer = shared_data / "tokenizers" / "llama3.2"
    Image.new("RGB", (32, 32)).save(tmp_path / "a.png")
    chat = [{"role": "user", "content": "<image>What?"}, {"role": "assistant", "content": "A."}]
    with caplog.at_level(logging.WARNING, logger="chute.media"):
        Recipe(tokenizer=tokenizer, template="llama3", image_tokens=1)
        recipe = Recipe(tokenizer=tokenizer, template="llama3", media_root=tmp_path)
        recipe.process({"instruction": "Hi", "output": "Hello"})  # text only: nothing said
        assert not caplog.records
        for _ in range(2):  # said once a process
            recipe.process({"messages": chat, "images": ["a.png"]})
    assert recipe.media.tokens["image"] == "<|image|>"
    (said,) = [r.getMessage() for r in caplog.records]
    assert "counts LLaVA-1.5's 576 tokens" in said and said.endswith("pass image_tokens=1")

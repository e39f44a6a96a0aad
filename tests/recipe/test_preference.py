"""Preference data: pairs (DPO, ORPO, reward models) and rated completions (KTO)."""

from __future__ import annotations

import json
import tempfile
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from chute import JsonlSource, Loader, Recipe, SampleError, World
from chute.cache import open_cache, preprocess
from chute.collate import PackedPreferenceCollate, PreferenceCollate
from chute.formats import FormatReader, FormatSpec
from chute.formats.preference import read_pair, read_rated
from chute.lengths import lengths_of
from chute.recipe.preference import pair_sides
from chute.testing import check_resume
from recipe_helpers import tiny_tokenizer

QWEN = "tokenizers/qwen3"
DPO = "llama-factory/dpo_en_demo.json"


def trl_messages(turns: list[dict[str, str]]) -> list[dict[str, str]]:
    roles = {"human": "user", "gpt": "assistant"}
    return [{"role": roles.get(t["from"], t["from"]), "content": t["value"]} for t in turns]


def contents(conv: Any) -> list[tuple[str, Any]]:
    return [(m.role, m.content) for m in conv.messages]


# -- reading every shape -----------------------------------------------------------------------

SHAPES = {
    "llama-factory sharegpt": {
        "conversations": [{"from": "system", "value": "S"}, {"from": "human", "value": "Q"}],
        "chosen": {"from": "gpt", "value": "good"},
        "rejected": {"from": "gpt", "value": "bad"},
    },
    "llama-factory alpaca": {
        "system": "S", "instruction": "Q", "input": "", "chosen": "good", "rejected": "bad",
    },
    "llama-factory v1": {
        "chosen_messages": [
            {"role": "system", "content": [{"type": "text", "value": "S"}], "loss_weight": 0.0},
            {"role": "user", "content": [{"type": "text", "value": "Q"}], "loss_weight": 0.0},
            {"role": "assistant", "content": [{"type": "text", "value": "good"}]},
        ],
        "rejected_messages": [
            {"role": "system", "content": [{"type": "text", "value": "S"}], "loss_weight": 0.0},
            {"role": "user", "content": [{"type": "text", "value": "Q"}], "loss_weight": 0.0},
            {"role": "assistant", "content": [{"type": "text", "value": "bad"}]},
        ],
    },
    "trl conversational": {
        "prompt": [{"role": "system", "content": "S"}, {"role": "user", "content": "Q"}],
        "chosen": [{"role": "assistant", "content": "good"}],
        "rejected": [{"role": "assistant", "content": "bad"}],
    },
    "trl implicit prompt": {
        "chosen": [{"role": "system", "content": "S"}, {"role": "user", "content": "Q"},
                   {"role": "assistant", "content": "good"}],
        "rejected": [{"role": "system", "content": "S"}, {"role": "user", "content": "Q"},
                     {"role": "assistant", "content": "bad"}],
    },
}  # fmt: skip


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_every_preference_shape_reads_as_two_conversations(shape: str) -> None:
    pair = read_pair(SHAPES[shape], FormatReader(FormatSpec("auto")))
    flat = [(r, c if isinstance(c, str) else "".join(p.value for p in c)) for r, c in
            contents(pair.chosen)]  # fmt: skip
    assert flat == [("system", "S"), ("user", "Q"), ("assistant", "good")]
    assert contents(pair.rejected)[-1][0] == "assistant" and pair.responses == (1, 1)


def test_trl_standard_and_remapped_columns() -> None:
    reader = FormatReader(FormatSpec("auto"))
    pair = read_pair({"prompt": "The sky is", "chosen": " blue.", "rejected": " green."}, reader)
    assert contents(pair.chosen) == [("user", "The sky is"), ("assistant", " blue.")]
    spec = FormatSpec("alpaca", columns={"prompt": "q", "chosen": "yes", "rejected": "no"})
    pair = read_pair({"q": "Q", "yes": "good", "no": "bad"}, FormatReader(spec))
    assert contents(pair.rejected) == [("user", "Q"), ("assistant", "bad")]
    with pytest.raises(SampleError, match="missing_field: a preference record needs a 'rejected'"):
        read_pair({"prompt": "Q", "chosen": "good"}, reader)
    rated = read_rated({"prompt": "Q", "completion": "A", "label": True}, reader)
    assert contents(rated.conversation) == [("user", "Q"), ("assistant", "A")] and rated.label
    with pytest.raises(SampleError, match="wrong_type: expected true or false, got a string"):
        read_rated({"prompt": "Q", "completion": "A", "label": "yes"}, reader)


def test_pairs_without_a_shared_prompt_and_kto_records_ending_on_a_user_are_rejected() -> None:
    reader = FormatReader(FormatSpec("auto"))
    differ = {  # two whole conversations that answer different questions
        "chosen": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}],
        "rejected": [{"role": "user", "content": "3+3?"}, {"role": "assistant", "content": "7"}],
    }
    with pytest.raises(SampleError, match="no_shared_prompt: the 'chosen' and 'rejected'"):
        read_pair(differ, reader)
    v1 = SHAPES["llama-factory v1"]
    other_system = [{"role": "system", "content": "Be rude."}, *v1["rejected_messages"][1:]]
    with pytest.raises(SampleError, match="no_shared_prompt"):
        read_pair({**v1, "rejected_messages": other_system}, reader)
    # TRL's implicit prompt over plain texts: said so, not "no format recognises ... completion"
    with pytest.raises(SampleError, match="missing_field: a preference record with text 'chosen'"):
        read_pair({"chosen": "Q: hi A: yes", "rejected": "Q: hi A: no"}, reader)
    # an error inside a response names the record's field, not the merged conversation's
    ranking = {
        "conversations": [{"from": "human", "value": "q"}],
        "chosen": {"from": "gpt", "value": 7},
        "rejected": {"from": "gpt", "value": "b"},
    }
    with pytest.raises(SampleError, match=r"\(field 'chosen.value'\)"):
        read_pair(ranking, reader)
    for messages in (
        [{"role": "user", "content": "Tell me a secret."}],
        [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": "x"},
            {"role": "user", "content": "you are wrong"},
        ],
    ):
        with pytest.raises(SampleError, match="bad_role_order: the rated response is the last"):
            read_rated({"messages": messages, "label": True}, reader)


def test_dataset_info_ranking_entries(shared_data: Path) -> None:
    info = shared_data / "llama-factory" / "dataset_info.json"
    spec = FormatSpec.from_dataset_info(info, "dpo_en_demo")
    recipe = Recipe(tokenizer=shared_data / QWEN, format=spec, task="preference")
    sample = recipe(JsonlSource(shared_data / DPO)[0])
    assert sample["chosen_length"] < sample["length"]
    kto = FormatSpec.from_dataset_info(info, "kto_en_demo")
    assert kto.columns["kto_tag"] == "label"


# -- parity with TRL ---------------------------------------------------------------------------


def trl_tokenized(rows: list[dict[str, Any]], tokenizer_dir: Path) -> list[dict[str, Any]]:
    """TRL's own DPO preprocessing (``DPOTrainer._prepare_dataset``) of ``rows``."""
    pytest.importorskip("trl")
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import DPOConfig
    from trl.trainer.dpo_trainer import DPOTrainer

    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    args = DPOConfig(
        output_dir=tempfile.mkdtemp(), max_length=None, report_to=[], use_cpu=True, bf16=False
    )
    trainer = types.SimpleNamespace(_tokenizer=tok)  # all _prepare_dataset reads of self
    out = DPOTrainer._prepare_dataset(trainer, Dataset.from_list(rows), tok, args, "train")
    return list(out)


def assert_same_as_trl(sample: dict[str, Any], row: dict[str, Any], what: str) -> None:
    prompt = row["prompt_ids"]
    for side, key in zip(pair_sides(sample), ("chosen_ids", "rejected_ids"), strict=True):
        ids = prompt + row[key]
        assert side["input_ids"].tolist() == ids, f"{what}: {key} ids"
        mask = [False] * len(prompt) + [True] * len(row[key])
        assert (side["labels"] != -100).tolist() == mask, f"{what}: {key} labels"


def test_pairs_equal_trl_dpo_tokenization_on_real_rows(shared_data: Path) -> None:
    """All 300 rows of LLaMA-Factory's dpo_en_demo, read in its own form and in TRL's
    conversational form, give TRL's ids and completion masks (Qwen3 and its chat template)."""
    rows = json.loads((shared_data / DPO).read_text())
    trl_rows = [
        {
            "prompt": trl_messages(r["conversations"]),
            "chosen": trl_messages([r["chosen"]]),
            "rejected": trl_messages([r["rejected"]]),
        }
        for r in rows
    ]
    expected = trl_tokenized(trl_rows, shared_data / QWEN)
    recipe = Recipe(tokenizer=shared_data / QWEN, task="preference")  # the tokenizer's template
    for i, (raw, trl_row, want) in enumerate(zip(rows, trl_rows, expected, strict=True)):
        assert_same_as_trl(recipe.process(raw), want, f"row {i} (LLaMA-Factory form)")
        assert_same_as_trl(recipe.process(trl_row), want, f"row {i} (TRL form)")


@pytest.mark.parametrize("template", [None, "qwen3"])
def test_pairs_equal_trl_under_enable_thinking_false(shared_data: Path, template: Any) -> None:
    """Qwen3 prompted with an empty think block (enable_thinking: false): TRL's prompt is that
    generation prompt, so a chosen side with reasoning is trained from after ``<think>``, and an
    empty response is its end of turn alone; the built-in and the real template agree."""
    q = {"role": "user", "content": "2+2?"}
    answers = [
        {"role": "assistant", "content": "<think>\nadd\n</think>\n\n4"},
        {"role": "assistant", "content": "4", "reasoning_content": "add them"},
        {"role": "assistant", "content": ""},
        {"role": "assistant", "content": "4"},
    ]
    five = {"role": "assistant", "content": "5"}
    rows = [{"prompt": [q], "chosen": [a], "rejected": [five]} for a in answers]
    variables = {"enable_thinking": False}
    expected = trl_tokenized(
        [{**r, "chat_template_kwargs": variables} for r in rows], shared_data / QWEN
    )
    recipe = Recipe(
        tokenizer=shared_data / QWEN, template=template, template_vars=variables, task="preference"
    )
    for i, (row, want) in enumerate(zip(rows, expected, strict=True)):
        assert_same_as_trl(recipe.process(row), want, f"row {i}")


def test_plain_pairs_equal_trl_standard_format(shared_data: Path) -> None:
    rows = json.loads((shared_data / DPO).read_text())
    plain = [
        {"prompt": r["conversations"][-1]["value"], "chosen": r["chosen"]["value"],
         "rejected": r["rejected"]["value"]}
        for r in rows
    ]  # fmt: skip
    expected = trl_tokenized(plain, shared_data / QWEN)
    # TRL's standard format has no chat template: prompt + response + eos, as template="raw"
    recipe = Recipe(tokenizer=shared_data / QWEN, template="raw", task="preference")
    for i, (row, want) in enumerate(zip(plain, expected, strict=True)):
        assert_same_as_trl(recipe.process(row), want, f"row {i}")


# -- KTO ---------------------------------------------------------------------------------------


def test_kto_rows_train_the_rated_answer(shared_data: Path) -> None:
    path = shared_data / "llama-factory" / "kto_en_demo.json"
    rows = json.loads(path.read_text())
    recipe = Recipe(tokenizer=shared_data / QWEN, template="qwen3", task="kto")
    plain = Recipe(tokenizer=shared_data / QWEN, template="qwen3", train_on="last")
    for i, record in enumerate(JsonlSource(path)[:50]):
        sample = recipe(record)
        assert sample["label"] is rows[i]["label"]
        sft = plain(record)  # same text; the last answer, through the end, is trained
        assert sample["input_ids"].tolist() == sft["input_ids"].tolist()
        start = int(np.argmax(sft["labels"] != -100))
        assert (sample["labels"][:start] == -100).all()
        assert (sample["labels"][start:] == sample["input_ids"][start:]).all()
    loader = Loader(path, recipe, batch_size=8, world=World(0, 1), shuffle=False)
    batch = next(iter(loader))
    assert batch["label"].tolist() == [rows[i]["label"] for i in range(8)]


# -- max_length, one policy for both sides ------------------------------------------------------


def pair_record(prompt_words: int, chosen_words: int, rejected_words: int) -> dict[str, Any]:
    return {
        "instruction": "question " * prompt_words,
        "chosen": "good " * chosen_words,
        "rejected": "bad " * rejected_words,
    }


def test_max_length_applies_to_both_sides_and_keeps_the_pair_whole() -> None:
    tok = tiny_tokenizer()
    whole = Recipe(tokenizer=tok, template="chatml", task="preference")
    record = pair_record(5, 3, 40)
    c, r = pair_sides(whole.process(record))
    assert len(c["input_ids"]) < 60 < len(r["input_ids"])
    drop = Recipe(tokenizer=tok, template="chatml", task="preference", max_length=60,
                  overflow="drop")  # fmt: skip
    with pytest.raises(SampleError, match="too_long"):
        drop.process(record)  # one side too long: the pair goes
    cut = Recipe(tokenizer=tok, template="chatml", task="preference", max_length=60)
    sample = cut.process(record)
    c2, r2 = pair_sides(sample)
    assert c2["input_ids"].tolist() == c["input_ids"].tolist()  # it fits: untouched
    assert r2["input_ids"].tolist() == r["input_ids"][:60].tolist() and sample["truncated"]
    with pytest.raises(SampleError, match="no_trainable_tokens"):
        cut.process(pair_record(80, 3, 3))  # the prompt alone fills max_length: TRL drops it


def test_turns_drop_the_same_exchanges_from_both_sides() -> None:
    tok = tiny_tokenizer()
    turns = [
        {"role": r, "content": f"{r} {i} " * 6} for i in range(4) for r in ("user", "assistant")
    ]
    record = {"prompt": [{"role": "system", "content": "S"}, *turns[:-1]],
              "chosen": [{"role": "assistant", "content": "yes"}],
              "rejected": [{"role": "assistant", "content": "no"}]}  # fmt: skip
    recipe = Recipe(tokenizer=tok, template="chatml", task="preference", max_length=80,
                    truncation="turns")  # fmt: skip
    c, r = pair_sides(recipe.process(record))
    text_c, text_r = (tok.decode(s["input_ids"].tolist()) for s in (c, r))
    assert len(c["input_ids"]) <= 80 and len(r["input_ids"]) <= 80
    assert text_c.startswith("<|im_start|>system\nS") and "user 3" in text_c
    assert "user 0" not in text_c and text_c.replace("yes", "no") == text_r


# -- plans, collate, cache, resume ---------------------------------------------------------------


@pytest.fixture
def pairs(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    path = tmp_path / "pairs.jsonl"
    with open(path, "w") as f:
        for i in range(40):
            p, c, r = (int(x) for x in rng.integers(1, 30, 3))
            f.write(json.dumps(pair_record(p, c, r) | {"instruction": f"q{i} " * p}) + "\n")
    return path


def pair_recipe(**kw: Any) -> Recipe:
    return Recipe(tokenizer=tiny_tokenizer(), template="chatml", task="preference", **kw)


@pytest.mark.parametrize("plan", ["random", "grouped", "budget", "packed"])
def test_every_pair_exactly_once_and_whole(pairs: Path, plan: str) -> None:
    recipe = pair_recipe(max_length=256)
    for world_size in (1, 3):
        seen, counts = [], set()
        for rank in range(world_size):
            loader = Loader(pairs, recipe, batch_size=4, plan=plan,
                            world=World(rank, world_size), seed=1)  # fmt: skip
            batches = list(loader)
            counts.add(len(batches))
            for batch in batches:
                ids = [i for i in batch["sample_ids"].tolist() if i >= 0]
                seen += ids
                if plan == "packed":
                    # both sides of every pair in the batch, chosen first
                    index, chosen = batch["pair_index"], batch["chosen_mask"]
                    for k in range(len(ids)):
                        assert bool(chosen[index == k].any()) and bool((~chosen)[index == k].any())
                elif ids:
                    assert batch["chosen_input_ids"].shape[0] == len(ids)
                    assert batch["rejected_input_ids"].shape[0] == len(ids)
        assert len(counts) == 1 and sorted(seen) == list(range(40)), (plan, world_size)


def test_pair_lengths_are_the_sum_and_the_longer_side(pairs: Path) -> None:
    recipe = pair_recipe()
    lens = lengths_of(JsonlSource(pairs), recipe)
    assert lens.sequences == 2
    for i, record in enumerate(JsonlSource(pairs)):
        c, r = pair_sides(recipe(record))
        assert lens.length[i] == len(c["input_ids"]) + len(r["input_ids"])
        assert lens.pad_lengths[i] == max(len(c["input_ids"]), len(r["input_ids"]))


def test_collates_match_the_sides(pairs: Path) -> None:
    recipe = pair_recipe()
    samples = [recipe(r) for r in JsonlSource(pairs)[:3]]
    batch = PreferenceCollate(pad_id=0)(samples)
    for k, sample in enumerate(samples):
        for side, name in zip(pair_sides(sample), ("chosen", "rejected"), strict=True):
            n = len(side["input_ids"])
            assert batch[f"{name}_input_ids"][k, :n].tolist() == side["input_ids"].tolist()
            assert batch[f"{name}_labels"][k, :n].tolist() == side["labels"].tolist()
            assert int(batch[f"{name}_attention_mask"][k].sum()) == n
    packed = PackedPreferenceCollate(512, pad_id=0)(samples, rows=[2, 1])
    ids, index, chosen = packed["input_ids"], packed["pair_index"], packed["chosen_mask"]
    for k, sample in enumerate(samples):
        c, r = pair_sides(sample)
        assert ids[(index == k) & chosen].tolist() == c["input_ids"].tolist()
        assert ids[(index == k) & ~chosen].tolist() == r["input_ids"].tolist()


def test_a_cache_of_pairs_loads_the_same_batches(pairs: Path, tmp_path: Path) -> None:
    from cache_helpers import write_tokenizer

    tok = write_tokenizer(tmp_path / "tok")
    recipe = Recipe(tokenizer=tok, template="chatml", task="preference", max_length=256)
    preprocess({"sources": [str(pairs)], "out": str(tmp_path / "cache"),
                "recipe": {"tokenizer": str(tok), "template": "chatml", "task": "preference",
                           "max_length": 256},
                "cache": {"chunk_size": 16, "workers": 1}})  # fmt: skip
    cache = open_cache(tmp_path / "cache", recipe=recipe)
    assert cache.task == "preference" and cache.longest is not None
    for plan in ("grouped", "packed"):
        live = Loader(pairs, recipe, batch_size=4, plan=plan, world=World(0, 1), seed=2)
        cached = Loader(tmp_path / "cache", recipe, batch_size=4, plan=plan, world=World(0, 1),
                        seed=2)  # fmt: skip
        for a, b in zip(live, cached, strict=True):
            assert sorted(a) == sorted(b)
            for key in a:
                assert a[key].tolist() == b[key].tolist(), (plan, key)


def test_resume_over_pairs(pairs: Path) -> None:
    recipe = pair_recipe(max_length=256)

    def make(world: World = World(0, 1), num_workers: int = 0) -> Loader:
        return Loader(pairs, recipe, batch_size=3, plan="grouped", world=world,
                      num_workers=num_workers, seed=4)  # fmt: skip

    assert check_resume(make, epochs=2, every=3) > 3


def test_preference_takes_images_in_the_prompt(tmp_path: Path) -> None:
    recipe = Recipe(tokenizer=tiny_tokenizer(), template="chatml", task="preference",
                    image_tokens=4, check_images=False)  # fmt: skip
    record = {"messages": [{"role": "user", "content": "<image>what?"}], "images": ["a.png"],
              "chosen": {"role": "assistant", "content": "a"},
              "rejected": {"role": "assistant", "content": "b"}}  # fmt: skip
    sample = recipe.process(record, path=str(tmp_path / "d.jsonl"))
    (image,) = sample["images"]
    k = sample["chosen_length"]
    assert image["span"][1] <= k and image["rejected_span"][0] >= k
    assert (
        image["span"][1] - image["span"][0]
        == 4
        == image["rejected_span"][1] - image["rejected_span"][0]
    )


def test_elastic_resume_over_pairs(pairs: Path) -> None:
    from chute.testing import check_elastic

    recipe = pair_recipe(max_length=256)

    def make(world: World) -> Loader:
        return Loader(pairs, recipe, batch_size=3, plan="grouped", world=world, seed=4)

    consumed, delivered = check_elastic(make, old_world_size=3, new_world_size=2, steps=2)
    assert sorted([*consumed.tolist(), *delivered.tolist()]) == list(range(40))

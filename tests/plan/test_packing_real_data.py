"""Packing real instruction data (../shared/data) tokenized with Qwen3: at the lower bound."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from chute import JsonlSource, Loader, PackedPlanner, Recipe, World
from chute.lengths import Lengths, lengths_of
from chute.plan import GroupedPlanner, RandomPlanner, padding_report

pytestmark = pytest.mark.shared_data

INSTRUCTION_SETS = [
    "fastchat/dummy_conversation.json",
    "llama-factory/alpaca_en_demo.json",
    "llama-factory/alpaca_zh_demo.json",
    "llama-factory/glaive_toolcall_en_demo.json",
    "llama-factory/identity.json",
    "llama-factory/v1_sft_demo.jsonl",
    "torchtune/alpaca_tiny.json",
    "xtuner/resource/openai_sft.jsonl",
    "xtuner/resource/mllm_sft_text_example_data.jsonl",
]


@pytest.fixture(scope="module")
def real(shared_data: Path) -> tuple[JsonlSource, Recipe, Lengths]:
    source = JsonlSource([shared_data / name for name in INSTRUCTION_SETS])
    recipe = Recipe(tokenizer=shared_data / "tokenizers/qwen3/tokenizer.json", template="qwen3")
    return source, recipe, lengths_of(source, recipe, workers=2, cache=False)


@pytest.mark.parametrize("max_length", [1024, 2048, 4096])
def test_packing_is_within_one_percent_of_the_lower_bound(real, max_length: int) -> None:  # type: ignore[no-untyped-def]
    source, _, lengths = real
    assert lengths.num_valid == len(source) > 3000  # every real record is a valid sample
    fed = np.minimum(lengths.length, max_length)
    bound = -(-int(fed.sum()) // max_length)
    planner = PackedPlanner(max_length, batch_size=16, lengths=fed)
    plan = planner.build(len(source), epoch=0, world_size=8)
    assert bound <= plan.stats["rows"] <= 1.01 * bound
    dealt, totals = [], []
    for k, r in itertools.product(range(plan.num_batches), range(8)):
        ids, rows, _ = plan.layout(r, k)
        dealt.append(ids)
        starts = np.concatenate([[0], np.cumsum(rows)])
        totals += [int(fed[ids[a:b]].sum()) for a, b in itertools.pairwise(starts)]
    assert max(totals) <= max_length  # never over max_length, never a sample split
    assert np.array_equal(np.sort(np.concatenate(dealt)), np.arange(len(source)))
    report = padding_report(plan, fed)
    assert report.efficiency >= 0.99 * int(fed.sum()) / (bound * max_length)


def test_grouping_pads_far_less_than_random_batches(real) -> None:  # type: ignore[no-untyped-def]
    source, _, lengths = real
    fed = np.minimum(lengths.length, 2048)
    grouped = GroupedPlanner(16, lengths=fed).build(len(source), epoch=0, world_size=8)
    random = RandomPlanner(16).build(len(source), epoch=0, world_size=8)
    g, r = padding_report(grouped, fed), padding_report(random, fed)
    assert g.steps == r.steps and g.tokens == r.tokens
    assert g.efficiency > 0.9 and r.efficiency < 0.5


def test_packed_batches_carry_exactly_the_recipes_tokens(real) -> None:  # type: ignore[no-untyped-def]
    source, recipe, lengths = real
    planner = PackedPlanner(2048, batch_size=2, seed=3, lengths=lengths)
    loader = Loader(source, recipe, plan=planner, world=World(rank=1, world_size=4))
    batch = next(iter(loader))
    for row, ids in enumerate(batch["row_sample_ids"].tolist()):
        at = 0
        for i in (x for x in ids if x >= 0):
            sample = recipe(source[i])
            n = len(sample["input_ids"])
            assert batch["input_ids"][row, at : at + n].tolist() == sample["input_ids"].tolist()
            labels = sample["labels"].tolist()
            assert batch["labels"][row, at + 1 : at + n].tolist() == labels[1:]
            at += n
        assert at <= 2048

"""The recipe contract: what plans, lengths, the cache and collate read of a recipe."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from chute import Loader, World
from chute.errors import ConfigError
from chute.lengths import lengths_of
from chute.recipe import LengthPolicy, Recipe
from chute.recipe.contract import PlainRecipe, RecipeBase, RecipeContract, as_recipe
from chute.recipe.preference import TASKS
from chute.recipe.tasks import TASK_STRATEGIES, KtoTask, PreferenceTask, SftTask
from chute.sources.record import Record
from recipe_helpers import tiny_tokenizer


def doubled(record: Record) -> dict[str, Any]:
    """A plain function: each record's ids twice over."""
    return {"input_ids": list(record.data["input_ids"]) * 2}


class HalfDeclared:
    """Says its windows are split but not how long they are: the silent loss the check stops."""

    overflow = "split"
    task = "sft"

    def __call__(self, record: Record) -> dict[str, Any]:
        return dict(record.data)


class Capped(RecipeBase):
    """A recipe class of one's own: the contract's defaults, ``max_length`` of its own."""

    max_length = 3

    def __call__(self, record: Record) -> dict[str, Any]:
        return {"input_ids": list(record.data["input_ids"])[: self.max_length]}


def sample_ids(loader: Loader) -> list[int]:
    return sorted(i for batch in loader for i in batch["sample_ids"].tolist())


def test_a_plain_function_is_an_sft_recipe_without_limits_and_loses_no_sample(id_source) -> None:  # type: ignore[no-untyped-def]
    source = id_source(23)
    loader = Loader(source, doubled, batch_size=4, world=World(), shuffle=False)
    assert isinstance(loader.recipe, PlainRecipe)
    assert (loader.recipe.task, loader.recipe.overflow, loader.recipe.max_length) == (
        "sft",
        "truncate",
        None,
    )
    assert loader.recipe.media is None
    assert sample_ids(loader) == list(range(23))
    first = next(iter(Loader(source, doubled, batch_size=1, world=World(), shuffle=False)))
    assert first["input_ids"].tolist() == [[0, 0]]


def test_a_callable_whose_declarations_need_what_it_leaves_out_is_refused_where_it_enters(
    id_source,
) -> None:  # type: ignore[no-untyped-def]
    source = id_source(5)
    missing = r"HalfDeclared declares overflow='split' without max_length \(the windows' length\)"
    with pytest.raises(ConfigError, match=missing):
        Loader(source, HalfDeclared(), batch_size=2, world=World())
    with pytest.raises(ConfigError, match=missing):
        lengths_of(source, HalfDeclared(), workers=1)
    with pytest.raises(ConfigError, match="expected a Recipe, a callable record -> sample"):
        as_recipe(42)

    class Capped:  # declares max_length alone: kept, the rest defaults
        max_length = 6

        def __call__(self, record: Record) -> dict[str, Any]:
            return dict(record.data)

    capped = as_recipe(Capped())
    assert (capped.max_length, capped.task, capped.overflow) == (6, "sft", "truncate")


def test_a_recipe_class_of_ones_own_is_read_through_the_contract(id_source) -> None:  # type: ignore[no-untyped-def]
    source = id_source(30)
    loader = Loader(source, Capped(), batch_size=2, plan="packed", world=World(), shuffle=False)
    assert loader.recipe.max_length == 3
    rows = [batch["input_ids"].shape[1] for batch in loader]
    assert set(rows) == {3}  # packed rows as wide as the recipe's max_length
    assert sample_ids(loader) == list(range(30))


def test_chute_recipes_meet_the_contract_and_pick_one_strategy_per_task() -> None:
    assert tuple(TASK_STRATEGIES) == TASKS
    kinds = {"sft": SftTask, "preference": PreferenceTask, "kto": KtoTask}
    for task, kind in kinds.items():
        recipe = Recipe(tokenizer=tiny_tokenizer(), template="chatml", task=task)
        assert isinstance(recipe, RecipeContract)
        assert as_recipe(recipe) is recipe
        assert isinstance(recipe.strategy, kind)
        assert recipe.strategy.batched == (task == "sft")


def test_a_plain_function_keeps_its_own_fingerprint_and_tokenizer() -> None:
    class Printed:
        tokenizer = "tok"

        def __call__(self, record: Any) -> dict[str, Any]:
            return {"input_ids": np.array([1])}

        def fingerprint(self) -> dict[str, Any]:
            return {"kind": "printed"}

    plain = as_recipe(Printed())
    assert isinstance(plain, PlainRecipe)
    assert plain.fingerprint() == {"kind": "printed"}
    assert plain.tokenizer == "tok"
    assert as_recipe(doubled).fingerprint() is None  # nothing to key a cache on


def test_the_length_options_are_one_checked_value_and_the_keywords_still_work() -> None:
    tok = tiny_tokenizer()
    policy = LengthPolicy(max_length=8, overflow="split", stride=2)
    grouped = Recipe(tokenizer=tok, template="chatml", length=policy)
    loose = Recipe(tokenizer=tok, template="chatml", max_length=8, overflow="split", stride=2)
    assert grouped.fingerprint() == loose.fingerprint()
    assert (grouped.max_length, grouped.overflow, grouped.stride) == (8, "split", 2)
    with pytest.raises(ConfigError, match=r"length options given twice: .* and max_length"):
        Recipe(tokenizer=tok, template="chatml", length=policy, max_length=4)
    with pytest.raises(ConfigError, match="overflow='split' cuts documents into windows"):
        LengthPolicy(overflow="split")
    with pytest.raises(ConfigError, match="split' cuts one sequence into windows"):
        Recipe(tokenizer=tok, template="chatml", task="kto", length=policy)  # needs the task


def test_a_recipe_class_meeting_the_contract_is_checked_too() -> None:
    class SplitWithoutLength(RecipeBase):
        overflow = "split"

    with pytest.raises(ConfigError, match="SplitWithoutLength declares overflow='split' without"):
        as_recipe(SplitWithoutLength())

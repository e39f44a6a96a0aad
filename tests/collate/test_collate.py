"""Padded collation: shapes, padding values, masks, multiples, the placeholder, pad ids."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from chute import Collate, ConfigError, Loader, World


def sample(ids: list[int], labels: list[int] | None = None) -> dict:
    out = {"input_ids": np.array(ids, dtype=np.int32)}
    if labels is not None:
        out["labels"] = np.array(labels, dtype=np.int32)
    return out


def test_pads_to_the_longest_with_labels_ignored_and_a_mask() -> None:
    batch = Collate(pad_id=9)([sample([1, 2, 3], [-100, 2, 3]), sample([5])])
    assert batch["input_ids"].tolist() == [[1, 2, 3], [5, 9, 9]]
    assert batch["labels"].tolist() == [[-100, 2, 3], [5, -100, -100]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]
    assert all(t.dtype == torch.int64 and t.is_contiguous() for t in batch.values())


def test_pad_to_a_multiple() -> None:
    batch = Collate(pad_to_multiple_of=8)([sample(list(range(9))), sample([1])])
    assert batch["input_ids"].shape == (2, 16)
    assert int(batch["attention_mask"].sum()) == 10


def test_the_placeholder_is_one_row_without_loss() -> None:
    batch = Collate(pad_id=2, pad_to_multiple_of=4)([])
    assert batch["input_ids"].tolist() == [[2, 2, 2, 2]]
    assert batch["labels"].tolist() == [[-100] * 4]
    assert batch["attention_mask"].tolist() == [[1, 0, 0, 0]]
    assert "sample_ids" not in batch  # the loader adds them, from its plan


class FakeTokenizer:
    pad_token_id = 151643


class FakeRecipe:
    tokenizer = FakeTokenizer()

    def __call__(self, record):
        return record


def test_the_pad_id_comes_from_the_recipe_when_it_knows_one() -> None:
    data = [{"input_ids": [1, 2]}, {"input_ids": [3]}]
    loader = Loader(data, FakeRecipe(), batch_size=2, shuffle=False, world=World())
    assert next(iter(loader))["input_ids"].tolist() == [[1, 2], [3, 151643]]
    explicit = Loader(data, FakeRecipe(), batch_size=2, shuffle=False, world=World(), pad_id=7)
    assert next(iter(explicit))["input_ids"].tolist() == [[1, 2], [3, 7]]


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ConfigError, match="pad_id must be a token id"):
        Collate(pad_id=-1)
    with pytest.raises(ConfigError, match="pad_to_multiple_of must be a positive int"):
        Collate(pad_to_multiple_of=0)

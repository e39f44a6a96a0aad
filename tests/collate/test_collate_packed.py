"""Packed collation: rows, labels, position ids, cu_seqlens, the block mask, the placeholder."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
import torch

from chute import ConfigError, PackedCollate
from chute.collate.packed import hf_packed_inputs, row_sample_ids


def sample(ids: list[int], labels: list[int] | None = None) -> dict:
    out = {"input_ids": np.array(ids, dtype=np.int32)}
    if labels is not None:
        out["labels"] = np.array(labels, dtype=np.int32)
    return out


def test_rows_hold_their_samples_back_to_back_with_positions_restarting() -> None:
    batch = PackedCollate(8, pad_id=9)(
        [sample([1, 2, 3], [-100, 2, 3]), sample([4, 5]), sample([6, 7, 8, 9, 10, 11, 12])],
        rows=[2, 1],
    )
    assert batch["input_ids"].tolist() == [[1, 2, 3, 4, 5, 9, 9, 9], [6, 7, 8, 9, 10, 11, 12, 9]]
    assert batch["labels"].tolist() == [
        [-100, 2, 3, -100, 5, -100, -100, -100],  # each sample's first label masked
        [-100, 7, 8, 9, 10, 11, 12, -100],
    ]
    assert batch["position_ids"].tolist() == [[0, 1, 2, 0, 1, 0, 1, 2], [0, 1, 2, 3, 4, 5, 6, 0]]
    assert batch["cu_seqlens"].tolist() == [0, 3, 5, 8, 15, 16]
    assert batch["cu_seqlens"].dtype == torch.int32 and int(batch["max_seqlen"]) == 7
    assert "attention_mask" not in batch  # a 2-D padding mask would let samples see each other


def test_cu_seqlens_are_where_position_ids_restart() -> None:
    rng = np.random.default_rng(0)
    lens = rng.integers(1, 30, 40)
    rows = [3, 1, 4, 2, 5, 6, 7, 12]
    batch = PackedCollate(512)([sample(list(range(n))) for n in lens], rows=rows)
    flat = batch["position_ids"].reshape(-1)
    starts = torch.nonzero(flat == 0).reshape(-1).tolist()
    assert batch["cu_seqlens"].tolist() == [*starts, flat.numel()]
    segs = np.diff(batch["cu_seqlens"].numpy())
    assert int(batch["max_seqlen"]) == segs.max()
    kept = batch["labels"].reshape(-1) != -100
    assert int(kept.sum()) == int((lens - 1).sum())  # every token but each first is a target


def test_the_block_mask_is_causal_within_each_segment_only() -> None:
    batch = PackedCollate(6, block_mask=True)([sample([1, 2]), sample([3, 4, 5])], rows=[2])
    mask = batch["block_attention_mask"]
    assert mask.shape == (1, 1, 6, 6) and mask.dtype == torch.bool
    assert mask[0, 0].int().tolist() == [
        [1, 0, 0, 0, 0, 0],
        [1, 1, 0, 0, 0, 0],
        [0, 0, 1, 0, 0, 0],
        [0, 0, 1, 1, 0, 0],
        [0, 0, 1, 1, 1, 0],
        [0, 0, 0, 0, 0, 1],  # the padding tail attends to itself: no fully masked row
    ]


def test_rows_as_wide_as_the_fullest_rounded_to_a_multiple() -> None:
    collate = PackedCollate(64, pad_to_max_length=False, pad_to_multiple_of=8)
    batch = collate([sample([1] * 5), sample([2] * 6), sample([3] * 2)], rows=[2, 1])
    assert batch["input_ids"].shape == (2, 16)
    assert batch["cu_seqlens"].tolist() == [0, 5, 11, 16, 18, 32]


def test_a_batch_without_samples_is_one_row_without_loss() -> None:
    batch = PackedCollate(4, pad_id=2)([], rows=[])
    assert batch["input_ids"].tolist() == [[2, 2, 2, 2]]
    assert batch["labels"].tolist() == [[-100] * 4]
    assert batch["cu_seqlens"].tolist() == [0, 4] and int(batch["max_seqlen"]) == 4


def test_a_row_longer_than_max_length_is_cut_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="chute.collate"):
        batch = PackedCollate(5)([sample([1, 2, 3]), sample([4, 5, 6])], rows=[2])
    assert batch["input_ids"].tolist() == [[1, 2, 3, 4, 5]]
    assert batch["cu_seqlens"].tolist() == [0, 3, 5]
    assert "a packed row held more than max_length=5 tokens" in caplog.text


def test_split_pieces_mask_their_first_label_like_whole_samples() -> None:
    piece = {**sample([7, 8, 9]), "piece_start": 40}  # a continuation from the previous row
    batch = PackedCollate(4)([piece], rows=[1])
    assert batch["labels"].tolist() == [[-100, 8, 9, -100]]
    assert batch["position_ids"].tolist() == [[0, 1, 2, 0]]


def test_row_sample_ids_and_hf_inputs() -> None:
    assert row_sample_ids([7, 2, 5], [2, 0, 1]).tolist() == [[7, 2], [5, -1]]
    assert row_sample_ids([], []).tolist() == [[-1]]
    batch = PackedCollate(4)([sample([1, 2]), sample([3])], rows=[1, 1])
    hf = hf_packed_inputs(batch)
    assert hf["input_ids"].tolist() == [[1, 2, 0, 0, 3, 0, 0, 0]]
    assert hf["position_ids"].tolist() == [[0, 1, 0, 1, 0, 0, 1, 2]]
    assert hf["cu_seq_lens_q"].tolist() == [0, 2, 4, 5, 8] and hf["max_length_k"] == 3


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ConfigError, match="max_length must be a positive int, got 0"):
        PackedCollate(0)
    with pytest.raises(ConfigError, match=r"pad_id must be a token id \(an int >= 0\), got -1"):
        PackedCollate(8, pad_id=-1)
    with pytest.raises(ConfigError, match=r"rows must give the number of samples in each row"):
        PackedCollate(8)([sample([1]), sample([2])], rows=[1])


def test_hf_packed_inputs_of_a_padded_batch_says_what_it_takes() -> None:
    from chute import Collate

    padded = Collate()([{"input_ids": np.array([1, 2, 3])}, {"input_ids": np.array([4])}])
    with pytest.raises(ConfigError, match=r"takes a packed batch .*a padded batch goes to the"):
        hf_packed_inputs(padded)


@pytest.mark.slow
def test_hf_packed_inputs_carry_onevisions_images_per_sample(tmp_path: Path) -> None:
    # without batch_num_images OneVision tiles each image of a multi-image sample, and a packed
    # row's image features outnumber its image tokens (the model raised)
    import json

    import torch
    from PIL import Image

    from chute import Loader, Recipe
    from llava_helpers import tiny_model
    from recipe_helpers import tiny_tokenizer

    rng = np.random.default_rng(0)
    for name, (w, h) in {"a.png": (333, 217), "b.png": (56, 700), "c.png": (1000, 56)}.items():
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(tmp_path / name)

    def record(question: str, answer: str, images: list[str]) -> dict:
        turns = [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
        return {"messages": turns, "images": images}

    records = [
        record("<image><image>two", "t w o", ["a.png", "b.png"]),
        record("<image>one", "o n e", ["c.png"]),
    ]
    (tmp_path / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    tok = tiny_tokenizer()
    recipe = Recipe(
        tokenizer=tok,
        template="chatml",
        image_tokens="llava-onevision",
        image_token="<image>",
        image_token_id=tok.vocab_size,
        max_length=8000,
    )
    loader = Loader(tmp_path / "data.jsonl", recipe, batch_size=1, plan="packed", shuffle=False)
    batch = next(iter(loader))
    inputs = hf_packed_inputs(batch)
    assert inputs["batch_num_images"].tolist() == [2, 1]
    model = tiny_model(
        "llava-onevision", vocab_size=tok.vocab_size + 1, image_token_id=tok.vocab_size
    )
    with torch.no_grad():
        assert torch.isfinite(model(**inputs).loss)

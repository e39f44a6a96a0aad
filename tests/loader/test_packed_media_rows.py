"""Packed rows shorter than a sample: text is cut to the row, media is never cut through.

The plan gives a sample longer than a row a row of its own, which the packed collate cuts.
Cut through an image's tokens, the batch would carry more pixels than image tokens and the
model stops at its first step; such a sample is left out before the plan deals it, counted in
``Loader.excluded``, with the fix in a warning (and, for a video the lengths do not count, by
the worker that meets it, with the fix in its message).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from cache_helpers import write_image_records, write_tokenizer
from chute import Loader, Recipe
from chute.media import ImageTransform, MediaStage

TOKENS_PER_IMAGE = 16


@pytest.fixture
def data(tmp_path: Path) -> tuple[Path, Recipe]:
    path = write_image_records(tmp_path, 6)  # ids 0-5: an image and a short exchange
    with open(path, "a") as f:  # ids 6-9: text, two of them longer than a row of 24 tokens
        for i, words in enumerate([3, 40, 2, 60]):
            f.write(json.dumps({"instruction": f"Say {i}", "output": " ".join(["word"] * words)}))
            f.write("\n")
    recipe = Recipe(
        tokenizer=write_tokenizer(tmp_path / "tok"),
        template="chatml",
        image_tokens=TOKENS_PER_IMAGE,
        media_root=tmp_path,
    )
    return path, recipe


def load(data: tuple[Path, Recipe], row: int) -> tuple[Loader, list[dict]]:
    path, recipe = data
    loader = Loader(
        path,
        recipe,
        batch_size=2,
        plan="packed",
        plan_options={"max_length": row},
        media=MediaStage(ImageTransform(size=16, crop=16, tokens_per_image=TOKENS_PER_IMAGE)),
        shuffle=False,
        max_bad_fraction=None,
    )
    return loader, list(loader)


def test_a_sample_with_media_longer_than_a_row_is_left_out_and_counted(
    data: tuple[Path, Recipe], caplog: pytest.LogCaptureFixture
) -> None:
    image = data[1].media.token_id("image")
    with caplog.at_level(logging.WARNING):
        loader, batches = load(data, row=24)
    delivered = sorted(i for b in batches for i in b["sample_ids"].tolist() if i >= 0)
    assert delivered == [6, 7, 8, 9]  # the text samples, the two long ones cut to the row
    for batch in batches:
        images = batch["pixel_values"].shape[0] if "pixel_values" in batch else 0
        assert int((batch["input_ids"] == image).sum()) == TOKENS_PER_IMAGE * images
        assert batch["input_ids"].shape[-1] == 24
    # left out before the plan deals them (each took a row of its own, then a placeholder)
    assert loader.excluded == {"media_too_long_for_row": 6} and not loader.tally.counts
    assert all(i >= 0 for b in batches for i in b["sample_ids"].tolist())
    assert "6 samples with images are longer than a packed row (max_length=24)" in caplog.text
    assert "set the recipe's max_length" in caplog.text
    # the plan cut the long text samples on purpose: no warning that lengths were wrong
    assert "packed row held more than" not in caplog.text


def test_rows_that_hold_the_samples_deliver_every_one(data: tuple[Path, Recipe]) -> None:
    loader, batches = load(data, row=256)
    delivered = sorted(i for b in batches for i in b["sample_ids"].tolist() if i >= 0)
    assert delivered == list(range(10)) and not loader.tally.counts
    pixels = sum(b["pixel_values"].shape[0] for b in batches if "pixel_values" in b)
    assert pixels == 6


def test_the_worker_still_refuses_media_the_lengths_do_not_count() -> None:
    # videos and audio are not in the lengths' image counts: the worker that meets one longer
    # than its row leaves it out, with the fix in its message
    import numpy as np

    from chute.errors import SampleError
    from chute.loader.worker import refuse_media_longer_than_a_row

    sample = {"input_ids": np.zeros(30, dtype=np.int32), "videos": [{"path": "v.mp4"}]}
    with pytest.raises(SampleError, match="media_too_long_for_row: 30 tokens with its videos"):
        refuse_media_longer_than_a_row(sample, 24)
    refuse_media_longer_than_a_row({**sample, "videos": []}, 24)  # text is cut, not refused
    refuse_media_longer_than_a_row(sample, 30)

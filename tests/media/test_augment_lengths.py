"""Planned lengths under augmentation: an augmented sample is never longer than planned.

A crop rewrites the boxes in the text per draw, so a sample's length changes from epoch to
epoch. The Loader's lengths pass writes every coordinate at its widest form
(``Recipe.widest_coordinates``); these tests tokenize many draws with Qwen's tokenizer and check
each against its planned length, then run packed plans over several epochs.
"""

from __future__ import annotations

import functools
import json
import logging
import random
from pathlib import Path
from typing import Any

import pytest
from augment_helpers import qwen_options
from PIL import Image

from chute import Loader, Recipe
from chute.lengths import lengths_of
from chute.media import DynamicResolution, MediaStage
from chute.media.augment import Augment, RandomResizedCrop, SampleDraw
from chute.sources import JsonlSource
from chute.tokenize import load_tokenizer

TOKENIZER = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "tokenizers" / "qwen3"
TRANSFORM = DynamicResolution(min_pixels=28 * 28, max_pixels=280 * 280)
AUG = Augment(crop=RandomResizedCrop(scale=(0.25, 1.0)), flip=0.5)

pytestmark = pytest.mark.skipif(not TOKENIZER.exists(), reason="no Qwen3 tokenizer in shared data")


def _box(rng: random.Random, convention: str, w: int, h: int) -> str:
    x1, y1 = rng.randrange(0, w - 8), rng.randrange(0, h - 8)
    x2, y2 = rng.randrange(x1 + 4, w), rng.randrange(y1 + 4, h)
    if convention == "qwen2.5-vl":
        return json.dumps({"bbox_2d": [x1, y1, x2, y2], "label": "cat"})
    if convention == "qwen2-vl":
        c = [round(x1 / w * 1000), round(y1 / h * 1000), round(x2 / w * 1000), round(y2 / h * 1000)]
        return f"<|box_start|>({c[0]},{c[1]}),({c[2]},{c[3]})<|box_end|>"
    return "[" + ", ".join(f"{v:.2f}" for v in (x1 / w, y1 / h, x2 / w, y2 / h)) + "]"


def _data(tmp_path: Path, convention: str, n: int = 24) -> Path:
    rng = random.Random(convention)
    rows = []
    for i in range(n):
        w, h = rng.choice([(150, 100), (300, 168), (90, 240), (280, 280)])
        Image.new("RGB", (w, h), (128, 90, 60)).save(tmp_path / f"{i}.png")
        boxes = " and ".join(_box(rng, convention, w, h) for _ in range(rng.randint(1, 4)))
        words = " ".join(["cat"] * rng.randint(0, 30))
        rows.append(
            {
                "messages": [
                    {"role": "user", "content": f"<image>Where are the cats? {words}"},
                    {"role": "assistant", "content": boxes},
                ],
                "images": [f"{i}.png"],
            }
        )
    path = tmp_path / "boxes.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@functools.cache
def _tokenizer() -> Any:
    return load_tokenizer(TOKENIZER, backend="hf")  # loaded once for every recipe here


def _recipe(convention: str, **kw):  # type: ignore[no-untyped-def]
    return Recipe(
        tokenizer=_tokenizer(),
        template="chatml",
        image_tokens=TRANSFORM.rule("qwen2.5-vl"),
        geometry=convention,
        **kw,
    )


@pytest.mark.parametrize("convention", ["qwen2.5-vl", "qwen2-vl", "normalized"])
def test_no_draw_makes_a_sample_longer_than_its_planned_length(tmp_path: Path, convention: str):
    data = _data(tmp_path, convention)
    recipe = _recipe(convention)
    widest = recipe.widest_coordinates()
    assert widest.fingerprint() != recipe.fingerprint()  # its lengths are cached apart
    planned = lengths_of(JsonlSource(data), widest, cache=False).length
    plain = lengths_of(JsonlSource(data), recipe, cache=False).length
    records = [json.loads(line) for line in data.read_text().splitlines()]
    transform = recipe._geometry_transform()
    longer_than_plain = checked = 0
    for i, record in enumerate(records):
        for epoch in range(12):
            draw = SampleDraw(AUG, seed=3, epoch=epoch, sample_id=i, transform=transform)
            try:
                sample = recipe._sample(record, str(data), None, i, None, draw)
            except Exception as exc:  # a box the crop lost: a counted reject, no length
                assert getattr(exc, "kind", None) == "box_outside", exc
                continue
            assert sample["length"] <= planned[i], (i, epoch, sample["length"], planned[i])
            longer_than_plain += sample["length"] > plain[i]
            checked += 1
    assert checked >= 150
    # the un-augmented lengths would have been exceeded: the bound is what keeps plans true
    # (``normalized`` text unmoved keeps its two decimals, and a draw writes at most as many)
    assert longer_than_plain > 0 or convention == "normalized"


@pytest.mark.parametrize(
    ("convention", "answer"),
    [
        ("qwen2.5-vl", '{"bbox_2d": [10.125, 20.25, 100.75, 200.125], "label": "cat"}'),
        ("qwen2.5-vl", '{"point_2d": [10.125, 20.25], "label": "cat"}'),
        ("qwen2-vl", "<|box_start|>(  5 ,  7  ) , (  9 ,  11  )<|box_end|>"),
    ],
)
def test_a_draw_that_moves_nothing_is_no_longer_than_planned(
    tmp_path: Path, convention: str, answer: str
):
    """An image the rule leaves as it is and a draw without a crop or flip kept the text as
    written, longer than the widest form the plan counted: packed rows were cut."""
    Image.new("RGB", (280, 280), (128, 90, 60)).save(tmp_path / "a.png")  # not resized
    record = {
        "messages": [
            {"role": "user", "content": "<image>Where?"},
            {"role": "assistant", "content": answer},
        ],
        "images": ["a.png"],
    }
    recipe = _recipe(convention, media_root=tmp_path)
    planned = recipe.widest_coordinates()(record)["length"]
    transform = recipe._geometry_transform()
    lengths = [
        recipe(record, draw=SampleDraw(Augment(flip=0.5), 0, 0, i, transform))["length"]
        for i in range(20)
    ]
    assert max(lengths) <= planned, (lengths, planned)


def test_packed_rows_with_augmentation_never_exceed_max_length(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    data = _data(tmp_path, "qwen2.5-vl", n=30)
    recipe = _recipe("qwen2.5-vl", max_length=256)
    media = MediaStage(TRANSFORM, augment=AUG)
    loader = Loader(data, recipe, plan="packed", seed=1, media=media)
    caplog.set_level(logging.WARNING)
    delivered = _packed_epochs(loader, epochs=3, width=256)
    assert "held more than max_length" not in caplog.text
    # every sample delivered or a counted reject (a crop that lost a box): none was cut
    assert delivered + loader.stats.get("box_outside", 0) == 3 * 30 and delivered >= 45


def _packed_epochs(loader: Loader, epochs: int, width: int) -> int:
    """Samples delivered over ``epochs``, each checked against its planned length, every row
    ``width`` tokens and none fuller."""
    planned = loader.lengths.length
    delivered = 0
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        for batch in loader:
            cu = batch["cu_seqlens"].tolist()
            seg = 0
            for row in batch["row_sample_ids"].tolist():
                used = 0
                for i in (i for i in row if i >= 0):
                    n = cu[seg + 1] - cu[seg]
                    assert n <= planned[i], (epoch, i, n, planned[i])
                    used, seg, delivered = used + n, seg + 1, delivered + 1
                assert used <= width == batch["input_ids"].shape[1]
                seg += used < width  # the padding tail, a segment of its own
            assert seg == len(cu) - 1
    return delivered


def test_a_mixture_plans_each_dataset_at_its_widest_coordinates(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    """Crops over a mixture: each dataset's lengths are counted by its own recipe writing the
    widest coordinates (the lengths of the dataset alone under ``widest_coordinates``), so no
    packed row is cut over epochs; a text dataset's lengths are its plain ones."""
    from chute import Mixture, MixtureEntry

    boxes = _data(tmp_path, "qwen2.5-vl", n=30)
    text = tmp_path / "text.jsonl"
    text.write_text(
        "".join(
            json.dumps({"instruction": f"Count to {i}.", "output": " ".join(["1"] * i)}) + "\n"
            for i in range(10)
        )
    )
    mix = Mixture(
        [MixtureEntry("boxes", str(boxes), weight=1.0), MixtureEntry("text", str(text))],
        recipe=qwen_options(TOKENIZER, TRANSFORM, geometry="qwen2.5-vl", max_length=256),
    )
    loader = Loader(mix, plan="packed", seed=1, media=MediaStage(TRANSFORM, augment=AUG))
    recipe = _recipe("qwen2.5-vl", max_length=256)
    widest = lengths_of(JsonlSource(boxes), recipe.widest_coordinates(), cache=False).length
    plain = lengths_of(JsonlSource(boxes), recipe, cache=False).length
    planned = loader.lengths.length
    assert planned[:30].tolist() == widest.tolist() and (widest > plain).any()
    text_alone = lengths_of(JsonlSource(text), recipe, cache=False).length
    assert planned[30:].tolist() == text_alone.tolist()
    caplog.set_level(logging.WARNING)
    delivered = _packed_epochs(loader, epochs=3, width=256)
    assert "held more than max_length" not in caplog.text
    assert delivered + loader.stats.get("box_outside", 0) == 3 * 40


def test_windows_under_crops_are_planned_at_their_widest_coordinates(tmp_path: Path):
    """``overflow="split"`` counts its windows from the lengths the plan uses: with crops, the
    widest coordinates' (a document with an image is one window), so no row is cut."""
    data = _data(tmp_path, "qwen2.5-vl", n=30)
    recipe = _recipe("qwen2.5-vl", max_length=256, overflow="split")
    loader = Loader(data, recipe, plan="packed", seed=1, media=MediaStage(TRANSFORM, augment=AUG))
    widest = lengths_of(JsonlSource(data), recipe.widest_coordinates(), cache=False).length
    plain = lengths_of(JsonlSource(data), recipe, cache=False).length
    assert loader.lengths.length.tolist() == widest.tolist() and (widest > plain).any()
    delivered = _packed_epochs(loader, epochs=2, width=256)
    # a document with an image is never cut: one whose widest form is too long is left out
    left_out = sum(loader.excluded.values())
    assert set(loader.excluded) <= {"too_long"}
    assert delivered + loader.stats.get("box_outside", 0) + 2 * left_out == 2 * 30

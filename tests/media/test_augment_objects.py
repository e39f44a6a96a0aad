"""Boxes in an ``objects`` / ``bbox`` column: written as the answer, moved with the pixels.

A record without an answer and with ``objects`` is answered by its objects in the geometry's
convention; the same draw that crops and flips the pixels moves them (checked on the delivered
``pixel_values``: the box decoded from ``input_ids`` encloses the red object).
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any

import pytest
from augment_helpers import (
    BOXES,
    TRANSFORM,
    encloses,
    first_box,
    images_of,
    red_extent,
    write_box_image,
)

from chute import Loader, Recipe
from chute.errors import ConfigError, SampleError
from chute.media import MediaStage
from chute.media.augment import Augment, RandomResizedCrop
from chute.tokenize import load_tokenizer

TOKENIZER = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "tokenizers" / "qwen3"
AUG = Augment(crop=RandomResizedCrop(scale=(0.4, 1.0)), flip=0.5)

pytestmark = pytest.mark.skipif(not TOKENIZER.exists(), reason="no Qwen3 tokenizer in shared data")


def _record(i: int, box: tuple[int, ...], column: str = "objects") -> dict[str, Any]:
    out: dict[str, Any] = {
        "messages": [{"role": "user", "content": "<image>Locate the red box, as JSON."}],
        "images": [f"{i}.png"],
    }
    if column == "objects":
        out["objects"] = [{"bbox": list(box), "label": "red box"}]
    else:
        out.update(bbox=list(box), label="red box")
    return out


def _data(tmp_path: Path) -> Path:
    rows = []
    for i, box in enumerate(BOXES * 3):
        write_box_image(tmp_path / f"{i}.png", box)
        rows.append(_record(i, box, "objects" if i % 2 else "bbox"))
    path = tmp_path / "objects.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@functools.cache
def _tokenizer() -> Any:
    return load_tokenizer(TOKENIZER, backend="hf")  # loaded once for every recipe here


def _recipe(geometry: str) -> Recipe:
    return Recipe(
        tokenizer=_tokenizer(),
        template="chatml",
        image_tokens=TRANSFORM.rule("qwen2.5-vl"),
        geometry=geometry,
    )


def _answer(recipe: Recipe, record: dict[str, Any], where: Path) -> str:
    ids = recipe.process(record, path=str(where))["input_ids"].tolist()
    text = recipe.tokenizer.decode([t for t in ids if t != recipe.media.token_id("image")])
    return text.split("<|im_start|>assistant\n")[1].split("<|im_end|>")[0]


def test_the_objects_become_the_answer_in_each_convention(tmp_path: Path):
    where = _data(tmp_path)
    record = _record(0, BOXES[0])
    # 150x100 is over max_pixels 112x112: scaled by sqrt(15000/12544) = 1.0935 and floored to
    # multiples of 28: 112x84. x * 112/150, y * 84/100, rounded outwards:
    # (40, 30, 90, 70) -> (29.87, 25.2, 67.2, 58.8) -> [29, 25, 68, 59]
    assert _answer(_recipe("qwen2.5-vl"), record, where) == (
        '[{"bbox_2d": [29, 25, 68, 59], "label": "red box"}]'
    )
    # 0-1000 of 150x100: (266.7, 300, 600, 700) -> (266,300),(600,700); a resize keeps them
    assert _answer(_recipe("qwen2-vl"), record, where) == (
        "<|object_ref_start|>red box<|object_ref_end|><|box_start|>(266,300),(600,700)<|box_end|>"
    )
    assert _answer(_recipe("normalized"), record, where) == (
        '[{"bbox": [0.266, 0.3, 0.6, 0.7], "label": "red box"}]'
    )
    # llava: written of the 150x150 square (the image 25 pixels down), y (30+25)/150 -> 0.366,
    # (70+25)/150 -> 0.634 outwards; then moved to the 112x84 image's square (14 pixels down):
    # (0.366*150 - 25) * 0.84 + 14 = 39.116 -> /112 = 0.349; (0.634*150 - 25) * 0.84 + 14
    # = 72.884 -> 0.651 (x: the square's width is the image's, unchanged)
    assert _answer(_recipe("llava"), _record(0, BOXES[0], "bbox"), where) == (
        '[{"bbox": [0.266, 0.349, 0.6, 0.651], "label": "red box"}]'
    )
    # an answered record keeps its answer: the column is not what the model reads
    answered = {
        **record,
        "messages": [*record["messages"], {"role": "assistant", "content": "No."}],
    }
    assert _answer(_recipe("qwen2.5-vl"), answered, where) == "No."
    with pytest.raises(SampleError, match="box_invalid"):
        _recipe("qwen2.5-vl").process({**record, "objects": [{"bbox": [1, 2]}]}, path=str(where))
    with pytest.raises(SampleError, match="box_invalid"):  # past the 150x100 image
        _recipe("qwen2.5-vl").process(_record(0, (10, 10, 160, 50)), path=str(where))


def test_objects_follow_the_crop_and_flip_through_the_loader(tmp_path: Path):
    recipe = _recipe("qwen2.5-vl")
    loader = Loader(
        _data(tmp_path),
        recipe,
        batch_size=4,
        shuffle=False,
        seed=5,
        media=MediaStage(TRANSFORM, augment=AUG),
    )
    image_id = recipe.media.token_id("image")
    moved = 0
    for epoch in range(2):
        loader.set_epoch(epoch)
        for batch in loader:
            for row, image in zip(batch["input_ids"], images_of(batch), strict=True):
                text = recipe.tokenizer.decode([t for t in row.tolist() if t != image_id])
                assert encloses(first_box(text), red_extent(image))
                moved += 1
    assert loader.stats == {} and moved == 24


def test_points_in_the_objects_column_are_written_and_follow_the_crop(tmp_path: Path):
    """``{"point": [x, y]}`` (or ``point_2d``): Qwen2.5-VL's ``point_2d`` of the resized image,
    moved with the crop and flip (it stays on the red object); no other convention has points."""
    import re

    where = _data(tmp_path)
    record = _record(0, BOXES[0])
    record["objects"] = [{"point": [65, 50], "label": "red box"}, {"point_2d": [41.5, 31]}]
    # the 112x84 image (see above): 65 * 112/150 = 48.5 -> 49, 50 * 0.84 = 42; 31.0, 26.04
    assert _answer(_recipe("qwen2.5-vl"), record, where) == (
        '[{"point_2d": [49, 42], "label": "red box"}, {"point_2d": [31, 26]}]'
    )
    with pytest.raises(SampleError, match="qwen2.5-vl's or qwen3-vl's convention only"):
        _recipe("qwen2-vl").process(record, path=str(where))
    with pytest.raises(SampleError, match=r"box_invalid: objects\[0\].point: expected \[x, y\]"):
        _recipe("qwen2.5-vl").process({**record, "objects": [{"point": [1]}]}, path=str(where))
    # through the Loader: each box's centre as a point lands on the red object, crop or flip
    rows = []
    for i, box in enumerate(BOXES * 3):
        centre = [(box[0] + box[2]) / 2, (box[1] + box[3]) / 2]
        rows.append({**_record(i, box), "objects": [{"point": centre, "label": "red box"}]})
    data = tmp_path / "points.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    recipe = _recipe("qwen2.5-vl")
    loader = Loader(data, recipe, batch_size=4, seed=5, media=MediaStage(TRANSFORM, augment=AUG))
    image_id = recipe.media.token_id("image")
    checked = 0
    for epoch in range(2):
        loader.set_epoch(epoch)
        for batch in loader:
            for row, image in zip(batch["input_ids"], images_of(batch), strict=True):
                text = recipe.tokenizer.decode([t for t in row.tolist() if t != image_id])
                x, y = map(int, re.search(r'"point_2d": \[(\d+), (\d+)\]', text).groups())  # type: ignore[union-attr]
                x1, y1, x2, y2 = red_extent(image)
                assert x1 - 1 <= x <= x2 + 1 and y1 - 1 <= y <= y2 + 1, (x, y, (x1, y1, x2, y2))
                checked += 1
    # a crop that leaves the point out is a counted reject, never a point elsewhere
    assert set(loader.stats) <= {"box_outside"} and checked >= 18
    assert checked + loader.stats.get("box_outside", 0) == 24


def test_boxes_follow_a_stages_own_transform_without_augmentation(tmp_path: Path):
    """LLaVA-1.5's default stage pads to a square; a stage that centre-crops instead moved
    the pixels, while the text's boxes were placed as if padded (they pointed at grey)."""
    from chute.media import ImageTransform

    where = _data(tmp_path)
    recipe = Recipe(
        tokenizer=_tokenizer(),
        template="chatml",
        image_tokens="llava-1.5",
        image_token="<|image_pad|>",
        geometry="normalized",
    )
    crop = ImageTransform(size=336, crop=336, pad_to_square=False, tokens_per_image=576)
    loader = Loader(where, recipe, batch_size=1, shuffle=False, media=MediaStage(crop))
    image_id = recipe.media.token_id("image")
    checked = 0
    for batch in loader:
        if batch["sample_ids"].tolist() == [-1]:
            continue
        text = recipe.tokenizer.decode([t for t in batch["input_ids"][0].tolist() if t != image_id])
        box = [
            float(v)
            for v in re.findall(r'"bbox": \[([\d.]+), ([\d.]+), ([\d.]+), ([\d.]+)\]', text)[0]
        ]
        pixels = batch["pixel_values"][0].numpy().transpose(1, 2, 0)  # (336, 336, 3)
        height, width = pixels.shape[:2]
        written = (box[0] * width, box[1] * height, box[2] * width, box[3] * height)
        assert encloses(written, red_extent(pixels), slack=3), (text, red_extent(pixels))
        checked += 1
    # the 150x100 images are cropped to their middle 100x100: a box left of it is not there
    assert checked + sum(loader.stats.values()) == 12 and checked >= 6
    assert set(loader.stats) <= {"box_outside"}


def test_a_cache_places_boxes_as_its_pixels_stage_prepares_the_images(tmp_path: Path):
    """``stages.pixels`` with a centre crop where LLaVA-1.5's default pads to a square: the
    cache's text took the default's boxes while its pixels were cropped."""
    from chute import open_cache, preprocess
    from chute.media import ImageTransform

    where = _data(tmp_path)
    options = {
        "tokenizer": str(TOKENIZER),
        "template": "chatml",
        "image_tokens": "llava-1.5",
        "image_token": "<|image_pad|>",
        "geometry": "normalized",
    }
    crop = {"transform": "fixed", "size": 336, "crop": 336, "pad_to_square": False}
    preprocess(
        {"sources": [str(where)], "recipe": options, "stages": {"pixels": crop}},
        out=tmp_path / "cache",
    )
    cache = open_cache(tmp_path / "cache")
    recipe = Recipe(
        tokenizer=_tokenizer(), **{k: v for k, v in options.items() if k != "tokenizer"}
    )
    image_id = recipe.media.token_id("image")
    for loader in (Loader(cache, batch_size=1, shuffle=False), Loader(cache, recipe, batch_size=1)):
        checked = 0
        for batch in loader:
            ids = [t for t in batch["input_ids"][0].tolist() if t != image_id]
            text = recipe.tokenizer.decode(ids)
            found = re.findall(r'"bbox": \[([\d.]+), ([\d.]+), ([\d.]+), ([\d.]+)\]', text)
            box = [float(v) for v in found[0]]
            pixels = batch["pixel_values"][0].numpy().transpose(1, 2, 0)
            height, width = pixels.shape[:2]
            written = (box[0] * width, box[1] * height, box[2] * width, box[3] * height)
            assert encloses(written, red_extent(pixels), slack=3), (text, red_extent(pixels))
            checked += 1
        assert checked >= 6  # the others' boxes left the crop: rejected when the cache was built
    # its own recipe config opens and checks it (the pixel transform applied to it)
    from chute.cache.verify import verify_cache

    open_cache(tmp_path / "cache", recipe=options)
    assert verify_cache(tmp_path / "cache", recipe=options).ok
    # a cache without pixels was placed for the rule's default stage: a cropping stage refused
    preprocess({"sources": [str(where)], "recipe": options}, out=tmp_path / "plain")
    plain = open_cache(tmp_path / "plain")
    stage = MediaStage(
        ImageTransform(size=336, crop=336, pad_to_square=False, tokens_per_image=576)
    )
    for given in (None, recipe):
        with pytest.raises(ConfigError, match=r"boxes were placed for the image rule's default"):
            Loader(plain, given, batch_size=1, media=stage)

"""The augmentation through the Loader: text and pixels move together, token counts hold.

Qwen's tokenizer (shared data), Qwen2.5-VL's absolute-pixel boxes, a small DynamicResolution:
each delivered sample's box (decoded from ``input_ids``) encloses the red object in its
``pixel_values`` (patches put back into an image), the image tokens equal the patches, and the
same seed gives the same pixels in another Loader, from a pixel store, after ``set_epoch``.
"""

from __future__ import annotations

import json
from pathlib import Path

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
from chute.errors import ConfigError
from chute.media import MediaStage, PixelStore, build_pixel_store
from chute.media.augment import Augment, ColorJitter, RandomResizedCrop

TOKENIZER = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "tokenizers" / "qwen3"
AUG = Augment(crop=RandomResizedCrop(scale=(0.4, 1.0)), flip=0.5, jitter=ColorJitter(0.2, 0.2))


def _data(tmp_path: Path, question: str = "Where is the red box?") -> Path:
    rows = []
    for i, box in enumerate(BOXES * 3):
        write_box_image(tmp_path / f"{i}.png", box)
        answer = json.dumps([{"bbox_2d": list(box), "label": "red box"}])
        rows.append(
            {
                "messages": [
                    {"role": "user", "content": f"<image>{question}"},
                    {"role": "assistant", "content": answer},
                ],
                "images": [f"{i}.png"],
            }
        )
    path = tmp_path / "boxes.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _recipe(**kw):  # type: ignore[no-untyped-def]
    rule = TRANSFORM.rule("qwen2.5-vl")
    return Recipe(
        tokenizer=TOKENIZER, template="chatml", image_tokens=rule, tokenizer_backend="hf", **kw
    )


def test_boxes_in_the_text_enclose_the_object_in_the_delivered_pixels(tmp_path: Path):
    recipe = _recipe(geometry="qwen2.5-vl")
    media = MediaStage(TRANSFORM, augment=AUG)
    loader = Loader(_data(tmp_path), recipe, batch_size=4, shuffle=False, seed=5, media=media)
    image_id = recipe.media.token_id("image")
    moved = 0
    for batch in loader:
        for row, image in zip(batch["input_ids"], images_of(batch), strict=True):
            box = first_box(recipe.tokenizer.decode([t for t in row.tolist() if t != image_id]))
            assert encloses(box, red_extent(image))
            moved += box not in BOXES
            # the tokens of the image are its patches' (the stage checks it; counted here too)
        tokens = (batch["input_ids"] == image_id).sum().item()
        assert tokens * 4 == batch["pixel_values"].shape[0]
    assert loader.stats == {} and moved >= 8  # every sample delivered, most boxes moved


def test_the_same_seed_gives_the_same_pixels_anywhere_and_epochs_differ(tmp_path: Path):
    data = _data(tmp_path)

    def pixels(epoch: int, **kw) -> list:  # type: ignore[no-untyped-def]
        media = MediaStage(TRANSFORM, augment=AUG, **kw)
        loader = Loader(data, _recipe(geometry="qwen2.5-vl"), batch_size=4, seed=5, media=media)
        loader.set_epoch(epoch)
        return [(b["input_ids"], b["pixel_values"]) for b in loader]

    first = pixels(0)
    again = pixels(0)
    assert all(
        (a[0] == b[0]).all() and (a[1] == b[1]).all() for a, b in zip(first, again, strict=True)
    )
    other = pixels(1)
    assert any(
        a[1].shape != b[1].shape or not (a[1] == b[1]).all()
        for a, b in zip(first, other, strict=True)
    )
    # from a pixel store of the clean decode: the same augmented pixels
    build_pixel_store([str(p) for p in sorted(tmp_path.glob("*.png"))], TRANSFORM, tmp_path / "px")
    stored = pixels(0, store=PixelStore(tmp_path / "px", TRANSFORM))
    assert all((a[1] == b[1]).all() for a, b in zip(first, stored, strict=True))


def test_left_and_right_in_the_text_skip_the_flip_or_reject_the_sample(tmp_path: Path):
    data = _data(tmp_path, question="Is the red box on the left?")
    flip = Augment(flip=1.0)
    clean = Loader(
        data,
        _recipe(geometry="qwen2.5-vl"),
        batch_size=12,
        shuffle=False,
        media=MediaStage(TRANSFORM),
    )
    skipped = Loader(
        data,
        _recipe(geometry="qwen2.5-vl"),
        batch_size=12,
        shuffle=False,
        media=MediaStage(TRANSFORM, augment=flip),
    )
    a, b = next(iter(clean)), next(iter(skipped))
    assert (a["pixel_values"] == b["pixel_values"]).all()  # unflipped: the text stays true
    assert (a["input_ids"] == b["input_ids"]).all()
    rejecting = Augment(flip=1.0, left_right="reject")
    loader = Loader(
        data,
        _recipe(geometry="qwen2.5-vl"),
        batch_size=12,
        media=MediaStage(TRANSFORM, augment=rejecting),
        max_bad_fraction=None,
        max_consecutive_bad=None,
    )
    list(loader)
    assert loader.stats == {"flip_left_right": 12}


def test_a_crop_that_loses_the_box_is_a_counted_reject(tmp_path: Path):
    tiny = Augment(crop=RandomResizedCrop(scale=(0.02, 0.03)))
    loader = Loader(
        _data(tmp_path),
        _recipe(geometry=dict(convention="qwen2.5-vl", outside="reject")),
        batch_size=4,
        media=MediaStage(TRANSFORM, augment=tiny),
        max_bad_fraction=None,
        max_consecutive_bad=None,
    )
    delivered = sum(int((b["sample_ids"] >= 0).sum()) for b in loader)
    assert set(loader.stats) == {"box_outside"}
    assert delivered + loader.stats["box_outside"] == 12


def test_crops_without_a_geometry_are_refused(tmp_path: Path):
    data = _data(tmp_path)
    with pytest.raises(ConfigError, match="geometry"):
        Loader(data, _recipe(), batch_size=4, media=MediaStage(TRANSFORM, augment=AUG))
    # colours alone need nothing of the text
    Loader(
        data,
        _recipe(),
        batch_size=4,
        media=MediaStage(TRANSFORM, augment=Augment(jitter=ColorJitter(0.2))),
    )
    with pytest.raises(ConfigError, match="augment"):
        MediaStage(lambda image: image, augment=AUG)


def test_crops_over_a_mixture_are_refused_until_its_lengths_can_follow(tmp_path: Path):
    """A mixture's lengths pass does not write the widest coordinates: a crop could make a
    sample longer than its planned row, so crops and flips over a mixture are refused."""
    from chute import Mixture, MixtureEntry

    data = _data(tmp_path)
    rule = {"min_pixels": TRANSFORM.min_pixels, "max_pixels": TRANSFORM.max_pixels}
    recipe = {
        "tokenizer": str(TOKENIZER),
        "template": "chatml",
        "image_tokens": {**rule, "family": "qwen2.5-vl"},
        "geometry": "qwen2.5-vl",
    }
    mix = Mixture([MixtureEntry("boxes", str(data), weight=1.0)], recipe=recipe)
    with pytest.raises(ConfigError, match="over a mixture"):
        Loader(mix, batch_size=4, media=MediaStage(TRANSFORM, augment=AUG))

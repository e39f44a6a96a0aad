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
    qwen_options,
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


def test_crops_of_preference_pairs_say_they_are_sft_only(tmp_path: Path):
    write_box_image(tmp_path / "0.png", BOXES[0])
    pair = {
        "messages": [{"role": "user", "content": "<image>Where?"}],
        "chosen": {"role": "assistant", "content": "Top left."},
        "rejected": {"role": "assistant", "content": "Nowhere."},
        "images": ["0.png"],
    }
    data = tmp_path / "pairs.jsonl"
    data.write_text(json.dumps(pair) + "\n")
    recipe = _recipe(task="preference")
    with pytest.raises(ConfigError, match="task='sft' only .*augment colours only"):
        Loader(data, recipe, batch_size=1, media=MediaStage(TRANSFORM, augment=AUG))


def _mixture(tmp_path: Path, boxes: Path, **recipe_options):  # type: ignore[no-untyped-def]
    """The boxes dataset first (its ids are the same as alone) and a text dataset after it."""
    from chute import Mixture, MixtureEntry

    text = tmp_path / "text.jsonl"
    rows = [
        {
            "messages": [
                {"role": "user", "content": f"Say {i}."},
                {"role": "assistant", "content": f"{i}"},
            ]
        }
        for i in range(6)
    ]
    text.write_text("".join(json.dumps(r) + "\n" for r in rows))
    recipe = qwen_options(TOKENIZER, tokenizer_backend="hf", **recipe_options)
    entries = [MixtureEntry("boxes", str(boxes), weight=1.0), MixtureEntry("text", str(text))]
    return Mixture(entries, recipe=recipe)


def _by_id(loader: Loader, epoch: int) -> dict[int, tuple[list[int], list]]:  # type: ignore[type-arg]
    """Every delivered sample of one epoch (batches of one): its tokens and its images."""
    loader.set_epoch(epoch)
    out = {}
    for batch in loader:
        (sample_id,) = batch["sample_ids"].tolist()
        images = images_of(batch) if "pixel_values" in batch else []
        out[sample_id] = (batch["input_ids"][0].tolist(), images)
    return out


def test_crops_over_a_mixture_move_each_datasets_boxes_as_the_dataset_alone(tmp_path: Path):
    """A mixture hands each sample's draw to its dataset's recipe: the grounding dataset's
    samples, tokens and pixels, equal the same dataset loaded alone, epoch by epoch, and every
    box encloses its object; the text dataset's samples pass untouched."""
    data = _data(tmp_path)
    mix = _mixture(tmp_path, data, geometry="qwen2.5-vl")
    media = MediaStage(TRANSFORM, augment=AUG)
    mixed = Loader(mix, batch_size=1, seed=5, media=media)
    alone = Loader(data, _recipe(geometry="qwen2.5-vl"), batch_size=1, seed=5, media=media)
    image_id = alone.recipe.media.token_id("image")  # type: ignore[union-attr]
    moved = 0
    for epoch in range(2):
        got, want = _by_id(mixed, epoch), _by_id(alone, epoch)
        assert sorted(got) == list(range(12 + 6))  # every sample of both datasets once
        for i, (tokens, images) in want.items():
            assert got[i][0] == tokens
            assert len(got[i][1]) == 1 and (got[i][1][0] == images[0]).all()
            box = first_box(alone.recipe.tokenizer.decode([t for t in tokens if t != image_id]))  # type: ignore[union-attr]
            assert encloses(box, red_extent(images[0]))
            moved += box not in BOXES
        assert all(not got[i][1] for i in range(12, 18))  # text: no images
    assert moved >= 8 and mixed.stats == {}
    # in DataLoader workers (the recipes pickled there): the same samples
    in_workers = _by_id(Loader(mix, batch_size=1, seed=5, media=media, num_workers=2), 1)
    assert in_workers.keys() == got.keys()
    assert all(tokens == got[i][0] for i, (tokens, _) in in_workers.items())


def test_crops_over_a_mixture_need_its_geometry(tmp_path: Path):
    data = _data(tmp_path)
    with pytest.raises(ConfigError, match="geometry"):
        Loader(_mixture(tmp_path, data), batch_size=4, media=MediaStage(TRANSFORM, augment=AUG))


@pytest.mark.parametrize("augment", [None, AUG], ids=["resize", "crops"])
def test_a_recipe_that_splits_documents_moves_boxes_as_one_that_does_not(
    tmp_path: Path, augment: Augment | None
):
    """``overflow="split"`` reads every record as windows (a short one is one window): the
    boxes in a window's text follow the resize and the draw as an unsplit sample's do. They
    did not (the window's text was read as written: every moved box wrong, silently)."""
    data = _data(tmp_path)
    media = MediaStage(TRANSFORM, augment=augment)

    def samples(overflow: str) -> dict[int, tuple[list[int], list]]:  # type: ignore[type-arg]
        recipe = _recipe(geometry="qwen2.5-vl", overflow=overflow, max_length=512)
        return _by_id(Loader(data, recipe, batch_size=1, seed=5, media=media), 0)

    split, whole = samples("split"), samples("truncate")
    assert split.keys() == whole.keys() == set(range(12))
    recipe = _recipe(geometry="qwen2.5-vl")
    image_id = recipe.media.token_id("image")
    for i, (tokens, images) in split.items():
        assert tokens == whole[i][0] and (images[0] == whole[i][1][0]).all()
        box = first_box(recipe.tokenizer.decode([t for t in tokens if t != image_id]))
        assert encloses(box, red_extent(images[0]))


def test_crops_over_a_mixture_split_into_windows_are_refused(tmp_path: Path):
    mix = _mixture(
        tmp_path, _data(tmp_path), geometry="qwen2.5-vl", overflow="split", max_length=512
    )
    with pytest.raises(ConfigError, match="split into windows"):
        Loader(mix, batch_size=4, media=MediaStage(TRANSFORM, augment=AUG))


def test_windows_of_in_memory_records_follow_the_draw(tmp_path: Path):
    """A list of dicts split into windows: each window's boxes follow the crop (the draw was
    dropped for such items), as the same records read from a file."""
    data = _data(tmp_path)
    records = [json.loads(line) for line in data.read_text().splitlines()]
    recipe = _recipe(
        geometry="qwen2.5-vl", overflow="split", max_length=512, media_root=str(tmp_path)
    )
    media = MediaStage(TRANSFORM, augment=AUG)
    in_memory = _by_id(Loader(records, recipe, batch_size=1, seed=5, media=media), 0)
    from_file = _by_id(Loader(data, recipe, batch_size=1, seed=5, media=media), 0)
    assert in_memory.keys() == from_file.keys() == set(range(12))
    assert all(in_memory[i][0] == from_file[i][0] for i in in_memory)


@pytest.mark.parametrize("overflow", ["truncate", "split"])
def test_the_loader_over_the_source_equals_it_over_the_cache_with_boxes(
    tmp_path: Path, overflow: str
):
    """Boxes moved for the resize: the same tokens and pixels whether the Loader runs the
    recipe or reads what ``preprocess`` made with it (under ``split`` they differed)."""
    from chute import open_cache, preprocess

    data = _data(tmp_path)
    options = qwen_options(TOKENIZER, geometry="qwen2.5-vl", max_length=512, overflow=overflow)
    out = tmp_path / "cache"
    preprocess(sources=[str(data)], recipe=options, cache={"workers": 1}, out=str(out))
    media = MediaStage(TRANSFORM)
    read = _by_id(Loader(data, Recipe(**options), batch_size=1, seed=5, media=media), 0)
    cached = _by_id(Loader(open_cache(out), batch_size=1, seed=5, media=media), 0)
    assert read.keys() == cached.keys() == set(range(12))
    for i, (tokens, images) in read.items():
        assert tokens == cached[i][0] and (images[0] == cached[i][1][0]).all()


def test_crops_over_a_mixture_resume_exactly(tmp_path: Path):
    """A mixture's draws are keyed by the global sample id: a resumed Loader (here with two
    workers, from one without) delivers the uninterrupted run's tokens and pixels."""
    mix = _mixture(tmp_path, _data(tmp_path), geometry="qwen2.5-vl")
    media = MediaStage(TRANSFORM, augment=AUG)
    first = Loader(mix, batch_size=2, seed=7, media=media)
    first.set_epoch(1)
    stream = iter(first)
    for _ in range(3):
        next(stream)
    state = first.state_dict()
    rest = [(b["input_ids"], b.get("pixel_values")) for b in stream]
    resumed = Loader(mix, batch_size=2, seed=7, media=media, num_workers=2)
    resumed.load_state_dict(state)
    again = [(b["input_ids"], b.get("pixel_values")) for b in resumed]
    assert len(again) == len(rest) == 6
    for (a, pa), (b, pb) in zip(rest, again, strict=True):
        assert a.equal(b) and (pa is None) == (pb is None)
        assert pa is None or pa.equal(pb)
    assert sum(pa is not None for _, pa in rest) >= 3

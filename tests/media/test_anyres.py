"""LLaVA-NeXT / LLaVA-OneVision anyres: the count rule, the tiles, the stage and the collation.

The references are ``transformers``' processors and PIL image processors (``tests/llava_helpers``);
these tests need no shared data (synthetic images); ``test_llava_family.py`` runs the real photos
and the tiny models.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from chute import Recipe
from chute.errors import ConfigError, SampleError
from chute.media import (
    AnyresImageTokens,
    AnyresTransform,
    ImageTransform,
    MediaStage,
    PixelStore,
    build_pixel_store,
    image_token_counts,
    image_tokens_rule,
)
from chute.media.stage import default_media_stage
from recipe_helpers import tiny_tokenizer

ATOL = 1e-5  # float32 rounding of the normalisation; measured at most 4.8e-7
ONEVISION = image_tokens_rule("llava-onevision")
NEXT = image_tokens_rule("llava-next")
NORMALIZE = {"llava-onevision": "siglip", "llava-next": "clip"}


def _sizes() -> list[tuple[int, int]]:
    """Sizes (width, height) of every kind: tiny, thin, square, each side of every grid ratio."""
    rng = np.random.default_rng(0)
    fixed = [(1, 1), (1, 700), (700, 1), (2, 3000), (5000, 7), (383, 384), (384, 384), (385, 384),
             (768, 384), (384, 1152), (1000, 750), (300, 168), (4800, 3203), (336, 1008),
             (1007, 336), (672, 671), (2304, 2304), (4000, 4000)]  # fmt: skip
    drawn = [(int(w), int(h)) for w, h in rng.integers(1, 5000, size=(300, 2))]
    ratios = [(int(s * a), int(s)) for s in (200, 713, 1500) for a in np.linspace(0.1, 8, 25)]
    return fixed + drawn + [(w, h) for w, h in ratios if w > 0]


def _image(width: int, height: int, seed: int = 0) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, size=(height, width, 3), dtype=np.uint8))


@pytest.mark.parametrize("preset", ["llava-onevision", "llava-next"])
def test_counts_equal_the_processors_over_many_sizes(preset: str) -> None:
    pytest.importorskip("transformers")
    from llava_helpers import processor

    proc, rule = processor(preset), image_tokens_rule(preset)
    side = rule.image_size
    sizes = _sizes()
    for w, h in sizes:
        want = proc._get_number_of_features(h, w, side, side)
        if proc.vision_feature_select_strategy == "default":
            want -= 1  # CLIP's CLS feature is dropped
        assert rule.count((w, h)) == (want, None), (w, h)
    vectorised = image_token_counts(sizes, rule)
    assert vectorised.tolist() == [rule.count(s)[0] for s in sizes]
    assert vectorised.dtype == np.int64


def test_presets_rules_and_their_json() -> None:
    assert isinstance(ONEVISION, AnyresImageTokens) and isinstance(NEXT, AnyresImageTokens)
    assert (ONEVISION.image_size, ONEVISION.side, ONEVISION.max_tiles) == (384, 27, 9)
    assert len(ONEVISION.grid_pinpoints) == 36 and ONEVISION.multi_image == "pad"
    assert (NEXT.image_size, NEXT.side, NEXT.max_tiles, NEXT.multi_image) == (336, 24, None, "tile")
    # a cache or config holds the JSON: it gives the same rule back
    for rule in (ONEVISION, NEXT):
        spec = json.loads(json.dumps(rule.to_json()))
        assert spec["rule"] == "anyres" and image_tokens_rule(spec) == rule
    assert image_tokens_rule(ONEVISION) is ONEVISION
    # the images of a multi-image OneVision sample: a padded square, 729 + 1 newline
    assert ONEVISION.in_sample(1) is ONEVISION
    assert ONEVISION.in_sample(3).count(None) == (730, None)
    assert NEXT.in_sample(3) is NEXT  # LLaVA-NeXT tiles every image
    # OneVision's pooling: a 6 x 6 grid's 162 x 162 feature map is pooled to about 9 tiles
    assert ONEVISION.count((2304, 2304)) == ((162 // 2) ** 2 + 81 + 729, None)


def test_rule_errors_name_the_field() -> None:
    with pytest.raises(
        ConfigError, match=r"grid_pinpoints: expected .*multiples of image_size=384"
    ):
        AnyresImageTokens(grid_pinpoints=((384, 500),))
    with pytest.raises(ConfigError, match=r"grid_pinpoints"):
        AnyresImageTokens(grid_pinpoints="384x384")
    with pytest.raises(ConfigError, match=r"multi_image: expected 'pad' .* or 'tile'"):
        AnyresImageTokens(multi_image="stack")
    with pytest.raises(ConfigError, match=r"max_tiles: expected a positive integer, got 0"):
        AnyresImageTokens(max_tiles=0)
    with pytest.raises(ConfigError, match=r"patch_size: 500 is larger than image_size=384"):
        AnyresImageTokens(patch_size=500)
    with pytest.raises(ConfigError, match=r"keys of an anyres rule are image_size"):
        image_tokens_rule({"rule": "anyres", "tile": 384})
    with pytest.raises(ConfigError, match=r"expected an AnyresImageTokens"):
        AnyresTransform(576)  # type: ignore[arg-type]


@pytest.mark.parametrize("preset", ["llava-onevision", "llava-next"])
def test_tiles_equal_the_image_processors(preset: str) -> None:
    pytest.importorskip("transformers")
    from llava_helpers import processed

    transform = AnyresTransform(image_tokens_rule(preset), normalize=NORMALIZE[preset])
    for k, (w, h) in enumerate([(300, 168), (168, 300), (1000, 750), (20, 900), (777, 777)]):
        image = _image(w, h, seed=k)
        tokens, ref = processed(preset, [image])
        got = transform(image)
        assert got.pixels.shape == ref["pixel_values"][0].shape
        assert np.abs(got.pixels - ref["pixel_values"][0]).max() < ATOL
        assert got.image_size == tuple(ref["image_sizes"][0].tolist()) == (h, w)
        assert got.num_features == tokens == transform.rule.count((w, h))[0]


def test_several_images_of_a_onevision_sample_are_padded_squares() -> None:
    pytest.importorskip("transformers")
    from llava_helpers import processed

    images = [_image(300, 168, 1), _image(90, 200, 2)]
    tokens, ref = processed("llava-onevision", images)
    assert tokens == 2 * 730 and ref["batch_num_images"].tolist() == [2]
    transform = AnyresTransform(ONEVISION).for_images(2)
    for k, image in enumerate(images):
        got = transform(image)
        assert got.pixels.shape == (1, 3, 384, 384) and not got.tiled
        assert np.abs(got.pixels[0] - ref["pixel_values"][k][0]).max() < ATOL
        assert got.num_features == 730
    assert AnyresTransform(NEXT).for_images(2).tiled  # LLaVA-NeXT tiles them


def test_finish_refuses_pixels_it_did_not_prepare() -> None:
    transform = AnyresTransform(ONEVISION)
    with pytest.raises(ConfigError, match=r"expected uint8 \(tiles \* 384 \+ 1, 384, 3\)"):
        transform.finish(np.zeros((336, 336, 3), dtype=np.uint8))
    # prepared with other grids: the tile count does not fit this rule's grid for the size
    other = AnyresTransform(AnyresImageTokens(grid_pinpoints=((384, 384),)))
    with pytest.raises(ConfigError, match=r"2 tiles for a 1000x750 image.*gives 7"):
        transform.finish(other.prepare(_image(1000, 750)))


def test_the_pixel_store_keeps_prepared_tiles(tmp_path: Path) -> None:
    paths = []
    for k, (w, h) in enumerate([(1000, 750), (300, 168)]):
        paths.append(str(tmp_path / f"{k}.png"))
        _image(w, h, k).save(paths[-1])
    transform = AnyresTransform(ONEVISION)
    report = build_pixel_store(paths, transform, tmp_path / "store", workers=1, progress=False)
    assert report.images == 2
    stored = MediaStage(transform, store=PixelStore(tmp_path / "store", transform))
    plain = MediaStage(transform)
    tokens = [ONEVISION.count(s)[0] for s in [(1000, 750), (300, 168)]]
    one = {"input_ids": np.zeros(tokens[0], dtype=np.int64),
           "images": [{"path": paths[0], "span": [0, tokens[0]]}]}  # fmt: skip
    got, want = stored(one), plain(one)
    assert np.array_equal(got["pixel_values"][0], want["pixel_values"][0])
    assert got["image_sizes"] == want["image_sizes"] == [(750, 1000)]
    # a multi-image sample's padded squares are not in the store: decoded, still right
    two = {"input_ids": np.zeros(1460, dtype=np.int64),
           "images": [{"path": p, "span": [730 * k, 730 * (k + 1)]} for k, p in enumerate(paths)]}  # fmt: skip
    got = stored(two)
    assert [a.shape for a in got["pixel_values"]] == [(1, 3, 384, 384)] * 2
    # a store of another transform is refused, naming the field
    with pytest.raises(ConfigError, match="grid_pinpoints"):
        PixelStore(tmp_path / "store", AnyresTransform(NEXT, normalize="clip"))


def test_the_stage_refuses_a_rule_that_does_not_count_its_tiles() -> None:
    recipe = Recipe(tokenizer=tiny_tokenizer(), template="chatml", image_tokens=576)
    with pytest.raises(ConfigError, match=r"counts a fixed 576 tokens.*AnyresTransform"):
        MediaStage(AnyresTransform(ONEVISION)).bind(recipe)
    onevision = Recipe(
        tokenizer=tiny_tokenizer(), template="chatml", image_tokens="llava-onevision"
    )
    with pytest.raises(ConfigError, match=r"anyres.*ImageTransform.*AnyresTransform\(rule\)"):
        MediaStage(ImageTransform()).bind(onevision)
    with pytest.raises(ConfigError, match=r"image_size: recipe 384, transform 336"):
        MediaStage(AnyresTransform(NEXT)).bind(onevision)
    assert MediaStage(AnyresTransform(ONEVISION)).bind(onevision).image.rule == ONEVISION


def test_default_stages_of_the_anyres_presets() -> None:
    onevision = default_media_stage(ONEVISION).image
    assert isinstance(onevision, AnyresTransform) and onevision.rule == ONEVISION
    assert onevision.normalize == "siglip"  # SigLIP-384
    nxt = default_media_stage(NEXT).image
    assert nxt.rule == NEXT and nxt.normalize == "clip"  # CLIP-336


def _records(tmp_path: Path) -> Path:
    _image(1000, 750, 1).save(tmp_path / "a.png")
    _image(300, 168, 2).save(tmp_path / "b.png")
    rows = [
        {"messages": [{"role": "user", "content": "<image>What is it?"},
                      {"role": "assistant", "content": "A cat."}], "images": ["a.png"]},
        {"messages": [{"role": "user", "content": "<image><image>Same?"},
                      {"role": "assistant", "content": "No."}], "images": ["a.png", "b.png"]},
        {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo."}]},
    ]  # fmt: skip
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_recipe_counts_stage_checks_and_collation(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from chute.collate import MediaCollate
    from chute.sources import JsonlSource

    source = JsonlSource(_records(tmp_path))
    tok = tiny_tokenizer()
    recipe = Recipe(tokenizer=tok, template="chatml", image_tokens="llava-onevision",
                    image_token="<image>", image_token_id=tok.vocab_size)  # fmt: skip
    samples = [recipe(source[i]) for i in range(len(source))]
    one, two, _ = samples
    assert [r["num_tokens"] for r in one["images"]] == [4725]  # from the header alone
    assert one["images"][0]["size"] == [1000, 750]
    assert [r["num_tokens"] for r in two["images"]] == [730, 730]  # padded squares
    image_id = tok.vocab_size
    assert int((one["input_ids"] == image_id).sum()) == 4725
    stage = default_media_stage(ONEVISION).bind(recipe)
    loaded = [stage(s) for s in samples]
    assert loaded[0]["pixel_values"][0].shape == (7, 3, 384, 384)
    assert [a.shape[0] for a in loaded[1]["pixel_values"]] == [1, 1]
    # a count that no longer matches the pixels is a counted skip, not a wrong batch
    bad = dict(one, images=[dict(one["images"][0], path=str(tmp_path / "b.png"))])
    with pytest.raises(SampleError, match="4725 tokens") as info:
        stage(bad)
    assert info.value.kind == "image_token_mismatch"
    batch = MediaCollate()(loaded)
    assert tuple(batch["pixel_values"].shape) == (3, 7, 3, 384, 384)  # padded over tiles
    assert float(batch["pixel_values"][1, 1:].abs().sum()) == 0.0
    assert batch["image_sizes"].tolist() == [[750, 1000], [750, 1000], [168, 300]]
    assert batch["batch_num_images"].tolist() == [1, 2]  # samples with images
    assert batch["image_counts"].tolist() == [1, 2, 0]
    assert "pixel_values" not in MediaCollate()([loaded[2]])


def test_a_cache_built_with_pixels_keeps_the_tiles(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from cache_helpers import write_tokenizer
    from chute import Loader, World, open_cache, preprocess

    config = {
        "sources": [str(_records(tmp_path))],
        "recipe": {"tokenizer": str(write_tokenizer(tmp_path / "tok")), "template": "chatml",
                   "image_tokens": "llava-onevision"},
        "cache": {"chunk_size": 2, "workers": 1},
    }  # fmt: skip
    report = preprocess(config, out=tmp_path / "c", pixels=True)
    assert report.to_json()["stage_outputs"]["pixels"]["images"] == 2
    cache = open_cache(tmp_path / "c")

    def first(**kw: Any) -> tuple[dict[str, Any], Loader]:
        loader = Loader(cache, batch_size=3, shuffle=False, world=World(0, 1), **kw)
        return dict(next(iter(loader))), loader

    got, auto = first()  # the cache's own stage: the recipe's rule, the stored tiles
    assert isinstance(auto.media.image, AnyresTransform) and auto.media.has_store
    assert auto.media.image.rule == ONEVISION and auto.media.image.normalize == "siglip"
    want, _ = first(media=MediaStage(AnyresTransform(ONEVISION), store=False))
    assert got.keys() == want.keys() and tuple(got["pixel_values"].shape) == (3, 7, 3, 384, 384)
    for key in want:
        assert np.array_equal(np.asarray(got[key]), np.asarray(want[key])), key
    with pytest.raises(ConfigError, match=r"transform: anyres tiles are counted by the recipe"):
        preprocess({**config, "recipe": {**config["recipe"], "image_tokens": 576}},
                   out=tmp_path / "d", pixels={"transform": "anyres"})  # fmt: skip


def test_the_docs_example_prints_what_it_shows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("torch")
    from conftest import REPO

    text = (REPO / "docs" / "media.md").read_text()
    section = text.split("\n### LLaVA-1.5 and LLaVA-OneVision\n", 1)[1].split("\n## ", 1)[0]
    (code,) = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    (shown,) = re.findall(r"```text\n(.*?)```", section, flags=re.S)
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "docs/media.md", "exec"), {})
    assert capsys.readouterr().out == shown

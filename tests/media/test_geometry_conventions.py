"""Coordinate conventions: what moves, what stays as written, and what is not a box.

A relative convention (0-1000, 0-1, LLaVA's padded square) keeps its numbers where only the
image's size changes; Qwen3-VL writes ``"bbox_2d"`` on a 0-1000 grid, not in pixels; numbers
outside a convention's range are ``box_invalid``; LLaVA's square is padded as LLaVA pads it.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from chute.errors import ConfigError, SampleError
from chute.media import DynamicResolution, ImageTransform
from chute.media.anyres import ANYRES_PRESETS
from chute.media.augment import ImageDraw
from chute.media.geometry import Geometry, ImageMap, prepared_map
from chute.media.tiles import AnyresTransform
from chute.media.tokens import DynamicImageTokens
from chute.recipe.coordinates import objects_answer
from chute.recipe.recipe import _warn_grid_of_family
from chute.sample.conversation import Conversation, Message, Part

LLAVA_15 = ImageTransform(size=336, crop=336, pad_to_square=True)


def _flip(width: int, height: int) -> ImageMap:
    return ImageMap.of((width, height), ImageDraw((height, width), flip=True))


# -- Qwen3-VL ------------------------------------------------------------------------------


def test_qwen3_vl_boxes_are_a_0_1000_grid_that_a_flip_mirrors():
    g = Geometry("qwen3-vl")
    text = '[{"bbox_2d": [500, 500, 700, 700], "label": "cup"}]'
    # a 1280x960 image: the box covers x 640..896; mirrored, x 384..640, 300..500 of the grid
    assert g.rewrite(text, [_flip(1280, 960)]) == (
        '[{"bbox_2d": [300, 500, 500, 700], "label": "cup"}]'
    )
    assert g.rewrite('{"point_2d": [250, 400]}', [_flip(1280, 960)]) == '{"point_2d": [750, 400]}'
    # a resize keeps a grid's numbers: the text is left exactly as written
    resize = prepared_map(DynamicResolution(), 1280, 960)
    assert g.rewrite('{"bbox_2d": [500,500, 700, 700]}', [resize]) == (
        '{"bbox_2d": [500,500, 700, 700]}'
    )
    with pytest.raises(SampleError, match="qwen3-vl coordinates are 0-1000"):
        g.rewrite('{"bbox_2d": [500, 500, 1001, 700]}', [resize])
    assert g.rewrite('{"bbox_2d": [1, 2, 3, 4]}', [resize], widest=True) == (
        '{"bbox_2d": [1000, 1000, 1000, 1000]}'
    )


def test_qwen2_5_vl_reads_the_same_text_as_pixels():
    g = Geometry("qwen2.5-vl")
    text = '{"bbox_2d": [500, 500, 700, 700]}'
    assert g.rewrite(text, [_flip(1280, 960)]) == '{"bbox_2d": [580, 500, 780, 700]}'


def test_objects_are_written_on_qwen3_vls_grid(tmp_path: Path):
    Image.new("RGB", (200, 100)).save(tmp_path / "a.png")
    conv = Conversation([Message("user", [Part("image", "a.png"), Part("text", "Find it.")])])
    data = {"objects": [{"bbox": [50, 25, 101, 75], "label": "dog"}, {"point": [100, 50]}]}

    class Paths:
        def resolve(self, value: str, path: str | None) -> str:
            return str(tmp_path / value)

    out = objects_answer(conv, data, Geometry("qwen3-vl"), Paths(), None)
    assert out.messages[-1].content == (
        '[{"bbox_2d": [250, 250, 505, 750], "label": "dog"}, {"point_2d": [500, 500]}]'
    )


def test_a_qwen_vl_generation_read_as_the_other_is_warned_about(caplog):
    with caplog.at_level(logging.WARNING, logger="chute"):
        _warn_grid_of_family(Geometry("qwen2.5-vl"), DynamicImageTokens(family="qwen3-vl"))
        _warn_grid_of_family(Geometry("qwen3-vl"), DynamicImageTokens(family="qwen3-vl"))
    said = [r.getMessage() for r in caplog.records if "bbox_2d" in r.getMessage()]
    assert len(said) == 1
    assert "qwen2.5-vl" in said[0] and "0-1000 grid" in said[0]


# -- relative conventions under a resize -----------------------------------------------------


@pytest.mark.parametrize(
    ("convention", "text"),
    [
        ("qwen2-vl", "<|box_start|>(267, 300), (600, 700)<|box_end|>"),
        ("normalized", "[0.200, 0.300, 0.600, 0.700]"),
    ],
)
def test_a_relative_box_under_a_resize_is_left_as_written(convention: str, text: str):
    for w, h in ((150, 100), (300, 168), (301, 199)):
        image = prepared_map(DynamicResolution(), w, h)
        assert Geometry(convention).rewrite(text, [image]) == text
        # several images: nothing moves, so which one a box is of does not matter
        assert Geometry(convention).rewrite(text, [image, image]) == text


def test_an_absolute_box_of_several_resized_images_is_still_ambiguous():
    maps = [prepared_map(DynamicResolution(), 150, 100)] * 2
    with pytest.raises(SampleError, match="box_ambiguous"):
        Geometry("qwen2.5-vl").rewrite('{"bbox_2d": [10, 10, 50, 50]}', maps)


@pytest.mark.parametrize("size", [(151, 100), (100, 151), (300, 199), (150, 100)])
def test_llava_boxes_stay_put_under_llava_1_5s_pad_and_resize(size: tuple[int, int]):
    image = prepared_map(LLAVA_15, *size)
    g = Geometry("llava")
    assert not g.moves(image)
    for text in (
        "[0.2, 0.3, 0.6, 0.7]",
        "[0.25, 0.35, 0.55, 0.65]",
        "[0.200, 0.300, 0.600, 0.700]",
    ):
        assert g.rewrite(text, [image]) == text


def test_llava_squares_are_padded_as_llava_pads_them():
    """LLaVA's expand2square pastes at (side - w) // 2: a box read and moved through a flip and
    flipped back lands where it was, on an odd difference of sides too."""
    g = Geometry("llava")
    there = g.rewrite("[0.2, 0.3, 0.6, 0.7]", [_flip(151, 100)])
    back = g.rewrite(there, [_flip(151, 100)])
    assert back == "[0.2, 0.3, 0.6, 0.7]"


# -- what is, and is not, a normalized box ---------------------------------------------------


@pytest.mark.parametrize("convention", ["normalized", "llava"])
@pytest.mark.parametrize(
    "box",
    [
        "[0.267, 0.3, 1.6, 0.7]",
        "[1.2, 0.3, 1.9, 0.7]",
        "[0.267, 0.3, 2.5, 0.7]",
        "[-0.1, 0.3, 0.5, 0.7]",
    ],
)
def test_fractions_outside_0_1_are_invalid(convention: str, box: str):
    for image in (ImageMap.of((150, 100)), _flip(150, 100)):
        with pytest.raises(SampleError, match="box_invalid"):
            Geometry(convention).rewrite(f"It is at {box}.", [image])


def test_a_list_of_integers_is_not_a_normalized_box():
    g = Geometry("normalized")
    text = "The answer is [1, 2, 3, 4]."
    assert not g.find(text)
    assert g.rewrite(text, [_flip(150, 100)]) == text
    assert g.rewrite("[0, 0, 1, 1]", [_flip(150, 100)]) == "[0.0, 0.0, 1.0, 1.0]"


# -- LLaVA-NeXT / OneVision tiles -------------------------------------------------------------


def test_relative_boxes_follow_anyres_tiles_and_pixels_are_refused():
    tiles = AnyresTransform(ANYRES_PRESETS["llava-next"], normalize="clip")
    image = prepared_map(tiles, 640, 480)
    for convention, text in (
        ("normalized", "[0.25, 0.3, 0.5, 0.75]"),
        ("qwen2-vl", "<|box_start|>(250,300),(500,750)<|box_end|>"),
        ("qwen3-vl", '{"bbox_2d": [250, 300, 500, 750]}'),
    ):
        Geometry(convention).check_transform(tiles)
        assert Geometry(convention).rewrite(text, [image]) == text
    for convention in ("qwen2.5-vl", "llava"):
        with pytest.raises(ConfigError, match="cannot follow LLaVA-NeXT / OneVision tiles"):
            Geometry(convention).check_transform(tiles)


def test_moves_is_seen_in_the_conventions_frame():
    resize = ImageMap((100, 50), (2.0, 2.0), (0.0, 0.0), (100, 200))
    pad = ImageMap((100, 50), (1.0, 1.0), (0.0, 25.0), (100, 100))
    assert not Geometry("qwen2-vl").moves(resize) and Geometry("qwen2.5-vl").moves(resize)
    assert Geometry("normalized").moves(pad) and not Geometry("llava").moves(pad)
    assert np.isclose(pad.forward(np.array([0.0]), np.array([0.0]))[1][0], 25.0)


def test_several_onevision_images_are_padded_squares_where_relative_boxes_move():
    onevision = AnyresTransform(ANYRES_PRESETS["llava-onevision"]).for_images(2)
    image = prepared_map(onevision, 200, 100)
    assert image.size == (384, 384)
    assert Geometry("normalized").moves(image)
    assert not Geometry("llava").moves(image)


@pytest.mark.parametrize(
    "text",
    [
        "The readings were [12.5, 30.0, 45.2, 60.1] degrees.",
        "Constants [3.14, 2.71, 1.41, 1.73].",
        "One-hot: [0, 1, 0, 0].",
        "[0.5, 1.5, 2.5, 3.5]",
    ],
)
def test_numbers_that_are_not_fractions_of_an_image_are_text(text: str):
    for convention in ("normalized", "llava"):
        g = Geometry(convention)
        assert not g.find(text)
        assert g.rewrite(text, [_flip(150, 100)]) == text
        assert g.rewrite(text, [_flip(150, 100)], widest=True) == text


def test_several_images_under_crops_and_flips_are_ambiguous_whatever_the_draw():
    """A draw that moves nothing this epoch must not let the sample through: it would be
    rejected some epochs and fed others, and fed as written (longer than its planned widest
    form)."""
    still = [ImageMap.of((150, 100)), ImageMap.of((150, 100))]
    g = Geometry("normalized")
    text = '{"bbox": [0.200,  0.300,  0.600,  0.700]}'
    assert g.rewrite(text, still) == text  # no augmentation: nothing moves, left as written
    with pytest.raises(SampleError, match="box_ambiguous"):
        g.rewrite(text, still, canonical=True)


def test_llava_follows_onevisions_padded_squares_of_several_images():
    onevision = AnyresTransform(ANYRES_PRESETS["llava-onevision"]).for_images(2)
    Geometry("llava").check_transform(onevision)
    maps = [prepared_map(onevision, 200, 100), prepared_map(onevision, 100, 300)]
    assert Geometry("llava").rewrite("[0.2, 0.3, 0.6, 0.7]", maps) == "[0.2, 0.3, 0.6, 0.7]"
    with pytest.raises(SampleError, match="box_ambiguous"):
        Geometry("normalized").rewrite("[0.2, 0.3, 0.6, 0.7]", maps)
    with pytest.raises(ConfigError, match="LLaVA-NeXT / OneVision"):
        Geometry("qwen2.5-vl").check_transform(onevision)


def test_the_rules_are_in_the_fingerprint():
    """Texts written under the earlier rules are in caches and cached lengths: not reused."""
    assert Geometry("qwen2-vl").fingerprint()["rules"] == 2

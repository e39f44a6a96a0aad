"""Augmentation as a pure function of (seed, epoch, sample id), and boxes that follow it.

The pixel checks draw a red rectangle on a grey image, write its box in the text in each
convention, run the transform's resize and an augmentation draw on both, and check that the box
in the rewritten text still encloses every red pixel of the augmented image.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from PIL import ImageDraw as PILDraw

from chute.errors import ConfigError, SampleError
from chute.media.augment import (
    Augment,
    ColorJitter,
    ImageDraw,
    RandomResizedCrop,
    SampleDraw,
    TorchTransform,
    sample_rng,
)
from chute.media.geometry import Geometry, ImageMap, prepared_map
from chute.media.transforms import DynamicResolution, ImageTransform

DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"
AUG = Augment(crop=RandomResizedCrop(scale=(0.3, 1.0)), flip=0.5, jitter=ColorJitter(0.3, 0.3))


def test_a_draw_is_a_pure_function_of_seed_epoch_sample_and_image():
    a = [AUG.draw(3, 1, i, 0, 64, 96) for i in range(20)]
    assert a == [AUG.draw(3, 1, i, 0, 64, 96) for i in range(20)]  # any process, any order
    assert a[::-1] == [AUG.draw(3, 1, i, 0, 64, 96) for i in reversed(range(20))]
    assert len({d.crop for d in a}) > 10  # samples differ
    assert {d.flip for d in a} == {True, False}
    assert a != [AUG.draw(3, 2, i, 0, 64, 96) for i in range(20)]  # epochs differ
    assert a != [AUG.draw(4, 1, i, 0, 64, 96) for i in range(20)]  # seeds differ
    assert AUG.draw(3, 1, 0, 0, 64, 96) != AUG.draw(3, 1, 0, 1, 64, 96)  # images of a sample
    # the flip guard changes the flip alone, not the other draws
    guarded = AUG.draw(3, 1, 0, 0, 64, 96, flip_allowed=False)
    assert not guarded.flip and guarded.crop == a[0].crop and guarded.jitter == a[0].jitter
    # the augmentation's own seed overrides the loader's
    own = Augment(flip=0.5, seed=9)
    assert own.draw(0, 0, 5, 0, 8, 8) == own.draw(1, 0, 5, 0, 8, 8)


def test_random_resized_crop_stays_in_the_image_and_keeps_the_size():
    crop = RandomResizedCrop(scale=(0.08, 1.0))
    for i in range(200):
        top, left, h, w = crop.params(sample_rng(0, 0, i), 30, 70)
        assert top >= 0 and top + h <= 30 and left >= 0 and left + w <= 70 and h > 0 and w > 0
    pixels = np.random.default_rng(0).integers(0, 256, (30, 70, 3), dtype=np.uint8)
    out = AUG.apply(pixels, AUG.draw(0, 0, 1, 0, 30, 70))
    assert out.shape == pixels.shape and out.dtype == np.uint8
    with pytest.raises(ConfigError, match="scale"):
        RandomResizedCrop(scale=(0.5, 2.0))
    with pytest.raises(ConfigError, match="flip"):
        Augment(flip=1.5)
    with pytest.raises(ConfigError, match="left_right"):
        Augment(left_right="maybe")


def test_flip_and_crop_move_pixels_as_the_draw_says():
    pixels = np.arange(4 * 6 * 3, dtype=np.uint8).reshape(4, 6, 3)
    flipped = Augment(flip=1.0).apply(pixels, ImageDraw((4, 6), flip=True))
    assert (flipped == pixels[:, ::-1]).all()
    crop = Augment(crop=RandomResizedCrop(resample="nearest"))
    out = crop.apply(pixels, ImageDraw((4, 6), crop=(0, 0, 2, 3)))
    assert (out == np.repeat(np.repeat(pixels[:2, :3], 2, 0), 2, 1)).all()
    x, y = ImageDraw((4, 6), crop=(0, 0, 2, 3)).map_points(np.array([3.0]), np.array([2.0]))
    assert (x[0], y[0]) == (6.0, 4.0)


def _torch_style_noise(image: torch.Tensor) -> torch.Tensor:
    """Like a torchvision v2 transform: draws from torch's global generator."""
    noise = torch.randint(-20, 21, image.shape)
    return (image.to(torch.int16) + noise).clamp(0, 255).to(torch.uint8)


def test_a_torch_transform_is_deterministic_per_sample_and_leaves_the_global_rng_alone():
    aug = Augment(transform=_torch_style_noise)  # a callable is wrapped in a TorchTransform
    assert isinstance(aug.transform, TorchTransform)
    pixels = np.full((8, 8, 3), 128, dtype=np.uint8)
    torch.manual_seed(123)
    before = torch.get_rng_state()
    a = aug.apply(pixels, aug.draw(0, 0, 7, 0, 8, 8))
    assert torch.equal(torch.get_rng_state(), before)  # the training loop's stream is untouched
    torch.manual_seed(999)  # whatever the global state, the sample's draw is its own
    b = aug.apply(pixels, aug.draw(0, 0, 7, 0, 8, 8))
    c = aug.apply(pixels, aug.draw(0, 0, 8, 0, 8, 8))
    assert (a == b).all() and not (a == pixels).all() and not (a == c).all()
    with_gen = Augment(transform=TorchTransform(lambda x, g: x.flip(0), pass_generator=True))
    assert (with_gen.apply(pixels, with_gen.draw(0, 0, 0, 0, 8, 8)) == pixels).all()
    bad = Augment(transform=lambda x: x.float())
    with pytest.raises(ConfigError, match="uint8 tensor"):
        bad.apply(pixels, bad.draw(0, 0, 0, 0, 8, 8))


def _scene(width: int, height: int, box: tuple[int, int, int, int]) -> Image.Image:
    image = Image.new("RGB", (width, height), (128, 128, 128))
    PILDraw.Draw(image).rectangle([box[0], box[1], box[2] - 1, box[3] - 1], fill=(255, 0, 0))
    return image


def _red_box(pixels: np.ndarray) -> tuple[int, int, int, int] | None:
    red = (pixels[..., 0].astype(int) - pixels[..., 1].astype(int)) > 60
    ys, xs = np.nonzero(red)
    if not len(xs):
        return None
    return int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1


def _write(convention: str, box: tuple[int, int, int, int], w: int, h: int) -> str:
    x1, y1, x2, y2 = box
    if convention == "qwen2-vl":
        v = [x1 * 1000 // w, y1 * 1000 // h, -(-x2 * 1000 // w), -(-y2 * 1000 // h)]
        return f"<|box_start|>({v[0]},{v[1]}),({v[2]},{v[3]})<|box_end|>"
    if convention == "qwen2.5-vl":
        return json.dumps({"bbox_2d": list(box), "label": "the red thing"})
    if convention == "normalized":
        return f"[{x1 / w:.3f}, {y1 / h:.3f}, {x2 / w:.3f}, {y2 / h:.3f}]"
    side = max(w, h)  # llava: of the padded square
    ox, oy = (side - w) / 2, (side - h) / 2
    return f"[{(x1 + ox) / side:.3f}, {(y1 + oy) / side:.3f}, {(x2 + ox) / side:.3f}, {(y2 + oy) / side:.3f}]"


def _read(convention: str, text: str, h: int, w: int) -> tuple[float, ...]:
    """The text's box in the model's image's pixels."""
    import re

    nums = [float(v) for v in re.findall(r"\d+(?:\.\d+)?", text.split("label")[0])]
    x1, y1, x2, y2 = nums[-4:]
    if convention == "qwen2-vl":
        return x1 * w / 1000, y1 * h / 1000, x2 * w / 1000, y2 * h / 1000
    if convention == "qwen2.5-vl":
        return x1, y1, x2, y2
    if convention == "normalized":
        return x1 * w, y1 * h, x2 * w, y2 * h
    side = max(w, h)
    ox, oy = (side - w) / 2, (side - h) / 2
    return x1 * side - ox, y1 * side - oy, x2 * side - ox, y2 * side - oy


TRANSFORMS = {
    "qwen2-vl": DynamicResolution(min_pixels=28 * 28, max_pixels=112 * 112),
    "qwen2.5-vl": DynamicResolution(min_pixels=28 * 28, max_pixels=112 * 112),
    "normalized": ImageTransform(size=64, crop=64),
    "llava": ImageTransform(size=48, crop=48, pad_to_square=True),
}


@pytest.mark.parametrize("convention", list(TRANSFORMS))
def test_after_every_transform_the_box_in_the_text_encloses_the_drawn_object(convention):
    transform = TRANSFORMS[convention]
    geometry = Geometry(convention)
    w0, h0, box = 150, 100, (40, 30, 90, 70)
    scene = _scene(w0, h0, box)
    text = _write(convention, box, w0, h0)
    checked = 0
    for sample_id in range(40):
        base = prepared_map(transform, w0, h0)
        pixels = transform.prepare(scene)
        assert pixels.shape[:2] == base.size  # the map's size is the transform's
        draw = SampleDraw(AUG, 0, 0, sample_id).image(0, *base.size)
        image = ImageMap(base.original, base.scale, base.offset, base.prepared, draw)
        try:
            moved = geometry.rewrite(text, [image])
        except SampleError as exc:
            assert exc.kind == "box_outside"
            assert _red_box(AUG.apply(pixels, draw)) is None  # nothing of the object is left
            continue
        out = AUG.apply(pixels, draw)
        red = _red_box(out)
        assert red is not None
        x1, y1, x2, y2 = _read(convention, moved, *out.shape[:2])
        # resampling smears the edge by a pixel or two; the box must still hold the object
        tol = 2.0
        assert x1 - tol <= red[0] and y1 - tol <= red[1], (sample_id, moved, red)
        assert red[2] <= x2 + tol and red[3] <= y2 + tol, (sample_id, moved, red)
        # and not a box of the whole image: it stays tight around the object
        assert (x2 - x1) * (y2 - y1) <= (red[2] - red[0] + 2 * tol) * (red[3] - red[1] + 2 * tol)
        checked += 1
    assert checked >= 30


def test_unmoved_coordinates_are_left_exactly_as_written():
    same = ImageMap.of((640, 480))
    for convention, text in [
        ("qwen2-vl", "<box>(588,499),(725,789)</box>"),
        ("normalized", "[0.123, 0.5, 0.75, 0.9]"),
        ("llava", "[0.12, 0.34, 0.56, 0.78]"),
    ]:
        assert Geometry(convention).rewrite(text, [same]) == text
        # a pure resize moves no relative coordinate either
        resized = prepared_map(DynamicResolution(), 640, 480)
        assert Geometry(convention).rewrite(text, [resized]) == text


def test_qwen2_5_vl_pixels_follow_the_resize_by_hand():
    # 300 x 168 (the shared mllm_demo 1.jpg's size) -> Qwen2-VL's 308 x 168
    resized = prepared_map(DynamicResolution(), 300, 168)
    assert resized.size == (168, 308)
    text = '{"bbox_2d": [120, 34, 250, 160], "point_2d": [150, 84]}'
    # x * 308 / 300: 123.2 -> 123 (floor), 256.67 -> 257 (ceil); y unchanged; point 154
    assert Geometry("qwen2.5-vl").rewrite(text, [resized]) == (
        '{"bbox_2d": [123, 34, 257, 160], "point_2d": [154, 84]}'
    )


def test_the_shared_qwen_vl_grounding_record_rewritten_by_hand():
    record = json.loads((DATA / "qwen-vl" / "qwen_vl_readme_example.json").read_text())[1]
    answer = record["conversations"][3]["value"]
    assert answer == "<ref>格子衬衫</ref><box>(588,499),(725,789)</box>"
    g = Geometry("qwen2-vl")  # Qwen-VL's <box> is 0-1000, as Qwen2-VL's
    flip = ImageMap.of((1000, 1000), ImageDraw((1000, 1000), flip=True))
    # a flip: x -> 1000 - x, corners swapped
    assert g.rewrite(answer, [flip]) == "<ref>格子衬衫</ref><box>(275,499),(412,789)</box>"
    # a crop of rows 100..600, columns 200..700, back to 1000 x 1000: (v - off) * 2, clipped
    crop = ImageMap.of((1000, 1000), ImageDraw((1000, 1000), crop=(100, 200, 500, 500)))
    assert g.rewrite(answer, [crop]) == "<ref>格子衬衫</ref><box>(776,798),(1000,1000)</box>"
    with pytest.raises(SampleError) as info:
        Geometry("qwen2-vl", outside="reject").rewrite(answer, [crop])
    assert info.value.kind == "box_outside"
    gone = ImageMap.of((1000, 1000), ImageDraw((1000, 1000), crop=(0, 0, 400, 400)))
    with pytest.raises(SampleError) as info:
        g.rewrite(answer, [gone])
    assert info.value.kind == "box_outside"


def test_bad_coordinates_and_several_images_are_rejects_not_guesses():
    moved = ImageMap.of((100, 100), ImageDraw((100, 100), flip=True))
    with pytest.raises(SampleError) as info:
        Geometry("qwen2-vl").rewrite("<box>(10,10),(1200,20)</box>", [moved])
    assert info.value.kind == "box_invalid"
    with pytest.raises(SampleError) as info:
        Geometry("qwen2-vl").rewrite("<box>(10,10),(20,20)</box>", [moved, moved])
    assert info.value.kind == "box_ambiguous"
    with pytest.raises(ConfigError, match="geometry"):
        Geometry("yolo")


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("the cat on the left", True),
        ("top_left corner", True),  # "_" is a word character: \b missed it
        ('{"topLeft": [1, 2]}', True),
        ("the lefthand side", True),
        ("left_of the dog", True),
        ("bottomRight", True),
        ("à gauche du chien", True),
        ("a la izquierda", True),
        ("слева от собаки", True),
        ("左边的猫", True),
        ("the leftover pizza", False),
        ("a bright copyright notice, alright", False),
        ("rightly so", False),
    ],
)
def test_the_flip_guard_reads_left_and_right_as_written(text: str, says: bool) -> None:
    from chute.recipe.coordinates import says_left_right
    from chute.sample.conversation import Conversation, Message

    conv = Conversation([Message("user", "Where?"), Message("assistant", text)])
    assert says_left_right(conv) is says

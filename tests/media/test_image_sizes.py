"""Image sizes from headers only, and the image-token rules."""

from __future__ import annotations

import base64
import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from chute.errors import ConfigError, SampleError
from chute.media import (
    DynamicImageTokens,
    FixedImageTokens,
    image_size,
    image_token_counts,
    image_tokens_rule,
    qwen2vl_grid,
    smart_resize,
)


def make(path: Path, size: tuple[int, int], fmt: str = "PNG", **kw) -> Path:
    Image.new("RGB", size, (200, 10, 10)).save(path, fmt, **kw)
    return path


def test_size_from_header_without_decoding(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = make(tmp_path / "a.png", (40, 30))

    def no_load(self):  # any pixel decoding would call load()
        raise AssertionError("image_size decoded pixels")

    monkeypatch.setattr(Image.Image, "load", no_load)
    monkeypatch.setattr("PIL.ImageFile.ImageFile.load", no_load)
    assert image_size(path) == (40, 30)


def test_truncated_image_still_has_a_header_size(tmp_path: Path) -> None:
    full = make(tmp_path / "full.jpg", (320, 200), "JPEG", quality=95)
    cut = tmp_path / "cut.jpg"
    cut.write_bytes(full.read_bytes()[: len(full.read_bytes()) // 2])
    # Counting tokens needs only the header; decoding (a later stage) will reject this file.
    assert image_size(cut) == (320, 200)


def test_exif_orientation_swaps_sides(tmp_path: Path) -> None:
    exif = Image.Exif()
    exif[0x0112] = 6  # rotated 90 degrees: displayed portrait
    path = tmp_path / "phone.jpg"
    Image.new("RGB", (400, 300)).save(path, "JPEG", exif=exif)
    assert image_size(path) == (300, 400)
    assert image_size(path, exif_transpose=False) == (400, 300)


def test_missing_corrupt_remote_and_data_urls(tmp_path: Path) -> None:
    with pytest.raises(SampleError, match="image_missing: .*nope.png: no such file"):
        image_size(tmp_path / "nope.png")
    with pytest.raises(SampleError, match="image_missing: .*is a directory"):
        image_size(tmp_path)
    with pytest.raises(SampleError, match="url_not_allowed: https://x/y.jpg is a remote URL"):
        image_size("https://x/y.jpg")
    empty = tmp_path / "empty.jpg"
    empty.write_bytes(b"")
    with pytest.raises(SampleError, match="image_corrupt: .*cannot read an image header"):
        image_size(empty)
    head = tmp_path / "head.jpg"
    head.write_bytes(make(tmp_path / "src.jpg", (64, 64), "JPEG").read_bytes()[:100])
    with pytest.raises(SampleError, match="image_corrupt"):
        image_size(head)
    buf = io.BytesIO()
    Image.new("RGB", (7, 5)).save(buf, "PNG")
    url = "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()
    assert image_size(url) == (7, 5)
    with pytest.raises(SampleError, match="image_corrupt: data:image/png: only base64"):
        image_size("data:image/png,rawbytes")


def test_decompression_bomb_is_too_large(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = make(tmp_path / "big.png", (300, 300))
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 100)
    with pytest.raises(SampleError, match="image_too_large"):
        image_size(path)


@pytest.mark.parametrize(
    ("height", "width", "expected"),
    [
        (168, 300, (168, 308)),  # rounded to multiples of 28
        (480, 640, (476, 644)),
        (20, 20, (56, 56)),  # below min_pixels: scaled up
        (4000, 6000, (812, 1204)),  # above max_pixels: scaled down
    ],
)
def test_smart_resize(height: int, width: int, expected: tuple[int, int]) -> None:
    h, w = smart_resize(height, width)
    assert (h, w) == expected
    assert h % 28 == 0 and w % 28 == 0
    assert 56 * 56 <= h * w <= 28 * 28 * 1280


def test_smart_resize_refuses_extreme_aspect_ratio() -> None:
    with pytest.raises(SampleError, match="image_unsupported: aspect ratio 250"):
        smart_resize(10, 2500)


def test_qwen2vl_grid_and_token_counts() -> None:
    assert qwen2vl_grid(300, 168) == (12, 22)
    rule = DynamicImageTokens()
    assert rule.count((300, 168)) == (66, (1, 12, 22))
    assert rule.count((640, 480)) == (391, (1, 34, 46))
    qwen3_like = DynamicImageTokens(
        patch_size=16, merge_size=2, min_pixels=32 * 32, max_pixels=256 * 32 * 32
    )
    tokens, (_, gh, gw) = qwen3_like.count((640, 480))
    assert tokens == gh * gw // 4 and tokens <= 256


def test_rules_from_recipe_arguments() -> None:
    assert image_tokens_rule(None) is None
    assert image_tokens_rule(576) == FixedImageTokens(576)
    assert image_tokens_rule("256") == FixedImageTokens(256)
    assert image_tokens_rule("llava-1.5").count(None) == (576, None)
    assert image_tokens_rule("qwen-vl") == FixedImageTokens(256)
    assert image_tokens_rule("qwen2.5-vl") == DynamicImageTokens(family="qwen2.5-vl")
    assert image_tokens_rule("qwen3-vl") == DynamicImageTokens(
        patch_size=16, min_pixels=65536, max_pixels=16777216, family="qwen3-vl"
    )
    with pytest.raises(ConfigError, match="image_tokens.family: expected one of qwen2-vl"):
        DynamicImageTokens(family="llava")
    assert image_tokens_rule({"patch_size": 16}) == DynamicImageTokens(patch_size=16)
    with pytest.raises(ConfigError, match="image_tokens: unknown preset 'clip'"):
        image_tokens_rule("clip")
    with pytest.raises(ConfigError, match="expected a positive number of tokens per image, got 0"):
        image_tokens_rule(0)
    with pytest.raises(ConfigError, match=r"image_tokens.patch_size: expected a positive integer"):
        DynamicImageTokens(patch_size=-1)
    with pytest.raises(ConfigError, match="min_pixels <= max_pixels"):
        DynamicImageTokens(min_pixels=10_000, max_pixels=5_000)
    with pytest.raises(ConfigError, match="the keys are patch_size"):
        image_tokens_rule({"patch": 14})
    with pytest.raises(ConfigError, match="got True"):
        image_tokens_rule(True)


@pytest.mark.shared_data
def test_real_images_with_wrong_extensions(shared_data: Path) -> None:
    images = shared_data / "llava/llava_bench_in_the_wild/images"
    assert image_size(images / "001.jpg")[0] > 0  # really WEBP
    assert image_size(images / "014.jpg")[0] > 0  # really an RGBA PNG
    assert image_size(shared_data / "llama-factory/mllm_demo_data/1.jpg") == (300, 168)
    assert image_size(shared_data / "xtuner/resource/mscoco_dog_000000319154.jpg") == (375, 500)
    assert image_size(shared_data / "images/skimage/camera.png") == (512, 512)


def test_vectorised_counts_equal_the_rule_image_by_image() -> None:
    rng = np.random.default_rng(0)
    sizes = np.concatenate(
        [
            rng.integers(1, 5000, size=(3000, 2)),
            rng.integers(1, 120, size=(500, 2)),  # below min_pixels
            [[300, 168], [640, 480], [28, 28], [2, 600], [14, 2800]],
        ]
    )
    for rule in (DynamicImageTokens(), DynamicImageTokens(16, 2, 32 * 32, 16384 * 32 * 32)):
        got = image_token_counts(sizes, rule)
        for (w, h), n in zip(sizes.tolist(), got.tolist(), strict=True):
            try:
                want = rule.count((w, h))[0]
            except SampleError:
                want = -1
            assert n == want, (w, h)
    assert image_token_counts([[10, 10]], FixedImageTokens(576)).tolist() == [576]

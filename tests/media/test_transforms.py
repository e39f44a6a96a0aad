"""Transforms without torchvision, against plain references and transformers' processors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from chute.errors import ConfigError
from chute.media import (
    NORMALIZE_PRESETS,
    DynamicImageTokens,
    DynamicResolution,
    ImageTransform,
    ProcessorTransform,
    decode_image,
)

# float32 fused multiply-add vs float64 two-step arithmetic: a few ulps of values up to ~2.2.
ATOL = 1e-5


def noise(w: int, h: int, seed: int = 0) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8))


def reference_clip(image: Image.Image, size: int, crop: int, preset: str) -> np.ndarray:
    """The straightforward pipeline: Pillow resize, slicing, numpy float64 normalise."""
    w, h = image.size
    new = (size, int(size * h / w)) if w <= h else (int(size * w / h), size)
    arr = np.asarray(image.resize(new, Image.Resampling.BICUBIC)).astype(np.float64)
    top, left = (arr.shape[0] - crop) // 2, (arr.shape[1] - crop) // 2
    arr = arr[top : top + crop, left : left + crop] / 255.0
    mean, std = (np.array(v) for v in NORMALIZE_PRESETS[preset])
    return ((arr - mean) / std).transpose(2, 0, 1)


@pytest.mark.parametrize("preset", ["clip", "siglip", "imagenet"])
@pytest.mark.parametrize("size", [(640, 480), (300, 700), (336, 336), (100, 80)])
def test_fixed_transform_matches_the_plain_reference(preset: str, size: tuple[int, int]) -> None:
    image = noise(*size)
    out = ImageTransform(size=336, crop=336, normalize=preset)(image)
    want = reference_clip(image, 336, 336, preset)
    assert out.pixels.shape == (3, 336, 336) and out.pixels.dtype == np.float32
    assert np.abs(out.pixels - want).max() < ATOL


def test_fixed_size_pad_to_square_and_no_normalise() -> None:
    image = noise(200, 100)
    exact = ImageTransform(size=(64, 32), crop=None, normalize=None, rescale=1.0)(image)
    assert exact.pixels.shape == (3, 64, 32)
    plain = np.asarray(image.resize((32, 64), Image.Resampling.BICUBIC)).transpose(2, 0, 1)
    assert np.array_equal(exact.pixels, plain.astype(np.float32))
    padded = ImageTransform(size=10, crop=10, pad_to_square=True, normalize="clip")
    arr = padded.prepare(Image.new("RGB", (20, 10), (255, 0, 0)))
    fill = [int(m * 255) for m in NORMALIZE_PRESETS["clip"][0]]
    assert arr[0, 5].tolist() == fill and arr[5, 5].tolist() == [255, 0, 0]  # LLaVA's expand2square
    small = ImageTransform(size=(8, 8), crop=12, normalize=None).prepare(noise(8, 8))
    assert small.shape == (12, 12, 3) and small[0, 0].tolist() == [0, 0, 0]  # zero padded


def test_transform_configuration_errors() -> None:
    with pytest.raises(ConfigError, match="crop: None with size=336 .* pass crop=336"):
        ImageTransform(size=336, crop=None)
    with pytest.raises(ConfigError, match="normalize: unknown preset 'dino'"):
        ImageTransform(normalize="dino")
    with pytest.raises(ConfigError, match="resample: expected one of"):
        ImageTransform(resample="area")
    with pytest.raises(ConfigError, match="size: expected a positive int or a"):
        ImageTransform(size=0)
    with pytest.raises(ConfigError, match="std > 0"):
        ImageTransform(normalize=((0, 0, 0), (1, 0, 1)))
    with pytest.raises(ConfigError, match="min_pixels <= max_pixels"):
        DynamicResolution(min_pixels=10_000, max_pixels=5_000)


@pytest.mark.parametrize("size", [(300, 168), (640, 480), (20, 20), (4000, 3000), (333, 999)])
def test_dynamic_resolution_counts_what_the_recipe_counts(size: tuple[int, int]) -> None:
    d = DynamicResolution()
    out = d(noise(*size))
    tokens, grid = DynamicImageTokens().count(size)
    assert out.grid_thw == grid and out.num_features == tokens
    t, gh, gw = grid
    assert out.pixels.shape == (t * gh * gw, 3 * 2 * 14 * 14)
    assert d.rule() == DynamicImageTokens()


def test_dynamic_patches_are_the_image() -> None:
    """Patch (row r, col c) of the flattened layout holds exactly those pixels, both frames."""
    d = DynamicResolution(normalize=None, rescale=1.0)
    image = noise(56, 84)
    arr = d.prepare(image)
    out = d.finish(arr)
    _, gh, gw = out.grid_thw
    chw = arr.transpose(2, 0, 1).astype(np.float32)
    # Order: merge windows row-major, then the 2x2 patches inside each window row-major.
    k = 0
    for wr in range(gh // 2):
        for wc in range(gw // 2):
            for i in range(2):
                for j in range(2):
                    r, c = 2 * wr + i, 2 * wc + j
                    patch = chw[:, 14 * r : 14 * r + 14, 14 * c : 14 * c + 14]
                    got = out.pixels[k].reshape(3, 2, 14, 14)
                    assert np.array_equal(got[:, 0], patch) and np.array_equal(got[:, 1], patch)
                    k += 1


def test_video_frames_group_by_temporal_patch() -> None:
    d = DynamicResolution()
    frames = np.stack([np.asarray(d.prepare(noise(56, 56, seed=s))) for s in range(3)])
    out = d.finish(frames)
    assert out.grid_thw == (2, 4, 4) and out.num_features == 2 * 4 * 4 // 4  # 3 frames -> 4


@pytest.mark.shared_data
def test_equal_to_transformers_processors_on_real_images(shared_data: Path) -> None:
    """chute's transforms against transformers' CLIP and Qwen2-VL (PIL backends) processors."""
    pil_clip = pytest.importorskip("transformers.models.clip.image_processing_pil_clip")
    pil_qwen = pytest.importorskip("transformers.models.qwen2_vl.image_processing_pil_qwen2_vl")
    clip = pil_clip.CLIPImageProcessorPil(
        size={"shortest_edge": 336}, crop_size={"height": 336, "width": 336}
    )
    qwen = pil_qwen.Qwen2VLImageProcessorPil()
    fixed, dynamic = ImageTransform(), DynamicResolution()
    bench = shared_data / "llava/llava_bench_in_the_wild/images"
    for path in (bench / "001.jpg", bench / "014.jpg", shared_data / "images/skimage/camera.png"):
        image = decode_image(path)
        want = clip(images=image, return_tensors="np")["pixel_values"][0]
        assert np.abs(fixed(image).pixels - want).max() < ATOL
        ref = qwen(images=image, return_tensors="np")
        got = dynamic(image)
        assert got.grid_thw == tuple(ref["image_grid_thw"][0].tolist())
        assert np.abs(got.pixels - ref["pixel_values"]).max() < ATOL
        wrapped = ProcessorTransform(qwen)(image)  # a user processor gives the same
        assert wrapped.grid_thw == got.grid_thw and wrapped.num_features == got.num_features
    via_clip = ProcessorTransform(clip, tokens_per_image=576)(decode_image(bench / "002.jpg"))
    assert via_clip.pixels.shape == (3, 336, 336) and via_clip.num_features == 576

"""LLaVA-1.5, LLaVA-NeXT and LLaVA-OneVision on the shared photos, against ``transformers``.

For every shared image, the recipe's image tokens (counted from the header) equal the number of
``<image>`` tokens the model family's processor writes, and the media stage's pixel inputs equal
the processor's (``pixel_values``, ``image_sizes``) within ``ATOL``. A tiny random model of each
family then runs forward on a batch of chute's ``Loader`` (padded collation, its default media
stage) and makes exactly as many image features per row as the row holds image tokens.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from chute import Loader, Recipe, World
from chute.media import decode_image
from chute.media.stage import default_media_stage
from recipe_helpers import tiny_tokenizer

pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

ATOL = 1e-5  # float32 rounding of the normalisation; measured at most 4.8e-7
PRESETS = ["llava-1.5", "llava-next", "llava-onevision"]
FOLDERS = (
    "llava/llava_bench_in_the_wild/images",
    "llava/examples",
    "llama-factory/mllm_demo_data",
    "qwen3-vl/demo/images",
)


def _shared_images(root: Path) -> list[str]:
    found = [
        str(p.relative_to(root))
        for folder in FOLDERS
        for p in sorted((root / folder).glob("*"))
        if p.suffix.lower() in (".jpg", ".jpeg", ".png")
    ]
    if len(found) < 20:
        pytest.skip(f"expected the shared photos under {root}; found {len(found)}")
    return found


def _recipe(preset: str, root: Path) -> Recipe:
    tok = tiny_tokenizer()  # <image> is not in it: LLaVA's rule, with an id of its own
    return Recipe(tokenizer=tok, template="chatml", image_tokens=preset, image_token="<image>",
                  image_token_id=tok.vocab_size, media_root=str(root))  # fmt: skip


def _record(images: list[str], text: str = "What is shown?") -> dict[str, Any]:
    return {
        "messages": [
            {"role": "user", "content": "<image>" * len(images) + text},
            {"role": "assistant", "content": "A photo."},
        ],
        "images": images,
    }


@pytest.mark.shared_data
@pytest.mark.slow
@pytest.mark.parametrize("preset", PRESETS)
def test_tokens_and_pixels_equal_transformers_on_every_shared_image(
    shared_data: Path, preset: str
) -> None:
    from llava_helpers import processed

    recipe = _recipe(preset, shared_data)
    image_id = recipe.media.token_id("image")
    stage = default_media_stage(recipe.media.image_rule).bind(recipe)
    worst = 0.0
    for name in _shared_images(shared_data):
        sample = recipe(_record([name]))
        tokens = int((sample["input_ids"] == image_id).sum())
        want, ref = processed(preset, [decode_image(shared_data / name)])
        assert tokens == want == sample["images"][0]["num_tokens"], name
        got = stage(sample)
        pixels, ref_pixels = got["pixel_values"][0], ref["pixel_values"][0]
        assert pixels.shape == ref_pixels.shape, name
        worst = max(worst, float(np.abs(pixels - ref_pixels).max()))
        if preset != "llava-1.5":
            assert got["image_sizes"] == [tuple(ref["image_sizes"][0].tolist())], name
    assert worst < ATOL


@pytest.mark.shared_data
def test_a_multi_image_onevision_sample_equals_transformers(shared_data: Path) -> None:
    from llava_helpers import processed

    names = _shared_images(shared_data)[:3]  # 2560 x 2180, 900 x 900, 1439 x 1439
    recipe = _recipe("llava-onevision", shared_data)
    sample = recipe(_record(names))
    want, ref = processed("llava-onevision", [decode_image(shared_data / n) for n in names])
    assert int((sample["input_ids"] == recipe.media.token_id("image")).sum()) == want == 3 * 730
    got = default_media_stage(recipe.media.image_rule).bind(recipe)(sample)
    for k, pixels in enumerate(got["pixel_values"]):
        assert pixels.shape == (1, 3, 384, 384)
        assert np.abs(pixels[0] - ref["pixel_values"][k][0]).max() < ATOL


@pytest.mark.shared_data
@pytest.mark.slow
@pytest.mark.parametrize("preset", PRESETS)
def test_a_tiny_model_runs_forward_on_a_chute_batch(
    shared_data: Path, tmp_path: Path, preset: str
) -> None:
    from llava_helpers import tiny_model

    demo = "llama-factory/mllm_demo_data"
    records = [
        _record([f"{demo}/1.jpg"]),
        {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo."}]},
        _record([f"{demo}/2.jpg", f"{demo}/3.jpg"], "Which is which?"),
        _record(["qwen3-vl/demo/images/10149.png"]),
    ]
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    recipe = _recipe(preset, shared_data)
    image_id = recipe.media.token_id("image")
    loader = Loader(path, recipe, batch_size=4, world=World(0, 1), shuffle=False)  # padded
    batch = next(iter(loader))
    counts = batch["image_counts"].tolist()
    assert counts == [1, 0, 2, 1] and batch["pixel_values"].shape[0] == 4
    model = tiny_model(preset, vocab_size=image_id + 1, image_token_id=image_id)
    names = ("pixel_values", "image_sizes", "batch_num_images")
    vision = {k: batch[k] for k in names if k in batch}
    if preset == "llava-1.5":
        assert tuple(batch["pixel_values"].shape) == (4, 3, 336, 336)
    else:  # padded over tiles, as the processors return them
        assert batch["pixel_values"].dim() == 5 and batch["image_sizes"].shape == (4, 2)
        assert batch["batch_num_images"].tolist() == [1, 2, 1]
    with torch.no_grad():
        features = model.model.get_image_features(**vision).pooler_output
        per_image = [int(f.shape[0]) for f in features]
        out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                    labels=batch["labels"], **vision)  # fmt: skip
    assert torch.isfinite(out.loss)
    tokens = (batch["input_ids"] == image_id).sum(dim=1).tolist()
    first = np.cumsum([0, *counts])
    assert tokens == [sum(per_image[first[r] : first[r + 1]]) for r in range(len(counts))]
    if preset == "llava-onevision":
        assert per_image[1:3] == [730, 730]  # the two images of row 2: padded squares

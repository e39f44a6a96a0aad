"""The media stage in the Loader: pixel_values whose features equal the image tokens, skips."""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from chute import JsonlSource, Loader, Recipe, World
from chute.collate import MediaCollate, collate_media
from chute.errors import ConfigError, SampleError
from chute.media import DynamicImageTokens, DynamicResolution, ImageTransform, MediaStage
from recipe_helpers import real_tokenizer, tiny_tokenizer

TOK = tiny_tokenizer()
PAD = TOK.token_to_id("<|image_pad|>")


def msgs(n: int = 1) -> list[dict]:
    return [
        {"role": "user", "content": "<image>" * n + "What?"},
        {"role": "assistant", "content": "A cat."},
    ]


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def features_per_sample(batch: dict, merge: int = 2) -> list[int]:
    """Image features of each row, from the batch's own tensors."""
    counts = batch["image_counts"].tolist()
    if "image_grid_thw" in batch:
        per_image = (batch["image_grid_thw"].prod(dim=1) // (merge * merge)).tolist()
    else:
        per_image = [None] * sum(counts)
    out, k = [], 0
    for c in counts:
        out.append(per_image[k : k + c])
        k += c
    return out


def check_batches(loader: Loader, image_id: int, per_fixed: int | None = None) -> int:
    """Every row: image tokens in input_ids == features of its images. Returns images seen."""
    seen = 0
    for batch in loader:
        ids = batch["input_ids"]
        for row, feats in enumerate(features_per_sample(batch)):
            if per_fixed is not None:
                feats = [per_fixed] * len(feats)
            assert int((ids[row] == image_id).sum()) == sum(feats)
            seen += len(feats)
        if "pixel_values" in batch:
            n = int(batch["image_counts"].sum())
            if "image_grid_thw" in batch:
                assert batch["pixel_values"].shape[0] == int(batch["image_grid_thw"].prod(1).sum())
            else:
                assert batch["pixel_values"].shape[0] == n
        else:
            assert int(batch["image_counts"].sum()) == 0
    return seen


@pytest.fixture
def pics(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    for name, size in (("a.png", (300, 168)), ("b.jpg", (640, 480)), ("c.png", (90, 120))):
        Image.fromarray(rng.integers(0, 255, (size[1], size[0], 3), dtype=np.uint8)).save(
            tmp_path / name
        )
    full = (tmp_path / "b.jpg").read_bytes()
    (tmp_path / "cut.jpg").write_bytes(full[: len(full) // 3])
    return tmp_path


def test_loader_dynamic_resolution_with_bad_images_skipped(pics: Path) -> None:
    rows = [
        {"images": ["a.png"], "messages": msgs()},
        {"images": ["a.png", "b.jpg"], "messages": msgs(2)},
        {"images": ["cut.jpg"], "messages": msgs()},  # truncated: image_corrupt
        {"instruction": "no image", "output": "fine"},
        {"images": ["../x.png"], "messages": msgs()},  # unsafe_path
        {"images": ["c.png"], "messages": msgs()},
    ]
    data = write_jsonl(pics / "d.jsonl", rows)
    recipe = Recipe(tokenizer=TOK, template="chatml", image_tokens="qwen2-vl")
    for workers in (0, 2):
        loader = Loader(
            data,
            recipe,
            batch_size=3,
            shuffle=False,
            media=DynamicResolution(),
            num_workers=workers,
            world=World(0, 1),
        )
        assert check_batches(loader, PAD) == 4
        assert loader.stats == {"image_corrupt": 1, "unsafe_path": 1}
        assert loader.tally.examples["image_corrupt"][0].startswith(f"{data}:3: image_corrupt")
    batch = next(iter(loader))
    assert batch["pixel_values"].dtype == torch.float32
    assert batch["pixel_values"].shape == (264 + 264 + 1564, 1176)
    assert batch["image_grid_thw"].tolist() == [[1, 12, 22], [1, 12, 22], [1, 34, 46]]
    assert batch["image_counts"].tolist() == [1, 2]


def test_loader_fixed_size_and_batches_without_images(pics: Path) -> None:
    rows = [{"images": ["a.png"], "messages": msgs()}, {"instruction": "x", "output": "y"}]
    data = write_jsonl(pics / "f.jsonl", rows)
    recipe = Recipe(tokenizer=TOK, template="chatml", image_tokens=16)
    stage = MediaStage(ImageTransform(size=64, crop=64, tokens_per_image=16))
    loader = Loader(data, recipe, batch_size=1, shuffle=False, media=stage, world=World(0, 1))
    first, second = list(loader)
    assert first["pixel_values"].shape == (1, 3, 64, 64) and first["image_counts"].tolist() == [1]
    assert "pixel_values" not in second and second["image_counts"].tolist() == [0]
    assert check_batches(loader, PAD, per_fixed=16) == 1


def test_token_mismatch_never_reaches_the_model(pics: Path) -> None:
    """A sample whose image tokens disagree with its pixels (e.g. built elsewhere) is skipped."""
    ids = np.array([1] + [PAD] * 10 + [2], dtype=np.int32)
    good_ids = np.array([1] + [PAD] * 66 + [2], dtype=np.int32)
    ref = {"path": str(pics / "a.png"), "span": [1, 11], "num_tokens": 10, "grid_thw": [1, 12, 22]}
    good_ref = dict(ref, span=[1, 67], num_tokens=66)
    stray = np.concatenate([good_ids, [PAD]]).astype(np.int32)
    data = [
        {"input_ids": ids, "images": [ref]},
        {"input_ids": good_ids, "images": [good_ref]},
        {"input_ids": stray, "images": [good_ref]},  # one image token outside the span
    ]
    stage = MediaStage(DynamicResolution(), token_ids={"image": PAD})
    with pytest.raises(
        SampleError, match=r"image_token_mismatch: image 0 .* 10 tokens .* 66 features"
    ):
        stage(data[0])
    with pytest.raises(SampleError, match="image_token_mismatch: input_ids holds 67 image tokens"):
        stage(data[2])
    loader = Loader(data, batch_size=3, shuffle=False, media=stage, world=World(0, 1))
    [batch] = list(loader)
    assert batch["sample_ids"].tolist() == [1] and batch["pixel_values"].shape == (264, 1176)
    assert loader.stats == {"image_token_mismatch": 2}


def test_bind_refuses_a_transform_that_disagrees_with_the_recipe() -> None:
    dyn = Recipe(tokenizer=TOK, template="chatml", image_tokens="qwen2-vl")
    fixed = Recipe(tokenizer=TOK, template="chatml", image_tokens=576)
    with pytest.raises(ConfigError, match="recipe counts a fixed 576 tokens per image"):
        MediaStage(DynamicResolution()).bind(fixed)
    with pytest.raises(ConfigError, match="a dynamic rule"):
        MediaStage(ImageTransform()).bind(dyn)
    with pytest.raises(ConfigError, match="patch_size: recipe 14, transform 16"):
        MediaStage(DynamicResolution(patch_size=16)).bind(dyn)
    with pytest.raises(ConfigError, match="576 tokens per image but .* tokens_per_image is 256"):
        MediaStage(ImageTransform(tokens_per_image=256)).bind(fixed)
    qwen3 = DynamicResolution(patch_size=16, normalize="siglip")
    ok = MediaStage(qwen3).bind(Recipe(tokenizer=TOK, template="chatml", image_tokens=qwen3.rule()))
    assert ok.token_ids["image"] == PAD
    assert pickle.loads(pickle.dumps(ok)).token_ids == ok.token_ids
    with pytest.raises(ConfigError, match="the data has videos but the media stage has no video"):
        ok({"input_ids": np.array([1]), "videos": [{"path": "v.mp4", "span": [0, 1]}]})


def test_collate_media_shapes_and_packed_rows() -> None:
    img = np.zeros((3, 4, 4), np.float32)
    samples = [
        {"input_ids": np.array([1]), "pixel_values": [img]},
        {"input_ids": np.array([2])},
        {"input_ids": np.array([3]), "pixel_values": [img, img]},
    ]
    batch = collate_media(samples)
    assert batch["pixel_values"].shape == (3, 3, 4, 4)
    assert batch["image_counts"].tolist() == [1, 0, 2]
    packed = collate_media(samples, rows=[0, 0, 1])  # samples 0 and 1 share a packed row
    assert packed["image_counts"].tolist() == [1, 2]
    half = collate_media(samples, dtype=torch.bfloat16)
    assert half["pixel_values"].dtype == torch.bfloat16
    with pytest.raises(ConfigError, match="cannot be stacked"):
        collate_media([{"pixel_values": [img, np.zeros((3, 5, 5), np.float32)]}])
    empty = MediaCollate()([])
    assert empty["image_counts"].tolist() == [0] and empty["input_ids"].shape == (1, 1)
    audio = collate_media([{"audio_values": [np.ones(3, np.float32), np.ones(5, np.float32)]}])
    assert audio["audio_values"].shape == (2, 5) and audio["audio_lengths"].tolist() == [3, 5]
    assert audio["audio_values"][0].tolist() == [1, 1, 1, 0, 0]


# -- real data -----------------------------------------------------------------------------------


@pytest.fixture
def qwen(shared_data: Path):  # type: ignore[no-untyped-def]
    return real_tokenizer(str(shared_data / "tokenizers/qwen3/tokenizer.json"))


@pytest.mark.shared_data
def test_real_multimodal_datasets_through_the_loader(
    shared_data: Path, qwen, tmp_path: Path
) -> None:
    image_id = qwen.token_to_id("<|image_pad|>")

    def run(path: Path, workers: int = 0, **recipe_kw) -> Loader:
        recipe = Recipe(tokenizer=qwen, template="qwen3", image_tokens="qwen2-vl", **recipe_kw)
        loader = Loader(
            path,
            recipe,
            batch_size=4,
            media=DynamicResolution(),
            num_workers=workers,
            world=World(0, 1),
        )
        assert check_batches(loader, image_id) > 0
        return loader

    assert run(shared_data / "llama-factory/mllm_demo.json", workers=2).stats == {}
    xtuner = shared_data / "xtuner/resource"
    for name in (
        "mllm_sft_single_image_example_data.jsonl",
        "mllm_sft_multi_image_example_data.jsonl",
    ):
        loader = run(
            xtuner / name,
            placeholders={"image": "<IMG_CONTEXT>"},
            media_root=shared_data / "xtuner",
        )
        assert loader.stats == {}
    assert (
        run(
            shared_data / "qwen3-vl/demo/single_images.json", media_root=shared_data / "qwen3-vl"
        ).stats
        == {}
    )
    # v1_multimodal_demo: paths are "data/mllm_demo_data/1.jpg", relative to LLaMA-Factory's
    # root. Against the data file's folder every image is missing; with a media root per source
    # (a folder laid out like that repository) they all load.
    v1 = shared_data / "llama-factory/v1_multimodal_demo.jsonl"
    recipe = Recipe(tokenizer=qwen, template="qwen3", image_tokens="qwen2-vl")
    with pytest.raises(SampleError, match="image_missing: .*data/mllm_demo_data/1.jpg"):
        recipe(JsonlSource(v1)[0])
    repo = tmp_path / "LLaMA-Factory"
    shutil.copytree(shared_data / "llama-factory/mllm_demo_data", repo / "data/mllm_demo_data")
    loader = run(v1, media_root={str(v1): repo})
    assert loader.stats == {} and loader.summary()["valid"] == len(JsonlSource(v1))


@pytest.mark.shared_data
def test_llava_bench_images_fixed_size(shared_data: Path, qwen, tmp_path: Path) -> None:
    """LLaVA-1.5 style (CLIP 336, 576 tokens) over LLaVA-Bench, WEBP and RGBA '.jpg' included."""
    bench = shared_data / "llava/llava_bench_in_the_wild"
    questions = [json.loads(x) for x in (bench / "questions.jsonl").read_text().splitlines()]
    rows = [
        {
            "id": q["id"],
            "image": q["image"],
            "conversations": [
                {"from": "human", "value": "<image>\n" + q["text"]},
                {"from": "gpt", "value": "An answer."},
            ],
        }
        for q in questions
    ]
    data = write_jsonl(tmp_path / "bench.jsonl", rows)
    recipe = Recipe(
        tokenizer=qwen,
        template="qwen3",
        format="llava",
        image_tokens=576,
        media_root=bench / "images",
    )
    stage = MediaStage(ImageTransform(size=336, crop=336, pad_to_square=True, tokens_per_image=576))
    loader = Loader(data, recipe, batch_size=8, media=stage, num_workers=2, world=World(0, 1))
    assert check_batches(loader, qwen.token_to_id("<|image_pad|>"), per_fixed=576) == len(rows)
    assert loader.stats == {}
    names = {q["image"] for q in questions}
    assert {"001.jpg", "014.jpg", "023.jpg"} <= names


@pytest.mark.shared_data
def test_qwen_vl_readme_missing_image_is_counted(shared_data: Path, qwen) -> None:
    recipe = Recipe(
        tokenizer=qwen,
        template="chatml",
        format="qwen_vl",
        image_tokens=256,
        media_root=shared_data / "qwen-vl",
    )
    stage = MediaStage(ImageTransform(size=448, crop=448, tokens_per_image=256))
    path = shared_data / "qwen-vl/qwen_vl_readme_example.json"
    loader = Loader(path, recipe, batch_size=3, shuffle=False, media=stage, world=World(0, 1))
    [batch] = list(loader)
    assert batch["sample_ids"].tolist() == [0]  # the text-only conversation loads
    assert loader.stats == {"url_not_allowed": 1, "image_missing": 1}
    assert "Beijing.jpeg: no such file" in loader.tally.examples["image_missing"][0]
    # Without the URL row's problem, the Chongqing image decodes; only Beijing is missing.
    chongqing = recipe.process(
        {
            "conversations": [
                {
                    "from": "user",
                    "value": "Picture 1: <img>assets/mm_tutorial/Chongqing.jpeg</img>\nHi",
                },
                {"from": "assistant", "value": "Yes"},
            ]
        },
        path=str(path),
    )
    out = stage.bind(recipe)(chongqing)
    assert out["pixel_values"][0].shape == (3, 448, 448)
    assert DynamicImageTokens().count((1500, 1001))[0] > 0


def test_urls_load_only_through_a_user_fetch(pics: Path) -> None:
    """allow_urls keeps URL references; chute fetches nothing, a user fetch= reads them."""
    recipe = Recipe(tokenizer=TOK, template="chatml", image_tokens=16, allow_urls=True)
    sample = recipe.process({"images": ["https://host/a.png"], "messages": msgs()})
    transform = ImageTransform(size=32, crop=32, tokens_per_image=16)
    with pytest.raises(SampleError, match="url_not_allowed: https://host/a.png is a URL"):
        MediaStage(transform).bind(recipe)(sample)
    fetched = []

    def fetch(url: str) -> bytes:
        fetched.append(url)
        return (pics / "a.png").read_bytes()

    out = MediaStage(transform, fetch=fetch).bind(recipe)(sample)
    assert fetched == ["https://host/a.png"] and out["pixel_values"][0].shape == (3, 32, 32)

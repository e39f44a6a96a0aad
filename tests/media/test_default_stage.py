"""Images never silently lose their pixels; modality-aware length grouping."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from chute import ConfigError, Loader, Recipe, World
from chute.lengths import Lengths
from chute.media import DynamicResolution, ImageTransform
from chute.media.stage import default_media_stage
from chute.media.tokens import image_tokens_rule
from chute.plan import GroupedPlanner
from chute.stats import padding_stats
from recipe_helpers import tiny_tokenizer

QWEN = "tokenizers/qwen3"


def test_each_rule_has_its_model_familys_transform() -> None:
    llava = default_media_stage(image_tokens_rule("llava-1.5")).image
    assert isinstance(llava, ImageTransform)
    assert (llava.output_size, llava.pad_to_square, llava.tokens_per_image) == (
        (336, 336),
        True,
        576,
    )
    qwen_vl = default_media_stage(image_tokens_rule("qwen-vl")).image
    assert qwen_vl.output_size == (448, 448) and qwen_vl.tokens_per_image == 256
    dynamic = default_media_stage(image_tokens_rule("qwen2-vl")).image
    assert isinstance(dynamic, DynamicResolution) and dynamic.rule(
        family="qwen2-vl"
    ) == image_tokens_rule("qwen2-vl")
    qwen3 = default_media_stage(image_tokens_rule({"patch_size": 16})).image
    assert qwen3.normalize == "siglip" and qwen3.patch_size == 16
    preset = default_media_stage(image_tokens_rule("qwen3-vl")).image
    assert preset.rule(family="qwen3-vl") == image_tokens_rule("qwen3-vl")
    assert preset.normalize == "siglip"
    with pytest.raises(
        ConfigError,
        match=r"media=MediaStage\(ImageTransform\(\.\.\., tokens_per_image=144\)\).*media=False",
    ):
        default_media_stage(image_tokens_rule(144))


@pytest.fixture
def llava_corpus(shared_data: Path, tmp_path: Path) -> Path:
    """LLaVA-format records over real LLaVA-Bench photos (WEBP, RGBA PNG, JPEG), some text-only
    records, and a few images cut short on disk (corrupt)."""
    images = shared_data / "llava" / "llava_bench_in_the_wild" / "images"
    names = sorted(p.name for p in images.iterdir())[:8]
    for name in names:
        shutil.copy(images / name, tmp_path / name)
    for k in range(3):  # truncated files: the header reads, the pixels do not
        data = (images / names[2]).read_bytes()
        (tmp_path / f"cut{k}.jpg").write_bytes(data[: len(data) // 4])
    rows = []
    for i in range(30):
        turns = [{"from": "human", "value": f"Question {i}?"}, {"from": "gpt", "value": "Yes."}]
        if i % 3 == 2:
            rows.append({"id": i, "conversations": turns})  # text only
            continue
        image = f"cut{i % 3}.jpg" if i in (4, 10, 16) else names[i % len(names)]
        turns[0]["value"] = "<image>\n" + turns[0]["value"]
        rows.append({"id": i, "image": image, "conversations": turns})
    path = tmp_path / "llava.json"
    path.write_text(json.dumps(rows))
    return path


def test_a_loader_without_media_loads_the_pixels_and_skips_bad_images(
    shared_data: Path, llava_corpus: Path
) -> None:
    recipe = Recipe(tokenizer=shared_data / QWEN, template="qwen3", format="llava",
                    image_tokens=576)  # fmt: skip
    loader = Loader(llava_corpus, recipe, batch_size=4, world=World(0, 1), seed=0)
    assert isinstance(loader.media.image, ImageTransform)  # the CLIP-336 default, bound
    images = skipped = 0
    image_id = recipe.tokenizer.token_to_id("<|image_pad|>")
    for batch in loader:
        counts = batch["image_counts"].tolist()
        if sum(counts):
            assert batch["pixel_values"].shape[1:] == (3, 336, 336)
            assert batch["pixel_values"].shape[0] == sum(counts)
        for row, count in enumerate(counts):
            assert int((batch["input_ids"][row] == image_id).sum()) == 576 * count
        images += sum(counts)
    skipped = loader.stats.get("image_corrupt", 0)
    assert skipped == 3 and images == 20 - 3
    # media=False remains the explicit way to train on the text alone
    text_only = Loader(llava_corpus, recipe, batch_size=4, world=World(0, 1), media=False)
    assert text_only.media is None and "pixel_values" not in next(iter(text_only))


def test_a_count_without_a_default_transform_is_refused(tmp_path: Path) -> None:
    from PIL import Image

    Image.new("RGB", (32, 32)).save(tmp_path / "a.png")
    path = tmp_path / "d.jsonl"
    rows = [
        {
            "messages": [
                {"role": "user", "content": "<image>hi"},
                {"role": "assistant", "content": "yo"},
            ],
            "images": ["a.png"],
        }
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))  # fmt: skip
    recipe = Recipe(tokenizer=tiny_tokenizer(), template="chatml", image_tokens=144)
    with pytest.raises(ConfigError, match="pass media=MediaStage.*or media=False"):
        Loader(path, recipe, world=World(0, 1))
    assert Loader(path, recipe, world=World(0, 1), media=False).media is None


def test_text_data_gets_no_stage_and_a_late_image_stops_the_loader(tmp_path: Path) -> None:
    from PIL import Image

    Image.new("RGB", (32, 32)).save(tmp_path / "a.png")
    text = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}
    late = {"messages": [{"role": "user", "content": "<image>hi"},
                         {"role": "assistant", "content": "yo"}], "images": ["a.png"]}  # fmt: skip
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in [text] * 300 + [late]))
    recipe = Recipe(tokenizer=tiny_tokenizer(), template="chatml")  # image_tokens="auto"
    loader = Loader(path, recipe, batch_size=50, world=World(0, 1), shuffle=False)
    assert loader.media is None and "image_counts" not in next(iter(loader))
    with pytest.raises(
        ConfigError,
        match=r"d.jsonl:301 references images, but the Loader has no media stage.*media=False",
    ):
        list(loader)
    assert len(list(Loader(path, recipe, batch_size=50, world=World(0, 1), media=False))) == 7
    # the lengths of a length-aware plan show the image: the stage is built up front
    grouped = Loader(path, recipe, batch_size=50, world=World(0, 1), plan="grouped")
    assert grouped.media is not None


# -- modality-aware grouping --------------------------------------------------------------------


def mixed_lengths(n: int = 1000, seed: int = 0) -> Lengths:
    rng = np.random.default_rng(seed)
    image = np.where(rng.random(n) < 0.4, 576, 0).astype(np.int32)
    length = (rng.integers(20, 1500, n) + image).astype(np.int32)
    length[rng.choice(n, 7, replace=False)] = -1  # rejected
    return Lengths(length, image_tokens=image)


def test_by_modality_keeps_batches_pure_and_deals_every_sample_once() -> None:
    lens = mixed_lengths()
    image = lens.image_tokens
    assert image is not None
    for world_size in (1, 2, 3):
        for batch_size in (1, 4, 7):
            planner = GroupedPlanner(batch_size, lengths=lens, by_modality=True, seed=3)
            plan = planner.build(len(lens), epoch=1, world_size=world_size)
            seen, mixed = [], 0
            for k in range(plan.num_batches):
                for rank in range(world_size):
                    ids = plan.batch(rank, k)
                    seen += ids.tolist()
                    mixed += len({bool(image[i] > 0) for i in ids}) > 1
            assert sorted(seen) == lens.valid_ids().tolist()
            # only the two remainders (less than a step each) may share a step
            assert mixed == plan.stats["mixed_batches"] <= 2 * world_size
    plain = GroupedPlanner(4, lengths=lens, seed=3).build(len(lens), epoch=0, world_size=2)
    assert "mixed_batches" not in plain.stats


def test_by_modality_resumes(tmp_path: Path) -> None:
    from chute.testing import check_resume

    rows = [{"input_ids": [i % 50] * (1 + i % 9), "num_image_tokens": 0} for i in range(60)]
    lens = Lengths(
        np.array([len(r["input_ids"]) for r in rows], dtype=np.int32),
        image_tokens=np.array([4 * (i % 3 == 0) for i in range(60)], np.int32),
    )

    def make(world: World = World(0, 1), num_workers: int = 0) -> Loader:
        planner = GroupedPlanner(4, lengths=lens, by_modality=True, seed=1)
        return Loader(rows, None, plan=planner, world=world, num_workers=num_workers)

    assert check_resume(make, epochs=2, every=2) > 5


def test_stats_report_modality_grouping() -> None:
    stats = padding_stats(mixed_lengths(), max_length=4096, batch_size=8, world_size=2)
    report = stats["plans"]["grouped_by_modality"]
    assert report["mixed_batches"] <= 4
    assert report["efficiency"] > 0.9 and stats["efficiency"]["grouped_by_modality"] > 0.9
    text_only = padding_stats(Lengths(np.arange(1, 100, dtype=np.int32)), max_length=64,
                              batch_size=4)  # fmt: skip
    assert "grouped_by_modality" not in text_only["plans"]


def test_a_cache_without_a_recipe_gets_its_recipes_default_stage() -> None:
    import types

    from chute.loader.options import _default_stage, cache_image_rule

    def cache(image_tokens: int, rule: dict | None) -> object:
        fingerprint = {"recipe": {"media": {"image_tokens": rule}}}
        config = types.SimpleNamespace(recipe=types.SimpleNamespace(video_tokens=None))
        return type(
            "C",
            (),
            {
                "manifest": {"image_tokens": image_tokens, "fingerprint": fingerprint},
                "recipe_config": lambda self: config,
                "__len__": lambda self: 0,
            },
        )()

    assert cache_image_rule(cache(0, {"rule": "fixed", "tokens": 576})).tokens == 576
    assert _default_stage(None, cache(0, {"rule": "fixed", "tokens": 576})) is None  # text only
    stage = _default_stage(None, cache(5760, {"rule": "fixed", "tokens": 576}))
    assert stage.image.output_size == (336, 336)
    dynamic = {"rule": "dynamic", "patch_size": 14, "merge_size": 2, "min_pixels": 3136,
               "max_pixels": 1003520}  # fmt: skip
    assert isinstance(_default_stage(None, cache(99, dynamic)).image, DynamicResolution)


def test_chute_stats_reports_batches_of_one_modality(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from chute.cli import app

    rows = [
        {"input_ids": [1] * (5 + i % 40), "num_image_tokens": 4 * (i % 3 == 0)} for i in range(90)
    ]
    path = tmp_path / "tokens.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = ["stats", str(path), "--max-length", "64", "--batch-size", "4", "--world-size", "2"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "grouped_by_modality" in result.output and "batch(es) mix samples" in result.output
    out = json.loads(CliRunner().invoke(app, [*args, "--json"]).stdout)
    assert out["plans"]["grouped_by_modality"]["mixed_batches"] <= 2 * 2

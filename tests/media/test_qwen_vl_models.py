"""Qwen2-VL, Qwen2.5-VL and Qwen3-VL train on chute's batches as on their own processors' inputs.

Tiny random-initialised models from ``transformers`` (no weights): on LLaMA-Factory's
``mllm_demo.json``, each sample's 3-D positions from chute equal the model's own
``get_rope_index``, pixels and grids equal the processor's, and the loss of one packed chute
batch equals the per-sample losses computed the model's usual way (the processor's inputs, one
sample per forward, ``position_ids=None``). The 1-D positions chute gave before are shown to
give another loss, so the check can fail.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from chute import Loader, Recipe, open_source  # noqa: E402
from chute.collate.packed import PackedCollate, hf_packed_inputs  # noqa: E402
from chute.media.positions import MRopePositions  # noqa: E402
from qwen_vl_helpers import (  # noqa: E402
    FAMILIES,
    build_model,
    processor,
    processor_inputs,
    special_ids,
    tiny_model,
)

pytestmark = [pytest.mark.shared_data, pytest.mark.slow]


@pytest.fixture(scope="module")
def data(shared_data: Path) -> dict[str, Any]:
    tokenizer = shared_data / "tokenizers" / "qwen3"
    return {
        "tokenizer": tokenizer,
        "images": shared_data / "llama-factory" / "mllm_demo.json",
        "hf_tokenizer": transformers.PreTrainedTokenizerFast(
            tokenizer_file=str(tokenizer / "tokenizer.json")
        ),
    }


def recipe(data: dict[str, Any], family: str) -> Recipe:
    return Recipe(tokenizer=data["tokenizer"], image_tokens=family, max_length=2048)


@pytest.mark.parametrize("family", FAMILIES)
def test_positions_equal_the_models_get_rope_index(data: dict[str, Any], family: str) -> None:
    r = recipe(data, family)
    model = tiny_model(family, special_ids(r))
    rule = MRopePositions(family)
    source = open_source(data["images"])
    for i in range(len(source)):
        sample = r(source[i])
        assert sample["images"], "every mllm_demo record has an image"
        types = rule.token_types(sample)
        theirs, _ = model.model.get_rope_index(
            torch.as_tensor(sample["input_ids"], dtype=torch.long)[None],
            torch.from_numpy(types)[None],
            image_grid_thw=torch.tensor([im["grid_thw"] for im in sample["images"]]),
        )
        np.testing.assert_array_equal(rule.positions(sample), theirs[:, 0].numpy())


@pytest.mark.parametrize("family", FAMILIES)
def test_packed_loss_equals_the_per_sample_loss(
    data: dict[str, Any], family: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    r = recipe(data, family)
    ids = special_ids(r)
    model = tiny_model(family, ids)
    proc = processor(family, data["hf_tokenizer"], monkeypatch)
    loader = Loader(data["images"], r, batch_size=6, plan="packed", shuffle=False)
    batch = next(iter(loader))
    assert batch["position_ids"].shape[0] == 4 and batch["input_ids"].shape[0] == 1
    source = open_source(data["images"])
    total, targets = 0.0, 0
    pixels, grids = [], []
    with torch.no_grad():
        for i in batch["sample_ids"].tolist():
            sample = r(source[i])
            inputs = processor_inputs(proc, sample, ids["<|image_pad|>"])
            # the processor's token ids are chute's, image tokens included
            np.testing.assert_array_equal(inputs["input_ids"][0].numpy(), sample["input_ids"])
            labels = torch.as_tensor(sample["labels"], dtype=torch.long)[None]
            out = model(**inputs, labels=labels)  # position_ids=None: the model's own
            n = int((labels[0, 1:] != -100).sum())
            total += out.loss.item() * n
            targets += n
            pixels.append(inputs["pixel_values"])
            grids.append(inputs["image_grid_thw"])
        np.testing.assert_array_equal(batch["image_grid_thw"].numpy(), torch.cat(grids).numpy())
        diff = (batch["pixel_values"] - torch.cat(pixels)).abs().max().item()
        assert diff < 1e-5, diff
        packed = model(**hf_packed_inputs(batch)).loss.item()
        assert packed == pytest.approx(total / targets, abs=1e-4)
        # a collate of one's own (docs/padding.md's SDPA recipe) gets the recipe's 3-D
        # positions too: it made 1-D ones, silently; the caller's object is left as it was
        pad = r.tokenizer.token_to_id(r.tokenizer.pad_token)
        mine = PackedCollate(max_length=2048, pad_id=pad, block_mask=True)
        options = {"batch_size": 6, "plan": "packed", "shuffle": False, "collate": mine}
        own = next(iter(Loader(data["images"], r, **options)))
        assert own["position_ids"].shape[0] == 4 and "mm_token_type_ids" in own
        assert model(**hf_packed_inputs(own)).loss.item() == pytest.approx(packed, abs=1e-6)
        assert mine.positions is None
        # what chute gave before: 1-D positions restarting per sample give another loss
        flat = hf_packed_inputs(batch)
        flat["position_ids"] = flat["position_ids"][0]
        assert abs(model(**flat).loss.item() - total / targets) > 1e-3


@pytest.mark.parametrize("family", ["qwen2-vl", "qwen3-vl"])
def test_padded_batches_carry_the_models_positions(data: dict[str, Any], family: str) -> None:
    r = recipe(data, family)
    model = tiny_model(family, special_ids(r))
    batch = next(iter(Loader(data["images"], r, batch_size=3, shuffle=False)))
    theirs, _ = model.model.get_rope_index(
        batch["input_ids"],
        batch["mm_token_type_ids"],
        image_grid_thw=batch["image_grid_thw"],
        attention_mask=batch["attention_mask"],
    )
    np.testing.assert_array_equal(batch["position_ids"].numpy(), theirs.numpy())
    inputs = {k: v for k, v in batch.items() if k not in ("sample_ids", "image_counts")}
    with torch.no_grad():
        assert torch.isfinite(model(**inputs).loss)


def test_chute_trainer_passes_the_3d_positions(data: dict[str, Any], tmp_path: Path) -> None:
    pytest.importorskip("accelerate")
    from chute.integrations.hf_trainer import ChuteTrainer, TrainerView

    r = recipe(data, "qwen2-vl")
    model = build_model("qwen2-vl", special_ids(r)).train()
    loader = Loader(data["images"], r, batch_size=3, plan="packed", shuffle=False)
    batch = next(iter(loader))
    view = next(iter(TrainerView(loader)))
    assert view["position_ids"].shape == (4, 1, batch["input_ids"].numel())
    model.eval()
    with torch.no_grad():
        assert model(**view).loss.item() == pytest.approx(
            model(**hf_packed_inputs(batch)).loss.item(), abs=1e-6
        )
    seen: list[Any] = []
    original = model.forward

    def forward(**kwargs: Any) -> Any:
        seen.append(kwargs["position_ids"].shape)
        return original(**kwargs)

    model.forward = forward
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path),
        max_steps=1,
        per_device_train_batch_size=3,
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
        save_strategy="no",
    )
    ChuteTrainer(model=model.train(), args=args, train_loader=loader).train()
    assert len(seen) == 1 and seen[0][0] == 4


@pytest.mark.parametrize("plan", ["packed", "random"])
def test_a_cache_gives_the_positions_of_the_recipe(
    data: dict[str, Any], tmp_path: Path, plan: str
) -> None:
    from chute import open_cache, preprocess

    out = tmp_path / "cache"
    preprocess(
        sources=[str(data["images"])],
        recipe={"tokenizer": str(data["tokenizer"]), "image_tokens": "qwen2.5-vl"},
        cache={"workers": 1},
        out=out,
        progress=False,
    )
    r = Recipe(tokenizer=data["tokenizer"], image_tokens="qwen2.5-vl")
    options: dict[str, Any] = {"batch_size": 3, "plan": plan, "shuffle": False}
    if plan == "packed":
        options["plan_options"] = {"max_length": 1024}
    direct = next(iter(Loader(data["images"], r, **options)))
    cached = next(iter(Loader(open_cache(out), **options)))
    assert direct["position_ids"].shape[0] == (4 if plan == "packed" else 3)
    for key in ("input_ids", "position_ids", "mm_token_type_ids", "image_grid_thw"):
        np.testing.assert_array_equal(cached[key].numpy(), direct[key].numpy())


# Qwen2-VL's videos differ from Qwen2.5-VL's only by a time step of 1 (its positions are checked
# in test_video_reference); the two layouts that differ are run here.
@pytest.mark.parametrize("family", ["qwen2.5-vl", "qwen3-vl"])
def test_packed_video_loss_equals_the_per_sample_loss(
    shared_data: Path, family: str, tmp_path: Path
) -> None:
    """Videos sampled by fps (Qwen2.5-VL's time step, Qwen3-VL's timestamped groups) pack right.

    The per-sample side gives the model chute's own input ids and pixels (equal to the
    processors' in ``test_video_reference``), the processors' ``mm_token_type_ids`` (the video
    token's positions) and no ``position_ids``: the model computes its own positions.
    """
    from chute.media import MediaStage

    pytest.importorskip("av")
    root = shared_data / "llama-factory"
    r = Recipe(
        tokenizer=shared_data / "tokenizers" / "qwen3",
        image_tokens=family,
        video_tokens="fps",
        max_length=8192,
        media_root=root,
    )
    ids = special_ids(r)
    model = tiny_model(family, ids)
    # the two shorter clips of the demo (2.avi, 3.mp4): the longest adds time, not cases
    data = tmp_path / "videos.json"
    data.write_text(json.dumps(json.loads((root / "mllm_video_demo.json").read_text())[1:]))
    batch = next(iter(Loader(data, r, batch_size=2, plan="packed", shuffle=False)))
    assert batch["input_ids"].shape[0] == 1 and batch["video_grid_thw"].shape[0] == 2
    stage = MediaStage(video=r.media.video_tokens).bind(r)
    source = open_source(data)
    total, targets = 0.0, 0
    with torch.no_grad():
        for i in batch["sample_ids"].tolist():
            sample = stage(r(source[i]))
            input_ids = torch.as_tensor(sample["input_ids"], dtype=torch.long)[None]
            inputs: dict[str, Any] = {
                "input_ids": input_ids,
                "mm_token_type_ids": (input_ids == ids["<|video_pad|>"]).long() * 2,
                "pixel_values_videos": torch.from_numpy(sample["pixel_values_videos"][0]),
                "video_grid_thw": torch.tensor([sample["videos"][0]["grid_thw"]]),
            }
            if family == "qwen2.5-vl":
                inputs["second_per_grid_ts"] = torch.tensor(
                    [sample["videos"][0]["second_per_grid_t"]], dtype=torch.float32
                )
            labels = torch.as_tensor(sample["labels"], dtype=torch.long)[None]
            n = int((labels[0, 1:] != -100).sum())
            total += model(**inputs, labels=labels).loss.item() * n
            targets += n
        packed = model(**hf_packed_inputs(batch)).loss.item()
    assert packed == pytest.approx(total / targets, abs=1e-4)


def test_the_docs_example_runs_and_prints_what_it_shows(
    shared_data: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import re

    from conftest import REPO

    if shared_data.resolve() != (REPO.parent / "shared" / "data").resolve():
        pytest.skip("the example reads ../shared/data beside the repository")
    text = (REPO / "docs" / "media.md").read_text()
    section = text.split("\n### Qwen2-VL, Qwen2.5-VL, Qwen3-VL: 3-D positions\n", 1)[1]
    section = section.split("\n### ", 1)[0]
    (code,) = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    (shown,) = re.findall(r"```text\n(.*?)```", section, flags=re.S)
    monkeypatch.chdir(REPO)
    exec(compile(code, "docs/media.md", "exec"), {})
    assert capsys.readouterr().out == shown


def test_auto_keeps_1d_positions_for_text_models_sharing_the_vocabulary(
    data: dict[str, Any], shared_data: Path
) -> None:
    text = shared_data / "llama-factory" / "alpaca_en_demo.json"
    auto = Recipe(tokenizer=data["tokenizer"], max_length=1024)  # Qwen3, a text model
    batch = next(iter(Loader(text, auto, batch_size=4, plan="packed", shuffle=False)))
    assert batch["position_ids"].ndim == 2 and "mm_token_type_ids" not in batch
    # named, the family's layout holds for text-only rows too (three equal rows)
    named = Recipe(tokenizer=data["tokenizer"], max_length=1024, image_tokens="qwen2-vl")
    vl = next(iter(Loader(text, named, batch_size=4, plan="packed", shuffle=False)))
    assert vl["position_ids"].shape[0] == 4
    for row in range(1, 4):
        np.testing.assert_array_equal(
            vl["position_ids"][row].numpy(), batch["position_ids"].numpy()
        )

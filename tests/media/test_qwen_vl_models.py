"""Qwen2-VL, Qwen2.5-VL and Qwen3-VL train on chute's batches as on their own processors' inputs.

Tiny random-initialised models from ``transformers`` (no weights): on LLaMA-Factory's
``mllm_demo.json``, each sample's 3-D positions from chute equal the model's own
``get_rope_index``, pixels and grids equal the processor's, and the loss of one packed chute
batch equals the per-sample losses computed the model's usual way (the processor's inputs, one
sample per forward, ``position_ids=None``). The 1-D positions chute gave before are shown to
give another loss, so the check can fail.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from chute import Loader, Recipe, open_source  # noqa: E402
from chute.collate.packed import hf_packed_inputs  # noqa: E402
from chute.media.positions import MRopePositions  # noqa: E402

pytestmark = [pytest.mark.shared_data, pytest.mark.slow]

FAMILIES = ("qwen2-vl", "qwen2.5-vl", "qwen3-vl")
SPECIAL = ("<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>")


def _text_config(**extra: Any) -> dict[str, Any]:
    return {
        "vocab_size": 151936,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "initializer_range": 0.2,  # random logits far from uniform: positions change the loss
        **extra,
    }


def tiny_model(family: str, ids: dict[str, int]) -> Any:
    """A random-initialised model of ``family`` with the tokenizer's special ids, float32."""
    key = (family, tuple(sorted(ids.items())))
    if key not in _MODELS:
        _MODELS[key] = _build_model(family, ids)
    return _MODELS[key]


_MODELS: dict[Any, Any] = {}  # one model per family for the whole module


def _build_model(family: str, ids: dict[str, int]) -> Any:
    torch.manual_seed(0)
    tokens = {
        "image_token_id": ids["<|image_pad|>"],
        "video_token_id": ids["<|video_pad|>"],
        "vision_start_token_id": ids["<|vision_start|>"],
    }
    rope = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]}
    vision = {
        "depth": 1,
        "num_heads": 2,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "initializer_range": 0.2,
    }
    if family == "qwen2-vl":
        config: Any = transformers.Qwen2VLConfig(
            text_config=_text_config(rope_parameters=rope),
            vision_config={**vision, "embed_dim": 32, "hidden_size": 64, "mlp_ratio": 2},
            **tokens,
        )
        cls: Any = transformers.Qwen2VLForConditionalGeneration
    elif family == "qwen2.5-vl":
        config = transformers.Qwen2_5_VLConfig(
            text_config=_text_config(rope_parameters=rope),
            vision_config={
                **vision,
                "hidden_size": 32,
                "intermediate_size": 64,
                "out_hidden_size": 64,
                "fullatt_block_indexes": [0],
                "tokens_per_second": 2,
            },
            **tokens,
        )
        cls = transformers.Qwen2_5_VLForConditionalGeneration
    else:
        config = transformers.Qwen3VLConfig(
            text_config=_text_config(
                head_dim=16, rope_parameters={**rope, "mrope_interleaved": True}
            ),
            vision_config={
                **vision,
                "hidden_size": 32,
                "intermediate_size": 64,
                "out_hidden_size": 64,
                "patch_size": 16,
                "num_position_embeddings": 64,
                "deepstack_visual_indexes": [0],
            },
            **tokens,
        )
        cls = transformers.Qwen3VLForConditionalGeneration
    config._attn_implementation = "sdpa"
    return cls(config).eval()


def image_processor(family: str) -> Any:
    """The family's image processor as its released checkpoints configure it (PIL backend)."""
    cls = transformers.Qwen2VLImageProcessorPil
    if family == "qwen3-vl":
        return cls(
            patch_size=16,
            merge_size=2,
            size={"shortest_edge": 65536, "longest_edge": 16777216},
            image_mean=[0.5, 0.5, 0.5],
            image_std=[0.5, 0.5, 0.5],
        )
    return cls()


def processor(family: str, hf_tokenizer: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The family's processor (images and text; no video processor, which needs torchvision)."""
    from transformers.processing_utils import ProcessorMixin

    # the processor checks each part's class against transformers' registry, and the video
    # processor's base class is only registered with torchvision installed
    monkeypatch.setattr(ProcessorMixin, "check_argument_for_proper_class", lambda *a: None)
    cls = transformers.Qwen3VLProcessor if family == "qwen3-vl" else transformers.Qwen2VLProcessor
    return cls(
        image_processor=image_processor(family), tokenizer=hf_tokenizer, video_processor=None
    )


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


def special_ids(r: Recipe) -> dict[str, int]:
    out = {}
    for token in SPECIAL:
        token_id = r.tokenizer.token_to_id(token)
        assert token_id is not None, token
        out[token] = token_id
    return out


def processor_inputs(proc: Any, sample: dict[str, Any], image_pad: int) -> Any:
    """The processor's inputs for the sample's text (each image's tokens as one placeholder)."""
    from PIL import Image

    ids = np.asarray(sample["input_ids"])
    keep = np.ones(len(ids), dtype=bool)
    keep[1:] = ~((ids[1:] == image_pad) & (ids[:-1] == image_pad))
    text = proc.tokenizer.decode(ids[keep].tolist())
    images = [Image.open(item["path"]).convert("RGB") for item in sample["images"]]
    return proc(text=[text], images=images, return_tensors="pt")


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
    model = _build_model("qwen2-vl", special_ids(r)).train()
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
        max_steps=2,
        per_device_train_batch_size=3,
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
        save_strategy="no",
    )
    ChuteTrainer(model=model.train(), args=args, train_loader=loader).train()
    assert len(seen) == 2 and all(shape[0] == 4 for shape in seen)


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

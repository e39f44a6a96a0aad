"""Tiny random-initialised Qwen2-VL, Qwen2.5-VL and Qwen3-VL models and their processors.

For tests that run chute's batches through the models' own code (no weights: configs only).

The models have a vocabulary of ``VOCAB`` ids, not the tokenizer's 151,936: a hook maps the
``input_ids`` and ``labels`` they are given (the tokenizer's ids) into it before the model runs,
the four vision tokens onto ids of their own. The map is one fixed function of the id, the same
on every side a test compares, so what the tests check (positions, masks, the pixels' places,
which tokens are targets) is untouched; the logits and the loss cost 37x less (a packed video
row of 3,000 tokens was 1.8 GB of logits and seconds of cross-entropy on 2 cores).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from chute import Recipe

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

FAMILIES = ("qwen2-vl", "qwen2.5-vl", "qwen3-vl")
SPECIAL = ("<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>")


VOCAB = 4096


def compact_ids(ids: Any, special: dict[str, int]) -> Any:
    """The tokenizer's ids as the tiny models' ids: the vision tokens 1-4, the rest from 5 on.

    ``-100`` (a label that is not a target) stays; distinct ordinary ids may share an id here,
    which changes nothing the tests compare (both sides map them alike).
    """
    out = ids.clone()
    ordinary = ids >= 0
    out[ordinary] = ids[ordinary] % (VOCAB - 1 - len(SPECIAL)) + 1 + len(SPECIAL)
    for k, token in enumerate(SPECIAL):
        out[ids == special[token]] = k + 1
    return out


def _text_config(**extra: Any) -> dict[str, Any]:
    return {
        "vocab_size": VOCAB,
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
        _MODELS[key] = build_model(family, ids)
    return _MODELS[key]


_MODELS: dict[Any, Any] = {}  # one model per family for the whole module


def build_model(family: str, ids: dict[str, int]) -> Any:
    torch.manual_seed(0)
    tokens = {
        "image_token_id": SPECIAL.index("<|image_pad|>") + 1,
        "video_token_id": SPECIAL.index("<|video_pad|>") + 1,
        "vision_start_token_id": SPECIAL.index("<|vision_start|>") + 1,
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
    model = cls(config).eval()

    def to_compact_ids(module: Any, args: Any, kwargs: dict[str, Any]) -> Any:
        assert not args, "the tests pass the model's inputs by name"
        for key in ("input_ids", "labels"):
            if kwargs.get(key) is not None:
                kwargs[key] = compact_ids(kwargs[key], ids)
        return args, kwargs

    model.register_forward_pre_hook(to_compact_ids, with_kwargs=True)
    return model


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

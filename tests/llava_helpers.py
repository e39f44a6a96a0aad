"""The LLaVA family in ``transformers``, built in code: processors and tiny random models.

Nothing is downloaded: the image processors are made with the arguments of the released
``llava-hf`` configs (PIL backends: no torchvision here), the processors with a tokenizer that
has ``<image>``, and the models from tiny random-initialised configs with the released vision
geometry (CLIP-336/14, SigLIP-384/14), so token counts and pixel shapes are the real ones.
"""

from __future__ import annotations

import functools
from typing import Any

IMAGE = "<image>"

# llava-hf/llava-onevision-qwen2-*-ov-hf and llava-hf/llava-v1.6-mistral-7b-hf, llava-1.5-7b-hf
CLIP_336 = {"size": {"shortest_edge": 336}, "crop_size": {"height": 336, "width": 336}}
SIGLIP = {"image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]}


@functools.cache
def hf_tokenizer() -> Any:
    """A ``transformers`` tokenizer (the tiny test vocabulary) with ``<image>`` added."""
    from transformers import PreTrainedTokenizerFast

    from recipe_helpers import _rust

    tok = PreTrainedTokenizerFast(tokenizer_object=_rust())
    tok.add_special_tokens({"additional_special_tokens": [IMAGE, "<video>"]})
    return tok


@functools.cache
def processor(preset: str) -> Any:
    """The ``transformers`` processor of a chute preset: ``llava-1.5``, ``llava-next``,
    ``llava-onevision``."""
    tok = hf_tokenizer()
    if preset == "llava-1.5":
        from transformers.models.llava.image_processing_pil_llava import LlavaImageProcessorPil
        from transformers.models.llava.processing_llava import LlavaProcessor

        return LlavaProcessor(
            image_processor=LlavaImageProcessorPil(**CLIP_336, do_pad=True),
            tokenizer=tok,
            patch_size=14,
            vision_feature_select_strategy="default",
            num_additional_image_tokens=1,
        )
    if preset == "llava-next":
        from transformers.models.llava_next.image_processing_pil_llava_next import (
            LlavaNextImageProcessorPil,
        )
        from transformers.models.llava_next.processing_llava_next import LlavaNextProcessor

        return LlavaNextProcessor(
            image_processor=LlavaNextImageProcessorPil(**CLIP_336),
            tokenizer=tok,
            patch_size=14,
            vision_feature_select_strategy="default",
            num_additional_image_tokens=1,
        )
    from transformers.models.llava_onevision.image_processing_pil_llava_onevision import (
        LlavaOnevisionImageProcessorPil,
    )
    from transformers.models.llava_onevision.processing_llava_onevision import (
        LlavaOnevisionProcessor,
    )

    class ImagesOnly(LlavaOnevisionProcessor):  # type: ignore[misc]
        """Without the video processor, which needs torchvision (not installed here)."""

        def __init__(self, image_processor: Any = None, tokenizer: Any = None, **kwargs: Any):
            super().__init__(image_processor, tokenizer, None, **kwargs)

    return ImagesOnly(
        image_processor=LlavaOnevisionImageProcessorPil(**SIGLIP),
        tokenizer=tok,
        num_image_tokens=729,
        vision_feature_select_strategy="full",
        vision_aspect_ratio="anyres_max_9",
    )


def processed(preset: str, images: list[Any]) -> tuple[int, dict[str, Any]]:
    """``(image tokens, outputs)`` of the processor on one sample with ``images``."""
    proc = processor(preset)
    out = proc(images=[images], text=[IMAGE * len(images) + " hi"], return_tensors="np")
    tokens = int((out["input_ids"] == hf_tokenizer().convert_tokens_to_ids(IMAGE)).sum())
    return tokens, dict(out)


def tiny_model(preset: str, vocab_size: int, image_token_id: int) -> Any:
    """A random tiny model of the preset's family with its released vision geometry."""
    import torch
    from transformers import (
        CLIPVisionConfig,
        LlamaConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
        LlavaNextConfig,
        LlavaNextForConditionalGeneration,
        LlavaOnevisionConfig,
        LlavaOnevisionForConditionalGeneration,
        Qwen2Config,
        SiglipVisionConfig,
    )

    torch.manual_seed(0)
    tiny = {"hidden_size": 16, "intermediate_size": 32, "num_attention_heads": 2}
    text = {**tiny, "num_hidden_layers": 1, "num_key_value_heads": 1, "vocab_size": vocab_size}
    common = {"image_token_index": image_token_id, "vision_feature_layer": -1}
    if preset == "llava-onevision":
        vision: Any = SiglipVisionConfig(**tiny, num_hidden_layers=1, image_size=384, patch_size=14)
        config: Any = LlavaOnevisionConfig(
            vision_config=vision,
            text_config=Qwen2Config(**text),
            vision_feature_select_strategy="full",
            vision_aspect_ratio="anyres_max_9",
            **common,
        )
        model: Any = LlavaOnevisionForConditionalGeneration(config)
    else:
        vision = CLIPVisionConfig(
            **tiny, num_hidden_layers=1, image_size=336, patch_size=14, projection_dim=16
        )
        cls, config_cls = (
            (LlavaNextForConditionalGeneration, LlavaNextConfig)
            if preset == "llava-next"
            else (LlavaForConditionalGeneration, LlavaConfig)
        )
        config = config_cls(
            vision_config=vision,
            text_config=LlamaConfig(**text),
            vision_feature_select_strategy="default",
            **common,
        )
        model = cls(config)
    return model.eval()

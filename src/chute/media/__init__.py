"""Media: safe paths, header sizes and token counts, decoding, transforms, the loader stage.

* ``MediaPaths``: every reference resolves inside its media root (``unsafe_path``), URLs are
  refused unless allowed (``url_not_allowed``).
* ``image_size`` / ``image_tokens_rule`` / ``image_token_counts``: token counts from headers,
  before any pixel is decoded (the recipe uses them).
* ``decode_image``: full, guarded decoding to RGB with limits (``DecodeOptions``).
* ``ImageTransform`` (fixed size, CLIP/SigLIP), ``DynamicResolution`` (Qwen2-VL patches),
  ``AnyresTransform`` (LLaVA-NeXT / OneVision tiles, counted by ``AnyresImageTokens``),
  ``ProcessorTransform`` (a user or ``transformers`` processor).
* ``MRopePositions``: the 3-D rotary positions of Qwen2/2.5/3-VL samples (laid out by the
  collates).
* ``MediaStage``: what the Loader runs after the recipe (``Loader(..., media=...)``); its
  tensors are batched by ``chute.collate.MediaCollate``.
* ``PixelStore``: pre-decoded, resized uint8 pixels, so training reads no JPEG.
* ``VideoFrames`` / ``AudioClips``: optional extras (``chute[video]``, ``chute[audio]``).

See docs/media.md.

Names are imported on first use (PEP 562): the recipe imports ``chute.media.refs`` for every
dataset, text-only ones too, and must not pay for what only image and audio samples use (the
loader's media stage, the pixel store, audio, the anyres tiles).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from chute._internal.lazy import lazy_exports

if TYPE_CHECKING:  # static analysers and IDEs see the real names
    from chute.media.anyres import AnyresImageTokens
    from chute.media.audio import AudioClips
    from chute.media.images import DEFAULT_MAX_PIXELS, DecodeOptions, decode_image
    from chute.media.paths import MediaPaths
    from chute.media.positions import MRopePositions
    from chute.media.processor import ProcessorTransform
    from chute.media.refs import MediaPlan, MediaSlot
    from chute.media.sizes import image_size, qwen2vl_grid, smart_resize
    from chute.media.stage import MediaStage
    from chute.media.store import PixelStore, PixelStores, StoreReport, build_pixel_store
    from chute.media.tiles import AnyresTransform
    from chute.media.tokens import (
        DynamicImageTokens,
        FixedImageTokens,
        image_token_counts,
        image_tokens_rule,
    )
    from chute.media.transforms import (
        NORMALIZE_PRESETS,
        DynamicResolution,
        ImageFeatures,
        ImageTransform,
    )
    from chute.media.video import VideoFrames

# public name -> module that defines it
_EXPORTS: dict[str, str] = {
    "AnyresImageTokens": "chute.media.anyres",
    "AudioClips": "chute.media.audio",
    "DEFAULT_MAX_PIXELS": "chute.media.images",
    "DecodeOptions": "chute.media.images",
    "decode_image": "chute.media.images",
    "MediaPaths": "chute.media.paths",
    "MRopePositions": "chute.media.positions",
    "ProcessorTransform": "chute.media.processor",
    "MediaPlan": "chute.media.refs",
    "MediaSlot": "chute.media.refs",
    "image_size": "chute.media.sizes",
    "qwen2vl_grid": "chute.media.sizes",
    "smart_resize": "chute.media.sizes",
    "MediaStage": "chute.media.stage",
    "PixelStore": "chute.media.store",
    "PixelStores": "chute.media.store",
    "StoreReport": "chute.media.store",
    "build_pixel_store": "chute.media.store",
    "AnyresTransform": "chute.media.tiles",
    "DynamicImageTokens": "chute.media.tokens",
    "FixedImageTokens": "chute.media.tokens",
    "image_token_counts": "chute.media.tokens",
    "image_tokens_rule": "chute.media.tokens",
    "NORMALIZE_PRESETS": "chute.media.transforms",
    "DynamicResolution": "chute.media.transforms",
    "ImageFeatures": "chute.media.transforms",
    "ImageTransform": "chute.media.transforms",
    "VideoFrames": "chute.media.video",
}

__all__ = [
    "DEFAULT_MAX_PIXELS",
    "NORMALIZE_PRESETS",
    "AnyresImageTokens",
    "AnyresTransform",
    "AudioClips",
    "DecodeOptions",
    "DynamicImageTokens",
    "DynamicResolution",
    "FixedImageTokens",
    "ImageFeatures",
    "ImageTransform",
    "MRopePositions",
    "MediaPaths",
    "MediaPlan",
    "MediaSlot",
    "MediaStage",
    "PixelStore",
    "PixelStores",
    "ProcessorTransform",
    "StoreReport",
    "VideoFrames",
    "build_pixel_store",
    "decode_image",
    "image_size",
    "image_token_counts",
    "image_tokens_rule",
    "qwen2vl_grid",
    "smart_resize",
]


__getattr__, __dir__ = lazy_exports("chute.media", _EXPORTS, globals())

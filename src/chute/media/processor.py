"""A user-supplied image processor as a transform: a ``transformers`` one, or any callable.

chute's own transforms (``ImageTransform``, ``DynamicResolution``) match ``transformers``' CLIP
and Qwen2-VL processors to float32 rounding and need nothing but Pillow and numpy. Use
``ProcessorTransform`` when the model's processor does something else (tiling, other
resampling): it calls the processor on each decoded RGB image and reads ``pixel_values`` (and
``image_grid_thw`` for dynamic-resolution processors) from its output.

Such a transform has no separate geometry step, so the pre-decoded pixel store cannot keep its
output; decoding still goes through chute's guarded ``decode_image``.

Example:
    >>> import numpy as np
    >>> from PIL import Image
    >>> t = ProcessorTransform(lambda im: np.zeros((3, 8, 8), np.float32), tokens_per_image=4)
    >>> f = t(Image.new("RGB", (5, 5)))
    >>> f.pixels.shape, f.num_features
    ((3, 8, 8), 4)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from PIL import Image

from chute.errors import ConfigError
from chute.media.transforms import ImageFeatures

__all__ = ["ProcessorTransform"]


class ProcessorTransform:
    """Wraps an image processor so the media stage can use it.

    Args:
        processor: a ``transformers`` image processor (called as ``processor(images=[image],
            return_tensors="np")``), or a callable ``fn(image) -> array | dict | ImageFeatures``
            (a dict with ``pixel_values`` and optionally ``image_grid_thw``).
        tokens_per_image: features per image for fixed-size outputs (checked against the image
            tokens in ``input_ids``); ``None``: the recipe's fixed count.
        merge_size: for outputs with ``image_grid_thw``: patches merged per side into one token
            (default: the processor's ``merge_size``, else 2).
    """

    kind = "processor"

    def __init__(
        self,
        processor: Callable[..., Any],
        *,
        tokens_per_image: int | None = None,
        merge_size: int | None = None,
    ):
        if not callable(processor):
            raise ConfigError(
                f"expected a transformers image processor or a callable, got "
                f"{type(processor).__name__}",
                param="processor",
            )
        self.processor = processor
        self.is_hf = hasattr(processor, "model_input_names") and hasattr(processor, "preprocess")
        self.tokens_per_image = tokens_per_image
        self.merge_size = int(merge_size or getattr(processor, "merge_size", None) or 2)

    def __call__(self, image: Image.Image) -> ImageFeatures:
        if self.is_hf:
            out: Any = self.processor(images=[image], return_tensors="np")
        else:
            out = self.processor(image)
        if isinstance(out, ImageFeatures):
            return out
        if isinstance(out, Mapping) or hasattr(out, "keys"):
            pixels = _array(out["pixel_values"])
            grid = out.get("image_grid_thw") if hasattr(out, "get") else None
            if grid is not None:
                t, h, w = (int(v) for v in np.asarray(grid).reshape(-1, 3)[0])
                count = t * h * w // (self.merge_size * self.merge_size)
                return ImageFeatures(pixels.astype(np.float32, copy=False), (t, h, w), count)
            if self.is_hf and pixels.ndim == 4 and pixels.shape[0] == 1:
                pixels = pixels[0]
            return ImageFeatures(pixels.astype(np.float32, copy=False), None, self.tokens_per_image)
        return ImageFeatures(
            _array(out).astype(np.float32, copy=False), None, self.tokens_per_image
        )

    def fingerprint(self) -> dict[str, Any]:
        return {"kind": "processor", "type": type(self.processor).__qualname__}

    def __repr__(self) -> str:
        return f"ProcessorTransform({type(self.processor).__name__})"


def _array(value: Any) -> np.ndarray:
    if hasattr(value, "detach"):  # a torch tensor
        value = value.detach().cpu().numpy()
    return np.asarray(value)

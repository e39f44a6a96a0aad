"""How many tokens one image becomes, decided before any pixel is decoded.

Two rules:

* ``FixedImageTokens(576)``: every image is the same number of tokens (LLaVA-1.5 with a 336px
  CLIP: 576; Qwen-VL: 256). The image file is at most checked for existence.
* ``DynamicImageTokens(patch_size, merge_size, min_pixels, max_pixels)``: Qwen2-VL style; the
  count follows from the image's size, read from its header (``chute.media.sizes``).

``image_tokens_rule`` turns the ``Recipe(image_tokens=...)`` argument into a rule: an int, a
preset name (``llava-1.5`` 576, ``qwen-vl`` 256, ``qwen2-vl`` / ``qwen2.5-vl`` / ``qwen3-vl``
dynamic, ``llava-next`` / ``llava-onevision`` anyres tiles: ``chute.media.anyres``), a mapping of
``DynamicImageTokens`` fields, or a rule object.

A dynamic preset also names its model ``family``: the family decides the rotary positions of the
batches (Qwen2/2.5/3-VL's 3-D mRoPE, ``chute.media.positions``) and how a video is laid out in
the text (Qwen3-VL writes a timestamp before each frame group), so it is never a hand-set flag.

Example:
    >>> image_tokens_rule("qwen2-vl").count((640, 480))
    (391, (1, 34, 46))
    >>> image_tokens_rule(576).count(None)
    (576, None)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from chute._internal.spelling import spell_value
from chute.errors import ConfigError
from chute.media.anyres import ANYRES_PRESETS, AnyresImageTokens
from chute.media.sizes import qwen2vl_grid

__all__ = [
    "MROPE_FAMILIES",
    "DynamicImageTokens",
    "FixedImageTokens",
    "image_token_counts",
    "image_tokens_rule",
]


@dataclass(frozen=True)
class FixedImageTokens:
    """The same token count for every image."""

    tokens: int
    needs_size = False

    def __post_init__(self) -> None:
        if not isinstance(self.tokens, int) or isinstance(self.tokens, bool) or self.tokens < 1:
            raise ConfigError(
                f"expected a positive number of tokens per image, got {spell_value(self.tokens)} "
                f"(LLaVA-1.5: 576, Qwen-VL: 256)",
                param="image_tokens",
            )

    def count(self, size: tuple[int, int] | None) -> tuple[int, None]:
        return self.tokens, None

    def to_json(self) -> dict[str, Any]:
        return {"rule": "fixed", "tokens": self.tokens}


@dataclass(frozen=True)
class DynamicImageTokens:
    """Qwen2-VL's rule: tokens = ``(h / patch) * (w / patch) / merge**2`` after ``smart_resize``.

    Args:
        patch_size: vision patch side in pixels (Qwen2/2.5-VL: 14, Qwen3-VL: 16).
        merge_size: patches merged per side into one token (2).
        min_pixels: smallest resized area (Qwen2-VL processor default ``56*56``).
        max_pixels: largest resized area (Qwen2-VL processor default ``28*28*1280``).
        family: the model family whose positions and video layout the batches follow:
            ``qwen2-vl``, ``qwen2.5-vl``, ``qwen3-vl`` (``MROPE_FAMILIES``), or ``None`` (1-D
            positions: a model that does not use mRoPE). The presets set it.
    """

    patch_size: int = 14
    merge_size: int = 2
    min_pixels: int = 56 * 56
    max_pixels: int = 28 * 28 * 1280
    family: str | None = None
    needs_size = True

    def __post_init__(self) -> None:
        for name in ("patch_size", "merge_size", "min_pixels", "max_pixels"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(
                    f"image_tokens.{name}: expected a positive integer, got {value!r}"
                )
        if self.family is not None and self.family not in MROPE_FAMILIES:
            raise ConfigError(
                f"image_tokens.family: expected one of {', '.join(MROPE_FAMILIES)} or None, got "
                f"{self.family!r}",
                param="image_tokens",
            )
        factor = self.patch_size * self.merge_size
        if self.min_pixels > self.max_pixels or self.max_pixels < factor * factor:
            raise ConfigError(
                f"min_pixels={self.min_pixels} and max_pixels={self.max_pixels} "
                f"must satisfy min_pixels <= max_pixels and max_pixels >= (patch_size * "
                f"merge_size)**2 = {factor * factor}",
                param="image_tokens",
            )

    def count(self, size: tuple[int, int] | None) -> tuple[int, tuple[int, int, int]]:
        """``(tokens, (t, grid_h, grid_w))`` for an image of ``size = (width, height)``."""
        if size is None:
            raise ValueError("DynamicImageTokens needs the image size")
        gh, gw = qwen2vl_grid(
            size[0],
            size[1],
            patch_size=self.patch_size,
            merge_size=self.merge_size,
            min_pixels=self.min_pixels,
            max_pixels=self.max_pixels,
        )
        return gh * gw // (self.merge_size * self.merge_size), (1, gh, gw)

    def to_json(self) -> dict[str, Any]:
        out = {"rule": "dynamic", **asdict(self)}
        if out["family"] is None:  # caches built before families stay valid
            del out["family"]
        return out


# The model families whose batches carry 3-D rotary positions (see chute.media.positions).
MROPE_FAMILIES = ("qwen2-vl", "qwen2.5-vl", "qwen3-vl")

_PRESETS: dict[str, FixedImageTokens | DynamicImageTokens | AnyresImageTokens] = {
    "llava-1.5": FixedImageTokens(576),
    "qwen-vl": FixedImageTokens(256),
    "qwen2-vl": DynamicImageTokens(family="qwen2-vl"),
    "qwen2.5-vl": DynamicImageTokens(family="qwen2.5-vl"),
    # Qwen3-VL's released processor: 16-pixel patches, 256 to 16,384 tokens' worth of pixels
    "qwen3-vl": DynamicImageTokens(
        patch_size=16, merge_size=2, min_pixels=65536, max_pixels=16777216, family="qwen3-vl"
    ),
}
_PRESETS.update(ANYRES_PRESETS)  # llava-next, llava-onevision: counted from the size


def image_tokens_rule(
    value: Any,
) -> FixedImageTokens | DynamicImageTokens | AnyresImageTokens | None:
    """The rule for ``Recipe(image_tokens=value)``; ``None`` stays ``None`` (no images allowed)."""
    if value is None or isinstance(
        value, FixedImageTokens | DynamicImageTokens | AnyresImageTokens
    ):
        return value
    if isinstance(value, bool):
        raise ConfigError(
            f"expected a count, a preset or a rule, got {spell_value(value)}", param="image_tokens"
        )
    if isinstance(value, int):
        return FixedImageTokens(value)
    if isinstance(value, str):
        if value.isdigit():
            return FixedImageTokens(int(value))
        if value in _PRESETS:
            return _PRESETS[value]
        raise ConfigError(
            f"unknown preset {spell_value(value)}; use a count (e.g. 576), auto, one of "
            f"{', '.join(_PRESETS)}, or the fields of a dynamic rule (patch_size, merge_size, "
            f"min_pixels, max_pixels)",
            param="image_tokens",
        )
    if isinstance(value, Mapping):
        if value.get("rule") == "anyres":  # an AnyresImageTokens.to_json(), e.g. from a cache
            return AnyresImageTokens.from_json(value)
        try:
            return DynamicImageTokens(**value)
        except TypeError as exc:
            raise ConfigError(
                f"{exc}; the keys are patch_size, merge_size, min_pixels, max_pixels",
                param="image_tokens",
            ) from None
    raise ConfigError(
        f"expected a count, a preset name or a rule, got {type(value).__name__}",
        param="image_tokens",
    )


def image_token_counts(
    sizes: Any, rule: FixedImageTokens | DynamicImageTokens | AnyresImageTokens
) -> np.ndarray:
    """Token counts of many images from their ``(width, height)``, vectorised.

    For a lengths or token cache that stores each image's header size: counts for another rule
    follow without opening a file. Equal to ``rule.count`` image by image (the same float64
    arithmetic as ``smart_resize``); ``-1`` where the rule refuses the image (aspect ratio above
    200).

    Example:
        >>> image_token_counts([[300, 168], [640, 480]], DynamicImageTokens()).tolist()
        [66, 391]
    """
    wh = np.asarray(sizes, dtype=np.float64).reshape(-1, 2)
    if isinstance(rule, FixedImageTokens):
        return np.full(len(wh), rule.tokens, dtype=np.int64)
    if isinstance(rule, AnyresImageTokens):  # the one image of a sample (see its ``counts``)
        return rule.counts(wh)
    w, h = wh[:, 0], wh[:, 1]
    factor = rule.patch_size * rule.merge_size
    with np.errstate(divide="ignore", invalid="ignore"):
        refused = np.maximum(h, w) / np.minimum(h, w) > 200
        h_bar = np.round(h / factor) * factor
        w_bar = np.round(w / factor) * factor
        big = h_bar * w_bar > rule.max_pixels
        beta = np.sqrt((h * w) / rule.max_pixels)
        h_big = np.maximum(factor, np.floor(h / beta / factor) * factor)
        w_big = np.maximum(factor, np.floor(w / beta / factor) * factor)
        small = ~big & (h_bar * w_bar < rule.min_pixels)
        beta = np.sqrt(rule.min_pixels / (h * w))
        h_small = np.ceil(h * beta / factor) * factor
        w_small = np.ceil(w * beta / factor) * factor
    h_bar = np.where(big, h_big, np.where(small, h_small, h_bar))
    w_bar = np.where(big, w_big, np.where(small, w_small, w_bar))
    p, m = rule.patch_size, rule.merge_size
    tokens = (h_bar // p).astype(np.int64) * (w_bar // p).astype(np.int64) // (m * m)
    return np.where(refused, -1, tokens)

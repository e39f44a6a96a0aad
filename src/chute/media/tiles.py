"""LLaVA-NeXT / LLaVA-OneVision tiles: the media stage's half of ``chute.media.anyres``.

``AnyresTransform`` cuts an image into the tiles ``transformers``' PIL image processors make
(``LlavaOnevisionImageProcessorPil``, ``LlavaNextImageProcessorPil``), equal to them within
float32 rounding, and counts their features with the recipe's ``AnyresImageTokens``::

    image ──► base: resized to S x S
          └─► resized into the best grid resolution (aspect kept, rounded up), zero-padded
              (centred), cut into S x S tiles row by row
    [base, tiles...] ──► x * rescale ──► (x - mean) / std ──► (tiles, 3, S, S) float32

Example:
    >>> from PIL import Image
    >>> t = AnyresTransform(ANYRES_PRESETS["llava-onevision"], normalize="siglip")
    >>> out = t(Image.new("RGB", (1000, 750)))
    >>> out.pixels.shape, out.image_size, out.num_features
    ((7, 3, 384, 384), (750, 1000), 4725)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from PIL import Image

from chute.errors import ConfigError
from chute.media.anyres import ANYRES_PRESETS, AnyresImageTokens
from chute.media.transforms import (
    RESAMPLE,
    ImageFeatures,
    _check_resample,
    _check_rescale,
    _normalization,
    normalize_chw,
)

__all__ = ["AnyresFeatures", "AnyresTransform", "check_anyres_rule"]

_SIZE_BYTES = 8  # the prepared pixels' last row starts with the image's (height, width), uint32


@dataclass(slots=True)
class AnyresFeatures(ImageFeatures):
    """One anyres image: ``pixels`` ``(tiles, 3, S, S)`` and the image's ``(height, width)``.

    Attributes:
        image_size: ``(height, width)`` of the decoded image (the model's ``image_sizes``).
        tiled: ``False`` for an image padded to a square (one tile: a multi-image OneVision
            sample), which the model must be told of (``batch_num_images``).
    """

    image_size: tuple[int, int] | None = None
    tiled: bool = True


@dataclass(frozen=True)
class AnyresTransform:
    """LLaVA-NeXT / LLaVA-OneVision tiles: ``(1 + rows * cols, 3, S, S)`` float32 per image.

    Pillow does the geometry, numpy the arithmetic, as ``transformers``' PIL image processors
    (``LlavaOnevisionImageProcessorPil``, ``LlavaNextImageProcessorPil``)::

        image ──► base: resized to S x S
              └─► resized into the best grid resolution (aspect kept, rounded up), zero-padded
                  (centred), cut into S x S tiles row by row
        [base, tiles...] ──► x * rescale ──► (x - mean) / std ──► (tiles, 3, S, S)

    An image of a multi-image OneVision sample (``for_images(n)``, ``n > 1``) is padded to a
    square with the mean colour and resized to one ``S x S`` tile instead.

    Args:
        rule: the recipe's ``AnyresImageTokens`` (tile side, grids, pooling), or its
            ``to_json()``: the features of every image are counted by it.
        resample: Pillow filter (``bicubic``, as both processors).
        rescale: factor from uint8 values (``1/255``).
        normalize: ``siglip`` (OneVision), ``clip`` (LLaVA-NeXT), ``(mean, std)`` or ``None``.

    ``prepare`` gives uint8 ``(tiles * S + 1, S, 3)``: the tiles one under the other and a last
    row that starts with the image's height and width (two little-endian uint32), so a pixel
    store can keep it and ``finish`` knows the size the token count depends on.

    Example:
        >>> t = AnyresTransform(ANYRES_PRESETS["llava-onevision"], normalize="siglip")
        >>> out = t(Image.new("RGB", (1000, 750)))
        >>> out.pixels.shape, out.image_size, out.num_features
        ((7, 3, 384, 384), (750, 1000), 4725)
    """

    rule: AnyresImageTokens = field(default_factory=lambda: ANYRES_PRESETS["llava-onevision"])
    resample: str = "bicubic"
    rescale: float = 1 / 255
    normalize: Any = "siglip"
    tiled: bool = True
    kind: str = field(default="anyres", init=False)

    def __post_init__(self) -> None:
        if isinstance(self.rule, Mapping):  # its JSON (a cache's pixels options)
            object.__setattr__(self, "rule", AnyresImageTokens.from_json(self.rule))
        if not isinstance(self.rule, AnyresImageTokens):
            raise ConfigError(
                f"expected an AnyresImageTokens (e.g. image_tokens_rule('llava-onevision')), "
                f"got {type(self.rule).__name__}",
                param="rule",
            )
        _check_resample(self.resample)
        _check_rescale(self.rescale)
        _normalization(self.normalize)

    def for_images(self, images: int) -> AnyresTransform:
        """The transform for each image of a sample with ``images`` images."""
        if images > 1 and self.rule.multi_image == "pad":
            return dataclasses.replace(self, tiled=False)
        return self

    def prepare(self, image: Image.Image) -> np.ndarray:
        """The geometry: an RGB image -> uint8 ``(tiles * S + 1, S, 3)`` (see the class)."""
        side, resample = self.rule.image_size, RESAMPLE[self.resample]
        width, height = image.size
        if not self.tiled:
            tiles = _square(image, side, self.normalize, resample)[None]
        else:
            best_h, best_w = self.rule.best_resolution(width, height)
            new_h, new_w = _fit(height, width, best_h, best_w)
            resized = (
                image if (new_w, new_h) == image.size else image.resize((new_w, new_h), resample)
            )
            canvas = np.zeros((best_h, best_w, 3), dtype=np.uint8)
            top, left = (best_h - new_h) // 2, (best_w - new_w) // 2
            canvas[top : top + new_h, left : left + new_w] = np.asarray(resized, dtype=np.uint8)
            grid = canvas.reshape(best_h // side, side, best_w // side, side, 3)
            grid = grid.transpose(0, 2, 1, 3, 4).reshape(-1, side, side, 3)
            base = np.asarray(image.resize((side, side), resample), dtype=np.uint8)
            tiles = np.concatenate([base[None], grid])
        last = np.zeros((1, side, 3), dtype=np.uint8)
        last.reshape(-1)[:_SIZE_BYTES] = np.array([height, width], dtype="<u4").view(np.uint8)
        return np.concatenate([tiles.reshape(-1, side, 3), last])

    def finish(self, pixels: np.ndarray) -> AnyresFeatures:
        """Prepared pixels -> ``(tiles, 3, S, S)`` float32, ``image_size`` and the feature count.

        Raises:
            ConfigError: ``pixels`` were not made by ``prepare`` of a transform with this tile
                side and these grids.
        """
        side = self.rule.image_size
        if pixels.ndim != 3 or pixels.shape[1:] != (side, 3) or pixels.shape[0] % side != 1:
            raise ConfigError(
                f"AnyresTransform.finish: expected uint8 (tiles * {side} + 1, {side}, 3) made by "
                f"prepare(), got shape {pixels.shape}; a pixel store built for another transform?"
            )
        height, width = (int(v) for v in pixels[-1].reshape(-1)[:_SIZE_BYTES].view("<u4"))
        tiles = pixels[:-1].reshape(-1, side, side, 3)
        if len(tiles) == 1:
            return AnyresFeatures(
                self._normalized(tiles), None, self.rule.padded_tokens, (height, width), False
            )
        best_h, best_w = self.rule.best_resolution(width, height)
        want = 1 + (best_h // side) * (best_w // side)
        if len(tiles) != want:
            raise ConfigError(
                f"AnyresTransform.finish: {len(tiles)} tiles for a {width}x{height} image, "
                f"whose grid {best_w}x{best_h} gives {want}; pixels made with other "
                f"grid_pinpoints (rebuild the pixel store)"
            )
        count = self.rule.count((width, height))[0]
        return AnyresFeatures(self._normalized(tiles), None, count, (height, width), True)

    def _normalized(self, tiles: np.ndarray) -> np.ndarray:
        return normalize_chw(tiles, self.rescale, _normalization(self.normalize))

    def __call__(self, image: Image.Image) -> AnyresFeatures:
        return self.finish(self.prepare(image))

    def fingerprint(self) -> dict[str, Any]:
        """What shapes the prepared pixels (a pre-decoded store keys on it)."""
        rule = self.rule.to_json()
        return {
            "kind": "anyres",
            "image_size": rule["image_size"],
            "grid_pinpoints": rule["grid_pinpoints"],
            "resample": self.resample,
            "tiled": self.tiled,
            "fill": None if self.tiled else _fill(self.normalize),
        }


def _fit(height: int, width: int, target_h: int, target_w: int) -> tuple[int, int]:
    """``transformers``' ``get_patch_output_size``: fit inside the target, aspect kept, rounded up."""
    scale_w, scale_h = target_w / width, target_h / height
    if scale_w < scale_h:
        return min(math.ceil(height * scale_w), target_h), target_w
    return target_h, min(math.ceil(width * scale_h), target_w)


def _fill(normalize: Any) -> tuple[int, int, int]:
    norm = _normalization(normalize)
    mean = norm[0] if norm is not None else np.zeros(3, dtype=np.float32)
    r, g, b = (int(m * 255) for m in mean)
    return r, g, b


def _square(
    image: Image.Image, side: int, normalize: Any, resample: Image.Resampling
) -> np.ndarray:
    """Padded to a square on the mean colour (centred, offsets rounded down), then ``side``."""
    if image.width != image.height:
        big = max(image.size)
        square = Image.new("RGB", (big, big), _fill(normalize))
        square.paste(image, ((big - image.width) // 2, (big - image.height) // 2))
        image = square
    if image.size != (side, side):
        image = image.resize((side, side), resample)
    return np.asarray(image, dtype=np.uint8)


def check_anyres_rule(transform: Any, rule: Any) -> None:
    """Refuse a media stage whose tiles the recipe's image-token rule would count otherwise.

    Raises:
        ConfigError: an ``AnyresTransform`` with a rule that is not its own (a fixed or dynamic
            rule, or an anyres rule with other fields: each is named), or an anyres rule with
            another transform.
    """
    if not isinstance(transform, AnyresTransform):
        raise ConfigError(
            f"the recipe counts LLaVA-NeXT / OneVision tiles (image_tokens anyres, "
            f"{rule.image_size}-pixel tiles) but the media stage's {type(transform).__name__} "
            f"makes other features; pass media=MediaStage(AnyresTransform(rule)) with the "
            f"recipe's rule, or leave media= out (the default stage is that one)",
            param="media",
        )
    if not isinstance(rule, AnyresImageTokens):
        counted = f"a fixed {rule.tokens}" if hasattr(rule, "tokens") else "a dynamic number of"
        raise ConfigError(
            f"the recipe counts {counted} tokens per image but the media stage's "
            f"AnyresTransform makes LLaVA-NeXT / OneVision tiles; pass "
            f"Recipe(image_tokens='llava-onevision') (or 'llava-next', or the transform's rule)",
            param="media",
        )
    if rule != transform.rule:
        mine, theirs = rule.to_json(), transform.rule.to_json()
        diffs = [
            f"{k}: recipe {mine[k]}, transform {theirs[k]}" for k in mine if mine[k] != theirs[k]
        ]
        raise ConfigError(
            f"the recipe's anyres image-token rule and the AnyresTransform's differ "
            f"({'; '.join(diffs)}), so token counts would not match the tiles; build the "
            f"transform from the recipe's rule: AnyresTransform(recipe.media.image_rule)",
            param="media",
        )

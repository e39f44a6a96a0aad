"""LLaVA-NeXT and LLaVA-OneVision "anyres" images: token counts from the size, tiles for the model.

LLaVA-NeXT (1.6) and LLaVA-OneVision resize an image into the best of a list of grid resolutions
(``grid_pinpoints``), cut it into tiles of the vision tower's input side ``S`` and put one more
tile in front, the whole image squeezed to ``S x S`` (the base)::

    1000 x 750 (w x h) ──select_best_resolution──► 768 x 1152 (h x w): a 2 x 3 grid of 384 tiles
    resized to 768 x 1024 (aspect kept), zero-padded to 768 x 1152, cut row by row
    pixel_values (7, 3, 384, 384): [base, tile 0, ..., tile 5]   image_sizes (750, 1000)

The model makes ``(S // patch)**2`` features of each tile, lays the grid's tiles out as one
feature map (``2*27 x 3*27``), drops the rows or columns that only hold padding ("unpadding"),
ends each row with an ``image_newline`` feature and puts the base tile's features first.
OneVision bilinearly pools a map of more than ``max_tiles`` tiles' worth (``anyres_max_9``) down
to about that. So the token count follows from the image size alone: ``AnyresImageTokens``
counts it in the recipe (from the header), ``AnyresTransform`` (``chute.media.tiles``) makes the
tiles in the media stage, and both follow ``transformers``' ``LlavaNextProcessor`` /
``LlavaOnevisionProcessor`` (``_get_number_of_features``) and their image processors, which
agree with the models' ``pack_image_features``.

Several images in one sample: OneVision pads each to a square and gives it one tile and
``(S // patch)**2 + 1`` tokens (``multi_image="pad"``, as its processor and training code);
LLaVA-NeXT tiles every image (``multi_image="tile"``).

Example:
    >>> rule = ANYRES_PRESETS["llava-onevision"]
    >>> rule.count((1000, 750))  # 54 x 81 features, unpadded to 54 x 73, 54 newlines, the base
    (4725, None)
    >>> rule.best_resolution(1000, 750), rule.in_sample(2).count(None)
    ((768, 1152), (730, None))
    >>> ANYRES_PRESETS["llava-next"].count((1000, 750))[0]
    2340
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from chute.errors import ConfigError

__all__ = ["ANYRES_PRESETS", "AnyresImageTokens", "PaddedImageTokens"]

_MULTI_IMAGE = ("pad", "tile")


def _positive(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(
            f"image_tokens.{name}: expected a positive integer, got {value!r}", param="image_tokens"
        )
    return value


def _pinpoints(value: Any, side: int) -> tuple[tuple[int, int], ...]:
    try:
        pairs = tuple((int(h), int(w)) for h, w in value)
        bad = any(
            isinstance(v, bool) or not isinstance(v, int) for pair in value for v in pair
        ) or any(h < side or w < side or h % side or w % side for h, w in pairs)
    except (TypeError, ValueError):
        pairs, bad = (), True
    if bad or not pairs:
        raise ConfigError(
            f"image_tokens.grid_pinpoints: expected (height, width) pairs of multiples of "
            f"image_size={side}, got {value!r}; e.g. [[384, 384], [384, 768], [768, 384]]",
            param="image_tokens",
        )
    return pairs


@dataclass(frozen=True)
class PaddedImageTokens:
    """One image of a multi-image OneVision sample: padded to a square, one tile and a newline.

    The rule ``AnyresImageTokens.in_sample(n)`` gives for each image of a sample with ``n > 1``
    images (``multi_image="pad"``); the count needs no size.
    """

    tokens: int
    needs_size = False

    def count(self, size: tuple[int, int] | None) -> tuple[int, None]:
        return self.tokens, None


@dataclass(frozen=True)
class AnyresImageTokens:
    """LLaVA-NeXT / LLaVA-OneVision image tokens, from the image's ``(width, height)``.

    Args:
        image_size: the vision tower's input side ``S``, the tile side (OneVision's SigLIP: 384,
            LLaVA-NeXT's CLIP: 336).
        patch_size: the vision tower's patch side (14); a tile gives ``(S // patch)**2``
            features (CLIP's CLS feature is not one: LLaVA-NeXT selects the ``default``
            features).
        grid_pinpoints: the grid resolutions an image may be resized into, ``(height, width)``
            pairs of multiples of ``image_size`` (the model config's ``image_grid_pinpoints``).
        max_tiles: OneVision's ``vision_aspect_ratio="anyres_max_9"``: a feature map larger
            than this many tiles (by more than 10% per side) is pooled down; ``None``: never
            (LLaVA-NeXT).
        multi_image: ``pad`` (OneVision: the images of a sample with several are padded to a
            square, one tile each) or ``tile`` (LLaVA-NeXT: every image is tiled).

    Example:
        >>> AnyresImageTokens(image_size=336, grid_pinpoints=((336, 672), (672, 336)),
        ...                   max_tiles=None, multi_image="tile").count((640, 480))
        (1368, None)
    """

    image_size: int = 384
    patch_size: int = 14
    grid_pinpoints: tuple[tuple[int, int], ...] = ()
    max_tiles: int | None = 9
    multi_image: str = "pad"
    needs_size = True

    def __post_init__(self) -> None:
        _positive(self.image_size, "image_size")
        _positive(self.patch_size, "patch_size")
        if self.patch_size > self.image_size:
            raise ConfigError(
                f"image_tokens.patch_size: {self.patch_size} is larger than image_size="
                f"{self.image_size}; a tile must hold at least one patch",
                param="image_tokens",
            )
        pinpoints = self.grid_pinpoints or _onevision_pinpoints(self.image_size)
        object.__setattr__(self, "grid_pinpoints", _pinpoints(pinpoints, self.image_size))
        if self.max_tiles is not None:
            _positive(self.max_tiles, "max_tiles")
        if self.multi_image not in _MULTI_IMAGE:
            raise ConfigError(
                f"image_tokens.multi_image: expected 'pad' (LLaVA-OneVision) or 'tile' "
                f"(LLaVA-NeXT), got {self.multi_image!r}",
                param="image_tokens",
            )

    @property
    def side(self) -> int:
        """Features per side of one tile: ``image_size // patch_size``."""
        return self.image_size // self.patch_size

    @property
    def padded_tokens(self) -> int:
        """Tokens of one image padded to a square (a multi-image OneVision sample): tile + newline."""
        return self.side * self.side + 1

    def best_resolution(self, width: int, height: int) -> tuple[int, int]:
        """``(height, width)`` of the grid resolution an image is resized into.

        ``transformers``' ``select_best_resolution``: the most of the image's pixels kept, then
        the least padding, then the first in ``grid_pinpoints``.
        """
        best = self.grid_pinpoints[0]
        most, least = 0, math.inf
        for h, w in self.grid_pinpoints:
            scale = min(w / width, h / height)
            kept = min(int(width * scale) * int(height * scale), width * height)
            wasted = w * h - kept
            if kept > most or (kept == most and wasted < least):
                best, most, least = (h, w), kept, wasted
        return best

    def count(self, size: tuple[int, int] | None) -> tuple[int, None]:
        """``(tokens, None)`` for the one image of a sample, of ``size = (width, height)``."""
        if size is None:
            raise ValueError("AnyresImageTokens needs the image size")
        width, height = int(size[0]), int(size[1])
        best_h, best_w = self.best_resolution(width, height)
        n = self.side
        rows, cols = n * (best_h // self.image_size), n * (best_w // self.image_size)
        # unpadding: the rows (or columns) of the map that cover only padding are dropped
        if width / height > cols / rows:
            kept = int(round(height * (cols / width), 7))
            rows -= (rows - kept) // 2 * 2
        else:
            kept = int(round(width * (rows / height), 7))
            cols -= (cols - kept) // 2 * 2
        unpadded, newlines = rows * cols, rows
        if self.max_tiles is not None:
            ratio = math.sqrt(rows * cols / (self.max_tiles * n * n))
            if ratio > 1.1:  # bilinear pooling to about max_tiles tiles' worth
                unpadded = int(rows // ratio) * int(cols // ratio)
                newlines = int(rows // ratio)
        return unpadded + newlines + n * n, None

    def counts(self, sizes: Any) -> np.ndarray:
        """Token counts of many images from their ``(width, height)``, vectorised.

        Equal to ``count`` image by image (the same float64 arithmetic); for the one image of a
        sample (a multi-image OneVision sample's images take ``padded_tokens`` each).

        Example:
            >>> ANYRES_PRESETS["llava-onevision"].counts([[1000, 750], [300, 168]]).tolist()
            [4725, 1149]
        """
        wh = np.asarray(sizes, dtype=np.float64).reshape(-1, 2)
        width, height = wh[:, :1], wh[:, 1:]
        pins = np.asarray(self.grid_pinpoints, dtype=np.float64)
        ph, pw = pins[:, 0][None], pins[:, 1][None]
        with np.errstate(divide="ignore", invalid="ignore"):
            scale = np.minimum(pw / width, ph / height)
            kept = np.minimum(
                np.floor(width * scale) * np.floor(height * scale), width * height
            )  # (images, pinpoints)
            wasted = pw * ph - kept
            wasted = np.where(kept == kept.max(axis=1, keepdims=True), wasted, np.inf)
            best = np.argmin(wasted, axis=1)  # the first of the least wasted among the most kept
            n, width, height = self.side, width[:, 0], height[:, 0]
            rows = n * (pins[best, 0] // self.image_size)
            cols = n * (pins[best, 1] // self.image_size)
            wide = width / height > cols / rows
            kept_h = np.floor(np.round(height * (cols / width), 7))
            kept_w = np.floor(np.round(width * (rows / height), 7))
        rows = np.where(wide, rows - (rows - kept_h) // 2 * 2, rows)
        cols = np.where(wide, cols, cols - (cols - kept_w) // 2 * 2)
        unpadded, newlines = rows * cols, rows
        if self.max_tiles is not None:
            ratio = np.sqrt(rows * cols / (self.max_tiles * n * n))
            pooled = ratio > 1.1
            safe = np.where(pooled, ratio, 1.0)
            unpadded = np.where(
                pooled, np.floor_divide(rows, safe) * np.floor_divide(cols, safe), unpadded
            )
            newlines = np.where(pooled, np.floor_divide(rows, safe), newlines)
        return (unpadded + newlines + n * n).astype(np.int64)

    def in_sample(self, images: int) -> AnyresImageTokens | PaddedImageTokens:
        """The rule for each image of a sample with ``images`` images."""
        if images > 1 and self.multi_image == "pad":
            return PaddedImageTokens(self.padded_tokens)
        return self

    def to_json(self) -> dict[str, Any]:
        out = {"rule": "anyres", **dataclasses.asdict(self)}
        out["grid_pinpoints"] = [list(p) for p in self.grid_pinpoints]
        return out

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> AnyresImageTokens:
        """The rule of a ``to_json`` mapping (as a cache's fingerprint or a config holds it)."""
        fields = {k: v for k, v in value.items() if k != "rule"}
        try:
            return cls(**fields)
        except TypeError as exc:
            raise ConfigError(
                f"{exc}; the keys of an anyres rule are image_size, patch_size, "
                f"grid_pinpoints, max_tiles, multi_image",
                param="image_tokens",
            ) from None


def _onevision_pinpoints(side: int) -> tuple[tuple[int, int], ...]:
    """LLaVA-OneVision's grids: 1 to 6 tiles per side (36 grids, rows first)."""
    return tuple((side * r, side * c) for r in range(1, 7) for c in range(1, 7))


ANYRES_PRESETS: dict[str, AnyresImageTokens] = {
    # llava-hf/llava-onevision-qwen2-*-hf: SigLIP-384/14 (729 features a tile), anyres_max_9
    "llava-onevision": AnyresImageTokens(
        image_size=384, patch_size=14, grid_pinpoints=_onevision_pinpoints(384), max_tiles=9
    ),
    # llava-hf/llava-v1.6-*-hf: CLIP-336/14 (576 features a tile), five grids, no pooling
    "llava-next": AnyresImageTokens(
        image_size=336,
        patch_size=14,
        grid_pinpoints=((336, 672), (672, 336), (672, 672), (1008, 336), (336, 1008)),
        max_tiles=None,
        multi_image="tile",
    ),
}

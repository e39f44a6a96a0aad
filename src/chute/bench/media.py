"""The media stage ``chute bench`` measures: one that matches the recipe's image token rule.

A recipe counting Qwen2-VL-style dynamic tokens gets ``DynamicResolution`` with the same patch,
merge and pixel bounds (so the stage's features equal the counted tokens); a fixed count
(LLaVA's 576) gets a fixed-size ``ImageTransform``. With a ``PixelStore``, images it holds are
read pre-decoded instead of decoded, which is how ``chute bench`` shows what the store saves.

Example:
    >>> from chute.media import DynamicImageTokens, FixedImageTokens
    >>> transform_for_rule(DynamicImageTokens(patch_size=16)).patch_size
    16
    >>> transform_for_rule(FixedImageTokens(576), image_size=224).output_size
    (224, 224)
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from chute.recipe.contract import as_recipe

__all__ = ["has_media", "stage_for_recipe", "transform_for_rule"]


def transform_for_rule(rule: Any, *, image_size: int = 336) -> Any:
    """The image transform whose feature count is what ``rule`` counts."""
    from chute.media import AnyresImageTokens, DynamicImageTokens, DynamicResolution, ImageTransform
    from chute.media.stage import default_media_stage

    if isinstance(rule, AnyresImageTokens):  # LLaVA-NeXT / OneVision tiles
        return default_media_stage(rule).image
    if isinstance(rule, DynamicImageTokens):
        return DynamicResolution(
            patch_size=rule.patch_size,
            merge_size=rule.merge_size,
            min_pixels=rule.min_pixels,
            max_pixels=rule.max_pixels,
        )
    return ImageTransform(size=image_size, crop=image_size)


def stage_for_recipe(
    recipe: Any,
    *,
    image_size: int = 336,
    store: str | os.PathLike[str] | None = None,
) -> Any:
    """A ``MediaStage`` for the images of ``recipe``'s samples.

    Args:
        recipe: a ``Recipe`` (its ``media.image_rule`` picks the transform).
        image_size: side of fixed-size images (fixed token rules only).
        store: a ``PixelStore`` folder of pre-decoded pixels built with the same transform.
    """
    from chute.media import MediaStage, PixelStore

    contract = as_recipe(recipe)
    plan = contract.media if contract is not None else None
    rule = plan.image_rule if plan is not None else None
    transform = transform_for_rule(rule, image_size=image_size)
    pixels = PixelStore(store, transform) if store is not None else None
    return MediaStage(image=transform, store=pixels)


def has_media(source: Any, recipe: Any, ids: Iterable[int]) -> bool:
    """Whether any of the samples ``ids`` refers to an image (bad records are passed over).

    ``recipe`` ``None``: ``source`` holds samples already (a token cache).
    """
    for i in ids:
        try:
            item = source[int(i)]
            sample = recipe(item) if recipe is not None else item
        except Exception:  # a bad record says nothing about media; the loader counts it
            continue
        if isinstance(sample, dict) and sample.get("images"):
            return True
    return False

"""Collation of LLaVA-NeXT / LLaVA-OneVision tiles: the layout ``transformers`` returns.

Each image of the media stage's ``AnyresTransform`` is ``(tiles, 3, S, S)``, with as many tiles
as its grid needs. A batch pads them with zeros over the tiles to the most of the batch, as the
processors do (``do_pad``), and adds each image's size and each sample's image count::

    sample 0: [a: 7 tiles]           pixel_values      (3, 10, 3, S, S)  a, b, c; zero tiles after
    sample 1: []                     image_sizes       [[750, 1000], [168, 300], [900, 900]]
    sample 2: [b: 1 tile, c: 1]      batch_num_images  [1, 2]  (samples with images)

The models cut the padding off by the tile counts they compute from ``image_sizes`` and
``batch_num_images`` (OneVision tiles the one image of a sample and pads the images of a sample
with several to one tile each; LLaVA-NeXT accepts and ignores ``batch_num_images``).

Example:
    >>> import numpy as np
    >>> s = [{"pixel_values": [np.ones((3, 3, 2, 2), np.float32)], "image_sizes": [(4, 5)]},
    ...      {"pixel_values": [np.ones((2, 3, 2, 2), np.float32)], "image_sizes": [(6, 7)]}]
    >>> values, keys = collate_tiles(s, [a for x in s for a in x["pixel_values"]])
    >>> values.shape, keys["image_sizes"].tolist(), keys["batch_num_images"].tolist()
    ((2, 3, 3, 2, 2), [[4, 5], [6, 7]], [1, 1])
    >>> float(values[1, 2].sum())  # the second image's padding tile
    0.0
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from chute._internal.lazy_torch import require_torch
from chute.errors import ConfigError

__all__ = ["collate_tiles"]


def collate_tiles(
    samples: Sequence[Mapping[str, Any]], arrays: Sequence[np.ndarray]
) -> tuple[np.ndarray, dict[str, Any]]:
    """``(pixel_values, {"image_sizes", "batch_num_images"})`` of a batch of tiled images.

    Args:
        samples: the batch's samples after the media stage, in order.
        arrays: their ``pixel_values``, sample after sample: ``(tiles, 3, S, S)`` each.

    Raises:
        ConfigError: tiles of different sides, or images without ``image_sizes`` (another
            transform made them: one media stage configuration per loader).
    """
    torch = require_torch()
    shapes = {a.shape[1:] for a in arrays}
    if len(shapes) > 1:
        raise ConfigError(
            f"pixel_values: tiles of shapes {sorted(shapes)} cannot be batched; one "
            f"AnyresTransform (one tile side) per loader"
        )
    sizes = [size for s in samples if s.get("pixel_values") for size in s.get("image_sizes") or ()]
    if len(sizes) != len(arrays):
        raise ConfigError(
            f"image_sizes: {len(sizes)} for {len(arrays)} tiled images; every image of a loader "
            f"must come from the same AnyresTransform"
        )
    most = max(len(a) for a in arrays)
    values = np.zeros((len(arrays), most, *arrays[0].shape[1:]), dtype=arrays[0].dtype)
    for k, a in enumerate(arrays):
        values[k, : len(a)] = a
    per_sample = [len(s["pixel_values"]) for s in samples if s.get("pixel_values")]
    return values, {
        "image_sizes": torch.tensor(sizes, dtype=torch.int64).reshape(-1, 2),
        "batch_num_images": torch.tensor(per_sample, dtype=torch.int64),
    }

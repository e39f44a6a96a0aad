"""Media collation: the media stage's per-sample outputs into batch tensors.

``collate_media(samples)`` builds only the media keys, so it composes with any text collation:
``MediaCollate`` wraps the padded ``chute.Collate`` (or any collate), and packed collation calls
``collate_media(samples, rows=...)`` to count images per packed row. Images keep the order of
``samples`` (for packed rows: pass the samples row by row, left to right, which is also the
order of their image tokens in the flattened batch)::

    fixed size (ImageTransform)            dynamic (DynamicResolution)
    sample 0: [img a]                      sample 0: [a: 264 patches, grid (1, 12, 22)]
    sample 1: []                           sample 1: [b: 1564 patches, grid (1, 34, 46)]
    sample 2: [img b, img c]
    pixel_values   (3, 3, 336, 336)        pixel_values   (1828, 1176)  patches concatenated
    image_counts   [1, 0, 2]               image_grid_thw [[1, 12, 22], [1, 34, 46]]
                                           image_counts   [1, 1]

LLaVA-NeXT / OneVision tiles (``AnyresTransform``, ``(tiles, 3, S, S)`` per image) are padded
over the tiles into ``(images, most tiles, 3, S, S)`` with ``image_sizes`` and
``batch_num_images`` (``chute.collate.tiles``).

Batches without any image carry ``image_counts`` (zeros) but no ``pixel_values``. Batches with
videos add ``pixel_values_videos`` / ``video_grid_thw`` / ``video_counts`` the same way, and
``second_per_grid_ts`` (float32, one per video: its entry's ``second_per_grid_t``, Qwen2.5-VL's
seconds per temporal group) when every video has one; with
audio, ``audio_values`` ``(clips, longest)`` zero-padded, ``audio_lengths`` and
``audio_counts``.

Example:
    >>> import numpy as np
    >>> s = [{"input_ids": np.array([1, 2]), "pixel_values": [np.zeros((3, 4, 4), np.float32)]},
    ...      {"input_ids": np.array([3])}]
    >>> b = collate_media(s)
    >>> tuple(b["pixel_values"].shape), b["image_counts"].tolist()
    ((1, 3, 4, 4), [1, 0])
    >>> collate_media(s, rows=[0, 0], num_rows=1)["image_counts"].tolist()
    [1]
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from chute._internal.lazy_torch import require_torch
from chute.collate.tiles import collate_tiles
from chute.errors import ConfigError
from chute.recipe.preference import pair_sides

__all__ = ["MediaCollate", "collate_media"]

_KINDS = (
    ("pixel_values", "image_grid_thw", "image_counts"),
    ("pixel_values_videos", "video_grid_thw", "video_counts"),
)


def collate_media(
    samples: Sequence[Mapping[str, Any]],
    *,
    rows: Sequence[int] | np.ndarray | None = None,
    num_rows: int | None = None,
    dtype: Any = None,
) -> dict[str, Any]:
    """The media tensors of a batch (see the module docstring for shapes).

    Args:
        samples: samples after the media stage.
        rows: the batch row of each sample (packed collation); default one row per sample.
        num_rows: rows in the batch (default ``max(rows) + 1``, or ``len(samples)``; at least 1,
            since an empty batch is one placeholder row).
        dtype: a torch dtype for pixel values (e.g. ``torch.bfloat16`` halves what crosses from
            the workers); default float32.
    """
    torch = require_torch()
    n = len(samples)
    if rows is None:
        row_of = np.arange(n, dtype=np.int64)
        total_rows = max(1, n) if num_rows is None else num_rows
    else:
        row_of = np.asarray(rows, dtype=np.int64)
        if row_of.shape != (n,):
            raise ConfigError(
                f"expected one row per sample ({n}), got shape {row_of.shape}", param="rows"
            )
        total_rows = (int(row_of.max()) + 1 if n else 1) if num_rows is None else num_rows
    out: dict[str, Any] = {}
    for values_key, grid_key, counts_key in _KINDS:
        counts = np.zeros(total_rows, dtype=np.int64)
        arrays: list[np.ndarray] = []
        grids: list[Any] = []
        for j, s in enumerate(samples):
            items = s.get(values_key)
            if items:
                arrays.extend(items)
                counts[row_of[j]] += len(items)
                grids.extend(s.get(grid_key) or ())
        if arrays or counts_key == "image_counts":
            out[counts_key] = torch.from_numpy(counts)
        if not arrays:
            continue
        if grids:
            if len(grids) != len(arrays):
                raise ConfigError(
                    f"{grid_key}: some samples have grids and some do not; one media stage "
                    f"configuration per loader"
                )
            values = np.concatenate(arrays, axis=0)
            out[grid_key] = torch.tensor(grids, dtype=torch.int64).reshape(-1, 3)
        elif values_key == "pixel_values" and arrays[0].ndim == 4:  # LLaVA-NeXT/OneVision tiles
            values, tile_keys = collate_tiles(samples, arrays)
            out.update(tile_keys)
        else:
            shapes = {a.shape for a in arrays}
            if len(shapes) > 1:
                raise ConfigError(
                    f"{values_key}: images of shapes {sorted(shapes)} cannot be stacked; use a "
                    f"transform with one output size (crop=..., or size=(h, w))"
                )
            values = np.stack(arrays)
        tensor = torch.from_numpy(values)
        out[values_key] = tensor.to(dtype) if dtype is not None else tensor
    seconds = _seconds_per_grid(samples)
    if seconds is not None:
        out["second_per_grid_ts"] = torch.tensor(seconds, dtype=torch.float32)
    audio = [(row_of[j], a) for j, s in enumerate(samples) for a in (s.get("audio_values") or ())]
    counts = np.zeros(total_rows, dtype=np.int64)
    if audio:
        longest = max(len(a) for _, a in audio)
        values = np.zeros((len(audio), longest), dtype=np.float32)
        lengths = np.zeros(len(audio), dtype=np.int64)
        for k, (row, a) in enumerate(audio):
            values[k, : len(a)] = a
            lengths[k] = len(a)
            counts[row] += 1
        out["audio_values"] = torch.from_numpy(values)
        out["audio_lengths"] = torch.from_numpy(lengths)
        out["audio_counts"] = torch.from_numpy(counts)
    return out


def _seconds_per_grid(samples: Sequence[Mapping[str, Any]]) -> list[float] | None:
    """Each loaded video's ``second_per_grid_t``, in order; ``None`` unless every video has one.

    Videos without it (a fixed token count, a cache written before the field) leave the key out,
    as the Qwen2.5-VL processor does without an ``fps``.
    """
    seconds: list[float] = []
    for s in samples:
        if not s.get("pixel_values_videos"):
            continue
        for ref in s.get("videos") or ():
            value = ref.get("second_per_grid_t")
            if value is None:
                return None
            seconds.append(float(value))
    return seconds or None


class MediaCollate:
    """A text collate (default ``chute.Collate``) plus the media keys of ``collate_media``.

    Args:
        text: the collate for ``input_ids`` / ``labels`` / masks; must accept ``[]``.
        dtype: torch dtype for pixel values (default float32).

    Example:
        >>> import numpy as np
        >>> from chute.collate import Collate
        >>> c = MediaCollate(Collate(pad_id=0))
        >>> b = c([{"input_ids": np.array([5, 6]), "pixel_values": [np.ones((3, 2, 2), np.float32)]}])
        >>> sorted(b)
        ['attention_mask', 'image_counts', 'input_ids', 'labels', 'pixel_values']
    """

    def __init__(
        self,
        text: Callable[[list[dict[str, Any]]], dict[str, Any]] | None = None,
        dtype: Any = None,
    ):
        if text is None:
            from chute.collate.padded import Collate

            text = Collate()
        self.text = text
        self.dtype = dtype

    def __call__(self, samples: Sequence[Mapping[str, Any]], **layout: Any) -> dict[str, Any]:
        # layout: the packed plans' rows=..., passed on to a packing text collate; the media
        # keys keep sample order, which is the order of image tokens in the flattened rows
        batch = self.text(list(samples), **layout)  # type: ignore[arg-type]
        rows = layout.get("rows")
        if getattr(self.text, "media_per_side", False):
            # packed preference pairs: each side is a segment holding the pair's media tokens
            samples = [side for s in samples for side in pair_sides(s)]
            rows = None if rows is None else [2 * r for r in rows]
        row_of = None if rows is None else np.repeat(np.arange(len(rows)), rows)
        num_rows = None if rows is None else max(1, int(np.count_nonzero(rows)))
        if row_of is not None:  # packed rows: count images per row (empty rows are dropped)
            row_of = np.searchsorted(np.flatnonzero(np.asarray(rows)), row_of)
        media = collate_media(samples, rows=row_of, num_rows=num_rows, dtype=self.dtype)
        for key, value in media.items():
            batch.setdefault(key, value)
        return batch

    def __repr__(self) -> str:
        return f"MediaCollate({self.text!r})"

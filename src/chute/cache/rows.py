"""One chunk's columns as numpy views over the mapped file, and one sample dict at a time.

Per-sample numbers are read through memoryviews of the Arrow buffers (indexing one gives a
Python int, faster than a numpy scalar, and nothing is copied); ``input_ids`` is a slice of the
mapped values; ``labels`` is rebuilt from the trained runs; ``truncated`` is read from Arrow's
bitmap in place. A reader keeps one ``ChunkRows`` per chunk it touched, holding views only.

Example:
    >>> rows = ChunkRows(cache.chunk(0), cache.source_paths)  # doctest: +SKIP
    >>> rows.sample(3)["labels"][:4]  # doctest: +SKIP
    array([-100, -100, -100, -100], dtype=int32)
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from chute.cache.schema import BASE_COLUMNS, IGNORE, MEDIA_COLUMNS, OPTIONAL_MEDIA_KEYS

__all__ = ["ChunkRows"]


class ChunkRows:
    """Numpy views over one chunk's columns (no copies), and one sample dict at a time."""

    __slots__ = (
        "batch",
        "extra",
        "file",
        "ids",
        "ids_off",
        "index",
        "line",
        "media",
        "n_img",
        "paths",
        "spans",
        "spans_off",
        "trunc_bits",
        "trunc_offset",
    )

    def __init__(self, batch: pa.RecordBatch, paths: list[str]):
        ids = batch.column("input_ids")
        spans = batch.column("label_spans")
        truncated = batch.column("truncated")
        self.batch = batch
        # Per-sample numbers are read through memoryviews of the mapped buffers: indexing one
        # gives a Python int directly (faster than a numpy scalar), and nothing is copied.
        self.ids_off = memoryview(ids.offsets.to_numpy())
        self.ids = ids.values.to_numpy()
        self.spans_off = memoryview(spans.offsets.to_numpy())
        self.spans = memoryview(spans.values.to_numpy())
        self.line = memoryview(batch.column("line").to_numpy())
        self.index = memoryview(batch.column("index").to_numpy())
        self.file = memoryview(batch.column("file").to_numpy())
        self.n_img = memoryview(batch.column("num_image_tokens").to_numpy())
        bitmap = truncated.buffers()[1]  # booleans are bits in Arrow: read them in place
        self.trunc_bits = memoryview(bitmap).cast("B") if bitmap is not None else None
        self.trunc_offset = truncated.offset
        self.media = [
            (name, batch.column(name), memoryview(batch.column(name).offsets.to_numpy()))
            for name in MEDIA_COLUMNS
            if batch.column(name).offsets[-1].as_py() > 0  # this chunk has some
        ]
        self.extra = {n: batch.column(n) for n in batch.schema.names if n not in BASE_COLUMNS}
        self.paths = paths

    def sample(self, j: int) -> dict[str, Any]:
        off = self.ids_off
        a, b = off[j], off[j + 1]
        ids = self.ids[a:b]
        labels = _ignored(b - a)
        off = self.spans_off
        s0, s1 = off[j], off[j + 1]
        spans = self.spans
        for i in range(s0, s1, 2):  # the trained runs: usually one per assistant turn
            x, y = spans[i], spans[i + 1]
            labels[x:y] = ids[x:y]
        bit = self.trunc_offset + j
        bits = self.trunc_bits
        out = {
            "input_ids": ids,
            "labels": labels,
            "length": b - a,
            "index": self.index[j],
            "path": self.paths[self.file[j]],
            "line": self.line[j],
            "images": [],
            "videos": [],
            "audios": [],
            "num_image_tokens": self.n_img[j],
            "truncated": bits is not None and bool((bits[bit >> 3] >> (bit & 7)) & 1),
        }
        for name, column, offsets in self.media:
            if offsets[j + 1] > offsets[j]:
                out[name] = [_media_item(item) for item in column[j].as_py()]
        for name, column in self.extra.items():
            out[name] = _value(column, j)
        return out


_IGNORED = np.full(1 << 16, IGNORE, dtype=np.int32)


def _ignored(n: int) -> np.ndarray:
    """A fresh int32 array of ``n`` times ``-100`` (a copy of a preallocated row: fast)."""
    global _IGNORED
    if n > len(_IGNORED):
        _IGNORED = np.full(max(n, 2 * len(_IGNORED)), IGNORE, dtype=np.int32)
    return _IGNORED[:n].copy()


def _value(column: pa.Array, j: int) -> Any:
    kind = column.type
    if pa.types.is_list(kind) and pa.types.is_primitive(kind.value_type):
        offsets = column.offsets
        return column.values.to_numpy(zero_copy_only=False)[
            offsets[j].as_py() : offsets[j + 1].as_py()
        ]
    return column[j].as_py()


def _media_item(item: dict[str, Any]) -> dict[str, Any]:
    for key in OPTIONAL_MEDIA_KEYS:
        if item.get(key) is None:
            item.pop(key, None)
    return item

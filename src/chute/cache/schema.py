r"""The columns of a cache chunk, and samples to and from them.

One row per sample:

=================  ===========================  ===============================================
column             Arrow type                   value
=================  ===========================  ===============================================
input_ids          list<uint16> or list<int32>  token ids; uint16 when every id fits
label_spans        list<int32>                  trained runs ``[start0, end0, start1, ...]``
length             int32                        tokens
num_image_tokens   int32                        image tokens
truncated          bool                         whether ``max_length`` cut the sample
file               int32                        the source file (index into the manifest's)
line               int64                        the 1-based line where the record begins
index              int64                        the record's index in the sources
images             list<struct>                 ``source``, ``path``, ``span``, ``num_tokens``,
videos, audios                                  ``size``, ``grid_thw``, ``seconds`` (audio),
                                                ``second_per_grid_t``, ``frame_spans``,
                                                ``timestamps`` (video) as in the recipe's sample
=================  ===========================  ===============================================

Columns a recipe's samples have only for some kinds of data, written when they do (so a cache of
plain SFT data is byte-identical to one built before they existed), and read back into each
sample like a stage's columns:

=================  ===========================  ===============================================
window             int32                        ``overflow="split"``: the window of the record
chosen_length      int32                        ``task="preference"``: where the rejected side
                                                starts in ``input_ids``
label              bool                         ``task="kto"``: the completion is desirable
=================  ===========================  ===============================================

Labels are not stored: chute's labels are ``input_ids`` where trained and ``-100`` elsewhere
(no shift), so the trained runs say everything. That is 8 bytes per trained run (one or a few
per sample) instead of 4 bytes per token; ``labels_from_spans`` rebuilds the array::

    input_ids   : 11 12 13 14 15 16 17 18
    label_spans : [3, 5, 6, 8]
    labels      : -100 -100 -100 14 15 -100 17 18

Example:
    >>> import numpy as np
    >>> ids = np.array([11, 12, 13, 14, 15, 16, 17, 18], dtype=np.int32)
    >>> labels = np.where(np.isin(np.arange(8), [3, 4, 6, 7]), ids, -100)
    >>> spans = trained_spans([ids], [labels])[1]
    >>> spans.tolist()
    [3, 5, 6, 8]
    >>> labels_from_spans(ids, spans).tolist()
    [-100, -100, -100, 14, 15, -100, 17, 18]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from chute.errors import CacheError

__all__ = [
    "BASE_COLUMNS",
    "IGNORE",
    "MEDIA_TYPE",
    "OPTIONAL_COLUMNS",
    "OPTIONAL_MEDIA_KEYS",
    "chunk_batch",
    "labels_from_spans",
    "schema_for",
    "token_dtype",
    "trained_spans",
]

IGNORE = -100
_MEDIA_ITEM = pa.struct(
    [
        ("source", pa.string()),
        ("path", pa.string()),
        ("span", pa.list_(pa.int32())),
        ("num_tokens", pa.int32()),
        ("size", pa.list_(pa.int32())),
        ("grid_thw", pa.list_(pa.int32())),
        ("seconds", pa.float64()),  # audio clips counted from their header
        # videos (format version 2): seconds per temporal group (Qwen2.5-VL's mRoPE); in
        # Qwen3-VL's layout each frame group's token span and time
        ("second_per_grid_t", pa.float64()),
        ("frame_spans", pa.list_(pa.list_(pa.int32()))),
        ("timestamps", pa.list_(pa.float64())),
        # a preference pair's media: where its tokens lie in the rejected side
        ("rejected_span", pa.list_(pa.int32())),
    ]
)
# Keys a media item has only when they apply (absent in the recipe's dict when null here, and in
# caches of format version 1, which had no such fields).
OPTIONAL_MEDIA_KEYS = (
    "seconds",
    "second_per_grid_t",
    "frame_spans",
    "timestamps",
    "rejected_span",
)
_MEDIA_KEYS = frozenset(_MEDIA_ITEM.field(i).name for i in range(_MEDIA_ITEM.num_fields))
MEDIA_TYPE = pa.list_(_MEDIA_ITEM)
MEDIA_COLUMNS = ("images", "videos", "audios")
BASE_COLUMNS = (
    "input_ids",
    "label_spans",
    "length",
    "num_image_tokens",
    "truncated",
    "file",
    "line",
    "index",
    *MEDIA_COLUMNS,
)
_OFFSET_LIMIT = 2**31 - 1
# Sample keys stored only when the samples have them (see the module docstring).
OPTIONAL_COLUMNS = {"window": pa.int32(), "chosen_length": pa.int32(), "label": pa.bool_()}


def token_dtype(vocab_size: int, extra_ids: Sequence[int | None] = ()) -> np.dtype:
    """``uint16`` when every id (the vocabulary and any extra media id) fits, else ``int32``.

    Example:
        >>> token_dtype(32_000), token_dtype(151_669), token_dtype(32_000, [-200])
        (dtype('uint16'), dtype('int32'), dtype('int32'))
    """
    ids = [vocab_size - 1, *(i for i in extra_ids if i is not None)]
    if min(ids) >= 0 and max(ids) <= np.iinfo(np.uint16).max:
        return np.dtype(np.uint16)
    return np.dtype(np.int32)


def schema_for(dtype: np.dtype, extra: Mapping[str, pa.DataType] | None = None) -> pa.Schema:
    """The Arrow schema of a chunk with token ids of ``dtype`` (and a stage's extra columns)."""
    fields = [
        ("input_ids", pa.list_(pa.from_numpy_dtype(dtype))),
        ("label_spans", pa.list_(pa.int32())),
        ("length", pa.int32()),
        ("num_image_tokens", pa.int32()),
        ("truncated", pa.bool_()),
        ("file", pa.int32()),
        ("line", pa.int64()),
        ("index", pa.int64()),
        *((name, MEDIA_TYPE) for name in MEDIA_COLUMNS),
        *((extra or {}).items()),
    ]
    return pa.schema(fields, metadata={"chute.cache": "1"})


def trained_spans(
    ids: Sequence[np.ndarray], labels: Sequence[np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """``(offsets, values)`` of the trained runs of many samples, in one vectorised pass.

    Raises:
        CacheError: a label is neither ``-100`` nor the token id at its position (chute's
            recipes never make such labels; a cache cannot represent them).
    """
    n = len(ids)
    lengths = np.fromiter((len(x) for x in ids), dtype=np.int64, count=n)
    starts = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=starts[1:])
    if starts[-1] == 0:
        return np.zeros(n + 1, dtype=np.int32), np.empty(0, dtype=np.int32)
    all_ids = np.concatenate(ids)
    all_labels = np.concatenate(labels)
    trained = all_labels != IGNORE
    if not np.array_equal(all_labels[trained], all_ids[trained]):
        bad = int(np.flatnonzero(trained & (all_labels != all_ids))[0])
        raise CacheError(
            f"label {int(all_labels[bad])} at token {bad} is neither -100 nor its token id "
            f"{int(all_ids[bad])}; the cache stores labels as trained runs of input_ids"
        )
    begin = starts[:-1][lengths > 0]
    end = starts[1:][lengths > 0]
    before = np.concatenate(([False], trained[:-1]))
    before[begin] = False
    after = np.concatenate((trained[1:], [False]))
    after[end - 1] = False
    run_start = np.flatnonzero(trained & ~before)
    run_end = np.flatnonzero(trained & ~after) + 1
    owner = np.searchsorted(starts, run_start, side="right") - 1
    local = np.empty(2 * len(run_start), dtype=np.int32)
    local[0::2] = run_start - starts[owner]
    local[1::2] = run_end - starts[owner]
    counts = np.bincount(owner, minlength=n)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(2 * counts, out=offsets[1:])
    return offsets, local


def labels_from_spans(ids: np.ndarray, spans: np.ndarray | Sequence[int]) -> np.ndarray:
    """The ``labels`` array (int32, ``-100`` outside the trained runs) of a cached sample."""
    labels = np.full(len(ids), IGNORE, dtype=np.int32)
    it = iter(np.asarray(spans).tolist())
    for a, b in zip(it, it, strict=True):
        labels[a:b] = ids[a:b]
    return labels


def _list_array(lengths: np.ndarray, values: np.ndarray, what: str) -> pa.Array:
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if offsets[-1] > _OFFSET_LIMIT:
        raise CacheError(
            f"a chunk holds {int(offsets[-1]):,} {what}, more than an Arrow list column takes "
            f"(2**31 - 1); lower cache.chunk_size"
        )
    return pa.ListArray.from_arrays(numbers(offsets.astype(np.int32)), numbers(values))


def numbers(values: np.ndarray) -> pa.Array:
    """The Arrow array of a 1-d numeric or bool numpy array, without copying numbers.

    Built from its buffers: ``pa.array`` would first check for pandas objects, which imports
    pandas (0.2 s in every worker process that writes a chunk).

    Example:
        >>> numbers(np.array([1, 2], dtype=np.int32)).to_pylist()
        [1, 2]
    """
    values = np.ascontiguousarray(values)
    if values.dtype == np.bool_:
        data = pa.py_buffer(np.packbits(values, bitorder="little"))
        return pa.Array.from_buffers(pa.bool_(), len(values), [None, data])
    return pa.Array.from_buffers(
        pa.from_numpy_dtype(values.dtype), len(values), [None, pa.py_buffer(values)]
    )


def integers(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """An integer Arrow column as numpy, read in place from its buffers.

    ``to_numpy()`` would do, but pyarrow imports pandas for it where pandas is installed (0.2 s
    in every process that reads a chunk's columns). Columns with nulls, or not integers, take
    ``to_numpy``.

    Example:
        >>> integers(numbers(np.array([5, 6, 7], dtype=np.int32)).slice(1)).tolist()
        [6, 7]
    """
    parts = []
    for chunk in getattr(column, "chunks", [column]):  # a ChunkedArray or an Array
        if chunk.null_count or not pa.types.is_integer(chunk.type):
            parts.append(chunk.to_numpy(zero_copy_only=False))
            continue
        dtype = np.dtype(
            f"{'i' if pa.types.is_signed_integer(chunk.type) else 'u'}{chunk.type.byte_width}"
        )
        data = chunk.buffers()[1]
        parts.append(
            np.frombuffer(data, dtype=dtype, count=len(chunk), offset=chunk.offset * dtype.itemsize)
        )
    return np.concatenate(parts) if len(parts) != 1 else parts[0]


def chunk_batch(
    samples: Sequence[Mapping[str, Any]],
    dtype: np.dtype,
    file_starts: np.ndarray,
    extra: Mapping[str, pa.Array] | None = None,
) -> pa.RecordBatch:
    """One record batch of ``samples`` (recipe samples of one chunk, in record order).

    Args:
        samples: the recipe's sample dicts.
        dtype: the token id dtype (``token_dtype``).
        file_starts: the global index of each source file's first record (provenance).
        extra: stages' columns, one value per sample each.
    """
    n = len(samples)
    extra = {**_optional_columns(samples), **(extra or {})}
    schema = schema_for(dtype, {name: array.type for name, array in extra.items()})
    ids = [s["input_ids"] for s in samples]
    lengths = np.fromiter((len(x) for x in ids), dtype=np.int64, count=n)
    flat = np.concatenate(ids) if n else np.empty(0, dtype=np.int32)
    info = np.iinfo(dtype)
    if flat.size and (int(flat.min()) < info.min or int(flat.max()) > info.max):
        raise CacheError(
            f"token id {int(flat.min()) if int(flat.min()) < info.min else int(flat.max())} "
            f"does not fit the cache's {np.dtype(dtype).name} ids (chosen from the vocabulary "
            f"size); this is a bug in the recipe or the tokenizer's vocab_size"
        )
    span_offsets, span_values = trained_spans(ids, [s["labels"] for s in samples])
    index = np.fromiter((s["index"] for s in samples), dtype=np.int64, count=n)
    columns: dict[str, pa.Array] = {
        "input_ids": _list_array(lengths, flat.astype(dtype, copy=False), "tokens"),
        "label_spans": pa.ListArray.from_arrays(numbers(span_offsets), numbers(span_values)),
        "length": numbers(lengths.astype(np.int32)),
        "num_image_tokens": numbers(
            np.fromiter((s["num_image_tokens"] for s in samples), dtype=np.int32, count=n)
        ),
        "truncated": numbers(np.fromiter((s["truncated"] for s in samples), bool, count=n)),
        "file": numbers((np.searchsorted(file_starts, index, side="right") - 1).astype(np.int32)),
        "line": numbers(np.fromiter((s["line"] for s in samples), dtype=np.int64, count=n)),
        "index": numbers(index),
    }
    for name in MEDIA_COLUMNS:
        items = [s.get(name) or [] for s in samples]
        unknown = {k for per in items for item in per for k in item} - _MEDIA_KEYS
        if unknown:
            raise CacheError(
                f"{name} entries hold {sorted(unknown)}, which the cache format has "
                f"no field for; the cache would lose them (a chute bug: add them to MEDIA_TYPE)"
            )
        if any(items):
            columns[name] = pa.array(items, type=MEDIA_TYPE)
        else:  # no media of this kind (text data): n empty lists, without pa.array's pandas
            empty = pa.nulls(0, MEDIA_TYPE.value_type)
            columns[name] = pa.ListArray.from_arrays(numbers(np.zeros(n + 1, np.int32)), empty)
    for name, array in extra.items():
        if name in columns:
            raise CacheError(f"stage column {name!r} would replace a column of the cache")
        if len(array) != n:
            raise CacheError(f"stage column {name!r} has {len(array)} values for {n} samples")
        columns[name] = array
    return pa.RecordBatch.from_arrays([columns[f.name] for f in schema], schema=schema)


def _optional_columns(samples: Sequence[Mapping[str, Any]]) -> dict[str, pa.Array]:
    """The ``OPTIONAL_COLUMNS`` the samples carry (all of them or none: one recipe made them)."""
    if not samples:
        return {}
    first = samples[0]
    out = {}
    for name, kind in OPTIONAL_COLUMNS.items():
        if name in first:
            values = [s.get(name) for s in samples]
            if any(v is None for v in values):
                raise CacheError(f"some samples of a chunk have {name!r} and some do not")
            out[name] = pa.array(values, type=kind)
    return out

"""What the loader accepts as a sample, checked once, with typed errors for everything else.

A sample is a mapping with ``input_ids`` (a 1-D sequence of token ids), optionally ``labels``
(same length; -100 masks a position; default: ``input_ids``), and whatever else a recipe adds
(``images``, ``path``, ``line``, ...). Without a recipe, each record of a JSONL source must be
such a mapping already (pre-tokenized data)::

    {"input_ids": [1, 2, 3], "labels": [-100, 2, 3]}

Example:
    >>> s = check_sample({"input_ids": [1, 2, 3], "labels": [-100, 2, 3]})
    >>> type(s["input_ids"]).__name__, s["labels"].tolist()
    ('ndarray', [-100, 2, 3])
    >>> check_sample({"input_ids": [1.5]})
    Traceback (most recent call last):
    ...
    chute.errors.SampleError: wrong_type: input_ids must hold integers, got float64 (field 'input_ids')
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from chute.errors import SampleError
from chute.sources.record import Record

__all__ = [
    "as_tokenized",
    "bad_values",
    "check_sample",
    "check_values",
    "describe_item",
    "location_of",
]


def as_tokenized(item: Any) -> Any:
    """The recipe used when there is none: the record's JSON (or the item itself) is the sample."""
    if isinstance(item, Record):
        data = item.data
        if not isinstance(data, Mapping):
            raise SampleError(
                "not_an_object",
                f"expected a JSON object with input_ids, got {type(data).__name__}",
            )
        return data
    return item


def location_of(item: Any) -> tuple[str | None, int | None]:
    """``(path, line)`` of a record or of a sample that carries them, else ``(None, None)``."""
    if isinstance(item, Record):
        return item.path, item.line
    if isinstance(item, Mapping):
        path, line = item.get("path"), item.get("line")
        return (str(path) if path is not None else None), (
            int(line) if isinstance(line, int | np.integer) else None
        )
    return None, None


def check_sample(sample: Any) -> dict[str, Any]:
    """``sample`` with its token fields as 1-D integer arrays, their shapes checked.

    A sample whose fields already are such arrays is returned as is (no copy: the hot path of
    in-memory and cached data); otherwise a shallow copy holds the converted arrays. Token
    values (no negative ids; labels >= 0 or -100) are checked for a whole batch at once by
    ``bad_values``; ``check_values`` does it for one sample.

    Raises:
        SampleError: ``missing_field``, ``wrong_type`` or ``empty_sample``, naming the field.
    """
    if type(sample) is not dict and not isinstance(sample, Mapping):
        raise SampleError(
            "wrong_type", f"a sample must be a mapping with input_ids, got {type(sample).__name__}"
        )
    raw = sample.get("input_ids")
    if raw is None:
        raise SampleError(
            "missing_field",
            f"the sample has no input_ids (keys: {sorted(map(str, sample))[:8]})",
            field="input_ids",
        )
    ids = (
        raw
        if type(raw) is np.ndarray and raw.ndim == 1 and raw.dtype.kind in "iu"
        else _token_array(raw, "input_ids")
    )
    if not len(ids):
        raise SampleError("empty_sample", "input_ids is empty", field="input_ids")
    raw_labels = sample.get("labels")
    labels: Any = raw_labels
    if raw_labels is not None:
        if not _is_token_array(raw_labels):
            labels = _token_array(raw_labels, "labels")
        if len(labels) != len(ids):
            raise SampleError(
                "wrong_type",
                f"labels has {len(labels)} tokens but input_ids has {len(ids)}; they must align",
                field="labels",
            )
    if ids is raw and labels is raw_labels and type(sample) is dict:
        return sample
    out = dict(sample)
    out["input_ids"] = ids
    if labels is not None:
        out["labels"] = labels
    return out


def check_values(sample: Mapping[str, Any]) -> None:
    """Raise ``wrong_type`` for a negative id, or a label below 0 other than -100 (masked)."""
    ids, labels = sample["input_ids"], sample.get("labels")
    if int(ids.min()) < 0:
        value = int(ids[ids < 0][0])
        raise SampleError(
            "wrong_type", f"input_ids holds {value}; token ids are >= 0", field="input_ids"
        )
    if labels is not None and labels is not ids and int(labels.min()) < 0:
        wrong = labels[(labels < 0) & (labels != -100)]
        if wrong.size:
            raise SampleError(
                "wrong_type",
                f"labels holds {int(wrong[0])}; labels are token ids >= 0, or -100 to mask",
                field="labels",
            )


def bad_values(samples: list[dict[str, Any]]) -> list[tuple[int, SampleError]]:
    """``(position, error)`` of each sample with invalid token values (see ``check_values``).

    One vectorised pass over the whole batch when all values are fine (the common case).
    """
    if not samples:
        return []
    low = int(np.concatenate([s["input_ids"] for s in samples]).min())
    masked = [
        s["labels"]
        for s in samples
        if s.get("labels") is not None and s["labels"] is not s["input_ids"]
    ]
    if masked:
        labels = np.concatenate(masked)
        if int(labels.min()) < 0 and _odd_negatives(labels):
            low = -1
    if low >= 0:
        return []
    found = []
    for j, sample in enumerate(samples):
        try:
            check_values(sample)
        except SampleError as error:
            found.append((j, error))
    return found


def _odd_negatives(labels: np.ndarray) -> bool:
    return bool(((labels < 0) & (labels != -100)).any())


def _is_token_array(value: Any) -> bool:
    return type(value) is np.ndarray and value.ndim == 1 and value.dtype.kind in "iu"


def _token_array(value: Any, name: str) -> np.ndarray:
    if isinstance(value, np.ndarray):
        arr = value
    else:
        if isinstance(value, str | bytes | Mapping) or not hasattr(value, "__len__"):
            raise SampleError(
                "wrong_type",
                f"{name} must be a list of ints, got {type(value).__name__}",
                field=name,
            )
        try:
            arr = np.asarray(value)
        except (ValueError, TypeError) as exc:
            raise SampleError("wrong_type", f"{name} is not an array: {exc}", field=name) from None
    if arr.ndim != 1:
        raise SampleError(
            "wrong_type", f"{name} must be 1-D, got shape {tuple(arr.shape)}", field=name
        )
    if arr.size == 0:
        return arr.astype(np.int32)
    if arr.dtype.kind not in "iu":
        raise SampleError("wrong_type", f"{name} must hold integers, got {arr.dtype}", field=name)
    return arr


def describe_item(item: Any, limit: int = 200) -> str:
    """A short text of a rejected item for a rejects file when it is not a raw record."""
    text = repr(item)
    return text if len(text) <= limit else text[:limit] + "..."

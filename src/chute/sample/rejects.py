"""The rejects file: one JSON line per rejected record, with where it is, why, and its text.

``chute validate --rejects``, ``chute preprocess`` (``DIR/rejects.jsonl``) and the Loader's
``rejects=`` all write this shape, so one script reads the rejects of any entry point.
"""

from __future__ import annotations

from typing import Any

from chute.errors import SampleError
from chute.sample.contract import describe_item
from chute.sources.record import Record

__all__ = ["MAX_REJECT_RAW", "reject_entry"]

# A rejects file keeps each bad record's text so it can be fixed; beyond this, it is cut.
MAX_REJECT_RAW = 1 << 20


def _utf8(text: str) -> str:
    r"""``text`` as JSON can hold it: a name that is not UTF-8 shows its bytes as ``\xe9``.

    Such a name (a tar member's from a latin-1 system) holds its bytes as lone surrogates
    (``surrogateescape``), which JSON cannot encode.
    """
    if text.isascii():
        return text
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def reject_entry(record: Record, error: SampleError) -> dict[str, Any]:
    """One line of a rejects file: where the record is, why it was rejected, and its text.

    Only the first ``MAX_REJECT_RAW`` bytes are read: a record rejected as too large stays
    unread beyond them.
    """
    raw = record.head(MAX_REJECT_RAW)
    size = record.size
    if size is None:
        size = len(record.raw)
    entry = {
        "path": _utf8(record.path),
        "line": record.line,
        "index": record.index,
        "reason": error.kind,
        "message": _utf8(error.message),
        "field": error.field,
        "raw": raw.decode("utf-8", errors="replace"),
    }
    if record.element is not None:
        entry["element"] = record.element
    if record.window is not None:
        entry["window"] = record.window
    if size > MAX_REJECT_RAW:
        entry["raw_truncated_from"] = size
    return entry


def item_reject_entry(item: Any, index: int, error: SampleError) -> dict[str, Any]:
    """``reject_entry`` of any source's item: a ``Record``, or an in-memory one (a dict)."""
    if isinstance(item, Record):
        return reject_entry(item, error)
    return {
        "path": error.path,
        "line": error.line,
        "index": index,
        "reason": error.kind,
        "message": _utf8(error.message),
        "field": error.field,
        "raw": None if item is None else describe_item(item),
    }

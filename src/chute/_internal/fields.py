"""Field-by-field differences of nested config and fingerprint values.

Every mismatch message chute prints (a stale cache, a resume state from another run, a mixture
that changed) names the differing fields with both values; this is where they are found.

Example:
    >>> diff_fields({"a": 1, "b": {"c": [1, 2]}}, {"a": 1, "b": {"c": [1, 3]}})
    [('b.c[1]', 2, 3)]
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["diff_fields"]


def diff_fields(a: Any, b: Any, prefix: str = "") -> list[tuple[str, Any, Any]]:
    """Every leaf where ``a`` and ``b`` differ, as ``(dotted.path, a_value, b_value)``."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        out: list[tuple[str, Any, Any]] = []
        for key in sorted(set(a) | set(b), key=str):
            path = f"{prefix}.{key}" if prefix else str(key)
            out += diff_fields(a.get(key, "<absent>"), b.get(key, "<absent>"), path)
        return out
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        if len(a) != len(b):
            return [(f"{prefix} (length)", len(a), len(b))]
        out = []
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            out += diff_fields(x, y, f"{prefix}[{i}]")
        return out
    return [] if a == b else [(prefix, a, b)]

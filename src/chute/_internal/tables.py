"""Plain aligned text tables, readable in logs and terminals (no rich, no colour).

Example:
    >>> print(table(["name", "count"], [["a", 1200], ["bb", 3]]))
    name  count
    ----  -----
    a     1,200
    bb        3
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["rate", "table"]


def rate(value: float) -> str:
    """A rate with the precision a reader needs: two significant digits below 10, whole above.

    Example:
        >>> rate(0.051928), rate(2.134), rate(15.3), rate(4431.7)
        ('0.052', '2.1', '15', '4,432')
    """
    if value >= 10 or value == 0:
        return f"{value:,.0f}"
    return f"{value:.2g}" if value >= 1e-4 else f"{value:.1e}"


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], title: str | None = None) -> str:
    """A plain aligned text table (numbers right-aligned), readable in logs and terminals."""
    cells = [[_fmt(v) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    numeric = [
        all(_is_number(row[i]) for row in rows) if rows else False for i in range(len(headers))
    ]

    def line(values: Sequence[str]) -> str:
        parts = [
            v.rjust(w) if num else v.ljust(w)
            for v, w, num in zip(values, widths, numeric, strict=True)
        ]
        return "  ".join(parts).rstrip()

    out = [title] if title else []
    out += [line(list(headers)), line(["-" * w for w in widths])]
    out += [line(row) for row in cells]
    return "\n".join(out)


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _fmt(v: Any) -> str:
    if isinstance(v, float):  # the precision given, at most 3 decimals: 13.8, not 13.800
        return f"{v:,.3f}".rstrip("0").rstrip(".") if abs(v) < 1000 else f"{v:,.0f}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return str(v)

"""Padding efficiency of a plan: real tokens / tokens in the padded rows, over a whole epoch.

For unpacked plans each batch is padded to its longest sample (rounded up to
``pad_to_multiple_of``), as ``Collate`` does; for packed plans each row is ``max_length`` wide,
as ``PackedCollate`` makes it by default::

    batch [812, 97, 430]  ->  3 rows x 812 = 2436 padded, 1339 real   -> 55.0 %
    row   [812 | 97 | 430 | 661]  ->  1 row x 2048 = 2048, 2000 real  -> 97.7 %

Samples longer than ``max_length`` count as ``max_length`` tokens (what a truncating collate
feeds) and as ``truncated``; ``dropped`` counts samples of the order the plan never deals.

Example:
    >>> from chute.plan import RandomPlanner
    >>> plan = RandomPlanner(batch_size=2, shuffle=False).build(4, epoch=0, world_size=1)
    >>> report = padding_report(plan, np.array([4, 2, 3, 3]))
    >>> report.tokens, report.padded, round(report.efficiency, 3)
    (12, 14, 0.857)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from chute.plan.base import Plan
from chute.plan.shard import BatchPlan
from chute.plan.table import TablePlan

__all__ = ["PaddingReport", "padding_report"]


@dataclass
class PaddingReport:
    """What one epoch of a plan feeds: tokens, padded tokens, rows, steps, dropped, truncated."""

    samples: int  # samples dealt (pieces counted once per sample)
    tokens: int  # real tokens fed
    padded: int  # tokens in padded rows (real + padding)
    rows: int  # rows over all ranks
    steps: int  # batches per rank (optimizer micro-steps)
    truncated: int
    dropped: int

    @property
    def efficiency(self) -> float:
        return self.tokens / self.padded if self.padded else 1.0

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "efficiency": round(self.efficiency, 6)}


def _round_up(values: np.ndarray, multiple: int) -> np.ndarray:
    return -(-values // multiple) * multiple


def _flat(plan: Plan) -> tuple[np.ndarray, np.ndarray]:
    """``(ids, bounds)``: every batch of every rank, step-major, as one array and offsets."""
    if isinstance(plan, TablePlan) and plan.row_bounds is None:
        return plan.ids.astype(np.int64), plan.batch_bounds
    w = plan.world_size
    parts: list[np.ndarray] = []
    if isinstance(plan, BatchPlan) and plan.full_steps:
        full = plan.full_steps * plan.step
        parts.append(plan.order.take(np.arange(full, dtype=np.int64)))
        sizes = [np.full(plan.full_steps * w, plan.batch_size, dtype=np.int64)]
        first = plan.full_steps
    else:
        sizes, first = [], 0
    tail = [plan.batch(r, k) for k in range(first, plan.num_batches) for r in range(w)]
    parts += tail
    sizes.append(np.array([len(t) for t in tail], dtype=np.int64))
    ids = np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)
    bounds = np.concatenate([[0], np.cumsum(np.concatenate(sizes))]).astype(np.int64)
    return ids, bounds


def padding_report(
    plan: Plan,
    lengths: np.ndarray,
    *,
    max_length: int | None = None,
    pad_to_multiple_of: int | None = None,
) -> PaddingReport:
    """Tokens and padding of one epoch of ``plan`` (all ranks) given per-sample ``lengths``.

    Args:
        plan: any plan; packed ``TablePlan``s are measured by rows.
        lengths: tokens per global sample id (e.g. ``Lengths.length``).
        max_length: longer samples count as this many tokens and as truncated (packed plans
            default to their row length).
        pad_to_multiple_of: unpacked rows are padded to a multiple of this.
    """
    lengths = np.asarray(lengths)
    multiple = pad_to_multiple_of or 1
    dropped = len(plan.undealt) if isinstance(plan, TablePlan) else 0
    if isinstance(plan, TablePlan) and plan.row_bounds is not None:
        width = int(max_length or plan.stats.get("max_length") or 0)
        ids = plan.ids.astype(np.int64)
        if plan.spans is not None:
            lens = (plan.spans[1] - plan.spans[0]).astype(np.int64)
            samples = int(np.count_nonzero(plan.spans[0] == 0))  # first pieces
        else:
            lens = lengths[ids].astype(np.int64)
            samples = len(ids)
        truncated = int(np.count_nonzero(lens > width)) if width else 0
        if width:
            lens = np.minimum(lens, width)
        rows = len(plan.row_bounds) - 1
        if not width:  # no row length known: rows padded to their own content
            width_total = int(np.add.reduceat(lens, plan.row_bounds[:-1]).max()) if rows else 0
        else:
            width_total = width
        tokens = int(lens.sum())
        return PaddingReport(
            samples, tokens, rows * width_total, rows, plan.num_batches, truncated, dropped
        )
    ids, bounds = _flat(plan)
    lens = lengths[ids].astype(np.int64)
    truncated = 0
    if max_length is not None:
        truncated = int(np.count_nonzero(lens > max_length))
        lens = np.minimum(lens, max_length)
    counts = np.diff(bounds)
    nonempty = counts > 0
    longest = np.zeros(len(counts), dtype=np.int64)
    if lens.size:
        longest[nonempty] = np.maximum.reduceat(lens, bounds[:-1][nonempty])
    padded = int((counts * _round_up(longest, multiple)).sum())
    if isinstance(plan, BatchPlan) and plan.remainder == "drop":
        dropped = len(plan.order) - len(ids)
    return PaddingReport(
        len(ids), int(lens.sum()), padded, int(counts.sum()), plan.num_batches, truncated, dropped
    )

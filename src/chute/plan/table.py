"""``TablePlan``: a plan held as flat arrays, for strategies that decide every batch up-front.

Length-aware plans (grouped, budget, packed) cannot compute batch ``k`` from a position alone;
they build the whole epoch once (numpy, no Python object per sample) into three arrays::

    ids          [ 7 2 9 | 4 1 | 8 0 3 6 | 5 ]         sample ids in dealing order
    row_bounds   [0     3     5         9  10]         packed rows (None: one sample per row)
    batch_bounds [0   1   2   4]                       rows of batch b = k * world_size + rank

    step 0:  rank 0 -> batch 0 = row 0 = [7 2 9]        rank 1 -> batch 1 = row 1 = [4 1]
    step 1:  rank 0 -> batch 2 = rows 2, 3 = [8 0 3 6] [5]   rank 1 -> batch 3 = (empty)

Batches are stored step-major, so the batches of steps ``>= k`` are one suffix of ``ids``:
``remaining(k)`` is that suffix (plus any ids the plan dropped) and costs nothing to find.
With ``spans`` (the ``split`` packing) each entry of ``ids`` is a piece ``[start, end)`` of a
sample's tokens, and one sample may appear in consecutive rows.

Example:
    >>> plan = TablePlan(IdOrder(np.arange(5)), 2, ids=np.array([3, 1, 4, 0, 2]),
    ...                  batch_bounds=np.array([0, 2, 3, 4, 5]))
    >>> plan.num_batches, plan.batch(0, 0).tolist(), plan.batch(1, 1).tolist()
    (2, [3, 1], [2])
    >>> plan.remaining(1).materialize().tolist()
    [0, 2]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from chute.errors import ConfigError
from chute.plan.base import Plan, check_positive
from chute.plan.order import IdOrder, Order

__all__ = ["BatchLayout", "TablePlan", "compact_ids", "even_bounds", "gather_segments"]

BatchLayout = tuple[np.ndarray, np.ndarray | None, np.ndarray | None]


class TablePlan(Plan):
    """Batches read from flat tables (see the module docstring).

    Args:
        order: the ids this plan was built over (its ``remaining`` falls back to them).
        world_size: number of ranks.
        ids: sample ids in dealing order (step by step, rank by rank within a step).
        batch_bounds: offsets of each batch into the rows (or into ``ids`` without rows);
            ``num_batches * world_size + 1`` entries.
        row_bounds: offsets of each packed row into ``ids``; ``None``: one sample per row.
        spans: ``(starts, ends)``, the token range of each entry of ``ids`` (split packing).
        undealt: ids of the order that the plan never deals (dropped), for ``remaining``.
        stats: counts the planner recorded (dropped, truncated, ...), for reports.
    """

    def __init__(
        self,
        order: Order,
        world_size: int,
        *,
        ids: np.ndarray,
        batch_bounds: np.ndarray,
        row_bounds: np.ndarray | None = None,
        spans: tuple[np.ndarray, np.ndarray] | None = None,
        undealt: np.ndarray | None = None,
        stats: dict[str, Any] | None = None,
    ):
        self.order = order
        self.world_size = check_positive("world_size", world_size)
        self.ids = compact_ids(ids)
        self.batch_bounds = np.asarray(batch_bounds, dtype=np.int64)
        self.row_bounds = None if row_bounds is None else np.asarray(row_bounds, dtype=np.int64)
        self.spans = spans
        self.undealt = np.empty(0, dtype=np.int64) if undealt is None else compact_ids(undealt)
        self.stats = dict(stats or {})
        batches = len(self.batch_bounds) - 1
        if batches < 0 or batches % self.world_size:
            raise ConfigError(
                f"internal error: {batches} batches cannot be dealt evenly to "
                f"{self.world_size} ranks"
            )
        self._num_batches = batches // self.world_size

    @property
    def num_batches(self) -> int:
        return self._num_batches

    @property
    def packed(self) -> bool:
        """Whether batches are made of packed rows (several samples per row)."""
        return self.row_bounds is not None

    def _id_range(self, b: int) -> tuple[int, int]:
        lo, hi = int(self.batch_bounds[b]), int(self.batch_bounds[b + 1])
        if self.row_bounds is not None:
            return int(self.row_bounds[lo]), int(self.row_bounds[hi])
        return lo, hi

    def batch(self, rank: int, k: int) -> np.ndarray:
        self.check_position(rank, k)
        lo, hi = self._id_range(k * self.world_size + rank)
        return self.ids[lo:hi].astype(np.int64)

    def batches(self, rank: int, start: int, stop: int) -> list[np.ndarray]:
        if not 0 <= start <= stop <= self.num_batches:
            raise IndexError(f"batches must lie in [0, {self.num_batches}], got {start}..{stop}")
        return [self.batch(rank, k) for k in range(start, stop)]

    def layout(self, rank: int, k: int) -> BatchLayout:
        """``(ids, rows, spans)`` of batch ``k`` of ``rank``.

        ``rows`` is the number of samples in each packed row (``None`` when unpacked);
        ``spans`` the ``(n, 2)`` token range ``[start, end)`` of each id (``None`` unless split).
        """
        self.check_position(rank, k)
        b = k * self.world_size + rank
        lo, hi = self._id_range(b)
        ids = self.ids[lo:hi].astype(np.int64)
        rows = None
        if self.row_bounds is not None:
            r0, r1 = int(self.batch_bounds[b]), int(self.batch_bounds[b + 1])
            rows = np.diff(self.row_bounds[r0 : r1 + 1])
        spans = None
        if self.spans is not None:
            spans = np.stack([self.spans[0][lo:hi], self.spans[1][lo:hi]], axis=1)
        return ids, rows, spans

    def remaining(self, consumed: int) -> Order:
        """The ids dealt at steps ``>= consumed`` (each once, in dealing order), then dropped ids.

        With split packing, a sample cut across the boundary is owed whole: its first piece
        was consumed, the continuation deals it again from its start.
        """
        if not 0 <= consumed <= self.num_batches:
            raise ConfigError(
                f"consumed batches must be in [0, {self.num_batches}], got {consumed}"
            )
        if consumed == self.num_batches:
            return IdOrder(np.empty(0, dtype=np.int64))
        lo, _ = self._id_range(consumed * self.world_size)
        rest = self.ids[lo:].astype(np.int64)
        if self.spans is not None and rest.size:
            _, first = np.unique(rest, return_index=True)
            rest = rest[np.sort(first)]
        return IdOrder(np.concatenate([rest, self.undealt.astype(np.int64)]))

    def describe(self) -> dict[str, Any]:
        return {
            "world_size": self.world_size,
            "num_batches": self.num_batches,
            "samples": len(self.ids),
            "rows": None if self.row_bounds is None else len(self.row_bounds) - 1,
            "order": self.order.describe(),
            **self.stats,
        }


def compact_ids(ids: np.ndarray) -> np.ndarray:
    """``ids`` as int32 when every id fits (half the memory of a 100M-sample plan), else int64.

    Example:
        >>> compact_ids(np.array([3, 2**31 - 1])).dtype.name
        'int32'
    """
    ids = np.asarray(ids)
    if ids.dtype == np.int32 or (ids.size and int(ids.max()) >= 2**31):
        return ids
    return ids.astype(np.int32)


def gather_segments(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Positions ``starts[i] .. starts[i] + lengths[i] - 1`` for every ``i``, concatenated.

    Example:
        >>> gather_segments(np.array([5, 0]), np.array([2, 3])).tolist()
        [5, 6, 0, 1, 2]
    """
    starts = np.asarray(starts, dtype=np.int64)
    lengths = np.asarray(lengths, dtype=np.int64)
    total = int(lengths.sum())
    if total == 0:
        return np.empty(0, dtype=np.int64)
    offsets = np.cumsum(lengths) - lengths  # where each segment begins in the output
    return np.repeat(starts - offsets, lengths) + np.arange(total, dtype=np.int64)


def even_bounds(count: int, world_size: int, batch_size: int, drop_last: bool) -> np.ndarray:
    """Batch bounds over ``count`` units dealt in steps of ``world_size * batch_size``.

    Full steps give every rank ``batch_size`` units; the last partial step is split so ranks
    differ by at most one (``drop_last``: left out). Returns ``num_batches * world_size + 1``
    offsets, step-major.

    Example:
        >>> even_bounds(7, 2, 2, drop_last=False).tolist()
        [0, 2, 4, 6, 7]
    """
    step = world_size * batch_size
    full, rest = divmod(count, step)
    sizes = np.full(full * world_size, batch_size, dtype=np.int64)
    if rest and not drop_last:
        q, extra = divmod(rest, world_size)
        last = q + (np.arange(world_size) < extra)
        sizes = np.concatenate([sizes, last.astype(np.int64)])
    return np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)

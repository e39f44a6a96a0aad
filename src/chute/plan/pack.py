"""Bin packing for packed rows: best-fit decreasing in O(n log n), and split packing.

**Best-fit decreasing** (BFD): take samples longest first; put each into the open row with the
least room that still fits it, or open a new row. It is within 11/9 of the optimal row count
(plus a constant), and in practice within a fraction of a percent of the lower bound
``ceil(tokens / max_length)`` on instruction data, where short samples fill the gaps.

A sample-by-sample Python loop would take minutes for 10M samples. Lengths are integers in
``[1, max_length]``, so samples are processed *by length*, and rows *by remaining room*: all
``k`` samples of length ``L`` go to the rows of the smallest room ``c >= L`` first. Exact BFD puts
consecutive equal samples into the same row until it is full (its room shrinks to ``c - L``,
which is then the best fit), so each row of room ``c`` takes ``q = c // L`` of them and is left
with ``c - q L < L``. That is one vectorised step per (length, room) pair instead of one per
sample::

    room -> rows      {2048: -, 300: [r4, r9], 120: [r2]}      samples of length 100, k = 5
    best fit: 120 -> r2 takes 1 (room 20); next best: 300 -> r4, r9 take 3 each ... 4 left: done

The result is the same as the sample-by-sample algorithm (tested against it).

**Split packing** (pretraining text): concatenate the samples and cut the stream every
``max_length`` tokens; a sample crossing a cut becomes two pieces in consecutive rows.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from chute.plan.bulk import side_tasks

__all__ = [
    "RowLayout",
    "best_fit_decreasing",
    "layout_rows",
    "pack_rows",
    "pack_sorted",
    "pack_spread",
    "radix_argsort",
    "split_rows",
]

# Items placed per step of ``pack_sorted``'s writing: its temporaries stay a few MB.
_WRITE = 1 << 18
# Writes of fewer items than this run in the packing loop itself (a thread's hand-off costs
# more than placing them).
_WRITE_INLINE = 1 << 14


def radix_argsort(keys: np.ndarray) -> np.ndarray:
    """A stable argsort of non-negative integer keys, by 16-bit radix passes when they fit.

    numpy sorts 16-bit keys by radix (linear time) but wider ones by timsort; two 16-bit passes
    (low half, then high half, both stable) order keys below 2**32 about 3x faster.

    Example:
        >>> radix_argsort(np.array([70000, 3, 70000, 1])).tolist()
        [3, 1, 0, 2]
    """
    keys = np.asarray(keys)
    top = int(keys.max()) if keys.size else 0
    if top < 2**16:
        return np.argsort(keys.astype(np.uint16), kind="stable")
    if top >= 2**32 or int(keys.min()) < 0:
        return np.argsort(keys, kind="stable")
    wide = keys.astype(np.uint32)
    first = np.argsort((wide & 0xFFFF).astype(np.uint16), kind="stable")
    return first[np.argsort((wide[first] >> 16).astype(np.uint16), kind="stable")]


def best_fit_decreasing(lengths: np.ndarray, capacity: int) -> tuple[np.ndarray, int]:
    """The row of each item under best-fit decreasing packing into rows of ``capacity``.

    Items are taken longest first; equal lengths in their given order (so a shuffled input
    gives a different packing each epoch). Lengths above ``capacity`` must be clipped by the
    caller; lengths below 1 count as 1.

    Args:
        lengths: item lengths (any integer dtype).
        capacity: tokens per row.

    Returns:
        ``(row, num_rows)``: the row (int64, numbered in the order rows were opened) of each
        item, in the input's order.

    Example:
        >>> row, n = best_fit_decreasing(np.array([3, 7, 5, 2, 4]), capacity=10)
        >>> row.tolist(), n
        ([0, 0, 1, 2, 1], 3)
    """
    members, counts = pack_rows(lengths, capacity)
    row = np.empty(len(members), dtype=np.int64)
    row[members] = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
    return row, len(counts)


def pack_rows(
    lengths: np.ndarray, capacity: int, rooms: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Best-fit decreasing rows as ``(members, counts)``: item indexes grouped row by row.

    Row ``r`` holds items ``members[sum(counts[:r]) : sum(counts[:r + 1])]``, longest first;
    rows are in the order they were opened. No sort is needed to group them: the packing knows
    each item's slot in its row.

    ``rooms``: rows already open, each with this much room left (rows ``0 .. len(rooms)-1``,
    part-filled by the caller; a room of 0 takes nothing); items go there first where they fit
    best, as into any row, and new rows follow.

    Example:
        >>> members, counts = pack_rows(np.array([3, 7, 5, 2, 4]), capacity=10)
        >>> members.tolist(), counts.tolist()
        ([1, 0, 2, 4, 3], [2, 2, 1])
        >>> pack_rows(np.array([4, 7, 5]), capacity=10, rooms=np.array([4, 0]))[1].tolist()
        [1, 0, 1, 1]
    """
    lens = np.clip(np.asarray(lengths, dtype=np.int64), 1, capacity)
    order = radix_argsort(capacity - lens)  # longest first, ties in input order
    histogram = np.bincount(lens, minlength=capacity + 1)
    return pack_sorted(order, histogram, capacity, rooms)


@dataclass(frozen=True)
class RowLayout:
    """Where best-fit decreasing puts its rows, before any item is written (``layout_rows``).

    ``counts[i]``: items of the ``i``-th row as laid out; ``starts[r]``: where row number ``r``
    (in the order rows were opened) begins; ``opened``: rows opened beyond the given rooms.
    """

    counts: np.ndarray
    starts: np.ndarray
    opened: int


def layout_rows(
    histogram: np.ndarray,
    capacity: int,
    rooms: np.ndarray | None = None,
    arrange: Callable[[np.ndarray], np.ndarray] | None = None,
    offset: Any = np.int32,
) -> RowLayout:
    """The rows best-fit decreasing makes of the sizes ``histogram`` counts, laid out.

    Needs the counts alone, not the items: ``pack_sorted`` does this first, and a caller that
    is still sorting the items may do it beside the sort and pass the result. ``arrange`` and
    ``rooms`` as in ``pack_sorted``; ``offset``: the dtype of ``starts`` (``int32`` below 2**31
    items).

    Example:
        >>> layout = layout_rows(np.bincount([3, 7, 5, 2, 4], minlength=11), 10)
        >>> layout.counts.tolist(), layout.starts.tolist(), layout.opened
        ([2, 2, 1], [0, 2, 4], 3)
    """
    histogram = np.asarray(histogram, dtype=np.int64)
    bound = 2 * -(-int((histogram * np.arange(len(histogram))).sum()) // capacity) + 1
    counts = _bfd(histogram, capacity, rooms, None, bound)  # any fit: one row at most half full
    opened = len(counts) - (0 if rooms is None else len(rooms))  # known now: no spare room
    if arrange is None:
        return RowLayout(counts, (np.cumsum(counts) - counts).astype(offset), opened)
    order = np.asarray(arrange(counts))
    counts = counts[order]
    starts = np.empty(len(counts), dtype=offset)
    starts[order] = np.cumsum(counts) - counts  # where each row (by number) begins
    return RowLayout(counts, starts, opened)


def pack_sorted(
    items: np.ndarray,
    histogram: np.ndarray,
    capacity: int,
    rooms: np.ndarray | None = None,
    arrange: Callable[[np.ndarray], np.ndarray] | None = None,
    layout: RowLayout | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Best-fit decreasing over items already sorted longest first, as ``(members, counts)``.

    ``histogram[L]``: how many items have size ``L`` (``1 <= L <= capacity``); ``items``: the
    items (indexes or sample ids, any integer dtype) in packing order, the ``histogram[capacity]``
    items of size ``capacity`` first, then those of ``capacity - 1``, ... The packing itself
    runs over the histogram (see the module docstring) and needs O(rows) memory beyond the
    ``members`` it returns (of ``items``' dtype): twice, once to count each row's items
    (``layout_rows``; ``layout``, when given, is its result for these arguments), once to write
    each item straight to its row's slot. ``rooms`` as in ``pack_rows``.

    ``arrange(counts)``, when given, returns the order the rows are laid out in (the rows'
    numbers, a permutation, e.g. a shuffle): ``members`` and ``counts`` then follow that order,
    and no second copy of the items is needed to reorder them.

    Example:
        >>> hist = np.bincount([3, 7, 5, 2, 4], minlength=11)
        >>> members, counts = pack_sorted(np.array([1, 2, 4, 0, 3]), hist, 10)
        >>> members.tolist(), counts.tolist()
        ([1, 0, 2, 4, 3], [2, 2, 1])
    """
    items = np.asarray(items)
    histogram = np.asarray(histogram, dtype=np.int64)
    if int(histogram.sum()) != len(items) or (len(histogram) and histogram[0]):
        raise ValueError(
            f"the histogram must count the {len(items)} items by size 1 .. capacity, got "
            f"{int(histogram.sum())} items ({int(histogram[:1].sum())} of size 0)"
        )
    offset = np.int32 if len(items) < 2**31 else np.int64
    if layout is None:
        layout = layout_rows(histogram, capacity, rooms, arrange, offset)
    starts = layout.starts
    members = np.empty(len(items), dtype=items.dtype)

    def place(pos: int, rows: np.ndarray, first: np.ndarray, q: int, count: int) -> None:
        # each row's q slots are consecutive in members: one broadcast add makes the places
        base = starts[rows] + first.astype(starts.dtype)
        at = base if q == 1 else (base[:, None] + np.arange(q, dtype=starts.dtype)).ravel()
        members[at[:count]] = items[pos : pos + count]

    with side_tasks() as submit:

        def write(pos: int, rows: np.ndarray, first: np.ndarray, q: int, count: int) -> None:
            # a few rows at a time, so the temporaries stay small; the steps write disjoint
            # slots of members (random writes, memory-bound), so they run on the plans'
            # threads while best-fit goes on; small ones here, where a thread costs more
            if count < _WRITE_INLINE:
                place(pos, rows, first, q, count)
                return
            step = max(1, _WRITE // q)
            for lo in range(0, len(rows), step):
                hi = min(len(rows), lo + step)
                n = min(count, hi * q) - lo * q
                submit(place, pos + lo * q, rows[lo:hi], first[lo:hi], q, n)

        _bfd(histogram, capacity, rooms, write, layout.opened)
    return members, layout.counts


def pack_spread(
    lengths: np.ndarray, capacity: int, weight: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Rows as ``pack_rows`` gives them, with the items of ``weight > 0`` spread evenly over rows.

    For balance (image patches): the weighted items, heaviest first, are dealt to the fewest
    rows any packing needs (``ceil(tokens / capacity)``, or one per item over half a row) in a
    snake (rows ``0 .. R-1``, then ``R-1 .. 0``, ...), so every row gets about the same weight;
    an item that would overflow its row joins the others, which are then packed best-fit
    decreasing into the room left (new rows only where nothing fits)::

        weights (heaviest first)  9 8 7 6 5 4      3 rows    row 0: 9 4   row 1: 8 5   row 2: 7 6

    Example:
        >>> members, counts = pack_spread(np.array([4, 4, 2, 2]), 6, np.array([5, 5, 0, 0]))
        >>> members.tolist(), counts.tolist()
        ([0, 2, 1, 3], [2, 2])
    """
    lens = np.clip(np.asarray(lengths, dtype=np.int64), 1, capacity)
    weight = np.asarray(weight)
    lead = np.flatnonzero(weight > 0)
    if not len(lead):
        return pack_rows(lens, capacity)
    target = max(-(-int(lens.sum()) // capacity), int(np.count_nonzero(2 * lens > capacity)), 1)
    lead = lead[np.lexsort((lead, -lens[lead], -weight[lead]))]  # heaviest first, fixed ties
    k = np.arange(len(lead), dtype=np.int64)
    pos = k % target
    row = np.where((k // target) % 2 == 0, pos, target - 1 - pos)
    by_row = radix_argsort(row)  # stable: dealing order within each row
    filled = np.cumsum(lens[lead[by_row]])
    starts = np.searchsorted(row[by_row], np.arange(target))
    before = np.concatenate([[0], filled])[starts]  # tokens of the rows dealt before each row
    fits = np.empty(len(lead), dtype=bool)
    fits[by_row] = filled - np.repeat(before, np.diff(np.append(starts, len(lead)))) <= capacity
    placed, placed_row = lead[fits], row[fits]
    taken = np.zeros(len(lens), dtype=bool)
    taken[placed] = True
    rest = np.flatnonzero(~taken)
    rooms = capacity - np.bincount(placed_row, weights=lens[placed], minlength=target).astype(
        np.int64
    )
    fill, fill_counts = pack_rows(lens[rest], capacity, rooms=rooms)
    fill_rows = np.repeat(np.arange(len(fill_counts), dtype=np.int64), fill_counts)
    items = np.concatenate([placed, rest[fill]])
    rows = np.concatenate([placed_row, fill_rows])
    at = radix_argsort(rows)  # stable: each row its weighted items, then the fill
    counts = np.bincount(rows, minlength=len(fill_counts))
    return items[at], counts[counts > 0]


class _Rooms:
    """Open rows by the room they have left: room -> rows, in the order they were added.

    Rows are kept as numpy arrays (one per addition), never as one Python int per row.
    """

    def __init__(self) -> None:
        self.stacks: dict[int, list[np.ndarray]] = {}
        self.sizes: dict[int, int] = {}
        self.keys: list[int] = []  # sorted rooms that have rows

    def add(self, room: int, rows: np.ndarray) -> None:
        if room <= 0 or not len(rows):
            return
        stack = self.stacks.get(room)
        if stack is None:
            stack = self.stacks[room] = []
            self.sizes[room] = 0
            bisect.insort(self.keys, room)
        stack.append(rows)
        self.sizes[room] += len(rows)

    def best(self, size: int) -> int | None:
        """The least room that holds ``size``, if any row has one."""
        j = bisect.bisect_left(self.keys, size)
        return self.keys[j] if j < len(self.keys) else None

    def pop(self, room: int, take: int) -> np.ndarray:
        """The last ``take`` rows of ``room`` (in the order they were added), removed."""
        stack, parts, need = self.stacks[room], [], take
        while need:
            last = stack[-1]
            if len(last) <= need:
                parts.append(stack.pop())
                need -= len(last)
            else:
                parts.append(last[len(last) - need :])
                stack[-1] = last[: len(last) - need]
                need = 0
        self.sizes[room] -= take
        if not self.sizes[room]:
            del self.stacks[room], self.sizes[room]
            self.keys.remove(room)
        return parts[0] if len(parts) == 1 else np.concatenate(parts[::-1])


def _bfd(
    histogram: np.ndarray,
    capacity: int,
    given: np.ndarray | None,
    write: Callable[[int, np.ndarray, np.ndarray, int, int], None] | None,
    expect: int = 1024,
) -> np.ndarray:
    """Best-fit decreasing over a histogram of sizes; returns the items of each row.

    ``write(pos, rows, first, q, count)``, when given, learns where the sorted items ``pos ..
    pos + count - 1`` go: ``q`` to each of ``rows`` in turn (the last may take fewer), into its
    places ``first[i] .. first[i] + q - 1`` within row ``rows[i]``. ``given``: the
    rooms of rows already open (rows ``0 .. len(given)-1``); ``expect``: new rows expected
    (room is made for more if needed). Counts and row numbers are ``int32``.
    """
    opened_before = 0 if given is None else len(given)
    filled = np.zeros(max(16, expect + opened_before), dtype=np.int32)  # items in each row
    rooms = _Rooms()
    next_row = opened_before
    if given is not None and len(given):
        given = np.minimum(np.asarray(given, dtype=np.int64), capacity)
        at = np.argsort(given, kind="stable")
        for group in np.split(at, np.flatnonzero(np.diff(given[at])) + 1):
            rooms.add(int(given[group[0]]), group.astype(np.int32))
    pos = 0
    for size in np.flatnonzero(histogram[: capacity + 1])[::-1].tolist():
        end = pos + int(histogram[size])
        while pos < end:
            left = end - pos
            room = rooms.best(size)
            if room is None:  # nothing fits: open new rows, q items each
                q = capacity // size
                opened = -(-left // q)
                if next_row + opened > len(filled):
                    filled = np.concatenate([filled, np.zeros(max(len(filled), opened), np.int32)])
                if write is not None:
                    new_rows = np.arange(next_row, next_row + opened, dtype=np.int64)
                    write(pos, new_rows, np.zeros(opened, dtype=np.int32), q, left)
                full, rest = divmod(left, q)
                filled[next_row : next_row + full] = q
                rooms.add(capacity - q * size, np.arange(next_row, next_row + full, dtype=np.int32))
                if rest:
                    filled[next_row + full] = rest
                    rooms.add(capacity - rest * size, np.array([next_row + full], dtype=np.int32))
                next_row += opened
                pos = end
                continue
            q = room // size
            take = min(rooms.sizes[room], -(-left // q))
            rows = rooms.pop(room, take)
            count = min(left, take * q)
            if write is not None:
                write(pos, rows, filled[rows], q, count)
            full, rest = divmod(count, q)
            filled[rows[:full]] += q
            rooms.add(room - q * size, rows[:full])
            if rest:
                filled[rows[full]] += rest
                rooms.add(room - rest * size, rows[full : full + 1])
            pos += count
    return filled[:next_row].copy()


def split_rows(
    lengths: np.ndarray, capacity: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Pieces of items concatenated in order and cut every ``capacity`` tokens.

    Args:
        lengths: item lengths, in stream order.
        capacity: tokens per row.

    Returns:
        ``(item, start, end, row_bounds)``: for each piece, the item it comes from and its
        token range ``[start, end)`` within the item; pieces are in stream order, and row
        ``r`` holds pieces ``row_bounds[r] .. row_bounds[r+1]-1``.

    Example:
        >>> item, start, end, rows = split_rows(np.array([5, 2, 6]), capacity=4)
        >>> item.tolist(), start.tolist(), end.tolist(), rows.tolist()
        ([0, 0, 1, 2, 2, 2], [0, 4, 0, 0, 1, 5], [4, 5, 2, 1, 5, 6], [0, 1, 4, 5, 6])
    """
    lens = np.asarray(lengths, dtype=np.int64)
    ends_at = np.cumsum(lens)
    begins = ends_at - lens
    keep = lens > 0
    first_row = begins // capacity
    last_row = np.where(keep, (ends_at - 1) // capacity, first_row - 1)
    pieces = last_row - first_row + 1
    item = np.repeat(np.arange(len(lens), dtype=np.int64), pieces)
    offsets = np.cumsum(pieces) - pieces
    row = (
        np.repeat(first_row, pieces)
        + np.arange(len(item), dtype=np.int64)
        - np.repeat(offsets, pieces)
    )
    lo = np.maximum(begins[item], row * capacity)
    hi = np.minimum(ends_at[item], (row + 1) * capacity)
    total = int(ends_at[-1]) if len(lens) else 0
    num_rows = -(-total // capacity)
    row_bounds = np.searchsorted(row, np.arange(num_rows + 1), side="left").astype(np.int64)
    return item, lo - begins[item], hi - begins[item], row_bounds

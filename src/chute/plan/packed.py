"""``packed``: several samples per row of ``max_length`` tokens, rows in batches of ``batch_size``.

Each epoch: shuffle the valid ids, pack them best-fit decreasing into rows of ``max_length``
(over the whole epoch, or within consecutive windows of ``window`` samples), shuffle the rows,
and deal ``batch_size`` rows per rank per step (the last partial step split evenly over ranks,
as the random plan does)::

    samples (lengths)   a:5  b:2  c:7  d:3  e:1  f:4   max_length = 8
    rows (BFD)          [c e]  [a d]  [f b]             7+1, 5+3, 4+2: 22 tokens in 3 x 8
    shuffled + dealt    step 0: rank 0 [a d] | rank 1 [f b];  step 1: rank 0 [c e] | rank 1 -

A sample is never split across rows; one longer than ``max_length`` follows ``overflow``:
``"truncate"`` (a row of its own, cut to ``max_length`` by the packed collate; counted as
``truncated``) or ``"drop"`` (never dealt; counted as ``dropped``). Every other valid id is
dealt exactly once per epoch.

``split=True`` (pretraining text): the shuffled samples are concatenated and cut into rows of
exactly ``max_length`` tokens, in stream order; a sample crossing a cut continues in the next row
(see ``docs/padding.md`` for what that means for its loss). The rows are dealt in stream order,
so an elastic resume owes a prefix-closed rest (the one sample cut by the resume point is dealt
again whole). Samples with image tokens cannot be split.

``align`` (context parallelism): every sample takes a multiple of ``align`` tokens of its row,
its real length rounded up, so the collate can pad each sample to that multiple and the row
still holds at most ``max_length``. ``PackedCollate(align=2 * cp)`` does the padding, and each
padded sample then cuts into ``2 * cp`` equal chunks (``chute.collate.context``)::

    align 4, max_length 12    samples a:5  b:2  c:3   take 8, 4, 4 tokens
    rows                      [a a a a a . . . b b . .]  [c c c . P P P P P P P P]

``balance`` (``chute.plan.balance``): the image samples are shared out evenly over the rows
(``pack_spread``), the shuffled rows are grouped into steps of alike patches (and compute, with
``"cost"``) and the steps shuffled, each step's rows are dealt to its ranks by load, and a last
step of fewer rows than ranks is repacked so every rank gets a share (as without ``balance``);
every row still holds at most ``max_length``. Compute (``cost=``, ``chute.plan.cost``) does
not change the packing: a row of ``max_length`` tokens holding one long document costs more than any row of short
samples, so no packing of whole samples into equal rows evens it out; steps of alike rows do::

    8 ranks x 1 row of 32,768, Llama-3-8B shape          cost per rank in one step (x 32,768 b)
    plain     rows of a 32k window next to rows of SFT    1.57 1.01 1.01 1.57 1.01 1.57 1.01 1.01
    balance   a step of windows, a step of SFT rows...    1.57 1.57 1.57 1.57 1.57 1.57 1.57 1.57

Example:
    >>> import numpy as np
    >>> planner = PackedPlanner(8, batch_size=1, shuffle=False, lengths=[5, 2, 7, 3, 1, 4])
    >>> plan = planner.build(6, epoch=0, world_size=2)
    >>> [plan.layout(r, k)[0].tolist() for k in range(plan.num_batches) for r in range(2)]
    [[2, 4], [0, 3], [5], [1]]

The last step held one row (``[5, 1]``) for two ranks: it is packed again so that each rank
gets samples instead of a placeholder batch (``balance`` or not).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, ClassVar

import numpy as np

from chute.errors import ConfigError
from chute.plan.balance import Balance, BalanceOption
from chute.plan.base import check_positive
from chute.plan.bulk import (
    CHUNK,
    id_dtype,
    lookup,
    lookup_table,
    map_multiset,
    ordered_map,
    place_desc,
    rank_desc,
    spans,
)
from chute.plan.cost import CostOption
from chute.plan.lengthed import LengthPlanner, derive_seed
from chute.plan.order import IdOrder, Order
from chute.plan.pack import layout_rows, pack_rows, pack_sorted, pack_spread, split_rows
from chute.plan.rebalance import deal_rows, spread_tail
from chute.plan.shuffle import Permutation
from chute.plan.table import TablePlan, even_bounds, gather_segments

__all__ = ["OVERFLOW", "PackedPlanner", "length_counts", "packing_bound"]

# how a last step is spread over the ranks without a balance of their own: by tokens
_TOKENS = Balance(weights=(("tokens", 1.0),))

log = logging.getLogger("chute.plan")

OVERFLOW = ("truncate", "drop")
# Warn when packing fills rows this much worse than the lengths allow.
WARN_GAP = 0.05


def packing_bound(lengths: np.ndarray, max_length: int) -> int:
    """The fewest rows any packing could use: tokens / max_length, and one per sample > half.

    Example:
        >>> packing_bound(np.array([6, 6, 2]), 8)
        2
    """
    lens = np.minimum(np.asarray(lengths, dtype=np.int64), max_length)
    tokens = int(lens.sum())
    return max(-(-tokens // max_length), int(np.count_nonzero(2 * lens > max_length)))


class PackedPlanner(LengthPlanner):
    """Rows of packed samples, ``batch_size`` rows per batch (see the module docstring).

    Args:
        max_length: tokens per row (default: the recipe's ``max_length``, set by the loader).
        batch_size: rows per batch per rank.
        split: concatenate and cut into full rows (pretraining text) instead of packing whole
            samples.
        window: pack within consecutive windows of this many samples of the shuffled order
            (``None``: the whole epoch at once, the tightest packing).
        overflow: a sample longer than ``max_length``: ``"truncate"`` or ``"drop"``.
        balance: even out image patches, tokens or compute across the ranks of each step
            (``True``, ``"tokens+patches"``, ``"patches"``, ``"cost"``, or weights:
            ``chute.plan.balance.Balance``): rows share out the image samples evenly, steps
            are made of rows of alike load, and each step's rows are dealt to ranks by load.
            ``None``: plain packing and dealing.
        cost: the compute model of ``balance="cost"`` (``chute.plan.cost.CostModel``, a name
            such as ``"llama3-8b"``, or ``{"a": ..., "b": ..., "c": ...}``; default
            ``DEFAULT_COST``, Llama-3-8B's shape).
        shuffle: a new order (and new rows) every epoch.
        seed: the shuffle's seed.
        drop_last: leave out the last partial step of rows.
        wrap: not supported (raises).
        lengths: the source's ``Lengths`` (the ``Loader`` binds them).
        align: each sample takes its length rounded up to a multiple of ``align`` in its row
            (``2 * cp`` for context-parallel slices; ``max_length`` must be a multiple).
            Not with ``split=True``.
    """

    kind: ClassVar[str] = "packed"

    def __init__(
        self,
        max_length: int | None = None,
        *,
        batch_size: int = 1,
        split: bool = False,
        window: int | None = None,
        overflow: str = "truncate",
        balance: BalanceOption = None,
        cost: CostOption = None,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
        wrap: bool = False,
        lengths: Any = None,
        align: int = 1,
    ):
        super().__init__(shuffle=shuffle, seed=seed, lengths=lengths)
        if wrap:
            raise ConfigError(
                "wrap=True is not supported by plan='packed' (rows are not samples to repeat); "
                "use the default or drop_last=True"
            )
        if max_length is None:
            raise ConfigError(
                "plan='packed' needs max_length (tokens per row): pass the Loader "
                "plan_options={'max_length': 4096} (or PackedPlanner(max_length=4096)); the "
                "Loader takes it from the recipe's max_length when the recipe has one"
            )
        if overflow not in OVERFLOW:
            raise ConfigError(f"overflow must be one of {OVERFLOW}, got {overflow!r}")
        self.max_length = check_positive("max_length", max_length)
        self.batch_size = check_positive("batch_size", batch_size)
        self.split = bool(split)
        self.window = None if window is None else check_positive("window", window)
        if self.split and self.window is not None:
            raise ConfigError("window= applies to packing whole samples; drop it with split=True")
        self.overflow = overflow
        self.balance = Balance.of(balance, cost)
        if self.split and self.balance is not None:
            raise ConfigError(
                "balance= moves whole samples between the rows of a step; with split=True every "
                "row is exactly max_length tokens (already even) and samples cannot move: drop "
                "balance, or pack whole samples (split=False)"
            )
        self.align = check_positive("align", align)
        if self.max_length % self.align:
            raise ConfigError(
                f"max_length={self.max_length} is not a multiple of align={self.align}: every "
                f"sample takes a multiple of align tokens, so a full row must too. Use "
                f"max_length={-(-self.max_length // self.align) * self.align} (or "
                f"{self.max_length // self.align * self.align} with samples no longer than it: "
                f"a longer one is cut to the row)",
                param="max_length",
            )
        if self.split and self.align > 1:
            raise ConfigError(
                f"align={self.align} pads every sample to a multiple of {self.align} tokens; "
                f"split=True fills rows with exactly max_length tokens of cut samples, which "
                f"leaves no room for it. For long documents use Recipe(overflow='split') "
                f"(windows of max_length) with split=False",
                param="align",
            )
        self.drop_last = bool(drop_last)
        self._warned = False
        self._warned_overflow = False

    def params(self) -> dict[str, Any]:
        return {
            **self.common_params(),
            "max_length": self.max_length,
            "batch_size": self.batch_size,
            "split": self.split,
            "window": self.window,
            "overflow": self.overflow,
            "drop_last": self.drop_last,
            # only when set: states saved before the option existed stay valid
            **({"balance": self.balance.to_json()} if self.balance is not None else {}),
            **({"align": self.align} if self.align > 1 else {}),
        }

    def sizes(self, lens: np.ndarray) -> np.ndarray:
        """The room each sample takes in a row: its length rounded up to a multiple of ``align``.

        Example:
            >>> PackedPlanner(8, align=4).sizes(np.array([1, 4, 5])).tolist()
            [4, 4, 8]
        """
        lens = np.asarray(lens, dtype=np.int64)
        return lens if self.align == 1 else -(-lens // self.align) * self.align

    def plan_order(
        self, order: Order, *, epoch: int, world_size: int, whole: bool = False
    ) -> TablePlan:
        """Packing by size buckets: O(max_length) state beyond two ``int32`` id arrays.

        The order's ids are counted by size, placed longest first by a counting sort (no
        argsort of the epoch) and packed over the histogram (``pack_sorted``), which writes
        every id straight into its row: the same rows as ``plan_ids`` over the materialised
        order. The rows' layout needs the histogram alone (``layout_rows``) and is worked out
        on a thread of its own while the ids are sorted. ``whole``: the order deals every
        valid id once (an epoch's own order), so the histogram is counted from the lengths in
        id order and the order is read once, chunk by chunk, never held whole. ``split``,
        ``window`` and ``balance`` take the ``plan_ids`` path.
        """
        if self.split or self.window is not None or (self.balance is not None and world_size > 1):
            return super().plan_order(order, epoch=epoch, world_size=world_size)
        cap = self.max_length
        length = self.require_lengths().length
        table = lookup_table(length)  # in memory, narrow: the random lookups run faster
        dtype = id_dtype(len(length))
        count = partial(length_counts, top=cap)
        if whole:  # the same samples in any order: count them in id order, on threads
            tallies = ordered_map(count, _chunks_of(length, CHUNK))
        else:  # the counts do not depend on the order: over its ids as a multiset, on threads
            tallies = map_multiset(count, table, order)
        counts = np.zeros(cap + 2, dtype=np.int64)
        for tally in tallies:
            counts += tally
        histogram, tokens, room, halves, over = self._tally(counts)

        def arrange(counts: np.ndarray) -> np.ndarray:  # the rows shuffled, as plan_ids does
            if not self.shuffle:
                return np.arange(len(counts), dtype=np.int64)
            seed = derive_seed(self.seed, "rows")
            return Permutation(len(counts), seed, epoch).materialize(id_dtype(len(counts)))

        # the rows' layout needs the histogram alone: worked out beside the sort of the ids
        offset = np.int32 if int(histogram.sum()) < 2**31 else np.int64
        beside = ThreadPoolExecutor(1)
        layout = beside.submit(layout_rows, histogram, cap, None, arrange, offset)
        beside.shutdown(wait=False)  # the thread ends with its one task
        dropped: list[np.ndarray] = []

        def keyed(
            table: np.ndarray, span: tuple[int, int]
        ) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
            ids = order.take_range(span[0], span[1], np.empty(span[1] - span[0], dtype=dtype))
            lens = lookup(table, ids)
            cut = ids[:0]
            if self.overflow == "drop":
                over = lens > cap
                cut, ids, lens = ids[over], ids[~over], lens[~over]
            # the room each takes, as ``intp`` (numpy counts those fastest); longer ones
            # truncated (none are left with "drop")
            size = np.empty(len(lens), dtype=np.intp)
            if self.align == 1:
                np.clip(lens, 1, cap, out=size, casting="unsafe")
            else:  # rounded up as ``sizes`` rounds it
                np.minimum(lens, cap, out=size, casting="unsafe")
                size = np.maximum(-(-size // self.align) * self.align, 1, out=size)
            return rank_desc(ids, size, cap), cut

        def placed(table: np.ndarray) -> Iterator[tuple[np.ndarray, ...]]:
            for part, cut in ordered_map(partial(keyed, table), spans(len(order), 1)):
                if len(cut):  # an empty view would keep its whole chunk alive
                    dropped.append(cut.copy())
                yield part

        ordered = place_desc(placed(table), histogram, np.empty(int(histogram.sum()), dtype=dtype))
        del table
        picked, counts = pack_sorted(ordered, histogram, cap, layout=layout.result())
        del ordered
        num_rows = len(counts)
        row_bounds = np.zeros(num_rows + 1, dtype=np.int64)
        np.cumsum(counts, out=row_bounds[1:])
        bounds = even_bounds(num_rows, world_size, self.batch_size, self.drop_last)
        dealt_rows = int(bounds[-1])
        dealt = int(row_bounds[dealt_rows])
        dealt_bounds, bounds = self._spread_last_step(
            picked[:dealt], row_bounds[: dealt_rows + 1], bounds, world_size
        )
        stats = {
            "truncated": 0 if self.overflow == "drop" else over,
            "dropped": (over if self.overflow == "drop" else 0) + len(picked) - dealt,
            "rows": num_rows,
            "tokens": tokens,
            "bound": max(-(-room // cap), halves),
            "max_length": cap,
        }
        self._check_efficiency(stats)
        self._check_overflow(over if self.overflow == "drop" else 0, stats)
        return TablePlan(
            order,
            world_size,
            ids=picked[:dealt],
            batch_bounds=bounds,
            row_bounds=dealt_bounds,
            undealt=np.concatenate([*dropped, picked[dealt:]]).astype(picked.dtype),
            stats=stats,
        )

    def _tally(self, counts: np.ndarray) -> tuple[np.ndarray, int, int, int, int]:
        """What packing needs from the lengths' counts (``length_counts``, up to ``max_length``).

        Returns ``(histogram of the room each sample takes, tokens packed, room taken, samples
        over half a row, samples over max_length)``, from ``max_length + 2`` numbers instead of
        a pass per figure over the samples. A sample over ``max_length`` is packed truncated to
        it, or left out with ``overflow="drop"``.
        """
        cap = self.max_length
        over = int(counts[cap + 1])
        kept = counts[: cap + 1].copy()  # samples of each length as packed
        if self.overflow != "drop":
            kept[cap] += over  # truncated to max_length
        length = np.arange(cap + 1, dtype=np.int64)
        size = self.sizes(length)
        histogram = np.zeros(max(cap, int(size[-1])) + 1, dtype=np.int64)
        np.add.at(histogram, np.maximum(size, 1), kept)
        return (
            histogram,
            int(kept @ length),
            int(kept @ size),
            int(kept[2 * size > cap].sum()),
            over,
        )

    def plan_ids(self, ids: np.ndarray, *, epoch: int, world_size: int) -> TablePlan:
        lens_all = self.require_lengths()
        lens = lens_all.length[ids].astype(np.int64)
        if self.split:
            return self._split(ids, lens, world_size)
        cap = self.max_length
        over = lens > cap
        stats = {"truncated": 0, "dropped": 0}
        undealt = np.empty(0, dtype=np.int64)
        if over.any():
            if self.overflow == "drop":
                undealt, ids, lens = ids[over], ids[~over], lens[~over]
                stats["dropped"] = len(undealt)
            else:
                stats["truncated"] = int(np.count_nonzero(over))
                lens = np.minimum(lens, cap)
        balance = self.balance if world_size > 1 else None
        cost = None if balance is None else balance.columns(lens_all, ids, cap)
        spread = None if balance is None or cost is None else balance.spread(cost)
        load = None if balance is None or cost is None else balance.load(cost)
        members, counts = self._pack(self.sizes(lens), spread)  # rows in opening order
        row_bounds = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        num_rows = len(counts)
        rows = np.arange(num_rows, dtype=np.int64)
        if self.shuffle:
            rows = Permutation(num_rows, derive_seed(self.seed, "rows"), epoch).materialize()
        if load is not None:
            weight = np.take(load, members)
            rows = self._steps_by_load(rows, weight, row_bounds, world_size, epoch)
        at = members[gather_segments(row_bounds[rows], counts[rows])]  # positions into ids
        picked = ids[at]
        row_bounds = np.concatenate([[0], np.cumsum(counts[rows])]).astype(np.int64)
        bounds = even_bounds(num_rows, world_size, self.batch_size, self.drop_last)
        dealt_rows = int(bounds[-1])
        dealt = int(row_bounds[dealt_rows])
        row_bounds = row_bounds[: dealt_rows + 1]
        if balance is not None and cost is not None:
            picked, row_bounds, bounds = self._deal(
                picked, np.take(cost, at[:dealt], axis=0), row_bounds, bounds, world_size, stats
            )
        else:
            row_bounds, bounds = self._spread_last_step(
                picked[:dealt], row_bounds, bounds, world_size
            )
        too_long = len(undealt)  # left out by overflow="drop" (the rest: drop_last's rows)
        undealt = np.concatenate([undealt, picked[dealt:]])
        stats["dropped"] += len(picked) - dealt
        tokens = int(lens.sum())
        bound = packing_bound(self.sizes(lens), cap)
        stats.update(rows=num_rows, tokens=tokens, bound=bound, max_length=cap)
        self._check_efficiency(stats)
        self._check_overflow(too_long, stats)
        return TablePlan(
            IdOrder(ids),
            world_size,
            ids=picked[:dealt],
            batch_bounds=bounds,
            row_bounds=row_bounds,
            undealt=undealt,
            stats=stats,
        )

    def _steps_by_load(
        self,
        rows: np.ndarray,
        weight: np.ndarray,
        row_bounds: np.ndarray,
        world_size: int,
        epoch: int,
    ) -> np.ndarray:
        """The rows (shuffled) grouped into steps of alike load, the steps shuffled.

        ``weight``: each packed sample's share of the patches and compute (``Balance.load``),
        in packing order. Rows are
        ordered by their total, heaviest first (equal ones keep their shuffled order), cut into
        steps of ``world_size x batch_size`` rows, and the full steps shuffled.
        """
        sums = np.concatenate([[0.0], np.cumsum(weight)])  # sequential: the same on every rank
        load = (sums[row_bounds[1:]] - sums[row_bounds[:-1]])[rows]
        rows = rows[np.lexsort((np.arange(len(rows)), -load))]
        unit = world_size * self.batch_size
        steps = len(rows) // unit
        if not self.shuffle or steps < 2:
            return rows
        perm = Permutation(steps, derive_seed(self.seed, "balance-steps"), epoch).materialize()
        head = rows[: steps * unit].reshape(steps, unit)[perm].ravel()
        return np.concatenate([head, rows[steps * unit :]])

    def _deal(
        self,
        picked: np.ndarray,
        cost: np.ndarray,
        row_bounds: np.ndarray,
        bounds: np.ndarray,
        world_size: int,
        stats: dict[str, Any],
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """With balance: each step's rows dealt to its ranks by load, the last step spread.

        ``deal_rows`` deals the rows of full steps; ``spread_tail`` repacks a last step of
        fewer rows than ranks so every rank gets a share. ``cost``: the dealt samples' columns.
        Returns ``(picked, row_bounds, bounds)``; counts the steps left outside the tolerance
        in ``stats``.
        """
        assert self.balance is not None
        dealt = int(row_bounds[-1])
        head, tail = picked[:dealt], picked[dealt:]
        row_bounds, bounds = self._spread_last_step(
            head, row_bounds, bounds, world_size, cost, self.balance
        )
        sums = np.zeros((len(cost) + 1, cost.shape[1]), dtype=np.int64)
        np.cumsum(cost, axis=0, out=sums[1:])
        rows_cost = sums[row_bounds[1:]] - sums[row_bounds[:-1]]
        unit = world_size * self.batch_size
        full = (len(row_bounds) - 1) // unit
        last = np.diff(bounds[full * world_size :]) if len(row_bounds) - 1 > full * unit else None
        order, changed = deal_rows(rows_cost, world_size, self.batch_size, self.balance, last)
        counts = np.diff(row_bounds)[order]
        head = head[gather_segments(row_bounds[:-1][order], counts)]
        row_bounds = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        stats["balanced_steps"] = changed
        stats["unbalanced_steps"] = self.balance.unbalanced(rows_cost[order], bounds, world_size)
        return np.concatenate([head, tail]), row_bounds, bounds

    def _spread_last_step(
        self,
        head: np.ndarray,
        row_bounds: np.ndarray,
        bounds: np.ndarray,
        world_size: int,
        cost: np.ndarray | None = None,
        balance: Balance | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """A last step of fewer rows than ranks packed again, so that every rank gets samples.

        Else the ranks without a row get a placeholder batch: a wasted step, and for a
        vision-language model under DDP a vision tower without gradients. ``head``: the dealt
        ids; ``cost`` (with ``balance``) their columns, else their tokens balance the new rows.
        The step's ids (and cost rows) are reordered in place, nothing before them copied;
        returns the new ``(row_bounds, bounds)``.
        """
        unit = world_size * self.batch_size
        full = (len(row_bounds) - 1) // unit
        left = len(row_bounds) - 1 - full * unit  # rows of the last step
        lo = int(row_bounds[full * unit])
        spread = None
        if 0 < left < world_size:  # ranks left without a row
            size = self.sizes(np.minimum(self.require_lengths().length[head[lo:]], self.max_length))
            columns = cost[lo:] if cost is not None else size[:, None]
            rule = _TOKENS if balance is None else balance
            spread = spread_tail(columns, size, self.max_length, left, world_size, rule)
        if spread is None:
            return row_bounds, bounds
        order, counts, per_rank = spread
        head[lo:] = head[lo:][order]
        if cost is not None:
            cost[lo:] = cost[lo:][order]
        row_bounds = np.concatenate([row_bounds[: full * unit + 1], lo + np.cumsum(counts)])
        bounds = np.concatenate(
            [bounds[: full * world_size + 1], full * unit + np.cumsum(per_rank)]
        )
        return row_bounds.astype(np.int64, copy=False), bounds.astype(np.int64, copy=False)

    def _pack(self, lens: np.ndarray, spread: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        def pack(lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
            if spread is None:
                return pack_rows(lens[lo:hi], self.max_length)
            return pack_spread(lens[lo:hi], self.max_length, spread[lo:hi])

        if self.window is None or self.window >= len(lens):
            return pack(0, len(lens))
        members, counts = [], []
        for lo in range(0, len(lens), self.window):
            part, sizes = pack(lo, lo + self.window)
            members.append(part + lo)
            counts.append(sizes)
        return np.concatenate(members), np.concatenate(counts)

    def _split(self, ids: np.ndarray, lens: np.ndarray, world_size: int) -> TablePlan:
        image = self.require_lengths().image_tokens
        if image is not None and len(ids) and bool((image[ids] > 0).any()):
            raise ConfigError(
                "split=True cuts samples at row boundaries, which would cut images apart; some "
                "samples have image tokens. Pack whole samples (split=False) for multimodal data"
            )
        item, start, end, row_bounds = split_rows(lens, self.max_length)
        num_rows = len(row_bounds) - 1
        bounds = even_bounds(num_rows, world_size, self.batch_size, self.drop_last)
        dealt_rows = int(bounds[-1])
        dealt = int(row_bounds[dealt_rows])
        pieces = ids[item]
        # undealt: samples with no piece dealt (a sample cut by the drop is dealt in part)
        touched = np.zeros(len(ids), dtype=bool)
        touched[item[:dealt]] = True
        undealt = ids[~touched]
        stats = {
            "max_length": self.max_length,
            "rows": num_rows,
            "tokens": int(lens.sum()),
            "bound": -(-int(lens.sum()) // self.max_length),
            "truncated": 0,
            "dropped": len(undealt),
            "split_samples": int(np.count_nonzero(np.bincount(item) > 1)) if len(item) else 0,
        }
        return TablePlan(
            IdOrder(ids),
            world_size,
            ids=pieces[:dealt],
            batch_bounds=bounds,
            row_bounds=row_bounds[: dealt_rows + 1],
            spans=(start[:dealt].astype(np.int32), end[:dealt].astype(np.int32)),
            undealt=undealt,
            stats=stats,
        )

    def _check_overflow(self, left: int, stats: dict[str, Any]) -> None:
        """Say once that samples longer than a row were cut or left out (no longer silent).

        The Loader gives the plan the recipe's ``max_length``, so this is a plan given a
        smaller one (``plan_options``), or samples made elsewhere (a cache, pre-tokenized).
        """
        cut = stats["truncated"]
        if self._warned_overflow or not (cut or left):
            return
        self._warned_overflow = True
        done = f"{cut} were cut to it (their last tokens are not trained)" if cut else ""
        done = done or f"{left} were left out of the epoch (overflow='drop')"
        log.warning(
            "samples longer than a packed row (max_length=%d): %s; give the plan a max_length "
            "at least the longest sample's (plan_options={'max_length': ...}), or make the "
            "samples shorter (the recipe's max_length)",
            self.max_length,
            done,
        )

    def _check_efficiency(self, stats: dict[str, Any]) -> None:
        rows, bound = stats["rows"], stats["bound"]
        if self._warned or not rows or rows <= bound * (1 + WARN_GAP) or rows - bound < 2:
            return
        self._warned = True
        log.warning(
            "packing fills rows poorly: %d rows where the lengths allow %d (%.1f%% vs %.1f%% of "
            "each row used); %s",
            rows,
            bound,
            100 * stats["tokens"] / (rows * self.max_length),
            100 * stats["tokens"] / (bound * self.max_length),
            "raise window= (or drop it to pack the whole epoch)"
            if self.window is not None
            else "the samples' sizes leave gaps no packing can fill (e.g. most samples just over "
            "a third or a half of max_length); a different max_length packs them tighter",
        )


def length_counts(lens: np.ndarray, top: int) -> np.ndarray:
    """How many of ``lens`` have each length ``0 .. top``, and (last) how many exceed ``top``.

    Negative lengths (invalid samples) are not counted. Two passes over the lengths (numpy's
    ``bincount`` counts ``intp`` values fastest).

    Example:
        >>> length_counts(np.array([2, -1, 0, 9, 2]), top=3).tolist()
        [1, 0, 2, 0, 1]
    """
    lens = np.asarray(lens)
    shifted = np.empty(len(lens), dtype=np.intp)
    np.clip(lens, -1, top + 1, out=shifted, casting="unsafe")
    shifted += 1  # invalid -> 0, length k -> k + 1, longer -> top + 2
    return np.bincount(shifted, minlength=top + 3)[1:]


def _chunks_of(values: np.ndarray, size: int) -> Iterator[np.ndarray]:
    for lo in range(0, len(values), size):
        yield values[lo : lo + size]

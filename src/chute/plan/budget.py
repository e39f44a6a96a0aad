"""``budget``: batches of as many samples as fit a budget of padded tokens (rows x longest).

Each epoch: shuffle the valid ids, cut them into mega-batches (about ``group_size`` optimizer
steps each), sort each by length (longest first) and cut it greedily: a batch starts at its
longest sample ``L`` and takes ``max_tokens // L`` samples (at most ``max_rows``). Short samples
make big batches, long ones small batches; every batch costs about ``max_tokens`` padded tokens,
so memory is flat and padding is low. ``max_tokens = 12``::

    sorted     6 6 5 | 4 3 3 | 2 2 2 2 2 2 | ...     batch = rows x longest <= 12
    batches    [6 6]   [5 4]   [3 3 2 2] ...         (rows 2, 2, 4: 12, 10, 12 tokens)

Equal batch counts per rank: the batches are dealt in steps of ``world_size`` consecutive
batches (neighbours in length, so ranks stay balanced within a step: similar padded tokens and
similar attention cost). With ``balance`` (``chute.plan.balance``), the batches are first
ordered by their image patches (and compute, with ``"cost"``), heaviest first (batches without
any keep their order), so a step's batches carry alike patches (compute) as well as about
``max_tokens`` padded tokens each: one batch of a 32k-token document and one of 64 samples of
512 pad to the same tokens, but the first costs 1.57x the second (``chute.plan.cost``). When
their count is not a multiple of ``world_size``, the batches with the most rows are split in two
(which never adds padding) until it is; only when there are too few samples for that do some
ranks get an empty last batch (the loader's placeholder row). The steps are then shuffled in
blocks of ``grad_accum``, the one holding the longest sample first.

A sample longer than ``max_tokens`` gets a batch of its own (counted as ``over_budget`` in the
plan's stats): set ``max_tokens >= max_length`` to avoid it.

Example:
    >>> import numpy as np
    >>> lens = np.array([6, 6, 5, 4, 3, 3, 2, 2, 2, 2])
    >>> plan = BudgetPlanner(12, shuffle=False, lengths=lens).build(10, epoch=0, world_size=1)
    >>> [plan.batch(0, k).tolist() for k in range(plan.num_batches)]
    [[0, 1], [2, 3], [4, 5, 6, 7], [8, 9]]
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from functools import partial
from typing import Any, ClassVar

import numpy as np

from chute.errors import ConfigError
from chute.plan.balance import Balance, BalanceOption
from chute.plan.base import check_positive
from chute.plan.bulk import (
    CHUNK,
    argsort_desc,
    id_dtype,
    lookup,
    lookup_table,
    map_multiset,
    ordered_map,
    spans,
    take_segments,
)
from chute.plan.cost import CostOption
from chute.plan.lengthed import LengthPlanner, derive_seed, shuffle_units, sort_within
from chute.plan.order import IdOrder, Order
from chute.plan.table import TablePlan, gather_segments

__all__ = ["BudgetPlanner", "budget_sizes"]


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def budget_sizes(
    lengths: list[int], bounds: list[int], max_tokens: int, max_rows: int | None, multiple: int
) -> tuple[list[int], int]:
    """Greedy batch sizes over runs of lengths sorted longest first.

    Args:
        lengths: sample lengths; each run ``bounds[i] .. bounds[i+1]`` is sorted descending.
        bounds: run boundaries (mega-batches), ``0`` first and ``len(lengths)`` last.
        max_tokens: padded tokens per batch.
        max_rows: samples per batch at most (``None``: no limit).
        multiple: rows are padded to a multiple of this.

    Returns:
        ``(sizes, over_budget)``: samples per batch in order, and how many batches are one
        sample longer than ``max_tokens``.

    Example:
        >>> budget_sizes([6, 6, 5, 4, 3, 3, 2], [0, 7], 12, None, 1)
        ([2, 2, 3], 0)
    """
    sizes: list[int] = []
    over = 0
    cap = max_rows or len(lengths) or 1
    for lo, hi in itertools.pairwise(bounds):
        i = lo
        while i < hi:
            width = _round_up(max(1, lengths[i]), multiple)
            rows = min(cap, max_tokens // width)
            if rows == 0:
                rows, over = 1, over + 1
            j = min(hi, i + rows)
            sizes.append(j - i)
            i = j
    return sizes, over


def _cut(lengths: np.ndarray, budget: int, cap: int, multiple: int, sizes: list[int]) -> int:
    """``budget_sizes`` over one run sorted longest first, appending to ``sizes``.

    One Python step per batch, none per sample: a batch's rows follow from its first (longest)
    sample alone, so only the lengths at batch starts are read (about one in 300 at 100M
    lognormal samples; rows for every sample cost 4x more, in int64 divisions). Returns how
    many batches are over the budget.

    Example:
        >>> found = []
        >>> _cut(np.array([6, 6, 5, 4, 3, 3, 2]), 12, 7, 1, found), found
        (0, [2, 2, 3])
    """
    over, i, m = 0, 0, len(lengths)
    while i < m:
        width = -(-max(1, int(lengths[i])) // multiple) * multiple
        r = min(cap, budget // width)
        if r == 0:
            r, over = 1, over + 1
        j = min(m, i + r)
        sizes.append(j - i)
        i = j
    return over


def _even_out(sizes: np.ndarray, world_size: int) -> np.ndarray:
    """Split the biggest batches in two until the count is a multiple of ``world_size``."""
    while len(sizes) % world_size:
        b = int(np.argmax(sizes)) if len(sizes) else 0
        if not len(sizes) or sizes[b] < 2:
            break
        half = int(sizes[b]) // 2
        sizes = np.concatenate([sizes[:b], [sizes[b] - half, half], sizes[b + 1 :]])
    return sizes


def _by_load(
    ordered: np.ndarray, sizes: np.ndarray, weight: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The epoch's batches reordered by their total ``weight``, heaviest first.

    The batches that then form a step carry alike loads; batches without any keep their order.
    """
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    sums = np.concatenate([[0.0], np.cumsum(weight)])  # sequential: the same on every rank
    load = np.where(sizes > 0, sums[starts + sizes] - sums[starts], 0.0)
    perm = np.lexsort((np.arange(len(sizes)), -load))
    return ordered[gather_segments(starts[perm], sizes[perm])], sizes[perm]


class BudgetPlanner(LengthPlanner):
    """Variable-size batches of about ``max_tokens`` padded tokens (see the module docstring).

    Args:
        max_tokens: padded tokens per batch (rows x longest row). Default: ``batch_size x
            max_length``, the memory of ``batch_size`` rows at full length.
        batch_size: with ``max_length``, sets the default ``max_tokens``.
        max_length: the longest sample (the recipe's); only for the default ``max_tokens``.
        max_rows: samples per batch at most (``None``: no limit).
        pad_to_multiple_of: rows are padded to a multiple of this (the collate's setting).
        group_size: optimizer steps per mega-batch (as in ``grouped``).
        grad_accum: micro-batches per optimizer step.
        longest_first: put the steps holding the longest sample first.
        balance: even out image patches, tokens or compute across the ranks of each step
            (``True``, ``"tokens+patches"``, ``"patches"``, ``"cost"``, or weights:
            ``chute.plan.balance.Balance``): the epoch's batches (still cut from mega-batches
            sorted by length) form steps by their patches (compute), heaviest first.
            ``None``: steps are runs of neighbouring batches.
        cost: the compute model of ``balance="cost"`` (``chute.plan.cost.CostModel``, a name,
            or ``{"a": ..., "b": ..., "c": ...}``; default ``DEFAULT_COST``).
        shuffle: a new order every epoch.
        seed: the shuffle's seed.
        drop_last: leave out a last step that would give some ranks an empty batch.
        wrap: not supported (raises).
        lengths: the source's ``Lengths`` (the ``Loader`` binds them).
    """

    kind: ClassVar[str] = "budget"

    def __init__(
        self,
        max_tokens: int | None = None,
        *,
        batch_size: int = 1,
        max_length: int | None = None,
        max_rows: int | None = None,
        pad_to_multiple_of: int | None = None,
        group_size: int = 50,
        grad_accum: int = 1,
        longest_first: bool = True,
        balance: BalanceOption = None,
        cost: CostOption = None,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
        wrap: bool = False,
        lengths: Any = None,
    ):
        super().__init__(shuffle=shuffle, seed=seed, lengths=lengths)
        if wrap:
            raise ConfigError(
                "wrap=True is not supported by plan='budget' (batches have no fixed size to "
                "fill); use the default or drop_last=True"
            )
        batch_size = check_positive("batch_size", batch_size)
        if max_tokens is None:
            if max_length is None:
                raise ConfigError(
                    "plan='budget' needs max_tokens (padded tokens per batch), or max_length "
                    "to default it to batch_size x max_length; e.g. max_tokens=16384"
                )
            max_tokens = batch_size * check_positive("max_length", max_length)
        self.max_tokens = check_positive("max_tokens", max_tokens)
        self.max_rows = None if max_rows is None else check_positive("max_rows", max_rows)
        self.multiple = (
            1
            if pad_to_multiple_of is None
            else check_positive("pad_to_multiple_of", pad_to_multiple_of)
        )
        self.group_size = check_positive("group_size", group_size)
        self.grad_accum = check_positive("grad_accum", grad_accum)
        self.longest_first = bool(longest_first)
        self.balance = Balance.of(balance, cost)
        self.drop_last = bool(drop_last)

    def params(self) -> dict[str, Any]:
        return {
            **self.common_params(),
            "max_tokens": self.max_tokens,
            "max_rows": self.max_rows,
            "pad_to_multiple_of": self.multiple,
            "group_size": self.group_size,
            "grad_accum": self.grad_accum,
            "longest_first": self.longest_first,
            "drop_last": self.drop_last,
            # only when set: states saved before the option existed stay valid
            **({"balance": self.balance.to_json()} if self.balance is not None else {}),
        }

    def plan_order(
        self, order: Order, *, epoch: int, world_size: int, whole: bool = False
    ) -> TablePlan:
        """Mega-batch by mega-batch: each is sorted and cut into batches in turn.

        Memory: two ``int32`` arrays of the epoch's ids and one mega-batch of temporaries; the
        same plan as ``plan_ids`` over the materialised order (``balance`` takes that path).
        """
        if self.balance is not None and world_size > 1:
            return super().plan_order(order, epoch=epoch, world_size=world_size)
        bound = self.require_lengths()
        lengths = bound.pad_lengths  # a preference pair: two rows of its longer side
        n = len(order)
        ordered = order.take_range(0, n, np.empty(n, dtype=id_dtype(len(lengths))))
        table = lookup_table(lengths)  # in memory, narrow: the random lookups run faster
        total = 0
        if whole:  # every valid id once: the same sum in id order, read sequentially
            for lo in range(0, len(lengths), CHUNK):
                part = lengths[lo : lo + CHUNK][bound.length[lo : lo + CHUNK] >= 0]
                total += int(part.sum(dtype=np.int64))
        else:  # the sum does not depend on the order: over its ids as a multiset, on threads
            total = sum(map_multiset(lambda lens: int(lens.sum(dtype=np.int64)), table, order))
        budget = self.max_tokens // bound.sequences
        mega = self._mega(total / n if n else 1.0, budget, world_size)
        found: list[int] = []
        over = 0
        cap = self.max_rows or n or 1
        heads, tops = [], []  # each mega-batch's start and longest (its first, once sorted)

        def cut(
            table: np.ndarray, span: tuple[int, int]
        ) -> tuple[list[int], list[int], list[int], int]:
            starts: list[int] = []
            longest: list[int] = []
            sizes: list[int] = []
            over = 0
            read_lens = lookup(table, ordered[span[0] : span[1]])
            for lo in range(span[0], span[1], mega):
                hi = min(span[1], lo + mega)
                lens = read_lens[lo - span[0] : hi - span[0]]
                perm = argsort_desc(lens)
                ordered[lo:hi] = ordered[lo:hi][perm]
                lens = lens[perm]
                starts.append(lo)
                longest.append(int(lens[0]))
                over += _cut(lens, budget, cap, self.multiple, sizes)
            return starts, longest, sizes, over

        for starts, longest, sizes, more in ordered_map(partial(cut, table), spans(n, mega)):
            heads += starts
            tops += longest
            found += sizes
            over += more
        del table
        heads_a, tops_a = np.asarray(heads, dtype=np.int64), np.asarray(tops, dtype=np.int64)

        def longest_at(limit: int) -> int:  # where argmax(lengths[ordered[:limit]]) is
            inside = heads_a < limit
            top = int(tops_a[inside].max())
            return int(heads_a[inside][np.flatnonzero(tops_a[inside] == top)[0]])

        batch_sizes = np.asarray(found, dtype=np.int64)
        return self._finish(order, ordered, batch_sizes, over, longest_at, epoch, world_size)

    def _mega(self, mean: float, budget: int, world_size: int) -> int:
        """Samples per mega-batch: ``group_size x grad_accum`` steps of average batches."""
        per_batch = max(1, min(self.max_rows or 1 << 62, int(budget // max(1.0, mean))))
        return self.group_size * self.grad_accum * world_size * per_batch

    def plan_ids(self, ids: np.ndarray, *, epoch: int, world_size: int) -> TablePlan:
        bound = self.require_lengths()
        lengths = bound.pad_lengths  # a preference pair: two rows of its longer side
        lens = lengths[ids]
        # a pair is two padded rows, so a batch holds half as many of them
        budget = self.max_tokens // bound.sequences
        mega = self._mega(float(lens.mean()) if len(lens) else 1.0, budget, world_size)
        ordered = ids[sort_within(lens, mega)]
        n = len(ordered)
        runs = [*range(0, n, mega), n]
        found, over = budget_sizes(
            lengths[ordered].tolist(), runs, budget, self.max_rows, self.multiple
        )
        sizes = np.asarray(found, dtype=np.int64)
        balance = self.balance if world_size > 1 else None
        other = None if balance is None else balance.without("tokens")
        load = None if other is None else other.load(other.columns(bound, ordered))
        if load is not None:  # steps of batches with alike patches (compute)
            ordered, sizes = _by_load(ordered, sizes, load)

        def longest_at(limit: int) -> int:
            return int(np.argmax(lengths[ordered[:limit]]))

        return self._finish(IdOrder(ids), ordered, sizes, over, longest_at, epoch, world_size)

    def _finish(
        self,
        order: Order,
        ordered: np.ndarray,
        sizes: np.ndarray,
        over: int,
        longest_at: Callable[[int], int],
        epoch: int,
        world_size: int,
    ) -> TablePlan:
        """Batches (``sizes`` over ``ordered``) evened out over ranks, steps shuffled, dealt."""
        bound = self.require_lengths()
        balance = self.balance if world_size > 1 else None
        sizes = _even_out(sizes, world_size)
        steps, short = divmod(len(sizes), world_size)
        starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        if self.shuffle and steps:
            first = None
            if self.longest_first:
                at = longest_at(int(starts[steps * world_size]))
                first = int(np.searchsorted(starts, at, side="right") - 1) // world_size
            perm = shuffle_units(
                steps, self.grad_accum, derive_seed(self.seed, "steps"), epoch, first
            )
            step_lo = starts[perm * world_size]
            step_len = starts[(perm + 1) * world_size] - step_lo
            shuffled = np.empty_like(ordered)
            head = int(starts[steps * world_size])
            take_segments(ordered, step_lo, step_len, out=shuffled[:head])
            shuffled[head:] = ordered[head:]
            ordered = shuffled
            grid = sizes[: steps * world_size].reshape(steps, world_size)[perm].ravel()
            sizes = np.concatenate([grid, sizes[steps * world_size :]])
        dropped = 0
        if short:
            if self.drop_last:
                dropped = int(sizes[steps * world_size :].sum())
                sizes = sizes[: steps * world_size]
            else:  # too few samples to split further: some ranks get an empty last batch
                sizes = np.concatenate([sizes, np.zeros(world_size - short, dtype=np.int64)])
        bounds = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        dealt = int(bounds[-1])
        stats = {"dropped": dropped, "over_budget": over, "max_tokens": self.max_tokens}
        if balance is not None:
            cost = balance.columns(bound, ordered[:dealt])
            stats["unbalanced_steps"] = balance.unbalanced(cost, bounds, world_size)
        return TablePlan(
            order,
            world_size,
            ids=ordered[:dealt],
            batch_bounds=bounds,
            undealt=ordered[dealt:],
            stats=stats,
        )

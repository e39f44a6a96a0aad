"""``grouped``: length-grouped batches (the LengthGroupedSampler of transformers and XTuner).

Each epoch: shuffle the valid ids, cut the order into mega-batches of ``group_size x grad_accum
x world_size x batch_size`` samples, sort each mega-batch by length (longest first), cut it into
steps of ``world_size x batch_size`` consecutive samples, and give each rank ``batch_size``
consecutive samples of each step. Then shuffle the steps, so training does not go from long to
short inside every mega-batch. ``world_size=2``, ``batch_size=2`` (lengths shown)::

    shuffled     37  5 22 90 14 61 | 8 43 70 12 29 51 ...     (mega-batch of 3 steps here)
    sorted       90 70 61 51 43 37 | 29 22 14 12  8  5
    steps        [90 70 | 61 51]  [43 37 | 29 22]  [14 12 | 8 5]
                  rank0   rank1
    shuffled     step 0 (longest first), then the others in random order

Why it pads less than XTuner's sampler, which sorts the same mega-batches but deals the sorted
order to ranks round-robin (``indices[rank::world_size]``): there, each rank's batch spans the
whole step (every ``world_size``-th sample of ``world_size x batch_size``); here it is a run of
``batch_size`` neighbours, so each row is padded to a nearer longest. Ranks still get similar
lengths in each step (the step is one narrow slice of a sorted mega-batch), which keeps them in
balance.

Gradient accumulation (``grad_accum=A``): mega-batches hold whole optimizer steps and steps are
shuffled in blocks of ``A``, so the ``A`` micro-batches of one optimizer step are neighbours in
length (their per-token loss weights stay even). ``longest_first`` moves the block holding the
longest sample to the start, so an out-of-memory shows in the first step, not hours in.

The last step may be partial: it is split evenly over the ranks (or dropped with
``drop_last``), exactly as the random plan does. Every valid id is dealt once per epoch.

``by_modality=True`` is LLaVA's ``group_by_modality_length``: samples with image tokens and
text-only samples are grouped apart, so every step holds one modality (a batch of text never
waits on the vision tower, and a multimodal batch is not padded to a long text sample). Each
modality is length-grouped as above into whole steps; only the two remainders (less than a step
each) share the last step or two. The steps are then shuffled together, so the two modalities
alternate at random through the epoch::

    image samples   [i i i i | i i i i | i i]        steps of world_size x batch_size = 4
    text samples    [t t t t | t t t t | t t t t | t]
    steps           [i i i i] [t t t t] [t t t t] [i i i i] [t t t t] [i i t t] [t]  (shuffled,
                                                                        the mixed rest last)

Example:
    >>> import numpy as np
    >>> planner = GroupedPlanner(2, group_size=2, lengths=np.arange(1, 17))
    >>> plan = planner.build(16, epoch=0, world_size=2)
    >>> plan.num_batches, sorted(np.concatenate(
    ...     [plan.batch(r, k) for r in range(2) for k in range(4)]).tolist()) == list(range(16))
    (4, True)
"""

from __future__ import annotations

from functools import partial
from typing import Any, ClassVar

import numpy as np

from chute.errors import ConfigError
from chute.plan.base import check_positive
from chute.plan.bulk import id_dtype, lookup, lookup_table, ordered_map, sort_desc, spans
from chute.plan.lengthed import LengthPlanner, derive_seed, shuffle_units, sort_within
from chute.plan.order import IdOrder, Order
from chute.plan.table import TablePlan, even_bounds, gather_segments

__all__ = ["GroupedPlanner", "mixed_batches"]


class GroupedPlanner(LengthPlanner):
    """Batches of ``batch_size`` samples of similar length (see the module docstring).

    Args:
        batch_size: samples per batch per rank.
        group_size: optimizer steps per mega-batch (transformers' ``mega_batch_mult``; XTuner
            and transformers use 50). Larger: less padding, less randomness.
        grad_accum: micro-batches per optimizer step (gradient accumulation).
        longest_first: put the steps holding the longest sample first (OOM shows at once).
        by_modality: keep samples with images and text-only samples in separate steps
            (needs the lengths' ``image_tokens``).
        shuffle: a new order every epoch (``False``: sort the source order, no step shuffle).
        seed: the shuffle's seed.
        drop_last: leave out the last partial step.
        wrap: not supported (raises); use the default or ``drop_last``.
        lengths: the source's ``Lengths`` (the ``Loader`` binds them).
    """

    kind: ClassVar[str] = "grouped"

    def __init__(
        self,
        batch_size: int,
        *,
        group_size: int = 50,
        grad_accum: int = 1,
        longest_first: bool = True,
        by_modality: bool = False,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
        wrap: bool = False,
        lengths: Any = None,
    ):
        super().__init__(shuffle=shuffle, seed=seed, lengths=lengths)
        if wrap:
            raise ConfigError(
                "wrap=True is not supported by plan='grouped' (filling the last step would "
                "repeat samples out of their length group); use the default (the last step is "
                "split evenly over ranks) or drop_last=True"
            )
        self.batch_size = check_positive("batch_size", batch_size)
        self.group_size = check_positive("group_size", group_size)
        self.grad_accum = check_positive("grad_accum", grad_accum)
        self.longest_first = bool(longest_first)
        self.by_modality = bool(by_modality)
        self.drop_last = bool(drop_last)

    def params(self) -> dict[str, Any]:
        return {
            **self.common_params(),
            "batch_size": self.batch_size,
            "group_size": self.group_size,
            "grad_accum": self.grad_accum,
            "longest_first": self.longest_first,
            **({"by_modality": True} if self.by_modality else {}),
            "drop_last": self.drop_last,
        }

    def plan_order(
        self, order: Order, *, epoch: int, world_size: int, whole: bool = False
    ) -> TablePlan:
        """Mega-batch by mega-batch: each is read, sorted and written where its steps go.

        The order is read in chunks (never held), each mega-batch sorted on its own (on
        several threads), and its steps written straight to their shuffled places: one
        ``int32`` array of the epoch's ids and a chunk of temporaries; the same plan as
        ``plan_ids`` over the materialised order. The block holding the longest sample is
        known only at the end; moving it first is a swap of two blocks.
        """
        if self.by_modality:
            return super().plan_order(order, epoch=epoch, world_size=world_size)
        lengths = self.require_lengths().pad_lengths  # a pair: its longer side
        n = len(order)
        step = world_size * self.batch_size
        mega = self.group_size * self.grad_accum * step
        full = n // step
        dtype = id_dtype(len(lengths))
        shuffled = self.shuffle and full > 0
        seed = derive_seed(self.seed, "steps")
        base = shuffle_units(full, self.grad_accum, seed, epoch) if shuffled else None
        where = np.arange(full, dtype=np.int64)  # output step of each sorted step
        if base is not None:
            where[base] = np.arange(full, dtype=np.int64)
        out = np.empty(n, dtype=dtype)
        grid = out[: full * step].reshape(full, step)

        table = lookup_table(lengths)  # in memory, narrow: the random lookups run faster

        def sort(
            table: np.ndarray, span: tuple[int, int]
        ) -> list[tuple[int, int]]:  # (start, longest) each
            lo0, hi0 = span
            read = order.take_range(lo0, hi0, np.empty(hi0 - lo0, dtype=dtype))
            read_lens = lookup(table, read)
            tops = []
            for lo in range(lo0, hi0, mega):
                ids = read[lo - lo0 : min(hi0, lo + mega) - lo0]
                lens = read_lens[lo - lo0 : min(hi0, lo + mega) - lo0]
                ids = sort_desc(ids, lens)
                whole_steps = min(len(ids) // step, full - lo // step)
                first_step = lo // step
                grid[where[first_step : first_step + whole_steps]] = ids[
                    : whole_steps * step
                ].reshape(whole_steps, step)
                rest = ids[whole_steps * step :]
                if len(rest):  # the last partial step stays last, sorted
                    out[full * step : full * step + len(rest)] = rest
                tops.append((lo, int(lens.max())))
            return tops

        longest, first = -1, None
        for tops in ordered_map(partial(sort, table), spans(n, mega)):
            for lo, top in tops:
                if lo < full * step and top > longest:  # sorted: the group's first
                    longest, first = top, lo // step
        del table
        if base is not None and self.longest_first and first is not None:
            final = shuffle_units(full, self.grad_accum, seed, epoch, first)
            _move_first(grid, where, base, final)
        return self._table(order, out, world_size)

    def _table(self, order: Order, ordered: np.ndarray, world_size: int) -> TablePlan:
        bounds = even_bounds(len(ordered), world_size, self.batch_size, self.drop_last)
        dealt = int(bounds[-1])
        return TablePlan(
            order,
            world_size,
            ids=ordered[:dealt],
            batch_bounds=bounds,
            undealt=ordered[dealt:],
            stats={"dropped": len(ordered) - dealt},
        )

    def plan_ids(self, ids: np.ndarray, *, epoch: int, world_size: int) -> TablePlan:
        bound = self.require_lengths()
        lengths = bound.pad_lengths  # a pair: its longer side
        step = world_size * self.batch_size
        mega = self.group_size * self.grad_accum * step
        image = bound.image_tokens if self.by_modality else None
        if image is None:
            ordered = ids[sort_within(lengths[ids], mega)]
        else:
            ordered = _by_modality(ids, lengths, image[ids] > 0, mega, step)
        full = len(ordered) // step
        if self.shuffle and full:
            first = None
            if self.longest_first:
                first = int(np.argmax(lengths[ordered[: full * step]])) // step
            steps = shuffle_units(
                full, self.grad_accum, derive_seed(self.seed, "steps"), epoch, first
            )
            head = ordered[gather_segments(steps * step, np.full(full, step))]
            ordered = np.concatenate([head, ordered[full * step :]])
        bounds = even_bounds(len(ordered), world_size, self.batch_size, self.drop_last)
        dealt = int(bounds[-1])
        stats: dict[str, Any] = {"dropped": len(ordered) - dealt}
        if image is not None:
            stats["mixed_batches"] = mixed_batches(image[ordered[:dealt]] > 0, bounds)
        return TablePlan(
            IdOrder(ids),
            world_size,
            ids=ordered[:dealt],
            batch_bounds=bounds,
            undealt=ordered[dealt:],
            stats=stats,
        )


def _move_first(grid: np.ndarray, where: np.ndarray, base: np.ndarray, final: np.ndarray) -> None:
    """Turn ``grid`` (rows: steps laid out in the ``base`` order) into the ``final`` order.

    ``where[s]``: the row of step ``s`` in ``base``. ``final`` is ``base`` with two blocks of
    steps swapped (the one holding the longest sample moved first): only the rows that differ
    move, through a copy of just those (two blocks; with a partial block, the rows between).

    Example:
        >>> grid = np.array([[1, 1], [2, 2], [3, 3]])
        >>> base, final = np.array([0, 1, 2]), np.array([2, 1, 0])
        >>> _move_first(grid, np.array([0, 1, 2]), base, final); grid[:, 0].tolist()
        [3, 2, 1]
    """
    differ = np.flatnonzero(base != final)
    if len(differ):
        grid[differ] = grid[where[final[differ]]]


def _by_modality(
    ids: np.ndarray, lengths: np.ndarray, multimodal: np.ndarray, mega: int, step: int
) -> np.ndarray:
    """Each modality length-grouped into whole steps; the two remainders sorted together last."""
    heads, rests = [], []
    for part in (ids[multimodal], ids[~multimodal]):
        ordered = part[sort_within(lengths[part], mega)]
        whole = len(ordered) // step * step
        heads.append(ordered[:whole])
        rests.append(ordered[whole:])
    rest = np.concatenate(rests)
    rest = rest[sort_within(lengths[rest], max(1, len(rest)))]
    return np.concatenate([*heads, rest])


def mixed_batches(multimodal: np.ndarray, bounds: np.ndarray) -> int:
    """Batches holding samples of both modalities (``multimodal``: one flag per dealt sample).

    Example:
        >>> mixed_batches(np.array([True, True, False, True]), np.array([0, 2, 4]))
        1
    """
    sizes = np.diff(bounds)
    starts = bounds[:-1][sizes > 0]
    if not len(starts):
        return 0
    flags = multimodal.astype(np.int8)
    some = np.maximum.reduceat(flags, starts)
    every = np.minimum.reduceat(flags, starts)
    return int(np.count_nonzero(some != every))

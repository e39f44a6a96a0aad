"""``MixturePlanner``: any plan over the samples a mixture selects for each epoch.

The epoch's selection (``chute.plan.mixture_selection.Selection``: which global ids each dataset gives,
shuffled together) becomes the *order* an ordinary planner deals, so every guarantee of that
planner carries over unchanged: each selected item once per epoch over ranks, equal batch
counts, exact resume, elastic resume (``remaining`` of the plan is the rest of that order)::

    Selection.order(epoch) ──► inner.build(n, epoch, world, order=...) ──► Plan
      (random, grouped, budget, packed: the same planners as for one dataset)

``batching="per_dataset"`` makes every step (the batches of all ranks at one step) come from one
dataset: the inner planner plans each dataset's share alone, and the steps of all datasets are
interleaved by a seeded shuffle, so at any point the next step's dataset is drawn in proportion
to the steps each still has (with ``shuffle=False``: spread evenly)::

    dataset a (6 steps)  a0 a1 a2 a3 a4 a5      interleaved   a0 b0 a1 a2 b1 a3 a4 b2 a5
    dataset b (3 steps)  b0 b1 b2               (seeded)      every step from one dataset

A dataset's last step may be short (split evenly over ranks, as any last step); every rank still
gets the same number of batches.

One dataset read alone (files, a source, a cache: no ``Mixture``) is a mixture of one whose
selection is every sample in the inner planner's own order: ``MixturePlanner(inner)`` without a
selection passes every call to ``inner``, so its plans, ``params()`` and resume states are the
inner planner's own, at no cost (nothing per sample, no plan held twice). The Loader plans
through a ``MixturePlanner`` in both cases, so exact-once, resume and the per-dataset counts have
one implementation.

Example:
    >>> from chute.plan import RandomPlanner
    >>> from chute.plan.mixture_selection import Selection, Share
    >>> sel = Selection([Share("a", 8), Share("b", 4, repeat=2)], seed=0)
    >>> planner = MixturePlanner(RandomPlanner(2, seed=0), sel, batching="per_dataset")
    >>> plan = planner.build(12, epoch=0, world_size=2)
    >>> steps = [np.concatenate([plan.batch(r, k) for r in range(2)]) for k in range(4)]
    >>> [sorted(set(sel.dataset_of(s).tolist())) for s in steps]
    [[0], [0], [1], [1]]
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from chute.errors import ConfigError
from chute.plan.base import Plan, Planner
from chute.plan.lengthed import LengthPlanner, derive_seed
from chute.plan.mixture_selection import Selection
from chute.plan.order import IdOrder, Order
from chute.plan.shard import BatchPlan
from chute.plan.shuffle import Permutation
from chute.plan.table import TablePlan, gather_segments

__all__ = ["BATCHING", "MixturePlanner", "Switch", "multiset_minus"]

BATCHING = ("mixed", "per_dataset")


@dataclass(frozen=True)
class Switch:
    """A mixture change in the middle of ``epoch``: what the earlier mixture had delivered.

    Attributes:
        epoch: the epoch the change happened in.
        previous: the earlier planner's mixture identity (with its own switch, if any).
        segments: the layouts that earlier mixture ran in this epoch, oldest first,
            ``(world_size, steps consumed)`` each, the last one included.
    """

    epoch: int
    previous: Mapping[str, Any]
    segments: tuple[tuple[int, int], ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "previous": dict(self.previous),
            "segments": [[w, k] for w, k in self.segments],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Switch:
        try:
            segments = tuple((int(w), int(k)) for w, k in data["segments"])
            return cls(int(data["epoch"]), dict(data["previous"]), segments)
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"the state's mixture_switch is damaged: {exc!r}") from None


class MixturePlanner(Planner):
    """The plans of ``inner`` over the samples ``selection`` gives each epoch.

    Args:
        inner: the planner that deals the selection (random, grouped, budget, packed); a
            length-aware one must have the lengths of every global id bound.
        selection: which samples each epoch takes; ``None``: one dataset, every sample once
            per epoch in ``inner``'s own order (``sole``: ``inner`` plans it unchanged).
        batching: ``"mixed"`` (batches mix datasets) or ``"per_dataset"`` (each step from one
            dataset).
        switch: a mixture change inside an epoch (see ``with_switch``).

    Example:
        >>> from chute.plan import RandomPlanner
        >>> inner = RandomPlanner(4, seed=3)
        >>> sole = MixturePlanner(inner)
        >>> sole.params() == inner.params(), sole.sole
        (True, True)
        >>> sole.build(10, epoch=1, world_size=2).batch(1, 0).tolist()  # inner's own plan
        [1, 2, 4, 7]
        >>> inner.build(10, epoch=1, world_size=2).batch(1, 0).tolist()
        [1, 2, 4, 7]
    """

    kind: ClassVar[str] = "mixture"
    _CACHED_BUILDS = 2

    def __init__(
        self,
        inner: Planner,
        selection: Selection | None = None,
        *,
        batching: str = "mixed",
        switch: Switch | None = None,
    ):
        if isinstance(inner, MixturePlanner):
            raise ConfigError("a MixturePlanner cannot wrap another MixturePlanner")
        if batching not in BATCHING:
            raise ConfigError(f"batching must be one of {BATCHING}, got {batching!r}")
        if batching == "per_dataset" and getattr(inner, "wrap", False):
            raise ConfigError(
                "wrap=True cannot fill a step from one dataset with another's samples under "
                "batching='per_dataset'; use the default (the last step of each dataset is "
                "split evenly over ranks) or drop_last=True"
            )
        if selection is None and (batching != "mixed" or switch is not None):
            raise ConfigError(
                "one dataset read alone has no datasets to batch apart and no mixture to switch "
                "from (a state saved over a mixture resumes only with that mixture)"
            )
        self.inner = inner
        self.selection = selection
        self.batching = batching
        self.switch = switch
        self._built: OrderedDict[tuple[int, int, int], Plan] = OrderedDict()
        self._switch_base: np.ndarray | None = None

    @property
    def sole(self) -> bool:
        """One dataset dealt by ``inner`` as it is (no selection): plans and params are its own."""
        return self.selection is None

    def __getattr__(self, name: str) -> object:
        # One dataset's loader.planner was the strategy itself before it was wrapped: its
        # attributes (max_length, batch_size, ...) stay readable through the wrapper. Only for
        # `sole`: a mixture's inner planner deals the selection, not the samples.
        if name.startswith("_") or name in ("inner", "selection"):
            raise AttributeError(name)
        if self.selection is None:
            return getattr(self.inner, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def needs_lengths(self) -> bool:
        return isinstance(self.inner, LengthPlanner)

    @property
    def lengths(self) -> Any:
        return getattr(self.inner, "lengths", None)

    def identity(self) -> dict[str, Any]:
        """The mixture part of ``params()``: the selection's identity and the batching.

        One dataset (``sole``) has none: its ``params()`` are ``inner``'s, so a resume state
        of a loader over one dataset is the same with or without this wrapper.
        """
        if self.selection is None:
            return {}
        return {**self.selection.identity(), "batching": self.batching}

    def params(self) -> dict[str, Any]:
        if self.selection is None:
            return self.inner.params()
        return {**self.inner.params(), "mixture": self.identity()}

    def with_selection(self, selection: Selection | None) -> MixturePlanner:
        """This planner over another selection (e.g. the one a resume state was saved under)."""
        return MixturePlanner(self.inner, selection, batching=self.batching)

    def with_switch(self, switch: Switch | None) -> MixturePlanner:
        """This planner where ``switch.epoch`` deals only what the earlier mixture had not.

        The epoch's selection under this mixture, minus the samples the earlier mixture
        delivered in that epoch (as a multiset: a sample this mixture takes twice and the
        earlier one delivered once is dealt once more), in this mixture's shuffled order.
        """
        return MixturePlanner(self.inner, self.selection, batching=self.batching, switch=switch)

    # -- building ----------------------------------------------------------------------------

    def build(
        self, num_samples: int, *, epoch: int, world_size: int, order: Order | None = None
    ) -> Plan:
        selection = self.selection
        if selection is None:  # one dataset: the inner planner's plan, nothing kept here
            return self.inner.build(num_samples, epoch=epoch, world_size=world_size, order=order)
        key = (int(num_samples), int(epoch), int(world_size))
        if order is None and key in self._built:
            self._built.move_to_end(key)
            return self._built[key]
        given = order
        if order is None:
            order = self.epoch_order(num_samples, int(epoch))
        if self.batching == "mixed":
            plan = self.inner.build(num_samples, epoch=epoch, world_size=world_size, order=order)
        else:
            plan = self._per_dataset(selection, num_samples, int(epoch), int(world_size), order)
        if given is None:
            self._built[key] = plan
            while len(self._built) > self._CACHED_BUILDS:
                self._built.popitem(last=False)
        return plan

    def epoch_order(self, num_samples: int, epoch: int) -> Order:
        """The ids ``epoch`` deals, in order (after a switch: what the earlier mixture left)."""
        if self.selection is None:  # one dataset: the inner planner's own order
            return self.inner.build(num_samples, epoch=epoch, world_size=1).order
        if self.switch is None or epoch != self.switch.epoch:
            return self.selection.order(epoch)
        if self._switch_base is None:
            mine = self.selection.order(epoch).materialize()
            self._switch_base = multiset_minus(mine, self.delivered_before(num_samples))
        return IdOrder(self._switch_base)

    def delivered_before(self, num_samples: int) -> np.ndarray:
        """The ids the earlier mixture delivered in the switch's epoch (repeats included)."""
        switch = self.switch
        if switch is None or self.selection is None:
            return np.empty(0, dtype=np.int64)
        previous = self.with_selection(self.selection.with_amounts(switch.previous))
        if switch.previous.get("switch") is not None:
            previous = previous.with_switch(Switch.from_json(switch.previous["switch"]))
        owed = previous.epoch_order(num_samples, switch.epoch).materialize()
        plan: Plan | None = None
        consumed = 0
        for ws, steps in switch.segments:
            rest = None if plan is None else plan.remaining(consumed)
            plan = previous.build(num_samples, epoch=switch.epoch, world_size=ws, order=rest)
            if not 0 <= steps <= plan.num_batches:
                raise ConfigError(
                    f"the state's mixture_switch says {steps} steps of epoch {switch.epoch} "
                    f"ran on {ws} ranks, but that plan has {plan.num_batches}; was it edited?"
                )
            consumed = steps
        if plan is None:
            return np.empty(0, dtype=np.int64)
        return multiset_minus(owed, plan.remaining(consumed).materialize())

    def _per_dataset(
        self, selection: Selection, n: int, epoch: int, world_size: int, order: Order
    ) -> TablePlan:
        ids = order.materialize()
        dataset = selection.dataset_of(ids)
        tables: list[TablePlan] = []
        for d in range(len(selection.shares)):
            mine = ids[dataset == d]
            if not len(mine):
                continue
            plan = self.inner.build(n, epoch=epoch, world_size=world_size, order=IdOrder(mine))
            tables.append(as_table(plan))
        steps = [t.num_batches for t in tables]
        which = np.repeat(np.arange(len(tables)), steps)
        index = np.concatenate([np.arange(s) for s in steps]) if steps else np.empty(0, int)
        if getattr(self.inner, "shuffle", True):
            seed = derive_seed(selection.seed, "mixture-steps")
            perm = Permutation(len(which), seed, epoch).materialize()
        else:  # spread each dataset's steps evenly, in proportion
            perm = np.argsort(
                (index + 0.5) / np.maximum(1, np.asarray(steps))[which], kind="stable"
            )
        return interleave(IdOrder(ids), world_size, tables, which[perm], index[perm])

    def __repr__(self) -> str:
        if self.selection is None:  # one dataset: its planner (what a Loader's repr showed)
            return repr(self.inner)
        return f"MixturePlanner({self.inner!r}, {self.selection!r}, batching={self.batching!r})"


def as_table(plan: Plan) -> TablePlan:
    """``plan`` as a ``TablePlan`` (ids in dealing order, step-major batch bounds)."""
    if isinstance(plan, TablePlan):
        return plan
    w = plan.world_size
    if isinstance(plan, BatchPlan):
        full = min(plan.full_steps, plan.num_batches)
        parts = [plan.order.take(np.arange(full * plan.step, dtype=np.int64))]
        sizes = [np.full(full * w, plan.batch_size, dtype=np.int64)]
        for k in range(full, plan.num_batches):
            batches = [plan.batch(r, k) for r in range(w)]
            parts += batches
            sizes.append(np.array([len(b) for b in batches], dtype=np.int64))
    else:
        batches = [plan.batch(r, k) for k in range(plan.num_batches) for r in range(w)]
        parts = batches
        sizes = [np.array([len(b) for b in batches], dtype=np.int64)]
    ids = np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)
    bounds = np.concatenate([[0], np.cumsum(np.concatenate(sizes))]).astype(np.int64)
    undealt = None
    if isinstance(plan, BatchPlan) and plan.remainder == "drop":
        undealt = plan.order.tail(plan.full_steps * plan.step).materialize()
    return TablePlan(plan.order, w, ids=ids, batch_bounds=bounds, undealt=undealt)


def interleave(
    order: Order,
    world_size: int,
    tables: Sequence[TablePlan],
    which: np.ndarray,
    step: np.ndarray,
) -> TablePlan:
    """One plan whose ``i``-th step is step ``step[i]`` of ``tables[which[i]]``."""
    w = world_size
    packed = [t.row_bounds is not None for t in tables]
    if any(packed) and not all(packed):
        raise ConfigError("internal error: packed and unpacked plans cannot be interleaved")
    split = bool(tables) and all(t.spans is not None for t in tables)
    id_parts, unit_parts = [], []
    unit_base = 0
    unit_offsets = []
    for t in tables:
        unit_offsets.append(unit_base)
        id_parts.append(t.ids.astype(np.int64))
        units = t.row_bounds if t.row_bounds is not None else np.arange(len(t.ids) + 1)
        unit_parts.append(np.diff(units))  # ids per unit (a packed row, or one sample)
        unit_base += len(units) - 1
    all_ids = np.concatenate(id_parts) if id_parts else np.empty(0, dtype=np.int64)
    unit_sizes = np.concatenate(unit_parts) if unit_parts else np.empty(0, dtype=np.int64)
    unit_starts = np.concatenate([[0], np.cumsum(unit_sizes)]).astype(np.int64)
    # each step: its w batches' units, contiguous in its table
    t_of = np.asarray(which, dtype=np.int64)
    k_of = np.asarray(step, dtype=np.int64)
    first_batch = k_of * w
    unit_lo = np.empty(len(t_of), dtype=np.int64)
    batch_sizes = np.empty((len(t_of), w), dtype=np.int64)
    for i, t in enumerate(tables):
        at = np.flatnonzero(t_of == i)
        if not at.size:
            continue
        bb = t.batch_bounds
        lo = bb[first_batch[at]]
        unit_lo[at] = lo + unit_offsets[i]
        cols = first_batch[at][:, None] + np.arange(w + 1)
        batch_sizes[at] = np.diff(bb[cols], axis=1)
    unit_count = batch_sizes.sum(axis=1)
    units = gather_segments(unit_lo, unit_count)
    ids_lo = unit_starts[units]
    ids_n = unit_sizes[units]
    take = gather_segments(ids_lo, ids_n)
    batch_bounds = np.concatenate([[0], np.cumsum(batch_sizes.ravel())]).astype(np.int64)
    row_bounds = None
    if all(packed) and tables:
        row_bounds = np.concatenate([[0], np.cumsum(ids_n)]).astype(np.int64)
    spans = None
    if split:
        starts = np.concatenate([t.spans[0] for t in tables if t.spans is not None])[take]
        ends = np.concatenate([t.spans[1] for t in tables if t.spans is not None])[take]
        spans = (starts, ends)
    undealt = [t.undealt.astype(np.int64) for t in tables]
    stats: dict[str, Any] = {}
    for t in tables:
        for k, v in t.stats.items():
            if isinstance(v, int | np.integer) and k != "max_tokens":
                stats[k] = stats.get(k, 0) + int(v)
    return TablePlan(
        order,
        w,
        ids=all_ids[take],
        batch_bounds=batch_bounds,
        row_bounds=row_bounds,
        spans=spans,
        undealt=np.concatenate(undealt) if undealt else None,
        stats=stats,
    )


def multiset_minus(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a`` without one occurrence per occurrence in ``b`` (the earliest ones), order kept.

    Example:
        >>> multiset_minus(np.array([5, 3, 5, 7, 5]), np.array([5, 7, 9])).tolist()
        [3, 5, 5]
    """
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    if not len(a) or not len(b):
        return a
    values, counts = np.unique(b, return_counts=True)
    order = np.argsort(a, kind="stable")
    sorted_a = a[order]
    occurrence = np.arange(len(a)) - np.searchsorted(sorted_a, sorted_a, side="left")
    pos = np.minimum(np.searchsorted(values, sorted_a), len(values) - 1)
    drop = (values[pos] == sorted_a) & (occurrence < counts[pos])
    keep = np.ones(len(a), dtype=bool)
    keep[order[drop]] = False
    return a[keep]

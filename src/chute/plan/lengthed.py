"""What length-aware planners share: their lengths, the epoch's order, seeds, a small build cache.

A length-aware planner holds the ``Lengths`` of the source (``with_lengths`` binds them; the
``Loader`` does it with ``chute.lengths.lengths_of``). Rejected samples (negative length) are
excluded up-front: an epoch's order is a fresh shuffle of the *valid* ids only::

    lengths   [12, -1, 40, 7, -1, 33]      valid ids  [0, 2, 3, 5]
    epoch e   Permutation(4, seed, e) ──►  order      [3, 0, 5, 2]   (each valid id once)

``params()`` records the lengths' fingerprint (counts and a hash), so a resume state saved
with other lengths (another recipe, changed data) is refused. Extra shuffles (of steps, of packed
rows) use their own ``Permutation`` with a seed derived from the run's seed, so results depend
only on chute's arithmetic, never on numpy's random generators.
"""

from __future__ import annotations

import copy
import hashlib
from collections import OrderedDict
from typing import Any, ClassVar

import numpy as np

from chute._internal.progress import progress
from chute.errors import ConfigError
from chute.lengths.base import Lengths
from chute.plan.base import Planner, check_positive
from chute.plan.bulk import id_dtype, valid_ids
from chute.plan.order import IdOrder, Mapped, Order, Reported, Sequential
from chute.plan.shared import PlanShare
from chute.plan.shuffle import ALGORITHM, Permutation
from chute.plan.table import TablePlan, gather_segments

__all__ = ["LengthPlanner", "derive_seed", "shuffle_units", "sort_within"]


def derive_seed(seed: int, purpose: str) -> int:
    """A seed for one purpose (``"steps"``, ``"rows"``), derived from the run's seed.

    Example:
        >>> derive_seed(0, "steps") != derive_seed(0, "rows")
        True
    """
    digest = hashlib.blake2b(f"{seed}:{purpose}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def shuffle_units(
    num_steps: int, unit: int, seed: int, epoch: int, first: int | None = None
) -> np.ndarray:
    """A shuffled order of ``num_steps`` steps that keeps blocks of ``unit`` steps together.

    Steps ``[0, unit)``, ``[unit, 2 unit)``, ... are blocks (an optimizer step's micro-batches
    under gradient accumulation); the blocks are permuted. ``first``: the step whose block goes
    first (e.g. the one holding the longest sample).

    Example:
        >>> sorted(shuffle_units(7, 2, seed=1, epoch=0).tolist())
        [0, 1, 2, 3, 4, 5, 6]
    """
    if num_steps == 0:
        return np.empty(0, dtype=np.int64)
    blocks = -(-num_steps // unit)
    order = Permutation(blocks, seed, epoch).materialize()
    if first is not None:
        at = int(np.flatnonzero(order == first // unit)[0])
        order[[0, at]] = order[[at, 0]]
    starts = order * unit
    sizes = np.minimum(unit, num_steps - starts)
    return gather_segments(starts, sizes)


class LengthPlanner(Planner):
    """Base of the grouped, budget and packed planners (see the module docstring).

    Args:
        shuffle: a new order every epoch (``False``: valid ids in source order).
        seed: the run's seed.
        lengths: the source's ``Lengths`` (or an array); bound later by ``with_lengths``.
    """

    kind: ClassVar[str]
    needs_lengths: ClassVar[bool] = True
    _CACHED_BUILDS = 2

    def __init__(self, *, shuffle: bool = True, seed: int = 0, lengths: Any = None):
        Permutation(0, seed, 0)  # validates the seed with a message naming it
        self.shuffle = bool(shuffle)
        self.seed = int(seed)
        self.lengths: Lengths | None = None if lengths is None else Lengths.of(lengths)
        self.share: PlanShare | None = None
        self._built: OrderedDict[tuple[int, int, int], TablePlan] = OrderedDict()

    def with_lengths(self, lengths: Any) -> LengthPlanner:
        """A copy of this planner that plans over ``lengths``."""
        other = copy.copy(self)
        other.lengths = Lengths.of(lengths)
        other._built = OrderedDict()
        return other

    def with_share(self, share: PlanShare | None) -> LengthPlanner:
        """A copy of this planner whose epoch plans are built once per node and memory-mapped.

        ``share`` (``chute.plan.shared.PlanShare``): the folder the ranks of a node meet at.
        Plans are the same either way; only who builds them and where they live changes.
        """
        other = copy.copy(self)
        other.share = share
        other._built = OrderedDict()
        return other

    def require_lengths(self) -> Lengths:
        if self.lengths is None:
            raise ConfigError(
                f"plan={self.kind!r} needs the length of every sample: pass lengths= (an array "
                f"or chute.lengths.lengths_of(source, recipe)), or use it through "
                f"Loader(..., plan={self.kind!r}), which computes them"
            )
        return self.lengths

    def common_params(self) -> dict[str, Any]:
        lengths = self.require_lengths()
        return {
            "kind": self.kind,
            "shuffle": self.shuffle,
            "shuffle_algorithm": ALGORITHM if self.shuffle else None,
            "seed": self.seed,
            "lengths": lengths.fingerprint(),
        }

    def epoch_ids(self, epoch: int) -> np.ndarray:
        """The epoch's order of valid ids (a shuffle, or source order), as int64."""
        return self.epoch_order(epoch).materialize()

    def epoch_order(self, epoch: int) -> Order:
        """The epoch's order of valid ids, lazily: a shuffle of the valid ids, or source order.

        Nothing per sample is held when no sample is rejected; otherwise only the valid ids
        (``int32`` below 2**31 samples).
        """
        lengths = self.require_lengths()
        n = len(lengths)
        if lengths.num_valid == n:
            return Permutation(n, self.seed, epoch) if self.shuffle else Sequential(n)
        valid = valid_ids(lengths.length)
        if not self.shuffle:
            return IdOrder(valid)
        return Mapped(Permutation(len(valid), self.seed, epoch), valid)

    def build(
        self, num_samples: int, *, epoch: int, world_size: int, order: Order | None = None
    ) -> TablePlan:
        lengths = self.require_lengths()
        if num_samples != len(lengths):
            raise ConfigError(
                f"plan={self.kind!r} has lengths for {len(lengths)} samples but the source has "
                f"{num_samples}; compute the lengths of this source (lengths_of(source, recipe))"
            )
        world_size = check_positive("world_size", world_size)
        key = (num_samples, int(epoch), world_size)
        if order is None and key in self._built:
            self._built.move_to_end(key)
            return self._built[key]
        dealt = self.epoch_order(int(epoch)) if order is None else order

        def make() -> TablePlan:
            # a bar over the reading of the order: at 100M samples a build takes tens of seconds
            with progress(len(dealt), f"plan {self.kind}", unit="ids") as bar:
                plan = self.plan_order(
                    Reported(dealt, bar.update),
                    epoch=int(epoch),
                    world_size=world_size,
                    whole=order is None,
                )
            plan.order = dealt  # the plan keeps the order itself, not the reporting wrapper
            return plan

        if order is None and self.share is not None:
            params = self.params()
            plan = self.share.fetch(make, params, dealt, num_samples, int(epoch), world_size)
        else:
            plan = make()
        if order is None:
            self._built[key] = plan
            while len(self._built) > self._CACHED_BUILDS:
                self._built.popitem(last=False)
        return plan

    def plan_order(
        self, order: Order, *, epoch: int, world_size: int, whole: bool = False
    ) -> TablePlan:
        """The plan dealing exactly the ids of ``order``, in its order, over ``world_size`` ranks.

        ``whole``: the order deals every valid id exactly once (the epoch's own order), so
        sums and counts over it may be read from the lengths in id order. This default materialises the order (``int32`` ids where they fit) for ``plan_ids``;
        planners that can read it chunk by chunk override it.
        """
        ids = order.materialize(id_dtype(len(self.require_lengths())))
        return self.plan_ids(ids, epoch=epoch, world_size=world_size)

    def plan_ids(self, ids: np.ndarray, *, epoch: int, world_size: int) -> TablePlan:
        """The plan dealing exactly ``ids`` (global sample ids) over ``world_size`` ranks."""
        raise NotImplementedError

    def __repr__(self) -> str:
        shown = {k: v for k, v in self.params().items() if k not in ("kind", "lengths")}
        args = ", ".join(f"{k}={v!r}" for k, v in shown.items())
        return f"{type(self).__name__}({args})"


def sort_within(lengths: np.ndarray, group: int) -> np.ndarray:
    """Positions sorted by length, longest first, within consecutive groups of ``group``.

    Stable: equal lengths keep their (shuffled) order.

    Example:
        >>> sort_within(np.array([1, 5, 3, 9, 2]), 3).tolist()
        [1, 2, 0, 3, 4]
    """
    n = len(lengths)
    out = np.empty(n, dtype=np.int64)
    key = (int(lengths.max()) if n else 0) - lengths.astype(np.int64)
    small = key.max() < 2**16 if n else True
    key = key.astype(np.uint16 if small else np.int64)  # uint16 keys sort by radix: O(n)
    for lo in range(0, n, group):
        hi = min(n, lo + group)
        out[lo:hi] = lo + np.argsort(key[lo:hi], kind="stable")
    return out

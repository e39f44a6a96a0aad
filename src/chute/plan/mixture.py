"""Which samples an epoch of a mixture takes: a pure function of (shares, pools, seed, epoch).

A mixture is several datasets laid end to end in one global id space (dataset ``d`` owns ids
``offsets[d] .. offsets[d+1]-1``). Each dataset has a *pool* (the ids it may give: all of them,
or those left after a validation hold-out, rejected records or a ``max_samples`` cap) and a
*count* per epoch, from exactly one rule:

==============  ==============================================================================
``weight``      its share of the samples the weighted datasets give together (largest
                remainder rounding: every count within one sample of ``weight x total``)
``repeat``      ``repeat x pool`` (rounded half up): 2.5 is every sample twice and a random half
``samples``     an absolute count (more than the pool: every sample ``k`` times plus a rest)
==============  ==============================================================================

A count ``c`` over a pool of ``m`` is ``c // m`` full copies of the pool plus ``r = c % m``
samples drawn without replacement. The draws walk through one shuffle of the pool per *cycle*
of ``ceil(m / r)`` epochs (cycle ``j`` is ``Permutation(m, seed_d, j)``), ``r`` at a time; the
last epoch of a cycle wraps around to the cycle's start::

    pool 10, count 4:   cycle 0 = 7 2 9 0 4 1 8 6 3 5     (3 epochs per cycle)
                        epoch 0: 7 2 9 0   epoch 1: 4 1 8 6   epoch 2: 3 5 7 2
                        epoch 3..5: the same walk over cycle 1, another shuffle

so a down-sampled dataset shows different samples in different epochs, never a sample twice in
one epoch, and all of it within every ``ceil(m / r)`` epochs. The epoch's samples of
all datasets are then shuffled together with ``Permutation(total, seed, epoch)``. The result is
an ``Order`` computed position by position (``MixtureOrder``): nothing of size ``total`` is held,
so the random plan over 100M selected samples costs the pools and nothing more.

Example:
    >>> sel = Selection([Share("a", 6, weight=1), Share("b", 4, weight=3)], seed=0)
    >>> sel.counts.tolist(), sel.offsets.tolist()
    ([3, 7], [0, 6, 10])
    >>> ids = sel.order(0).materialize()
    >>> np.bincount(sel.dataset_of(ids)).tolist()
    [3, 7]
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from chute.errors import ConfigError
from chute.plan.lengthed import derive_seed
from chute.plan.order import Order, Sequential
from chute.plan.shuffle import Permutation

__all__ = [
    "AMOUNTS",
    "SELECTION_ALGORITHM",
    "MixtureOrder",
    "Selection",
    "Share",
    "counts_of",
    "valid_pools",
]

# Names the selection arithmetic; changing it must change this (resume states record it).
SELECTION_ALGORITHM = "mixture-v1"
AMOUNTS = ("weight", "repeat", "samples")


@dataclass(frozen=True)
class Share:
    """How much of one dataset each epoch takes (exactly one of weight, repeat, samples).

    Args:
        name: the dataset's name (seeds its draws, so reordering datasets changes nothing).
        records: ids the dataset owns in the global id space.
        weight: its share among the weighted datasets' samples.
        repeat: pool size multiplier (fractional allowed).
        samples: samples per epoch.
        max_samples: cap the pool at this many ids, a fixed seeded subset, before the rule.
        tag: opaque JSON data recorded in the identity (e.g. the validation hold-out).

    Neither rule given means ``repeat=1``: every sample of the pool once per epoch.
    """

    name: str
    records: int
    weight: float | None = None
    repeat: float | None = None
    samples: int | None = None
    max_samples: int | None = None
    tag: Any = None

    def __post_init__(self) -> None:
        given = [k for k in AMOUNTS if getattr(self, k) is not None]
        if len(given) > 1:
            raise ConfigError(
                f"dataset {self.name!r} sets {' and '.join(given)}: give exactly one of "
                f"weight, repeat or samples (how much of it an epoch takes)"
            )
        if isinstance(self.records, bool) or int(self.records) < 0:
            raise ConfigError(f"dataset {self.name!r}: records must be >= 0, got {self.records}")
        for key in ("weight", "repeat"):
            value = getattr(self, key)
            if value is not None and not (_number(value) and math.isfinite(value) and value >= 0):
                raise ConfigError(
                    f"dataset {self.name!r}: {key} must be a number >= 0, got {value!r}"
                )
        for key in ("samples", "max_samples"):
            value = getattr(self, key)
            if value is not None and not (_integer(value) and value >= 0):
                raise ConfigError(
                    f"dataset {self.name!r}: {key} must be an integer >= 0, got {value!r}"
                )

    @property
    def rule(self) -> str:
        """``weight``, ``repeat`` or ``samples`` (``repeat`` when none is given)."""
        return next((k for k in AMOUNTS if getattr(self, k) is not None), "repeat")

    def amounts(self) -> dict[str, Any]:
        """The fields that say how much an epoch takes (what a mixture change may change)."""
        return {k: getattr(self, k) for k in (*AMOUNTS, "max_samples")}


def _number(value: Any) -> bool:
    return isinstance(value, int | float | np.integer | np.floating) and not isinstance(value, bool)


def _integer(value: Any) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


def counts_of(
    shares: Sequence[Share],
    pool_sizes: Sequence[int] | np.ndarray,
    epoch_samples: int | None = None,
) -> np.ndarray:
    """Samples each dataset gives per epoch (see the module docstring).

    ``epoch_samples``: the total of every dataset; the weighted ones share what the others
    leave. Default: the weighted datasets give as many samples as their pools hold together.

    Example:
        >>> counts_of([Share("a", 9, weight=2), Share("b", 9, weight=1),
        ...            Share("c", 10, repeat=0.5)], [9, 9, 10]).tolist()
        [12, 6, 5]
    """
    sizes = np.asarray(pool_sizes, dtype=np.int64)
    counts = np.zeros(len(shares), dtype=np.int64)
    weighted = [d for d, s in enumerate(shares) if s.rule == "weight"]
    for d, share in enumerate(shares):
        if share.rule == "samples":
            counts[d] = int(share.samples or 0)
        elif share.rule == "repeat":
            repeat = 1.0 if share.repeat is None else float(share.repeat)
            whole = math.floor(repeat)
            counts[d] = whole * sizes[d] + math.floor((repeat - whole) * int(sizes[d]) + 0.5)
    fixed = int(counts.sum())
    if epoch_samples is not None:
        budget = int(epoch_samples) - fixed
        if budget < 0 or (budget > 0 and not weighted):
            raise ConfigError(
                f"epoch_samples={epoch_samples} cannot hold the {fixed} samples the datasets "
                f"with repeat or samples take"
                + (", and no dataset has a weight to take the rest" if budget > 0 else "")
                + "; raise epoch_samples or leave it out"
            )
    else:
        budget = int(sizes[weighted].sum()) if weighted else 0
    if weighted:
        w = np.array([float(shares[d].weight or 0.0) for d in weighted])
        if w.sum() <= 0:
            raise ConfigError(
                f"the weights of {[shares[d].name for d in weighted]} add up to 0; give at "
                f"least one a weight > 0"
            )
        counts[weighted] = _largest_remainder(w / w.sum() * budget, budget)
    for d, share in enumerate(shares):
        if counts[d] and not sizes[d]:
            raise ConfigError(
                f"dataset {share.name!r} has no sample left to draw from ({share.records} "
                f"records, none in its pool: held out for validation, rejected or capped) but "
                f"{share.rule} asks for {counts[d]} per epoch; lower its val or fix its records"
            )
    return counts


def _largest_remainder(exact: np.ndarray, total: int) -> np.ndarray:
    """Integers summing to ``total``, each the floor or ceiling of ``exact`` (Hamilton)."""
    floor = np.floor(exact).astype(np.int64)
    short = total - int(floor.sum())
    if short > 0:
        # largest fractional parts first; ties by position (stable)
        order = np.argsort(-(exact - floor), kind="stable")
        floor[order[:short]] += 1
    return floor


class Selection:
    """The samples of every epoch of a mixture (see the module docstring).

    Args:
        shares: one per dataset, in id order.
        seed: the run's seed.
        epoch_samples: total samples per epoch (see ``counts_of``).
        pools: per dataset, the local ids it may give (ascending), or ``None`` for all of them.
        shuffle: shuffle the epoch's samples together (``False``: dataset by dataset).

    Attributes:
        offsets: ``len(shares) + 1`` global id offsets.
        pools: each dataset's pool after ``max_samples`` (``None``: every id).
        pool_sizes: ids in each pool.
        counts: samples each dataset gives per epoch.
    """

    def __init__(
        self,
        shares: Sequence[Share],
        *,
        seed: int = 0,
        epoch_samples: int | None = None,
        pools: Sequence[np.ndarray | None] | None = None,
        shuffle: bool = True,
    ):
        self.shares = list(shares)
        if not self.shares:
            raise ConfigError("a mixture needs at least one dataset")
        names = [s.name for s in self.shares]
        if len(set(names)) != len(names):
            dup = sorted({n for n in names if names.count(n) > 1})
            raise ConfigError(f"dataset names must be unique, got {dup} more than once")
        if epoch_samples is not None and not (_integer(epoch_samples) and epoch_samples >= 0):
            raise ConfigError(f"epoch_samples must be an integer >= 0, got {epoch_samples!r}")
        Permutation(0, seed, 0)  # validates the seed with a message naming it
        self.seed = int(seed)
        self.epoch_samples = None if epoch_samples is None else int(epoch_samples)
        self.shuffle = bool(shuffle)
        records = np.array([s.records for s in self.shares], dtype=np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(records)]).astype(np.int64)
        given = list(pools) if pools is not None else [None] * len(self.shares)
        if len(given) != len(self.shares):
            raise ConfigError(f"pools has {len(given)} entries for {len(self.shares)} datasets")
        self.given_pools = given
        self.pools = [self._cap(d, p) for d, p in enumerate(given)]
        self.pool_sizes = np.array(
            [
                s.records if p is None else len(p)
                for s, p in zip(self.shares, self.pools, strict=True)
            ],
            dtype=np.int64,
        )
        self.counts = counts_of(self.shares, self.pool_sizes, self.epoch_samples)
        self.count_offsets = np.concatenate([[0], np.cumsum(self.counts)]).astype(np.int64)
        self._seeds = [derive_seed(self.seed, f"mixture/{n}") for n in names]

    def _cap(self, d: int, pool: np.ndarray | None) -> np.ndarray | None:
        share = self.shares[d]
        if pool is not None:
            pool = np.asarray(pool)
            if pool.ndim != 1 or (pool.size and pool.dtype.kind not in "iu"):
                raise ConfigError(f"the pool of {share.name!r} must be a 1-D array of ids")
            if pool.size and (int(pool.min()) < 0 or int(pool.max()) >= share.records):
                raise ConfigError(
                    f"the pool of {share.name!r} holds ids outside [0, {share.records})"
                )
        m = share.records if pool is None else len(pool)
        cap = share.max_samples
        if cap is None or cap >= m:
            return pool
        # a fixed subset (the same every epoch): the first `cap` of one seeded shuffle
        seed = derive_seed(self.seed, f"mixture-cap/{share.name}")
        chosen = np.sort(Permutation(m, seed, 0).take(np.arange(cap, dtype=np.int64)))
        return chosen if pool is None else pool[chosen]

    # -- the epochs ----------------------------------------------------------------------------

    def __len__(self) -> int:
        """Samples per epoch, all datasets together."""
        return int(self.count_offsets[-1])

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.shares]

    def order(self, epoch: int) -> MixtureOrder:
        """The epoch's selected global ids, shuffled together (computed on demand)."""
        return MixtureOrder(self, epoch)

    def dataset_of(self, ids: np.ndarray) -> np.ndarray:
        """The dataset (its position in ``shares``) of each global id."""
        return np.searchsorted(self.offsets, np.asarray(ids), side="right") - 1

    def local_ids(self, d: int, slots: np.ndarray, epoch: int) -> np.ndarray:
        """Local ids of dataset ``d`` at its epoch slots ``slots`` (each in ``[0, counts[d])``)."""
        m, count = int(self.pool_sizes[d]), int(self.counts[d])
        slots = np.asarray(slots, dtype=np.int64)
        copies = (count // m) * m if m else 0
        out = np.empty(len(slots), dtype=np.int64)
        full = slots < copies
        out[full] = slots[full] % m if m else 0
        rest = np.flatnonzero(~full)
        if rest.size:
            r = count - copies
            per_cycle = -(-m // r)  # epochs per cycle
            cycle, step = divmod(int(epoch), per_cycle)
            perm = Permutation(m, self._seeds[d], cycle)
            out[rest] = perm.take((step * r + slots[rest] - copies) % m)
        pool = self.pools[d]
        return out if pool is None else pool[out].astype(np.int64)

    def ids_of(self, d: int, epoch: int) -> np.ndarray:
        """Every global id dataset ``d`` gives in ``epoch`` (in slot order, repeats included)."""
        slots = np.arange(int(self.counts[d]), dtype=np.int64)
        return self.local_ids(d, slots, epoch) + self.offsets[d]

    # -- identity ------------------------------------------------------------------------------

    def identity(self) -> dict[str, Any]:
        """What a resume state records: the rule of every dataset, pool sizes, the algorithm."""
        return {
            "algorithm": SELECTION_ALGORITHM,
            "epoch_samples": self.epoch_samples,
            "names": self.names,  # the order of the datasets in the id space
            "datasets": {
                s.name: {
                    "records": int(s.records),
                    "pool": int(self.pool_sizes[d]),
                    **{k: _plain(v) for k, v in s.amounts().items()},
                    "tag": s.tag,
                }
                for d, s in enumerate(self.shares)
            },
        }

    def with_amounts(self, identity: Mapping[str, Any]) -> Selection:
        """This selection with the amounts (and ``epoch_samples``) another identity records.

        Used to rebuild the selection a resume state was saved under; everything but the
        amounts must be the same (names, records, tags), else ``ConfigError`` naming it.
        """
        names = list(identity.get("names", []))
        saved = identity.get("datasets", {})
        if names != self.names or not isinstance(saved, Mapping):
            raise ConfigError(
                f"the state's datasets {names} are not this mixture's {self.names}; a mixture "
                f"change may change only weight, repeat, samples, max_samples and epoch_samples"
            )
        shares = []
        for share in self.shares:
            old = saved.get(share.name, {})
            for key in ("records", "tag"):
                if old.get(key) != _plain(getattr(share, key)):
                    raise ConfigError(
                        f"dataset {share.name!r}: {key} changed (state {old.get(key)!r}, now "
                        f"{_plain(getattr(share, key))!r}); a mixture change may change only "
                        f"weight, repeat, samples, max_samples and epoch_samples"
                    )
            shares.append(replace(share, **{k: old.get(k) for k in (*AMOUNTS, "max_samples")}))
        return Selection(
            shares,
            seed=self.seed,
            epoch_samples=identity.get("epoch_samples"),
            pools=self.given_pools,
            shuffle=self.shuffle,
        )

    def __repr__(self) -> str:
        parts = ", ".join(
            f"{s.name}: {int(c)}/{int(m)}"
            for s, c, m in zip(self.shares, self.counts, self.pool_sizes, strict=True)
        )
        return f"Selection({parts}; {len(self)} per epoch)"


def _plain(value: Any) -> Any:
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    return value


class MixtureOrder(Order):
    """One epoch of a ``Selection`` as an ``Order``: position -> global id, on demand.

    Example:
        >>> sel = Selection([Share("a", 3), Share("b", 2, repeat=2)], seed=1, shuffle=False)
        >>> sel.order(0).materialize().tolist()
        [0, 1, 2, 3, 4, 3, 4]
    """

    def __init__(self, selection: Selection, epoch: int):
        self.selection = selection
        self.epoch = int(epoch)
        n = len(selection)
        self._slots: Order = (
            Permutation(n, selection.seed, self.epoch) if selection.shuffle else Sequential(n)
        )

    def __len__(self) -> int:
        return len(self.selection)

    def _take(self, positions: np.ndarray) -> np.ndarray:
        sel = self.selection
        slots = self._slots.take(positions)
        dataset = np.searchsorted(sel.count_offsets, slots, side="right") - 1
        out = np.empty(len(slots), dtype=np.int64)
        for d in np.unique(dataset).tolist():
            at = np.flatnonzero(dataset == d)
            local = sel.local_ids(d, slots[at] - sel.count_offsets[d], self.epoch)
            out[at] = local + sel.offsets[d]
        return out

    def describe(self) -> dict[str, Any]:
        return {"kind": "MixtureOrder", "length": len(self), "epoch": self.epoch}


def valid_pools(
    pools: Sequence[np.ndarray | None] | None, records: Sequence[int], lengths: Any
) -> list[np.ndarray | None]:
    """Each dataset's pool without the ids whose length is negative (rejected records).

    Length-aware plans deal only valid samples; a mixture's counts are then taken over them.
    ``lengths``: per global id (an array, or anything with ``.length``).

    Example:
        >>> [p.tolist() for p in valid_pools(None, [3, 2], np.array([4, -1, 2, 5, -1]))]
        [[0, 2], [0]]
    """
    length = np.asarray(getattr(lengths, "length", lengths))
    offsets = np.concatenate([[0], np.cumsum(np.asarray(records, dtype=np.int64))])
    if len(length) != offsets[-1]:
        raise ConfigError(
            f"lengths has {len(length)} entries but the datasets hold {int(offsets[-1])} records"
        )
    given = list(pools) if pools is not None else [None] * len(records)
    out: list[np.ndarray | None] = []
    for d, pool in enumerate(given):
        ok = length[offsets[d] : offsets[d + 1]] >= 0
        if pool is None:
            out.append(None if ok.all() else _compact(np.flatnonzero(ok)))
        else:
            pool = np.asarray(pool)
            out.append(pool[ok[pool]])
    return out


def _compact(ids: np.ndarray) -> np.ndarray:
    """Local ids as int32 where they fit (half the memory of 100M pooled ids)."""
    return ids.astype(np.int32) if len(ids) and int(ids[-1]) < 2**31 else ids

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

from collections.abc import Mapping, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

import numpy as np

from chute.errors import ConfigError
from chute.plan.bulk import ordered_map
from chute.plan.lengthed import derive_seed
from chute.plan.order import MultisetPart, Order, Sequential
from chute.plan.shares import AMOUNTS, Share, counts_of, is_integer
from chute.plan.shuffle import Permutation

__all__ = [
    "AMOUNTS",
    "SELECTION_ALGORITHM",
    "MixtureOrder",
    "Selection",
    "Share",
    "counts_of",
    "valid_pools",
]  # Share, counts_of and AMOUNTS live in chute.plan.shares

# Names the selection arithmetic; changing it must change this (resume states record it).
SELECTION_ALGORITHM = "mixture-v1"
# Positions of a mixture order computed per step of a long range: each takes a few int64
# temporaries of this size (a budget plan reads its whole epoch in one range).
RANGE_CHUNK = 1 << 20


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
        if epoch_samples is not None and not (is_integer(epoch_samples) and epoch_samples >= 0):
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
        """Local ids of dataset ``d`` at its epoch slots ``slots`` (each in ``[0, counts[d])``).

        Slots below ``copies`` are the pool's full copies (slot ``s`` is pool id ``s % m``);
        the rest walk the cycle's permutation of the pool. Each case is worked out only where
        slots have it (most datasets have one), without an int64 division where a compare does.
        """
        m, count = int(self.pool_sizes[d]), int(self.counts[d])
        slots = np.asarray(slots, dtype=np.int64)
        copies = (count // m) * m if m else 0

        def copied(s: np.ndarray) -> np.ndarray:
            return s % m if count // m > 1 else s.copy()  # one copy: the slot is the id

        def walked(s: np.ndarray) -> np.ndarray:
            if not len(s):
                return s.copy()
            r = count - copies
            per_cycle = -(-m // r)  # epochs per cycle
            cycle, step = divmod(int(epoch), per_cycle)
            walk = s + (step * r - copies)  # in [0, 2m): wrapped once at most
            np.subtract(walk, m, out=walk, where=walk >= m)
            return Permutation(m, self._seeds[d], cycle).take(walk)

        if not len(slots) or int(slots.min()) >= copies:
            out = walked(slots)
        elif int(slots.max()) < copies:
            out = copied(slots)
        else:
            out = np.empty(len(slots), dtype=np.int64)
            cut = slots < copies
            out[cut] = copied(slots[cut])
            out[~cut] = walked(slots[~cut])
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
        return self._ids_at(self._slots.take(positions))

    def _ids_at(self, slots: np.ndarray) -> np.ndarray:
        """The global ids at the epoch's ``slots`` (int64): each slot's dataset, then its id."""
        sel = self.selection
        dataset = _bucket_of(slots, sel.count_offsets)
        present = np.bincount(dataset, minlength=len(sel.shares))  # linear, where unique sorts
        out = np.empty(len(slots), dtype=np.int64)
        for d in np.flatnonzero(present).tolist():
            if present[d] == len(slots):  # one dataset: no gather, no scatter
                local = sel.local_ids(d, slots - sel.count_offsets[d], self.epoch)
                return np.add(local, sel.offsets[d], out=local)
            at = np.flatnonzero(dataset == d)
            local = sel.local_ids(d, slots[at] - sel.count_offsets[d], self.epoch)
            out[at] = np.add(local, sel.offsets[d], out=local)
        return out

    def take_range(self, lo: int, hi: int, out: np.ndarray | None = None) -> np.ndarray:
        """The ids at positions ``lo .. hi-1`` (into ``out`` if given), ``RANGE_CHUNK`` at a time.

        Example:
            >>> sel = Selection([Share("a", 3), Share("b", 2)], seed=1, shuffle=False)
            >>> sel.order(0).take_range(1, 4).tolist()
            [1, 2, 3]
        """
        lo, hi = self._check_range(lo, hi)
        if out is None:
            out = np.empty(hi - lo, dtype=np.int64)
        filled = out

        def fill(a: int) -> None:
            b = min(hi, a + RANGE_CHUNK)
            filled[a - lo : b - lo] = self._ids_at(self._slots.take_range(a, b))

        # chunks are independent: a long range (a budget plan reads its epoch in one) is read
        # on threads, most of its work in numpy; one chunk stays on the caller's thread
        starts = range(lo, hi, RANGE_CHUNK)
        if len(starts) > 1:
            for _ in ordered_map(fill, starts):
                pass
        elif starts:
            fill(lo)
        return out

    def multiset_parts(self, size: int, dtype: Any = np.int64) -> list[MultisetPart]:
        """The epoch's ids by dataset, never shuffled together (``Order.multiset_parts``).

        A dataset's slots are its pool ``count // pool`` times over (each id that many times)
        and the next ``count % pool`` ids of its pool's permutation (each once), as
        ``Selection.local_ids`` deals them: the same ids, without the epoch's shuffle of the
        slots nor finding each slot's dataset, which is most of what reading the order costs.

        Example:
            >>> sel = Selection([Share("a", 3), Share("b", 2, repeat=2)], seed=1)
            >>> parts = [part() for part in sel.order(0).multiset_parts(8)]
            >>> [(ids.tolist(), times) for ids, times in parts]
            [([0, 1, 2], 1), ([3, 4], 2)]
        """
        sel = self.selection
        parts: list[MultisetPart] = []
        for d in range(len(sel.shares)):
            m, count, offset = int(sel.pool_sizes[d]), int(sel.counts[d]), int(sel.offsets[d])
            if not m or not count:
                continue
            pool, times, rest = sel.pools[d], count // m, count % m
            if times:  # every id of the pool, ``times`` times
                for lo in range(0, m, size):
                    hi = min(m, lo + size)
                    parts.append(partial(_pool_part, pool, lo, hi, offset, times, dtype))
            if rest:  # the next ``rest`` ids of the pool's permutation (as ``local_ids``)
                cycle, step = divmod(self.epoch, -(-m // rest))
                perm = Permutation(m, sel._seeds[d], cycle)
                for lo in range(0, rest, size):
                    first, last = step * rest + lo, step * rest + min(rest, lo + size)
                    parts.append(partial(_permuted_part, perm, first, last, pool, offset, dtype))
        return parts

    def describe(self) -> dict[str, Any]:
        return {"kind": "MixtureOrder", "length": len(self), "epoch": self.epoch}


def _bucket_of(values: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """The bucket of each value: ``searchsorted(bounds, values, side="right") - 1``.

    For values in ``[bounds[0], bounds[-1])``: a compare per inner bound (few datasets)
    instead of a binary search per value.

    Example:
        >>> _bucket_of(np.array([0, 4, 5, 9]), np.array([0, 5, 5, 10])).tolist()
        [0, 0, 2, 2]
    """
    inner = bounds[1:-1]
    if len(inner) > 16:  # many datasets: the binary search is the fewer passes
        return np.searchsorted(bounds, values, side="right") - 1
    bucket = np.zeros(len(values), dtype=np.uint8)
    for bound in inner.tolist():
        bucket += values >= bound
    return bucket


def _pool_part(
    pool: np.ndarray | None, lo: int, hi: int, offset: int, times: int, dtype: Any
) -> tuple[np.ndarray, int]:
    local = np.arange(lo, hi, dtype=np.int64) if pool is None else pool[lo:hi].astype(np.int64)
    return (local + offset).astype(dtype, copy=False), times


def _permuted_part(
    perm: Permutation, first: int, last: int, pool: np.ndarray | None, offset: int, dtype: Any
) -> tuple[np.ndarray, int]:
    # positions ``first .. last-1`` of the permutation, around its end (computed when read),
    # as ranges: consecutive positions cost about 0.6x arbitrary ones (``take_range``)
    local = np.empty(last - first, dtype=np.int64)
    m, done = len(perm), 0
    while done < len(local):
        start = (first + done) % m
        size = min(len(local) - done, m - start)
        perm.take_range(start, start + size, local[done : done + size])
        done += size
    if pool is not None:
        local = pool[local].astype(np.int64)
    return (local + offset).astype(dtype, copy=False), 1


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

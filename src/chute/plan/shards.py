r"""Shard-window shuffling: an epoch that reads a few files (shards) at a time.

A full permutation of 100M samples over 1,000 remote files touches a different file at almost
every sample, so every file is needed for the whole epoch: a bounded local cache thrashes and
every read is a ranged request. ``ShardWindowOrder`` keeps reads local to a *window* of
``window`` shards:

::

    shards (files):       s0  s1  s2  s3  s4  s5  s6         sizes from the source's ranges
    1. shuffle shards:    s4  s0  s6 | s2  s5  s1 | s3       Permutation(S, seed', epoch)
    2. cut windows:       window 0     window 1     window 2 (``window`` shards each)
    3. shuffle inside:    every sample of window k at a    Permutation(m_k, seed_k, epoch)
                          uniformly random position of window k's span

It is MosaicML Streaming's ``py1b`` (shuffle the shard order, cut the concatenated samples into
blocks, shuffle within each block) with block boundaries on shard boundaries: a shard belongs to
exactly one window, so while window ``k`` is dealt exactly its ``window`` shards are in use on
every rank of the job (all ranks deal the same global order step by step), and a local cache of
``window`` (two while windows change) shards' bytes serves the whole epoch. ``py1e`` (samples of
a shard spread over an expanded range) has no such hard working set; ``py1br`` (random block
sizes) exists to de-synchronise many nodes' downloads, which a shared node cache does not need.

Like ``Permutation``, nothing is stored per sample: the order is computed position by position
from the per-shard sizes, so 100M samples cost ``O(S)`` memory, ``tail`` (resume, elastic
resume) is a lazy view, and the result depends only on this file's arithmetic
(``SHARD_ALGORITHM``).

Example:
    >>> bounds = np.array([0, 4, 8, 12, 16])          # 4 shards of 4 samples
    >>> ids = ShardWindowOrder(bounds, window=2, seed=0, epoch=0).materialize()
    >>> sorted(ids.tolist()) == list(range(16))
    True
    >>> len({int(i) // 4 for i in ids[:8]})           # the first 8 come from 2 shards
    2
"""

from __future__ import annotations

import hashlib
from typing import Any, ClassVar

import numpy as np

from chute.errors import ConfigError
from chute.plan.base import check_positive
from chute.plan.order import Order, Sequential
from chute.plan.shard import BatchPlan, RandomPlanner
from chute.plan.shuffle import ALGORITHM, Permutation

__all__ = ["SHARD_ALGORITHM", "ShardPlanner", "ShardWindowOrder", "check_bounds"]

SHARD_ALGORITHM = f"shard-window-v1+{ALGORITHM}"
_MASK64 = (1 << 64) - 1


def check_bounds(bounds: Any) -> np.ndarray:
    """``bounds`` as an int64 array ``[0, end_0, end_1, ...]`` (shard ``j``: ids ``b[j]..b[j+1]-1``).

    Example:
        >>> check_bounds([0, 3, 3, 5]).tolist()
        [0, 3, 3, 5]
        >>> check_bounds([0, 3, 2])
        Traceback (most recent call last):
        ...
        chute.errors.ConfigError: shard_bounds must start at 0 and never decrease (the sample ranges of the source's files), got [0, 3, 2]
    """
    arr = np.asarray(bounds)
    if arr.ndim != 1 or len(arr) < 1 or (arr.size and arr.dtype.kind not in "iu"):
        raise ConfigError(
            f"shard_bounds must be a 1-D integer array [0, end of shard 0, ...], got "
            f"{arr.dtype} {arr.shape}"
        )
    arr = arr.astype(np.int64)
    if arr[0] != 0 or (np.diff(arr) < 0).any():
        shown = arr.tolist() if len(arr) <= 8 else f"{arr[:8].tolist()}..."
        raise ConfigError(
            f"shard_bounds must start at 0 and never decrease (the sample ranges of the "
            f"source's files), got {shown}"
        )
    return arr


def _derive(seed: int, salt: int) -> int:
    """A seed for one sub-shuffle: independent of the others, stable across versions."""
    digest = hashlib.blake2b(f"{seed}:{salt}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & _MASK64


class ShardWindowOrder(Order):
    """The ``epoch``-th shard-window shuffle of the samples of shards with ``bounds``.

    Args:
        bounds: ``[0, end_0, end_1, ...]``: shard ``j`` holds ids ``bounds[j] .. bounds[j+1]-1``.
        window: shards shuffled together (1: shard order shuffled, each shard's samples
            shuffled in place; ``>= len(bounds) - 1``: one full permutation).
        seed: the run's seed.
        epoch: the epoch; each epoch draws a new shard order and new windows.

    Example:
        >>> order = ShardWindowOrder(np.array([0, 3, 6]), window=1, seed=1, epoch=0)
        >>> sorted(order.take_range(0, 3).tolist()) in ([0, 1, 2], [3, 4, 5])
        True
    """

    def __init__(self, bounds: Any, window: int, seed: int, epoch: int):
        self.bounds = check_bounds(bounds)
        self.window = check_positive("shard_window", window)
        Permutation(0, seed, epoch)  # validates seed and epoch with messages naming them
        self.seed, self.epoch = int(seed), int(epoch)
        sizes = np.diff(self.bounds)
        shards = len(sizes)
        self.shard_order = Permutation(shards, _derive(self.seed, -1), self.epoch).materialize()
        # the shuffled shards' samples laid end to end: shard shard_order[j] starts at seq[j]
        self._seq = np.zeros(shards + 1, dtype=np.int64)
        np.cumsum(sizes[self.shard_order], out=self._seq[1:])
        # window k spans stream positions [win[k], win[k+1])
        cuts = np.minimum(np.arange(0, shards + self.window, self.window), shards)
        self._win = self._seq[np.unique(cuts)] if shards else np.zeros(1, dtype=np.int64)
        self._perms: dict[int, Permutation] = {}

    def __len__(self) -> int:
        return int(self.bounds[-1])

    @property
    def num_windows(self) -> int:
        return len(self._win) - 1

    def window_of(self, positions: np.ndarray) -> np.ndarray:
        """The window each stream position falls in."""
        return np.searchsorted(self._win, positions, side="right") - 1

    def _perm(self, k: int) -> Permutation:
        perm = self._perms.get(k)
        if perm is None:
            size = int(self._win[k + 1] - self._win[k])
            perm = Permutation(size, _derive(self.seed, k), self.epoch)
            if len(self._perms) > 64:  # a bounded memo: resume and batches touch few windows
                self._perms.clear()
            self._perms[k] = perm
        return perm

    def _take(self, positions: np.ndarray) -> np.ndarray:
        positions = np.asarray(positions, dtype=np.int64)
        out = np.empty(len(positions), dtype=np.int64)
        if not len(positions):
            return out
        windows = self.window_of(positions)
        stream = np.empty_like(positions)  # position in the concatenated shuffled shards
        for k in np.unique(windows).tolist():
            at = np.flatnonzero(windows == k)
            lo = self._win[k]
            stream[at] = lo + self._perm(k).take(positions[at] - lo)
        slot = np.searchsorted(self._seq, stream, side="right") - 1
        out[:] = self.bounds[self.shard_order[slot]] + (stream - self._seq[slot])
        return out

    def describe(self) -> dict[str, Any]:
        return {
            "kind": "ShardWindowOrder",
            "length": len(self),
            "shards": len(self.bounds) - 1,
            "window": self.window,
            "seed": self.seed,
            "epoch": self.epoch,
            "algorithm": SHARD_ALGORITHM,
        }


class ShardPlanner(RandomPlanner):
    """Fixed-size batches over a shard-window shuffle (``Loader(plan="shards")``).

    Batches are dealt exactly as ``RandomPlanner`` deals them (lockstep steps, the same
    remainder rules, the same resume and elastic resume); only the order differs.

    Args:
        batch_size: samples per batch per rank.
        shard_window: shards shuffled together (see ``ShardWindowOrder``); the default 8.
        shard_bounds: the sample ranges of the source's files, ``[0, end_0, end_1, ...]``;
            the ``Loader`` fills it from the source (``FileSource.shard_bounds()``).
        shuffle, seed, drop_last, wrap: as for ``RandomPlanner``.

    Example:
        >>> planner = ShardPlanner(batch_size=2, shard_window=2, shard_bounds=[0, 3, 6, 9])
        >>> plan = planner.build(9, epoch=0, world_size=2)
        >>> sorted(np.concatenate([plan.batch(r, k) for r in range(2)
        ...     for k in range(plan.num_batches)]).tolist()) == list(range(9))
        True
    """

    kind: ClassVar[str] = "shards"
    needs_shards: ClassVar[bool] = True

    def __init__(
        self,
        batch_size: int,
        *,
        shard_window: int = 8,
        shard_bounds: Any = None,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
        wrap: bool = False,
    ):
        super().__init__(batch_size, shuffle=shuffle, seed=seed, drop_last=drop_last, wrap=wrap)
        self.shard_window = check_positive("shard_window", shard_window)
        self.shard_bounds = None if shard_bounds is None else check_bounds(shard_bounds)

    def with_shards(self, bounds: Any) -> ShardPlanner:
        """This planner over shards with ``bounds`` (what the ``Loader`` calls)."""
        return ShardPlanner(
            self.batch_size,
            shard_window=self.shard_window,
            shard_bounds=bounds,
            shuffle=self.shuffle,
            seed=self.seed,
            drop_last=self.drop_last,
            wrap=self.wrap,
        )

    def params(self) -> dict[str, Any]:
        bounds = self.shard_bounds
        digest = (
            None if bounds is None else hashlib.blake2b(bounds.tobytes(), digest_size=8).hexdigest()
        )
        return {
            **super().params(),
            "kind": self.kind,
            "shuffle_algorithm": SHARD_ALGORITHM if self.shuffle else None,
            "shard_window": self.shard_window,
            "shards": None if bounds is None else len(bounds) - 1,
            "shard_bounds_digest": digest,
        }

    def build(
        self, num_samples: int, *, epoch: int, world_size: int, order: Order | None = None
    ) -> BatchPlan:
        if order is None:
            order = self._order(num_samples, epoch) if self.shuffle else Sequential(num_samples)
        return BatchPlan(order, world_size, self.batch_size, self.remainder)

    def _order(self, num_samples: int, epoch: int) -> ShardWindowOrder:
        bounds = self.shard_bounds
        if bounds is None:
            raise ConfigError(
                "plan='shards' needs the sample ranges of the source's files: read a source "
                "of files (JsonlSource, ParquetSource, a path or URL glob), or pass "
                "ShardPlanner(shard_bounds=[0, end_0, end_1, ...])"
            )
        if int(bounds[-1]) != num_samples:
            raise ConfigError(
                f"shard_bounds cover {int(bounds[-1])} samples but the plan deals "
                f"{num_samples}; shard_bounds must be the ranges of the files of this source "
                f"(a split recipe or a filtered view changes the ids: use plan='random')"
            )
        return ShardWindowOrder(bounds, self.shard_window, self.seed, epoch)

    def __repr__(self) -> str:
        shown = {k: v for k, v in self.params().items() if k in ("batch_size", "shard_window")}
        return f"ShardPlanner({', '.join(f'{k}={v!r}' for k, v in shown.items())})"

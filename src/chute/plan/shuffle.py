"""A seeded shuffle of ``0 .. n-1`` that is computed per position, never stored.

``Permutation(n, seed, epoch)`` is a pseudo-random bijection of ``[0, n)``: a 6-round Feistel
network over the smallest power-of-two domain that holds ``n`` (its two halves differ by at most
one bit), keyed by ``(seed, epoch)``, with *cycle walking* for values that land outside
``[0, n)``::

    position p ──► Feistel_k(p) ──► >= n? ──yes──► Feistel_k again ──► ... ──► id in [0, n)
                                       └──no────────────────────────────────► id

Why not ``numpy.random.Generator.permutation``:

* **No memory, no build time.** Batch ``k`` of rank ``r`` needs only its ``B`` positions, so a
  100M-sample plan costs nothing to build and nothing to hold, in the main process or in any
  worker. ``materialize()`` produces the whole array when a plan needs it (length grouping).
* **Stable across versions.** The result depends only on this file's arithmetic (uint32/uint64
  wrap-around, shifts, xor), while numpy does not promise that ``Generator.permutation`` keeps
  its output across releases. A resume state written today must mean the same order after an
  upgrade. ``ALGORITHM`` names the version; changing the arithmetic must change it.

Statistical checks (uniform positions across seeds, no adjacency, all small permutations
reachable with near-equal frequency) live in ``tests/plan/test_shuffle.py``.

Example:
    >>> p = Permutation(10, seed=0, epoch=0)
    >>> sorted(p.materialize().tolist()) == list(range(10))
    True
    >>> bool((p.materialize() == Permutation(10, seed=0, epoch=1).materialize()).all())
    False
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from chute.errors import ConfigError
from chute.plan.bulk import worker_threads
from chute.plan.order import Order

__all__ = ["ALGORITHM", "Permutation", "permutation"]

ALGORITHM = "feistel6-v1"
ROUNDS = 6
_MASK64 = (1 << 64) - 1
# Positions encrypted per block: small enough that a round's passes stay in the CPU's cache.
_BLOCK = 1 << 16
# Positions per thread task when a long range is computed on several cores.
_PART = 1 << 21
# Positions whose walk outside ``[0, n)`` is done together (a few MB of scratch at most).
_WALK = 1 << 20
_SHIFTS32 = (np.uint32(16), np.uint32(15), np.uint32(16))
_MULTS32 = (np.uint32(0x7FEB352D), np.uint32(0x846CA68B))
_SHIFTS64 = (np.uint64(33), np.uint64(33), np.uint64(33))
_MULTS64 = (np.uint64(0xFF51AFD7ED558CCD), np.uint64(0xC4CEB9FE1A85EC53))


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def _round_keys(seed: int, epoch: int, rounds: int) -> list[int]:
    state = _splitmix64(_splitmix64(seed) ^ _splitmix64(epoch ^ 0x6368757465))  # "chute"
    return [_splitmix64(state + i) for i in range(rounds)]


def _check_seed(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ConfigError(f"{name} must be a non-negative int, got {value!r}")
    if not 0 <= int(value) <= _MASK64:
        raise ConfigError(f"{name} must be in [0, 2**64), got {value}")
    return int(value)


class Permutation(Order):
    """The ``epoch``-th shuffle of ``0 .. n-1`` under ``seed``, computed position by position.

    Args:
        n: number of samples.
        seed: the run's seed (non-negative int).
        epoch: the epoch (non-negative int); each epoch is an independent shuffle.

    Example:
        >>> Permutation(5, seed=1, epoch=0).take(np.arange(5)).tolist()
        [0, 3, 1, 2, 4]
    """

    def __init__(self, n: int, seed: int, epoch: int):
        if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 0:
            raise ConfigError(f"Permutation needs n >= 0 samples, got {n!r}")
        self.n = int(n)
        self.seed = _check_seed("seed", seed)
        self.epoch = _check_seed("epoch", epoch)
        bits = (self.n - 1).bit_length() if self.n > 1 else 0
        self._lo_bits = bits // 2
        self._hi_bits = bits - self._lo_bits
        self._dtype = np.uint32 if bits <= 32 else np.uint64
        dt = self._dtype
        self._lo_mask = dt((1 << self._lo_bits) - 1)
        self._hi_mask = dt((1 << self._hi_bits) - 1)
        self._shift = dt(self._lo_bits)
        width_mask = 0xFFFFFFFF if dt is np.uint32 else _MASK64
        self._keys = [dt(k & width_mask) for k in _round_keys(self.seed, self.epoch, ROUNDS)]
        self._round0: np.ndarray | None = None  # built on first use (``_first_round``)

    def __len__(self) -> int:
        return self.n

    def describe(self) -> dict[str, Any]:
        return {
            "kind": "Permutation",
            "length": self.n,
            "seed": self.seed,
            "epoch": self.epoch,
            "algorithm": ALGORITHM,
        }

    def _take(self, positions: np.ndarray) -> np.ndarray:
        out = np.empty(len(positions), dtype=np.int64)
        for lo in range(0, len(positions), _WALK):
            hi = min(len(positions), lo + _WALK)
            self._fill(positions[lo:hi].astype(self._dtype), out[lo:hi])
        return out

    def take_range(self, lo: int, hi: int, out: np.ndarray | None = None) -> np.ndarray:
        """Ids at positions ``lo .. hi-1``, written into ``out`` (any integer dtype) if given."""
        lo, hi = self._check_range(lo, hi)
        if out is None:
            out = np.empty(hi - lo, dtype=np.int64)
        parts = [(a, min(hi, a + _PART)) for a in range(lo, hi, _PART)]
        threads = min(len(parts), worker_threads())
        if threads < 2:
            for a, b in parts:
                self._fill_range(a, b, out[a - lo : b - lo])
            return out
        # numpy's arithmetic releases the GIL: parts run in parallel, each into its own slice
        with ThreadPoolExecutor(threads) as pool:
            done = [pool.submit(self._fill_range, a, b, out[a - lo : b - lo]) for a, b in parts]
            for future in done:
                future.result()
        return out

    def _fill_range(self, lo: int, hi: int, out: np.ndarray) -> None:
        for a in range(lo, hi, _WALK):
            b = min(hi, a + _WALK)
            self._fill(np.arange(a, b, dtype=self._dtype), out[a - lo : b - lo], first=a)

    def _first_round(self) -> np.ndarray | None:
        """What the first round xors into consecutive positions, repeated over a block.

        The first round adds to the high half a hash of the low half alone, and the low
        halves of consecutive positions count up and wrap: its values for every low half,
        laid end to end past a block's length, make the round one xor with a slice of them
        (for position ``p``, the slice starting at ``p`` modulo the low half's range) instead
        of its dozen passes. ``None`` where the low half is too wide to list (over 2**16).
        """
        if self._lo_bits > 16:
            return None
        if self._round0 is None or len(self._round0) < _BLOCK + (1 << self._lo_bits):
            low = np.arange(1 << self._lo_bits, dtype=self._dtype)
            h, t = np.empty_like(low), np.empty_like(low)
            self._round(0, low, h, t)
            table = low ^ np.arange(1 << self._lo_bits, dtype=self._dtype)  # what it xored
            self._round0 = np.tile(table, -(-_BLOCK // len(table)) + 1)
        return self._round0

    def _fill(self, positions: np.ndarray, out: np.ndarray, first: int | None = None) -> None:
        """``out[i]`` = the id at ``positions[i]`` (``positions`` of ``self._dtype``).

        Every round works in place on a block of ``_BLOCK`` values (a few hundred KB, so the
        ~80 passes of the six rounds stay in the CPU's cache): the same arithmetic as one pass
        over the whole array, several times faster on 100M positions. The values that land
        outside ``[0, n)`` (up to half of them) are collected over all blocks and walked
        together: walking each block's few on its own cost twice the first encryption, most
        of it numpy's fixed cost per call on ever smaller arrays.
        """
        if self.n <= 1:
            out[:] = positions
            return
        size = min(_BLOCK, len(positions))
        x = np.empty(size, dtype=self._dtype)
        h = np.empty_like(x)
        t = np.empty_like(x)
        n = self.n  # a Python int: 2**32 itself does not fit uint32 (nothing lies outside)
        where, values = [], []
        round0 = None if first is None else self._first_round()
        wrap = (1 << self._lo_bits) - 1
        for lo in range(0, len(positions), _BLOCK):
            hi = min(len(positions), lo + _BLOCK)
            xs = x[: hi - lo]
            xs[...] = positions[lo:hi]
            if round0 is not None and first is not None:  # consecutive: round 0 is one xor
                low = (first + lo) & wrap
                xs ^= round0[low : low + hi - lo]
                self._encrypt(xs, h[: hi - lo], t[: hi - lo], start=1)
            else:
                self._encrypt(xs, h[: hi - lo], t[: hi - lo])
            outside = np.flatnonzero(xs >= n)
            if outside.size:  # walked below; out holds a placeholder there until then
                where.append(outside + lo)
                values.append(xs[outside])
                xs[outside] = 0
            out[lo:hi] = xs
        if not where:
            return
        at = np.concatenate(where)
        y = np.concatenate(values)
        while at.size:  # cycle walking: a few rounds at most, the domain is < 2n
            for lo in range(0, len(y), _BLOCK):
                hi = min(len(y), lo + _BLOCK)
                self._encrypt(y[lo:hi], h[: hi - lo], t[: hi - lo])
            inside = y < n
            out[at[inside]] = y[inside]
            at, y = at[~inside], y[~inside]

    def _encrypt(self, x: np.ndarray, h: np.ndarray, t: np.ndarray, start: int = 0) -> None:
        """Six Feistel rounds over ``x`` in place (``h``, ``t``: scratch of the same shape).

        ``start``: the rounds already done (``_fill`` does the first one its own way).
        """
        for i in range(start, len(self._keys)):
            self._round(i, x, h, t)

    def _round(self, i: int, x: np.ndarray, h: np.ndarray, t: np.ndarray) -> None:
        """Feistel round ``i`` over ``x`` in place."""
        key = self._keys[i]
        if i % 2 == 0:  # the high half absorbs a hash of the low half
            np.bitwise_and(x, self._lo_mask, out=h)
            h ^= key
            self._mix(h, t)
            h &= self._hi_mask
            h <<= self._shift
        else:  # the low half absorbs a hash of the high half
            np.right_shift(x, self._shift, out=h)
            h ^= key
            self._mix(h, t)
            h &= self._lo_mask
        x ^= h

    def _mix(self, h: np.ndarray, t: np.ndarray) -> None:
        """A bijective integer hash with full avalanche, in place (``t``: scratch)."""
        if self._dtype is np.uint32:  # "lowbias32" (C. Wellons)
            shifts, mults = _SHIFTS32, _MULTS32
        else:  # MurmurHash3's fmix64
            shifts, mults = _SHIFTS64, _MULTS64
        for shift, mult in zip(shifts, (*mults, None), strict=True):
            np.right_shift(h, shift, out=t)
            h ^= t
            if mult is not None:
                h *= mult


def permutation(n: int, seed: int, epoch: int = 0) -> np.ndarray:
    """The whole shuffle of ``0 .. n-1`` as an int64 array (see ``Permutation``).

    Example:
        >>> sorted(permutation(6, seed=3).tolist())
        [0, 1, 2, 3, 4, 5]
    """
    return Permutation(n, seed, epoch).materialize()

"""Orders: the sequence of global sample ids a plan deals out, computed lazily by position.

An ``Order`` answers "which sample sits at stream position ``p``" for whole arrays of positions,
without holding the sequence in memory unless it is given as an array. Plans cut an order into
batches; an elastic resume continues with the ``tail`` of an order.

Example:
    >>> import numpy as np
    >>> Sequential(10).tail(7).take(np.arange(3)).tolist()
    [7, 8, 9]
    >>> IdOrder(np.array([5, 3, 9])).take(np.array([2, 0])).tolist()
    [9, 5]
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from chute.errors import ConfigError

__all__ = ["IdOrder", "Mapped", "MultisetPart", "Order", "Reported", "Sequential", "Tail"]

# Positions materialised per step, so a 100M-sample order never needs 100M temporaries at once.
MATERIALIZE_CHUNK = 1 << 22
# Positions per progress report of a ``Reported`` order: a few reports per second at 100M,
# each piece large enough to keep the shuffle's threads busy.
REPORT_CHUNK = 1 << 24


class Order(ABC):
    """A sequence of global sample ids of known length, read by arrays of positions."""

    @abstractmethod
    def __len__(self) -> int: ...

    @abstractmethod
    def _take(self, positions: np.ndarray) -> np.ndarray:
        """Ids at ``positions`` (int64, all in ``[0, len)``); subclasses implement this."""

    def take(self, positions: np.ndarray) -> np.ndarray:
        """The sample ids at ``positions`` (each in ``[0, len(self))``), as int64.

        Example:
            >>> Sequential(4).take(np.array([3, 1])).tolist()
            [3, 1]
        """
        positions = np.asarray(positions, dtype=np.int64)
        if positions.size and (positions.min() < 0 or positions.max() >= len(self)):
            raise IndexError(
                f"positions must lie in [0, {len(self)}), got min {positions.min()} and "
                f"max {positions.max()}"
            )
        return self._take(positions)

    def tail(self, start: int) -> Order:
        """The order from position ``start`` on (what is left after ``start`` ids were dealt)."""
        self._check_tail(start)
        return self if start == 0 else Tail(self, start)

    def _check_tail(self, start: int) -> None:
        if not 0 <= start <= len(self):
            raise ConfigError(f"tail start must be in [0, {len(self)}], got {start}")

    def take_range(self, lo: int, hi: int, out: np.ndarray | None = None) -> np.ndarray:
        """The ids at positions ``lo .. hi-1``, written into ``out`` (any integer dtype) if given.

        Example:
            >>> Sequential(10).tail(4).take_range(1, 3).tolist()
            [5, 6]
        """
        lo, hi = self._check_range(lo, hi)
        if out is None:
            return self._take(np.arange(lo, hi, dtype=np.int64))
        out[:] = self._take(np.arange(lo, hi, dtype=np.int64))
        return out

    def _check_range(self, lo: int, hi: int) -> tuple[int, int]:
        if not 0 <= lo <= hi <= len(self):
            raise IndexError(f"a range of positions must lie in [0, {len(self)}], got {lo}..{hi}")
        return int(lo), int(hi)

    def multiset_parts(self, size: int, dtype: Any = np.int64) -> list[MultisetPart]:
        """The order's ids without their order, as parts that may be read in any order.

        Each part, called, returns ``(ids, times)``: ``ids`` (of ``dtype``, at most about
        ``size`` of them) stand ``times`` times each in the order. Together the parts hold the
        order's ids with their multiplicities. For sums and counts that do not depend on the
        order (a histogram of sizes, a total of tokens): an order that is computed, not stored,
        may give them far more cheaply than itself (a mixture's, ``MixtureOrder``). This
        default reads the order in ranges, each once.

        Example:
            >>> [part()[0].tolist() for part in Sequential(5).multiset_parts(2)]
            [[0, 1], [2, 3], [4]]
        """
        n = len(self)
        return [
            partial(_range_part, self, lo, min(n, lo + size), dtype) for lo in range(0, n, size)
        ]

    def materialize(self, dtype: Any = np.int64) -> np.ndarray:
        """The whole order as an array (int64, or ``dtype``; computed in chunks of 4M positions).

        ``dtype=np.int32`` halves the memory of a 100M-sample order (ids must fit).

        Example:
            >>> Sequential(3).materialize(np.int32).dtype.name
            'int32'
        """
        n = len(self)
        out = np.empty(n, dtype=dtype)
        for lo in range(0, n, MATERIALIZE_CHUNK):
            hi = min(n, lo + MATERIALIZE_CHUNK)
            self.take_range(lo, hi, out[lo:hi])
        return out

    def describe(self) -> dict[str, Any]:
        """A small description for messages and debugging (not a fingerprint)."""
        return {"kind": type(self).__name__, "length": len(self)}


# A part of an order's multiset: called, ``(ids, how many times each stands in the order)``.
MultisetPart = Callable[[], tuple[np.ndarray, int]]


def _range_part(order: Order, lo: int, hi: int, dtype: Any) -> tuple[np.ndarray, int]:
    return order.take_range(lo, hi, np.empty(hi - lo, dtype=dtype)), 1


class Sequential(Order):
    """Ids ``0 .. n-1`` in order (``shuffle=False``)."""

    def __init__(self, n: int):
        if n < 0:
            raise ConfigError(f"the number of samples must be >= 0, got {n}")
        self.n = int(n)

    def __len__(self) -> int:
        return self.n

    def _take(self, positions: np.ndarray) -> np.ndarray:
        return positions.copy()

    def take_range(self, lo: int, hi: int, out: np.ndarray | None = None) -> np.ndarray:
        lo, hi = self._check_range(lo, hi)
        if out is None:
            return np.arange(lo, hi, dtype=np.int64)
        out[:] = np.arange(lo, hi, dtype=out.dtype)
        return out


class IdOrder(Order):
    """An explicit array of ids (e.g. what is left of an epoch after an elastic resume)."""

    def __init__(self, ids: np.ndarray):
        ids = np.asarray(ids)
        if ids.ndim != 1 or (ids.size and ids.dtype.kind not in "iu"):
            raise ConfigError(f"IdOrder needs a 1-D integer array, got {ids.dtype} {ids.shape}")
        self.ids = ids

    def __len__(self) -> int:
        return len(self.ids)

    def _take(self, positions: np.ndarray) -> np.ndarray:
        return self.ids[positions].astype(np.int64, copy=False)

    def tail(self, start: int) -> Order:
        self._check_tail(start)
        return IdOrder(self.ids[start:])

    def take_range(self, lo: int, hi: int, out: np.ndarray | None = None) -> np.ndarray:
        lo, hi = self._check_range(lo, hi)
        if out is None:
            return self.ids[lo:hi].astype(np.int64)
        out[:] = self.ids[lo:hi]
        return out

    def materialize(self, dtype: Any = np.int64) -> np.ndarray:
        return self.ids.astype(dtype, copy=True)


class Tail(Order):
    """``base`` without its first ``start`` positions; computed lazily, nothing copied."""

    def __init__(self, base: Order, start: int):
        self.base = base
        self.start = int(start)

    def __len__(self) -> int:
        return len(self.base) - self.start

    def _take(self, positions: np.ndarray) -> np.ndarray:
        return self.base._take(positions + self.start)

    def take_range(self, lo: int, hi: int, out: np.ndarray | None = None) -> np.ndarray:
        lo, hi = self._check_range(lo, hi)
        return self.base.take_range(lo + self.start, hi + self.start, out)

    def tail(self, start: int) -> Order:
        self._check_tail(start)
        return self.base.tail(self.start + start)

    def describe(self) -> dict[str, Any]:
        return {"kind": "Tail", "start": self.start, "base": self.base.describe()}


class Mapped(Order):
    """``table[base[p]]``: an order of positions into ``table`` read through it (lazily).

    A shuffle of the valid samples is ``Mapped(Permutation(len(valid), seed, epoch), valid)``:
    only the ``valid`` ids are held, never the shuffled order.

    Example:
        >>> Mapped(Sequential(3), np.array([4, 7, 9], dtype=np.int32)).take_range(1, 3).tolist()
        [7, 9]
    """

    def __init__(self, base: Order, table: np.ndarray):
        if len(base) > len(table):
            raise ConfigError(f"an order of {len(base)} positions into {len(table)} ids")
        self.base = base
        self.table = np.asarray(table)

    def __len__(self) -> int:
        return len(self.base)

    def _take(self, positions: np.ndarray) -> np.ndarray:
        return self.table[self.base._take(positions)].astype(np.int64, copy=False)

    def take_range(self, lo: int, hi: int, out: np.ndarray | None = None) -> np.ndarray:
        lo, hi = self._check_range(lo, hi)
        at = self.base.take_range(lo, hi, np.empty(hi - lo, dtype=self.table.dtype))
        if out is None:
            return self.table[at].astype(np.int64, copy=False)
        if out.dtype == self.table.dtype:  # ids of the base order lie in range: no checks
            np.take(self.table, at.astype(np.intp), out=out, mode="clip")
        else:
            out[:] = self.table[at]
        return out

    def describe(self) -> dict[str, Any]:
        return {"kind": "Mapped", "length": len(self), "base": self.base.describe()}


class Reported(Order):
    """``inner``, reporting the ids read through ``take_range`` (a plan build's progress).

    Planners read an epoch's order in long ranges (the shuffle is most of a build's time), so
    ``report(n)`` after each piece of ``REPORT_CHUNK`` positions is a progress bar with an ETA.
    Random access (``take``) is not counted. Wrap an order only for one build: the plan keeps
    the inner order.

    Example:
        >>> seen = []
        >>> Reported(Sequential(5), seen.append).take_range(1, 4).tolist(), seen
        ([1, 2, 3], [3])
    """

    def __init__(self, inner: Order, report: Callable[[int], object]):
        self.inner = inner
        self.report = report

    def __len__(self) -> int:
        return len(self.inner)

    def _take(self, positions: np.ndarray) -> np.ndarray:
        return self.inner._take(positions)

    def multiset_parts(self, size: int, dtype: Any = np.int64) -> list[MultisetPart]:
        # the inner order's own (not reported: the bar counts the one pass that reads the order)
        return self.inner.multiset_parts(size, dtype)

    def take_range(self, lo: int, hi: int, out: np.ndarray | None = None) -> np.ndarray:
        lo, hi = self._check_range(lo, hi)
        if out is None:
            out = np.empty(hi - lo, dtype=np.int64)
        for a in range(lo, hi, REPORT_CHUNK):
            b = min(hi, a + REPORT_CHUNK)
            self.inner.take_range(a, b, out[a - lo : b - lo])
            self.report(b - a)
        return out

    def describe(self) -> dict[str, Any]:
        return self.inner.describe()

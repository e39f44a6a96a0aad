"""How much of each dataset an epoch takes: the rules, and the counts they give.

A mixture's dataset gives, per epoch, a count from exactly one rule (``Share``): its ``weight``
among the weighted datasets, a ``repeat`` multiple of its pool, or a fixed number of
``samples``; ``max_samples`` caps its pool first. ``counts_of`` turns the rules and the pool
sizes into counts: weighted ones by largest remainder, so they sum to the total and each is
within one sample of ``weight x total``.

Example:
    >>> counts_of([Share("a", 10, weight=1), Share("b", 10, weight=2)], [10, 10]).tolist()
    [7, 13]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from chute.errors import ConfigError

__all__ = ["AMOUNTS", "Share", "counts_of", "is_integer", "is_number"]

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
            if value is not None and not (is_number(value) and math.isfinite(value) and value >= 0):
                raise ConfigError(
                    f"dataset {self.name!r}: {key} must be a number >= 0, got {value!r}"
                )
        for key in ("samples", "max_samples"):
            value = getattr(self, key)
            if value is not None and not (is_integer(value) and value >= 0):
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


def is_number(value: Any) -> bool:
    return isinstance(value, int | float | np.integer | np.floating) and not isinstance(value, bool)


def is_integer(value: Any) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


def counts_of(
    shares: Sequence[Share],
    pool_sizes: Sequence[int] | np.ndarray,
    epoch_samples: int | None = None,
) -> np.ndarray:
    """Samples each dataset gives per epoch (see the module docstring).

    ``epoch_samples``: the total of every dataset; the weighted ones share what the others
    leave. Default: the weighted datasets give as many samples as their pools hold together
    (a dataset of weight 0 gives none, and its pool is not counted: the others are not
    repeated to fill it).

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
    else:  # a weight of 0 turns a dataset off: its pool does not count either
        budget = int(sum(int(sizes[d]) for d in weighted if (shares[d].weight or 0.0) > 0))
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
                f"records, none in its pool: held out for validation, rejected or capped by "
                f"max_samples) but {share.rule} asks for {counts[d]} per epoch; lower its val, "
                f"raise its max_samples or fix its records"
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

"""Moved to ``chute.plan.mixture_selection``: a mixture's per-epoch selection.

Kept because docs/mixtures.md named this path (``chute.plan.mixture.Selection``) before;
removed in 0.3.

Example:
    >>> from chute.plan.mixture import Selection
    >>> from chute.plan.mixture_selection import Selection as Moved
    >>> Selection is Moved
    True
"""

from chute.plan.mixture_selection import (
    AMOUNTS,
    SELECTION_ALGORITHM,
    MixtureOrder,
    Selection,
    Share,
    counts_of,
    valid_pools,
)

__all__ = [
    "AMOUNTS",
    "SELECTION_ALGORITHM",
    "MixtureOrder",
    "Selection",
    "Share",
    "counts_of",
    "valid_pools",
]

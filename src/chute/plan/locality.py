"""How shuffled and how local an order is: the two sides of shard-window shuffling.

A full permutation mixes best and reads worst (every sample from another file); the identity
order reads best and does not mix. ``order_locality`` measures both, over an epoch's ids and the
shards' sample ranges:

* ``same_shard_pairs``: the fraction of neighbouring positions whose samples share a shard
  (1.0 in file order; about ``sum(size_j^2) / n^2`` under a full permutation);
* ``displacement``: mean ``|position - id| / n`` (about 1/3 for a full permutation, 0 in file
  order): how far samples move from where the files hold them;
* ``rank_correlation``: Pearson correlation of position and id (1.0 in file order, about 0 for a
  full permutation);
* ``shard_switches_per_1000``: how often the next sample lives in another shard, per 1000
  samples: the opens or range requests a reader without a whole-shard cache pays.

Example:
    >>> import numpy as np
    >>> q = order_locality(np.arange(8), np.array([0, 4, 8]))
    >>> q["same_shard_pairs"], q["displacement"], q["shard_switches_per_1000"]
    (0.857, 0.0, 142.857)
"""

from __future__ import annotations

import numpy as np

__all__ = ["order_locality"]


def order_locality(ids: np.ndarray, bounds: np.ndarray) -> dict[str, float]:
    """Shuffle quality and read locality of the order ``ids`` over shards with ``bounds``."""
    ids = np.asarray(ids, dtype=np.int64)
    n = len(ids)
    if n < 2:
        return {
            "same_shard_pairs": 1.0,
            "displacement": 0.0,
            "rank_correlation": 1.0,
            "shard_switches_per_1000": 0.0,
        }
    shard = np.searchsorted(np.asarray(bounds, dtype=np.int64), ids, side="right") - 1
    same = float(np.mean(shard[1:] == shard[:-1]))
    positions = np.arange(n, dtype=np.float64)
    displacement = float(np.mean(np.abs(positions - ids)) / n)
    corr = float(np.corrcoef(positions, ids.astype(np.float64))[0, 1])
    return {
        "same_shard_pairs": round(same, 3),
        "displacement": round(displacement, 3),
        "rank_correlation": round(corr, 3),
        "shard_switches_per_1000": round(1000 * (1 - same), 3),
    }

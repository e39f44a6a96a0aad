"""Per-sample lengths of a whole source, computed once by one parallel pass and cached.

``lengths_of(source, recipe)`` is how length-aware plans (``grouped``, ``budget``, ``packed``)
and ``chute stats`` get lengths without tokenizing again:

1. a source that knows its lengths (an attribute or method ``lengths``, as chute's offline
   token cache has) answers directly: an array (negative = rejected) or a ``Lengths``;
2. otherwise the cache under ``<cache root>/lengths/`` answers when it holds this (source
   fingerprint, recipe fingerprint) pair: a memory map, no tokenization;
3. otherwise the lengths pass runs (``compute_lengths``: all cores) and stores the result.

Sources or recipes without a ``fingerprint()`` cannot be keyed, so their lengths are computed
again each time and never cached (fine for in-memory data).

With ``Recipe(overflow="split")`` the pass measures whole documents (that is what is cached) and
the result is per window: ``split_lengths`` expands it into pieces, each a sample of its own
(``chute.lengths.pieces``). With ``Recipe(task="preference")`` each sample is a pair, two rows of
a padded batch (``sequences == 2``; ``longest`` is the longer side). Under ``torchrun`` only local rank
0 of each node computes; the other local ranks wait for its file (``wait_timeout``).

Example:
    >>> lens = lengths_of([{"input_ids": [1, 2]}, {"input_ids": "x"}, {"input_ids": [3]}])
    >>> lens.length.tolist(), lens.rejected
    ([2, -1, 1], {'wrong_type': 1})
"""

from chute.lengths.measure import (
    LENGTHS_VERSION,
    STATUS_OK,
    STATUS_REJECTED,
    STATUS_TRUNCATED,
    Lengths,
    Pieces,
    PieceTable,
    compute_lengths,
    lengths_key,
    lengths_of,
    split_lengths,
)

__all__ = [
    "LENGTHS_VERSION",
    "STATUS_OK",
    "STATUS_REJECTED",
    "STATUS_TRUNCATED",
    "Lengths",
    "PieceTable",
    "Pieces",
    "compute_lengths",
    "lengths_key",
    "lengths_of",
    "split_lengths",
]

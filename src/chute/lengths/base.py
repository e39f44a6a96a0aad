"""``Lengths``: every sample's token count (and image tokens), as length-aware plans need them.

One array per column, indexed by global sample id::

    id            0     1     2     3     4
    length      812   -1   2048   97   430      -1: the recipe rejected the record
    image_tok     0     0   576     0     0
    status        0     3     1     0     0      0 ok, 1 truncated by max_length, 2+k: kinds[k]
    first_tr.    31    0     12    9    40      the first trained token (decides max_length)
    longest     812   -1   2048   97   430      a preference pair's longer side (else = length)

A sample's ``length`` is all its tokens (what a packed row holds); ``longest`` its longest
sequence (what a padded row is padded to): they differ only for preference pairs
(``sequences == 2``: a pair is two rows of a padded batch). With ``Recipe(overflow="split")``
the samples are the documents' windows and ``pieces`` maps each back to its record
(``chute.lengths.pieces``).

Rejected samples are **excluded up-front** by every length-aware plan (they are never dealt),
and reported: ``rejected`` counts them by kind with a few ``path:line`` examples. The valid
samples are dealt exactly once per epoch, as with the random plan.

Example:
    >>> lens = Lengths.of([5, -1, 7])
    >>> len(lens), lens.num_valid, lens.tokens, lens.valid_ids().tolist()
    (3, 2, 12, [0, 2])
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from chute.errors import ConfigError, RejectTally

# Samples per slice where a property reads every length: 4M int32 are 16 MB.
_SLICE = 1 << 22

__all__ = ["ROWS", "STATUS_OK", "STATUS_REJECTED", "STATUS_TRUNCATED", "Lengths"]

STATUS_OK = 0
STATUS_TRUNCATED = 1
STATUS_REJECTED = 2  # and up: STATUS_REJECTED + k is a reject of kind ``kinds[k]``
# Rows of a lengths pass's array: length, image_tokens, status, first_trained, longest.
ROWS = 5


@dataclass
class Lengths:
    """Per-sample lengths of a source (int32; -1 for a rejected record).

    Args:
        length: tokens per sample (``input_ids`` after the recipe, image tokens included);
            any negative value marks a rejected record.
        image_tokens: image tokens per sample (``None``: all zero).
        status: per-sample code (``STATUS_OK``, ``STATUS_TRUNCATED``, or
            ``STATUS_REJECTED + k`` for a reject of kind ``kinds[k]``); ``None``: derived
            from ``length``.
        kinds: reject kinds, by code.
        tally: rejected records by kind with ``path:line`` examples.
        key: the cache key the arrays were stored under (``None``: not cached).
        first_trained: per sample, the position of its first trained token (its length when
            none is), so a later ``max_length`` is decided as the recipe would
            (``chute.recipe.outcome.overflow_outcome``); ``None``: unknown (taken as 0).
        longest: the longest sequence of each sample (``None``: ``length``).
        sequences: sequences per sample (2 for preference pairs, padded as two rows).
        pieces: with ``overflow="split"``, the ``PieceTable`` from windows to records.
    """

    length: np.ndarray
    image_tokens: np.ndarray | None = None
    status: np.ndarray | None = None
    kinds: tuple[str, ...] = ()
    tally: RejectTally = field(default_factory=RejectTally)
    key: str | None = None
    first_trained: np.ndarray | None = None
    longest: np.ndarray | None = None
    sequences: int = 1
    pieces: Any = None
    _fingerprint: dict[str, Any] | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        length = np.asarray(self.length)
        if length.ndim != 1 or (length.size and length.dtype.kind not in "iu"):
            raise ConfigError(
                f"lengths must be a 1-D array of ints (one per sample, negative for a rejected "
                f"record), got dtype {length.dtype} and shape {length.shape}"
            )
        if length.size and int(length.max()) >= 2**31:
            raise ConfigError(f"a sample length of {int(length.max())} tokens exceeds int32")
        self.length = length if length.dtype == np.int32 else length.astype(np.int32)
        for name in ("image_tokens", "status", "first_trained", "longest"):
            value = getattr(self, name)
            if value is not None and len(value) != len(self.length):
                raise ConfigError(
                    f"{name} has {len(value)} entries but length has {len(self.length)}; "
                    f"they must describe the same samples"
                )

    @classmethod
    def of(cls, value: Any) -> Lengths:
        """``value`` as ``Lengths``: itself, or an array / sequence of per-sample lengths."""
        if isinstance(value, Lengths):
            return value
        if isinstance(value, np.ndarray) or (
            isinstance(value, Sequence) and not isinstance(value, str | bytes)
        ):
            return cls(np.asarray(value))
        raise ConfigError(
            f"lengths must be a chute Lengths or an array of per-sample token counts, got "
            f"{type(value).__name__}"
        )

    def __len__(self) -> int:
        return len(self.length)

    def rejecting(self, mask: np.ndarray, kind: str) -> Lengths:
        """A copy with the samples of ``mask`` rejected as ``kind`` (counted; no plan deals them).

        Example:
            >>> out = Lengths.of([5, 9, -1]).rejecting(np.array([False, True, False]), "too_long")
            >>> out.length.tolist(), out.rejected
            ([5, -1, -1], {'rejected': 1, 'too_long': 1})
        """
        kinds = self.kinds or ("rejected",)
        if self.status is not None and self.kinds:
            status = self.status.copy()
        else:  # earlier rejects of no known kind: "rejected"
            status = np.where(self.length < 0, STATUS_REJECTED, STATUS_OK).astype(np.int32)
        if kind not in kinds:
            kinds = (*kinds, kind)
        status[mask] = STATUS_REJECTED + kinds.index(kind)
        length = self.length.copy()
        length[mask] = -1
        tally = RejectTally(self.tally.max_examples)
        tally.merge(self.tally)
        tally.counts[kind] += int(np.count_nonzero(mask))
        return dataclasses.replace(
            self, length=length, status=status, kinds=kinds, tally=tally, _fingerprint=None
        )

    @property
    def pad_lengths(self) -> np.ndarray:
        """What each sample is padded to in a padded batch: its longest sequence."""
        return self.length if self.longest is None else self.longest

    @property
    def valid(self) -> np.ndarray:
        """One flag per sample: False for a rejected record."""
        return self.length >= 0

    def valid_ids(self) -> np.ndarray:
        """Ids of the samples a plan deals (the rejected ones left out), ascending, int64."""
        return np.flatnonzero(self.length >= 0)

    @property
    def num_valid(self) -> int:
        # in slices: a plan asks this on every build, and ``length >= 0`` over 100M samples
        # is a 100 MB temporary
        return sum(int(np.count_nonzero(part >= 0)) for part in self._slices())

    @property
    def num_rejected(self) -> int:
        return len(self) - self.num_valid

    @property
    def tokens(self) -> int:
        """Tokens in all valid samples."""
        return sum(int(part[part >= 0].sum(dtype=np.int64)) for part in self._slices())

    def _slices(self) -> list[np.ndarray]:
        """``length`` in views of ``_SLICE`` samples (whole-array temporaries stay small)."""
        return [self.length[lo : lo + _SLICE] for lo in range(0, len(self.length), _SLICE)]

    @property
    def num_truncated(self) -> int:
        """Samples the recipe cut to its ``max_length``."""
        if self.status is None:
            return 0
        return int(np.count_nonzero(self.status == STATUS_TRUNCATED))

    @property
    def rejected(self) -> dict[str, int]:
        """Rejected records by kind (``{"bad_json": 3}``); ``"rejected"`` when kinds are unknown."""
        if self.status is not None and self.kinds:
            counts = np.bincount(self.status, minlength=STATUS_REJECTED + len(self.kinds))
            return {
                k: int(counts[STATUS_REJECTED + i])
                for i, k in enumerate(self.kinds)
                if counts[STATUS_REJECTED + i]
            }
        n = self.num_rejected
        return {"rejected": n} if n else {}

    def fingerprint(self) -> dict[str, Any]:
        """What a resume state records: counts and a hash of the lengths (computed once).

        Example:
            >>> Lengths.of([3, 4]).fingerprint()["tokens"]
            7
        """
        if self._fingerprint is None:
            h = hashlib.blake2b(digest_size=16)
            data = np.ascontiguousarray(self.length, dtype="<i4")
            step = 1 << 24
            for lo in range(0, len(data), step):
                h.update(data[lo : lo + step].tobytes())
            self._fingerprint = {
                "samples": len(self),
                "valid": self.num_valid,
                "tokens": self.tokens,
                "hash": h.hexdigest(),
            }
        return dict(self._fingerprint)

    def summary(self) -> dict[str, Any]:
        """Counts for reports: samples, valid, tokens, truncated, rejected by kind."""
        return {
            "samples": len(self),
            "valid": self.num_valid,
            "tokens": self.tokens,
            "truncated": self.num_truncated,
            "rejected": self.num_rejected,
            "by_reason": self.rejected,
            "examples": self.tally.examples,
        }

r"""Windows as samples: the global sample ids of a source whose long documents are split.

With ``Recipe(overflow="split")`` one record becomes one or more windows, and every guarantee
counts windows (pieces): plans deal piece ids, the loader's exact-once and resume are over
piece ids, rejects are counted once per record. A piece id is a record's first piece id plus
the window number; the table of first ids is computed once from the records' lengths (the
lengths pass, cached), because the number of windows is a pure function of a document's length
(``chute.recipe.windows``)::

    record          0        1             2      3 (rejected)
    tokens        300     9000           700     -1           max_length 4096, stride 0
    windows         1        3             1      1
    piece ids       0     1  2  3          4      5
    first        [0, 1, 4, 5, 6]           piece p is window p - first[r] of record r

``Pieces(source, table)`` is the map-style view the loader reads: ``pieces[p]`` is record ``r``
standing for its window (``Record.with_window``), which the recipe turns into that window's
sample. Its fingerprint joins the source's and the split options, so a resume state records
both.

Example:
    >>> from chute.lengths.base import Lengths
    >>> lens = split_lengths(Lengths(np.array([300, 9000, 700, -1])), max_length=4096, stride=0)
    >>> lens.length.tolist(), lens.pieces.first.tolist(), lens.pieces.locate(3)
    ([300, 4096, 4096, 808, 700, -1], [0, 1, 4, 5, 6], (1, 2))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from chute.errors import RejectTally, SampleError
from chute.lengths.base import STATUS_REJECTED, Lengths
from chute.recipe.windows import Windowed, window_counts
from chute.sources.record import Record

__all__ = ["PieceTable", "Pieces", "split_lengths"]


@dataclass
class PieceTable:
    """Where each record's pieces begin: ``first`` (int64, one more entry than records)."""

    first: np.ndarray
    max_length: int
    stride: int

    def __len__(self) -> int:
        return int(self.first[-1])

    @property
    def records(self) -> int:
        return len(self.first) - 1

    def locate(self, piece: int) -> tuple[int, int]:
        """``(record, window)`` of a piece id."""
        n = len(self)
        if not 0 <= piece < n:
            raise IndexError(f"piece id {piece} out of range for {n} pieces")
        record = int(np.searchsorted(self.first, piece, side="right")) - 1
        return record, piece - int(self.first[record])

    def options(self) -> dict[str, Any]:
        return {"max_length": self.max_length, "stride": self.stride, "pieces": len(self)}


def split_lengths(lengths: Lengths, max_length: int, stride: int) -> Lengths:
    """Per-piece ``Lengths`` of per-record ones (the whole documents' lengths), with ``pieces``.

    A rejected record stays one piece of length -1, so it is counted (and excluded) once.
    """
    full = lengths.length.astype(np.int64)
    counts = window_counts(full, max_length, stride)
    first = np.zeros(len(full) + 1, dtype=np.int64)
    np.cumsum(counts, out=first[1:])
    record = np.repeat(np.arange(len(full), dtype=np.int64), counts)
    start = (np.arange(len(record), dtype=np.int64) - first[record]) * (max_length - stride)
    doc = full[record]
    length = np.where(doc < 0, -1, np.minimum(doc - start, max_length)).astype(np.int32)
    image = None if lengths.image_tokens is None else lengths.image_tokens[record]
    status = None if lengths.status is None else lengths.status[record]
    kinds, tally = lengths.kinds, lengths.tally
    if status is not None and lengths.first_trained is not None:
        # windows that end before their document's first trained token hold nothing to learn
        # (a long prompt): left out of the plan as the recipe rejects them (untrained_window)
        end = np.minimum(doc, start + max_length)
        untrained = np.flatnonzero((doc > max_length) & (end <= lengths.first_trained[record]))
        if len(untrained):
            kinds, tally = _left_out(untrained, record, first, kinds, tally)
            status[untrained] = STATUS_REJECTED + kinds.index(UNTRAINED)
            length[untrained] = -1
    return Lengths(
        length,
        image,
        status,
        kinds=kinds,
        tally=tally,
        pieces=PieceTable(first, max_length, stride),
    )


UNTRAINED = "no_trainable_tokens"


def _left_out(
    pieces: np.ndarray,
    record: np.ndarray,
    first: np.ndarray,
    kinds: tuple[str, ...],
    tally: RejectTally,
) -> tuple[tuple[str, ...], RejectTally]:
    """The kinds and a tally (a copy) that count ``pieces`` as windows with nothing to learn."""
    out = RejectTally(tally.max_examples)
    out.merge(tally)
    for piece in pieces[: out.max_examples].tolist():
        r = int(record[piece])
        out.add(
            SampleError(
                UNTRAINED,
                f"record {r}: window {piece - int(first[r])} of {int(first[r + 1] - first[r])} "
                f"ends before the record's first trained token (a prompt longer than the "
                f"window); left out",
            )
        )
    out.counts[UNTRAINED] += len(pieces) - min(len(pieces), out.max_examples)
    return (kinds if UNTRAINED in kinds else (*kinds, UNTRAINED)), out


class Pieces:
    """The map-style view of ``source`` whose items are the windows of its records.

    Args:
        source: the records (``len``, ``source[i]``).
        lengths: per-piece ``Lengths`` with ``pieces`` (``split_lengths``); answered as this
            view's own lengths, so length-aware plans need no second pass.
    """

    def __init__(self, source: Any, lengths: Lengths):
        if lengths.pieces is None:
            raise ValueError("Pieces needs per-piece lengths (split_lengths)")
        self.source = source
        self.lengths: Lengths | None = lengths
        self.table: PieceTable = lengths.pieces

    def __len__(self) -> int:
        return len(self.table)

    def __getitem__(self, piece: int) -> Any:
        record, window = self.table.locate(int(piece))
        item = self.source[record]
        if isinstance(item, Record):
            return item.with_window(window)
        return Windowed(item, window)

    def __getstate__(self) -> dict[str, Any]:
        # DataLoader workers only locate pieces: the per-piece lengths stay in the main process
        return {"source": self.source, "lengths": None, "table": self.table}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def fingerprint(self) -> dict[str, Any]:
        """The source's fingerprint and the split (what a resume state must match)."""
        own = getattr(self.source, "fingerprint", None)
        inner = own() if callable(own) else {"records": len(self.source)}
        return {"kind": "pieces", "source": inner, **self.table.options()}

    def __repr__(self) -> str:
        return f"Pieces({self.source!r}, pieces={len(self)})"

r"""Vectorised scan of a JSON Lines file into record spans: no Python loop per line.

The file is cut into windows read with ``pread``. Each window is scanned on a small thread pool
(``pread`` and numpy release the GIL, so windows scan in parallel): numpy finds every newline
at once and builds the record spans of the lines that start *and* end inside the window,
dropping a ``\r`` before a newline and blank lines. The main thread only stitches the one line
per window that started in an earlier window and shifts line numbers. Lines that start with
whitespace are rare; only those are re-read to decide whether they are blank.

We read with ``pread`` rather than a memory map on purpose: a file truncated while a map of it
is read kills the process with SIGBUS, while ``pread`` just returns less.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import BinaryIO, NamedTuple

import numpy as np

__all__ = ["ENTRY_DTYPE", "LineScan", "Pread", "scan_lines", "scan_spans"]

# pread(n, offset): up to n bytes at offset (os.pread of a file, or ranged requests to an object
# in remote storage).
Pread = Callable[[int, int], bytes]

# One record: [start, end) byte span (end excludes the newline and a trailing \r) and the 1-based
# line number where it begins. 24 bytes a record; memory-mapped, never loaded into Python objects.
ENTRY_DTYPE = np.dtype([("start", "<u8"), ("end", "<u8"), ("line", "<u8")])

BOM = b"\xef\xbb\xbf"
WINDOW = 1 << 22
_WHITESPACE = b" \t\r\n"


class LineScan:
    """Totals of a scan, filled in as ``scan_lines`` runs."""

    def __init__(self) -> None:
        self.lines = 0
        self.records = 0
        self.bytes = 0

    @property
    def blank_lines(self) -> int:
        return self.lines - self.records


class _Window(NamedTuple):
    pos: int  # absolute offset of the window
    size: int  # bytes read
    newlines: int  # newlines in the window
    head_end: int  # end (\r dropped) of the line ending at the window's first newline
    inner: np.ndarray  # ENTRY_DTYPE records of lines between newlines; "line" relative (2..k)
    last_newline: int  # absolute offset of the window's last newline
    after_last: int  # byte after the last newline, -1 when it lies in the next window
    first: int  # the window's first byte


def _scan_window(pread: Pread, pos: int, window: int) -> _Window:
    lo = pos - 1 if pos > 0 else 0  # one byte of overlap: the byte before a leading newline
    buf = np.frombuffer(pread(window + (pos - lo), lo), dtype=np.uint8)
    off = pos - lo
    body = buf[off:]
    first = int(body[0]) if len(body) else -1
    rel = np.flatnonzero(body == 10)
    k = len(rel)
    if k == 0:
        return _Window(pos, len(body), 0, -1, _EMPTY, -1, -1, first)
    before = buf[rel + (off - 1)] if off else buf[np.maximum(rel - 1, 0)]
    if not off and rel[0] == 0:
        before[0] = 0
    newlines = rel.astype(np.uint64) + np.uint64(pos)
    ends = newlines - (before == 13).astype(np.uint64)
    # Line j (j >= 1 within the window) runs from after newline j-1 to newline j.
    starts = newlines[:-1] + np.uint64(1)
    inner_ends = ends[1:]
    heads = body[rel[:-1] + 1].astype(np.int16)
    keep = _records_mask(pread, starts, inner_ends, heads)
    inner = np.empty(int(np.count_nonzero(keep)), dtype=ENTRY_DTYPE)
    inner["start"], inner["end"] = starts[keep], inner_ends[keep]
    inner["line"] = np.flatnonzero(keep).astype(np.uint64) + np.uint64(2)
    after_last = int(body[rel[-1] + 1]) if rel[-1] + 1 < len(body) else -1
    return _Window(pos, len(body), k, int(ends[0]), inner, int(newlines[-1]), after_last, first)


_EMPTY = np.empty(0, dtype=ENTRY_DTYPE)


def _windows(pread: Pread, size: int, window: int, threads: int) -> Iterator[_Window]:
    """Scanned windows in file order, at most ``2 * threads`` in flight."""
    if threads <= 1:
        for pos in range(0, size, window):
            yield _scan_window(pread, pos, window)
        return
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="chute-scan") as pool:
        pending: deque[Future[_Window]] = deque()
        for pos in range(0, size, window):
            pending.append(pool.submit(_scan_window, pread, pos, window))
            if len(pending) >= 2 * threads:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


def scan_lines(
    f: BinaryIO,
    totals: LineScan,
    progress: Callable[[int], None] | None = None,
    window: int = WINDOW,
    threads: int | None = None,
) -> Iterator[np.ndarray]:
    """Yield arrays of ``ENTRY_DTYPE`` for the records of an open binary file, in order.

    Blank and whitespace-only lines are skipped (and counted in ``totals``); a UTF-8 BOM at the
    start is excluded from the first record; a last line without a newline is a record.
    ``f`` must be a real file (it is read with ``pread`` on its descriptor).
    """
    fd = f.fileno()
    yield from scan_spans(
        lambda n, offset: os.pread(fd, n, offset),
        os.fstat(fd).st_size,
        totals,
        progress,
        window,
        threads,
    )


def scan_spans(
    pread: Pread,
    size: int,
    totals: LineScan,
    progress: Callable[[int], None] | None = None,
    window: int = WINDOW,
    threads: int | None = None,
) -> Iterator[np.ndarray]:
    """``scan_lines`` over ``size`` bytes read with ``pread(n, offset)`` (safe from threads).

    Windows are read in parallel on ``threads`` threads, so a remote object is fetched with
    that many ranged requests in flight, each byte once (a few short re-reads decide whether
    lines that start with whitespace are blank).
    """
    threads = threads or min(4, os.cpu_count() or 1)
    line_start = 3 if pread(3, 0) == BOM else 0
    head = -1  # first byte of the line starting at line_start, once known
    line_no = 0
    end_of_data = 0
    for w in _windows(pread, size, window, threads):
        end_of_data = w.pos + w.size
        if head < 0:  # the current line starts in this window: at its start, or after a BOM
            head = w.first if line_start == w.pos else _byte_at(pread, line_start)
        if w.newlines:
            line_no += 1
            carried = _one_entry(pread, line_start, w.head_end, line_no, head)
            if carried is not None:
                yield carried
            if len(w.inner):
                w.inner["line"] += np.uint64(line_no - 1)
                yield w.inner
            totals.records += len(w.inner) + (carried is not None)
            line_no += w.newlines - 1
            line_start, head = w.last_newline + 1, w.after_last
        totals.bytes = end_of_data
        if progress is not None:
            progress(w.size)
    if line_start < end_of_data:  # a last line without a newline
        line_no += 1
        end = end_of_data
        if end - 1 > line_start and _byte_at(pread, end - 1) == 13:
            end -= 1
        if head < 0:
            head = _byte_at(pread, line_start)
        last = _one_entry(pread, line_start, end, line_no, head)
        if last is not None:
            totals.records += 1
            yield last
    totals.lines = line_no


def _one_entry(pread: Pread, start: int, end: int, line: int, head: int) -> np.ndarray | None:
    if end <= start or (head <= 32 and not _has_content(pread, start, end)):
        return None
    return np.array([(start, end, line)], dtype=ENTRY_DTYPE)


def _records_mask(
    pread: Pread, starts: np.ndarray, ends: np.ndarray, heads: np.ndarray
) -> np.ndarray:
    """True for lines that hold a record: not empty and not whitespace only."""
    nonempty = ends > starts
    keep = nonempty & (heads > 32)
    # A non-empty line starting with a byte <= 32 may still be a record (leading spaces, or a
    # stray control byte that must become a counted reject, not vanish). Re-read just those.
    for i in np.flatnonzero(nonempty & (heads <= 32)):
        keep[i] = _has_content(pread, int(starts[i]), int(ends[i]))
    return keep


def _byte_at(pread: Pread, offset: int) -> int:
    got = pread(1, offset)
    return got[0] if got else -1


def _has_content(pread: Pread, start: int, end: int) -> bool:
    block = 1 << 16
    while start < end:
        chunk = pread(min(block, end - start), start)
        if not chunk:
            return False
        if chunk.strip(_WHITESPACE):
            return True
        start += len(chunk)
    return False

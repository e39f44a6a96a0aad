r"""``JsonlSource``: JSON Lines and JSON array files read in place, with random access.

A ``.txt`` file is read the same way, one document per line (blank lines skipped): each line is
the record ``{"text": line}`` (a ``TextLine``), for pretraining corpora stored as plain text.

Example:
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "a.jsonl").write_text('{"text": "one"}\n{"text": "two"}\n')
    >>> src = JsonlSource(d / "a.jsonl", cache_dir=d / "cache")
    >>> len(src), src[1].data["text"], src[1].line
    (2, 'two', 2)
"""

from __future__ import annotations

import builtins
import contextlib
import glob
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from chute.errors import SourceChanged, SourceError
from chute.sources.index import FileIndex, open_index
from chute.sources.record import Record, TextLine
from chute.sources.scan_lines import BOM

__all__ = ["JsonlSource", "expand_paths"]

PathLike = str | os.PathLike[str]

# Records read together by records_between, bounded so a run of huge lines is not one huge read.
_BLOCK_RECORDS = 512
_BLOCK_BYTES = 8 << 20
_ARRAY_BEFORE = frozenset(b" \t\r\n,[")
_ARRAY_AFTER = frozenset(b" \t\r\n,]")


class JsonlSource:
    """Records of one or many JSONL / JSON-array / text files, by global index, without loading.

    Each file gets a cached byte-offset index (see ``chute.sources.index``); the source maps
    a global record index to (file, record) with one ``searchsorted`` over per-file counts.
    Memory per process is O(1) in the file size: the indexes are memory-mapped and records are
    read with ``pread`` on demand.

    Args:
        paths: a path, a glob (``data/*.jsonl``, ``**`` allowed), or a list of them; files keep
            the given order and each glob is sorted, so record ids are stable across runs.
        cache_dir: where indexes live (default ``$CHUTE_CACHE_DIR`` or ``~/.cache/chute``).
        rebuild: rebuild indexes even when a valid one exists.
        progress: called with the number of bytes scanned, for progress bars.
    """

    def __init__(
        self,
        paths: PathLike | Sequence[PathLike],
        *,
        cache_dir: PathLike | None = None,
        rebuild: bool = False,
        progress: Callable[[int], None] | None = None,
    ):
        self.paths = expand_paths(paths)
        self.cache_dir = cache_dir
        self.files: list[FileIndex] = [
            open_index(p, cache_dir=cache_dir, rebuild=rebuild, progress=progress)
            for p in self.paths
        ]
        self._starts = np.cumsum([0] + [len(f) for f in self.files], dtype=np.int64)
        self._readers = [_FileReader(f) for f in self.files]

    # -- size and identity ------------------------------------------------------------------

    def __len__(self) -> int:
        return int(self._starts[-1])

    @property
    def blank_lines(self) -> int:
        return sum(f.blank_lines for f in self.files)

    @property
    def bytes(self) -> int:
        return sum(f.bytes for f in self.files)

    def fingerprint(self) -> dict[str, Any]:
        """What identifies this source's content: each file's identity and record count."""
        return {
            "kind": "jsonl",
            "records": len(self),
            "files": [
                {"path": os.path.abspath(f.path), "records": len(f), **f.identity.to_json()}
                for f in self.files
            ],
        }

    def __repr__(self) -> str:
        names = ", ".join(Path(p).name for p in self.paths[:3])
        more = f", +{len(self.paths) - 3} more" if len(self.paths) > 3 else ""
        return f"JsonlSource([{names}{more}], records={len(self)})"

    # -- access -----------------------------------------------------------------------------

    def locate(self, index: int) -> tuple[int, int]:
        """(file number, record number within that file) of a global index."""
        n = len(self)
        if not -n <= index < n:
            raise IndexError(f"record index {index} out of range for a source of {n} records")
        index %= n
        file_no = int(np.searchsorted(self._starts, index, side="right")) - 1
        return file_no, index - int(self._starts[file_no])

    def __getitem__(self, key: int | slice) -> Any:
        if isinstance(key, slice):
            start, stop, step = key.indices(len(self))
            if step == 1:
                return list(self.records_between(start, stop))
            return [self[i] for i in range(start, stop, step)]
        if not isinstance(key, int | np.integer):
            raise TypeError(f"records are indexed by int or slice, not {type(key).__name__}")
        file_no, local = self.locate(int(key))
        entry = self.files[file_no].entries[local]
        raw = self._readers[file_no].read(int(entry["start"]), int(entry["end"]))
        return self._record(file_no, local, raw, int(entry["line"]))

    def __iter__(self) -> Iterator[Record]:
        return self.records_between(0, len(self))

    def records_between(self, i: int, j: int) -> Iterator[Record]:
        """Records ``i`` to ``j - 1`` in order, read in large sequential blocks."""
        i, j = max(0, i), min(len(self), j)
        while i < j:
            file_no, local = self.locate(i)
            reader, entries = self._readers[file_no], self.files[file_no].entries
            stop = min(len(entries), local + (j - i))
            for lo in range(local, stop, _BLOCK_RECORDS):
                block = np.asarray(entries[lo : min(stop, lo + _BLOCK_RECORDS)])
                for k, raw in enumerate(reader.read_many(block["start"], block["end"])):
                    yield self._record(file_no, lo + k, raw, int(block["line"][k]))
            i += stop - local

    def _record(self, file_no: int, local: int, raw: builtins.bytes, line: int) -> Record:
        f = self.files[file_no]
        return (TextLine if f.kind == "text" else Record)(
            raw,
            path=f.path,
            line=line,
            index=int(self._starts[file_no]) + local,
            element=local + 1 if f.kind == "json_array" else None,
        )

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_readers"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._readers = [_FileReader(f) for f in self.files]


class _FileReader:
    """Reads record bytes from one indexed file and refuses to return bytes from a changed file.

    Every read checks the file's size and mtime against the index and checks that the bytes
    around the record are the record delimiters the index promised, so a file modified or
    truncated while open raises ``SourceChanged`` instead of yielding a wrong record.
    """

    def __init__(self, index: FileIndex):
        self.index = index
        self.is_array = index.kind == "json_array"
        self.bom = False
        self._fd: int | None = None
        self._pid = -1

    def _open(self) -> int:
        if self._fd is None or self._pid != os.getpid():
            try:
                self._fd = os.open(self.index.data_path, os.O_RDONLY)
            except FileNotFoundError:
                raise SourceChanged(
                    f"{self.index.path}: the file vanished after it was indexed"
                ) from None
            self._pid = os.getpid()
            self.bom = os.pread(self._fd, 3, 0) == BOM
        self._check_unchanged(self._fd)
        return self._fd

    def _check_unchanged(self, fd: int) -> None:
        st = os.fstat(fd)
        ident = self.index.identity
        if st.st_size != ident.size or st.st_mtime_ns != ident.mtime_ns:
            raise SourceChanged(
                f"{self.index.path}: the file changed after it was indexed (size {ident.size} -> "
                f"{st.st_size}, mtime_ns {ident.mtime_ns} -> {st.st_mtime_ns}); re-open the "
                f"source to re-index it"
            )

    def read(self, start: int, end: int) -> bytes:
        fd = self._open()
        lo = start - 1 if start > 0 else 0
        hi = min(end + 1, self.index.identity.size)
        buf = os.pread(fd, hi - lo, lo)
        return self._cut(buf, lo, start, end)

    def read_many(self, starts: np.ndarray, ends: np.ndarray) -> Iterator[bytes]:
        first, last = int(starts[0]), int(ends[-1])
        if last - first > _BLOCK_BYTES:
            for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
                yield self.read(s, e)
            return
        fd = self._open()
        lo = first - 1 if first > 0 else 0
        hi = min(last + 1, self.index.identity.size)
        buf = os.pread(fd, hi - lo, lo)
        for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
            yield self._cut(buf, lo, s, e)

    def _cut(self, buf: bytes, lo: int, start: int, end: int) -> bytes:
        size = self.index.identity.size
        if len(buf) < min(end + 1, size) - lo:
            self._changed(start)
        before = buf[start - 1 - lo] if start > 0 else None
        after = buf[end - lo] if end < size else None
        if self.is_array:
            ok = (before is None or before in _ARRAY_BEFORE) and (
                after is None or after in _ARRAY_AFTER
            )
        else:
            ok = (before is None or before == 10 or (start == 3 and self.bom)) and (
                after is None or after in (10, 13)
            )
        if not ok:
            self._changed(start)
        return buf[start - lo : end - lo]

    def _changed(self, offset: int) -> None:
        raise SourceChanged(
            f"{self.index.path}: bytes at offset {offset} no longer match the index (the file was "
            f"modified in place); re-open the source to re-index it"
        )

    def __del__(self) -> None:
        if self._fd is not None and self._pid == os.getpid():
            with contextlib.suppress(OSError):
                os.close(self._fd)


def expand_paths(paths: PathLike | Sequence[PathLike]) -> list[str]:
    """Turn a path, a glob or a list of them into an ordered list of files.

    Example:
        >>> expand_paths([])
        Traceback (most recent call last):
        ...
        chute.errors.SourceError: no data files given
    """
    items = [paths] if isinstance(paths, str | os.PathLike) else list(paths)
    out: list[str] = []
    for item in items:
        text = os.fspath(item)
        if glob.has_magic(text):
            matches = sorted(m for m in glob.glob(text, recursive=True) if os.path.isfile(m))
            if not matches:
                raise SourceError(f"{text}: the pattern matches no files")
            out.extend(matches)
        else:
            out.append(text)
    if not out:
        raise SourceError("no data files given")
    return out

r"""``JsonlSource``: JSON Lines and JSON array files read in place, with random access.

A ``.txt`` file is read the same way, one document per line (blank lines skipped): each line is
the record ``{"text": line}`` (a ``TextLine``), for pretraining corpora stored as plain text.

Files may be local or in object storage (``s3://``, ``gs://``, ``az://``, ``hf://``,
``https://``): the same index, the same checks, bytes read through a block cache
(``chute.sources.remote``).

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
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

import numpy as np

from chute._internal.files import FileIdentity, edge_hash
from chute._internal.objects import RemoteIdentity
from chute._internal.remote import DEFAULT_OPTIONS
from chute.errors import SourceChanged
from chute.remote_options import RemoteOptions
from chute.sources.base import FileSource, expand_paths, shown_path
from chute.sources.blocks import BlockCache
from chute.sources.file_cache import FileCache
from chute.sources.index import FileIndex, open_index
from chute.sources.record import Record, TextLine
from chute.sources.remote import RemoteBytes, block_cache, file_cache, remote_bytes
from chute.sources.scan_lines import BOM

__all__ = ["JsonlSource", "expand_paths"]

PathLike = str | os.PathLike[str]

# Records read together by records_between, bounded so a run of huge lines is not one huge read.
_BLOCK_RECORDS = 512
_BLOCK_BYTES = 8 << 20
# A record larger than this is handed over unread (its size from the index) and read on first
# use, so a size guard (max_record_bytes) rejects it without reading a byte of it.
_UNREAD_BYTES = 1 << 20
_ARRAY_BEFORE = frozenset(b" \t\r\n,[")
_ARRAY_AFTER = frozenset(b" \t\r\n,]")


class JsonlSource(FileSource):
    """Records of one or many JSONL / JSON-array / text files, by global index, without loading.

    Each file gets a cached byte-offset index (see ``chute.sources.index``); the source maps
    a global record index to (file, record) with one ``searchsorted`` over per-file counts.
    Memory per process is O(1) in the file size: the indexes are memory-mapped and records are
    read with ``pread`` on demand (ranged requests through a bounded block cache for files in
    object storage).

    Args:
        paths: a path, a glob (``data/*.jsonl``, ``**`` allowed), a URL or URL glob
            (``s3://bucket/train-*.jsonl``), or a list of them; files keep the given order and
            each glob is sorted, so record ids are stable across runs.
        cache_dir: where indexes live (default ``$CHUTE_CACHE_DIR`` or ``~/.cache/chute``).
        rebuild: rebuild indexes even when a valid one exists.
        progress: called with the number of bytes scanned, for progress bars.
        remote: timeouts, retries and block cache for URLs (``RemoteOptions``).
    """

    kind = "jsonl"

    def __init__(
        self,
        paths: PathLike | Sequence[PathLike],
        *,
        cache_dir: PathLike | None = None,
        rebuild: bool = False,
        progress: Callable[[int], None] | None = None,
        remote: RemoteOptions | None = None,
    ):
        self.remote = remote or DEFAULT_OPTIONS
        self.paths = expand_paths(paths, self.remote)
        self.cache_dir = cache_dir
        self.files: list[FileIndex] = [
            open_index(p, cache_dir=cache_dir, rebuild=rebuild, progress=progress, remote=remote)
            for p in self.paths
        ]
        self._starts = np.cumsum([0] + [len(f) for f in self.files], dtype=np.int64)
        self._readers = self._open_readers()

    def _open_readers(self) -> list[_FileReader]:
        remote = any(f.remote for f in self.files)
        blocks = block_cache(self.remote) if remote else None
        files = file_cache(self.remote, self.cache_dir) if remote else None
        return [_FileReader(f, _bytes_of(f, self.remote, blocks, files)) for f in self.files]

    # -- size and identity ------------------------------------------------------------------

    @property
    def blank_lines(self) -> int:
        return sum(f.blank_lines for f in self.files)

    @property
    def bytes(self) -> int:
        return sum(f.bytes for f in self.files)

    @property
    def blocks(self) -> BlockCache | None:
        """This process's block cache of remote files (counters: ``requests``, ...), if any."""
        for r in self._readers:
            if isinstance(r.io, RemoteBytes):
                return r.io.cache
        return None

    def fingerprint(self) -> dict[str, Any]:
        """What identifies this source's content: each file's identity and record count."""
        return {
            "kind": "jsonl",
            "records": len(self),
            "files": [
                {"path": shown_path(f.path), "records": len(f), **f.identity.to_json()}
                for f in self.files
            ],
        }

    # -- access -----------------------------------------------------------------------------

    def _read(self, file_no: int, local: int) -> Record:
        entry = self.files[file_no].entries[local]
        raw = self._readers[file_no].read(int(entry["start"]), int(entry["end"]))
        return self._record(file_no, local, raw, int(entry["line"]))

    def records_between(self, i: int, j: int) -> Iterator[Record]:
        """Records ``i`` to ``j - 1`` in order, read in large sequential blocks."""
        i, j = max(0, i), min(len(self), j)
        while i < j:
            file_no, local = self.locate(i)
            reader, entries = self._readers[file_no], self.files[file_no].entries
            stop = min(len(entries), local + (j - i))
            f = self.files[file_no]
            make = TextLine if f.kind == "text" else Record
            first = int(self._starts[file_no])
            array = f.kind == "json_array"
            for lo in range(local, stop, _BLOCK_RECORDS):
                block = np.asarray(entries[lo : min(stop, lo + _BLOCK_RECORDS)])
                lines = block["line"].tolist()  # one conversion per block, not per record
                raws = reader.read_many(block["start"], block["end"])
                for k, (raw, line) in enumerate(zip(raws, lines, strict=True), lo):
                    yield make(
                        raw,
                        path=f.path,
                        line=line,
                        index=first + k,
                        element=k + 1 if array else None,
                    )
            i += stop - local

    def _record(self, file_no: int, local: int, raw: builtins.bytes | _Unread, line: int) -> Record:
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
        self.__dict__.setdefault("remote", DEFAULT_OPTIONS)
        self._readers = self._open_readers()


class _Bytes(Protocol):
    def pread(self, n: int, offset: int) -> builtins.bytes: ...


def _bytes_of(
    index: FileIndex, options: RemoteOptions, blocks: BlockCache | None, files: FileCache | None
) -> _Bytes:
    if index.remote and blocks is not None and isinstance(index.identity, RemoteIdentity):
        return remote_bytes(index.data_path, index.identity, options, blocks, files)
    return _LocalBytes(index)


class _LocalBytes:
    """``pread`` of a local indexed file; every read first checks its size and mtime."""

    def __init__(self, index: FileIndex):
        self.index = index
        self._fd: int | None = None
        self._pid = -1

    def pread(self, n: int, offset: int) -> builtins.bytes:
        if self._fd is None or self._pid != os.getpid():
            try:
                self._fd = os.open(self.index.data_path, os.O_RDONLY)
            except FileNotFoundError:
                raise SourceChanged(
                    f"{self.index.path}: the file vanished after it was indexed"
                ) from None
            self._pid = os.getpid()
            self._check_edges(self._fd)
        st = os.fstat(self._fd)
        ident = self.index.identity
        mtime = ident.mtime_ns if isinstance(ident, FileIdentity) else None
        if st.st_size != ident.size or st.st_mtime_ns != mtime:
            raise SourceChanged(
                f"{self.index.path}: the file changed after it was indexed (size {ident.size} -> "
                f"{st.st_size}, mtime_ns {mtime} -> {st.st_mtime_ns}); re-open the "
                f"source to re-index it"
            )
        return os.pread(self._fd, n, offset)

    def _check_edges(self, fd: int) -> None:
        """Once a process, at open: both ends of the file hash as when it was indexed.

        Every read compares size and mtime; a rewrite that kept both (``cp -p``, some sync
        tools) is caught here, the first time a process reads the file.
        """
        ident = self.index.identity
        if not isinstance(ident, FileIdentity) or not ident.edge_hash:
            return
        with os.fdopen(os.dup(fd), "rb") as f:
            size = os.fstat(f.fileno()).st_size
            now = edge_hash(f, size)
        if now != ident.edge_hash:
            raise SourceChanged(
                f"{self.index.path}: the file changed after it was indexed (its size and mtime "
                f"are as before, its content is not: rewritten with the times kept?); re-open "
                f"the source to re-index it"
            )

    # os's functions bound here: at interpreter exit a module's globals may already be None
    # when this runs (an object kept alive by an exception's traceback), which printed a
    # TypeError after every failed run.
    def __del__(self, _getpid: Any = os.getpid, _close: Any = os.close) -> None:
        if self._fd is not None and self._pid == _getpid():
            try:  # noqa: SIM105 - not contextlib.suppress: it may be gone at exit
                _close(self._fd)
            except OSError:
                pass


def _pread_all(io: _Bytes, n: int, offset: int) -> builtins.bytes:
    """``n`` bytes at ``offset`` (fewer only where the file ends), in as many reads as it takes.

    One ``pread`` may return less than asked without being at the end: Linux returns at most
    0x7ffff000 bytes (just under 2 GiB) per call, so a larger record takes several.
    """
    data = io.pread(n, offset)
    if len(data) >= n or not data:
        return data
    parts, got = [data], len(data)
    while got < n:
        more = io.pread(n - got, offset + got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)


class _FileReader:
    """Reads record bytes from one indexed file and refuses to return bytes from a changed file.

    Every read checks the file against its index (a local file's size and mtime; a remote
    object's ETag, see ``RemoteFile.pinned_read``) and checks that the bytes around the record
    are the record delimiters the index promised, so a file modified or truncated while open
    raises ``SourceChanged`` instead of yielding a wrong record. A record over
    ``_UNREAD_BYTES`` is returned unread (``_Unread``: its delimiters checked, its size from
    the index); its bytes are read, and checked again, on first use.
    """

    def __init__(self, index: FileIndex, io: _Bytes):
        self.index = index
        self.io = io
        self.is_array = index.kind == "json_array"
        self._bom: bool | None = None

    @property
    def bom(self) -> bool:
        if self._bom is None:
            self._bom = self.io.pread(3, 0) == BOM
        return self._bom

    def read(self, start: int, end: int) -> builtins.bytes | _Unread:
        """Record ``[start, end)``: its bytes, or, for a large one, an ``_Unread`` of it."""
        if end - start > _UNREAD_BYTES:
            self._check_edges(start, end)
            return _Unread(self, start, end)
        lo = start - 1 if start > 0 else 0
        hi = min(end + 1, self.index.identity.size)
        buf = _pread_all(self.io, hi - lo, lo)
        return self._cut(buf, lo, start, end)

    def read_many(self, starts: np.ndarray, ends: np.ndarray) -> Iterator[builtins.bytes | _Unread]:
        first, last = int(starts[0]), int(ends[-1])
        if last - first > _BLOCK_BYTES or int((ends - starts).max()) > _UNREAD_BYTES:
            for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
                yield self.read(s, e)
            return
        lo = first - 1 if first > 0 else 0
        hi = min(last + 1, self.index.identity.size)
        buf = _pread_all(self.io, hi - lo, lo)
        for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
            yield self._cut(buf, lo, s, e)

    def head(self, start: int, end: int, n: int) -> builtins.bytes:
        """The first ``n`` bytes of record ``[start, end)`` (all of it: exactly its bytes)."""
        n = min(n, end - start)
        data = _pread_all(self.io, n, start)
        if len(data) < n:
            self._changed(start)
        self._check_edges(start, end)  # after the read: the bytes read are the indexed ones
        return data

    def _check_edges(self, start: int, end: int) -> None:
        """The bytes just outside record ``[start, end)`` are the delimiters the index saw."""
        size = self.index.identity.size
        before = self.io.pread(1, start - 1) if start > 0 else None
        after = self.io.pread(1, end) if end < size else None
        if (before is not None and len(before) != 1) or (after is not None and len(after) != 1):
            self._changed(start)
        self._check(before[0] if before else None, after[0] if after else None, start)

    def _cut(self, buf: builtins.bytes, lo: int, start: int, end: int) -> builtins.bytes:
        size = self.index.identity.size
        if len(buf) < min(end + 1, size) - lo:
            self._changed(start)
        before = buf[start - 1 - lo] if start > 0 else None
        after = buf[end - lo] if end < size else None
        self._check(before, after, start)
        return buf[start - lo : end - lo]

    def _check(self, before: int | None, after: int | None, start: int) -> None:
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

    def _changed(self, offset: int) -> None:
        # The stored index is stale though the file's size and mtime match it (rewritten with
        # them kept: cp -p, rsync -t): removed, so that re-opening re-indexes instead of reusing
        # it. A process reading it keeps its own mapped copy.
        sidecar = self.index.sidecar
        if sidecar is not None:
            with contextlib.suppress(OSError):
                sidecar.unlink()
        raise SourceChanged(
            f"{self.index.path}: bytes at offset {offset} no longer match the index (the file was "
            f"modified in place); re-open the source to re-index it"
        )


class _Unread:
    """A large record of an indexed file, not read yet: its size, and its bytes on demand."""

    __slots__ = ("end", "reader", "start")

    def __init__(self, reader: _FileReader, start: int, end: int):
        self.reader = reader
        self.start = start
        self.end = end

    @property
    def size(self) -> int:
        return self.end - self.start

    def read(self, n: int) -> builtins.bytes:
        return self.reader.head(self.start, self.end, n)

r"""``ParquetSource``: Parquet files (local or remote) read in place, one row = one record.

Most datasets on the Hugging Face Hub are Parquet. A Parquet file carries its own index: the
footer lists the row groups and their row counts, so the source's index is just the first row
of each group (no scan, no conversion). Record ``i`` is row ``i - start`` of row group ``g``::

    footer ──► row groups: rows [0, 1000) [1000, 2000) ...   (group_starts: 0, 1000, 2000, ...)
    source[i] ──► file (searchsorted over files) ──► group g (searchsorted over group_starts)
              ──► read_row_group(g), kept in a small per-process cache ──► row as a dict

Records are ``Record.from_data`` dicts with provenance ``path:row`` (the row counting from 1,
as lines do), and go through the same format adapters as JSON records. Random access costs one
row-group read per group not in the cache: keep row groups small (the Hub's are 100 to 1,000
rows), give the decoded-group cache room (``cache_bytes``), or build a token cache once
(``chute preprocess``), which reads groups in order.

A file that changes while the source is open raises ``SourceChanged``: local files are checked
(size and mtime) before each row-group read; remote ones are read through ``RemoteFile``'s
pinned reads (identity checked on open, ``If-Match`` on S3).

Example:
    >>> import tempfile, pathlib, pyarrow as pa, pyarrow.parquet as pq
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "t.parquet"
    >>> pq.write_table(pa.table({"text": ["a", "b", "c"]}), p, row_group_size=2)
    >>> src = ParquetSource(p)
    >>> len(src), src[2].data, src[2].line, src.files[0].group_starts.tolist()
    (3, {'text': 'c'}, 3, [0, 2, 3])
"""

from __future__ import annotations

import io
import os
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from chute._internal.files import FileIdentity
from chute._internal.objects import RangeReader, RemoteIdentity, object_identity
from chute._internal.remote import DEFAULT_OPTIONS, is_url
from chute.errors import SourceChanged, SourceError
from chute.remote_options import RemoteOptions
from chute.sources.base import FileSource, expand_paths, shown_path
from chute.sources.blocks import BlockCache
from chute.sources.file_cache import FileCache
from chute.sources.record import Record
from chute.sources.remote import block_cache, file_cache, remote_bytes

__all__ = ["PARQUET_SUFFIXES", "ParquetFileIndex", "ParquetSource", "open_parquet"]

PARQUET_SUFFIXES = (".parquet", ".pq")
_BATCH_ROWS = 512

PathLike = str | os.PathLike[str]


@dataclass
class ParquetFileIndex:
    """One Parquet file's index: where each row group starts, from the footer.

    Attributes:
        path: the file as the user named it (a path or a URL).
        identity: the file's identity when it was opened.
        group_starts: the first row of each row group, then the row count (``int64``).
        columns: the top-level column names.
    """

    path: str
    identity: FileIdentity | RemoteIdentity
    group_starts: np.ndarray
    columns: list[str]

    def __len__(self) -> int:
        return int(self.group_starts[-1])

    @property
    def bytes(self) -> int:
        return self.identity.size

    @property
    def row_groups(self) -> int:
        return len(self.group_starts) - 1

    @property
    def remote(self) -> bool:
        return is_url(self.path)


def open_parquet(path: str, options: RemoteOptions = DEFAULT_OPTIONS) -> ParquetFileIndex:
    """Read the footer of a Parquet file (local or remote) into its index."""
    identity = object_identity(path, options)
    reader = _Reader(path, identity, options, block_cache(options) if is_url(path) else None)
    meta = reader.file().metadata
    counts = [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]
    starts = np.cumsum([0, *counts], dtype=np.int64)
    names = list(reader.file().schema_arrow.names)
    return ParquetFileIndex(path, identity, starts, names)


class ParquetSource(FileSource):
    """Rows of one or many Parquet files as records, by global index, without loading them.

    Args:
        paths: a path, a glob, a URL or URL glob (``hf://datasets/org/name/data/train-*``),
            or a list of them; files keep the given order, each glob sorted.
        remote: timeouts, retries and block cache for URLs (``RemoteOptions``).
        cache_bytes: decoded row groups kept per process, in bytes of Arrow data (random access
            reads a whole group; the other rows of a cached group are then free). At least one
            group is kept, however large.
    """

    kind = "parquet"

    def __init__(
        self,
        paths: PathLike | Sequence[PathLike],
        *,
        remote: RemoteOptions | None = None,
        cache_bytes: int = 256 << 20,
    ):
        self.remote = remote or DEFAULT_OPTIONS
        self.paths = expand_paths(paths, self.remote)
        self.cache_bytes = int(cache_bytes)
        self.files = [open_parquet(p, self.remote) for p in self.paths]
        self._starts = np.cumsum([0] + [len(f) for f in self.files], dtype=np.int64)
        self._readers: list[_Reader] = self._open_readers()

    def _open_readers(self) -> list[_Reader]:
        remote = any(f.remote for f in self.files)
        blocks = block_cache(self.remote) if remote else None
        files = file_cache(self.remote, None) if remote else None
        groups = _GroupCache(self.cache_bytes)
        return [_Reader(f.path, f.identity, self.remote, blocks, groups, files) for f in self.files]

    # -- size and identity ------------------------------------------------------------------

    blank_lines = 0

    @property
    def bytes(self) -> int:
        return sum(f.bytes for f in self.files)

    def fingerprint(self) -> dict[str, Any]:
        """What identifies this source's content: each file's identity and row count."""
        return {
            "kind": "parquet",
            "records": len(self),
            "files": [
                {"path": shown_path(f.path), "records": len(f), **f.identity.to_json()}
                for f in self.files
            ],
        }

    # -- access -----------------------------------------------------------------------------

    def _read(self, file_no: int, local: int) -> Record:
        f = self.files[file_no]
        g = int(np.searchsorted(f.group_starts, local, side="right")) - 1
        table = self._readers[file_no].group(g)
        row = table.slice(local - int(f.group_starts[g]), 1).to_pylist()[0]
        return self._record(file_no, local, row)

    def records_between(self, i: int, j: int) -> Iterator[Record]:
        """Records ``i`` to ``j - 1`` in order, a row group at a time."""
        i, j = max(0, i), min(len(self), j)
        while i < j:
            file_no, local = self.locate(i)
            f, reader = self.files[file_no], self._readers[file_no]
            stop = min(len(f), local + (j - i))
            g = int(np.searchsorted(f.group_starts, local, side="right")) - 1
            row = local
            while row < stop:
                first = int(f.group_starts[g])
                end = min(stop, int(f.group_starts[g + 1]))
                table = reader.group(g)
                for lo in range(row, end, _BATCH_ROWS):
                    n = min(_BATCH_ROWS, end - lo)
                    for k, data in enumerate(table.slice(lo - first, n).to_pylist()):
                        yield self._record(file_no, lo + k, data)
                row, g = end, g + 1
            i += stop - local

    def _record(self, file_no: int, local: int, data: Any) -> Record:
        return Record.from_data(
            data,
            path=self.files[file_no].path,
            line=local + 1,
            index=int(self._starts[file_no]) + local,
        )

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_readers"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._readers = self._open_readers()


class _GroupCache:
    """Decoded row groups of a source's files, least recently used out past ``capacity`` bytes."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.tables: OrderedDict[tuple[str, int], Any] = OrderedDict()
        self.bytes = 0

    def get(self, key: tuple[str, int]) -> Any:
        table = self.tables.get(key)
        if table is not None:
            self.tables.move_to_end(key)
        return table

    def put(self, key: tuple[str, int], table: Any) -> None:
        self.tables[key] = table
        self.bytes += table.nbytes
        while self.bytes > self.capacity and len(self.tables) > 1:
            _, old = self.tables.popitem(last=False)
            self.bytes -= old.nbytes

    def clear(self) -> None:
        self.tables.clear()
        self.bytes = 0


class _Reader:
    """One Parquet file opened in this process; decoded groups go to the source's cache."""

    def __init__(
        self,
        path: str,
        identity: FileIdentity | RemoteIdentity,
        options: RemoteOptions,
        blocks: BlockCache | None,
        groups: _GroupCache | None = None,
        files: FileCache | None = None,
    ):
        self.path, self.identity, self.options, self.blocks = path, identity, options, blocks
        self.files = files
        self._groups = groups if groups is not None else _GroupCache(0)
        self._file: Any = None
        self._handle: Any = None
        self._pid = -1

    def file(self) -> Any:
        if self._file is not None and self._pid == os.getpid():
            self._check()
            return self._file
        import pyarrow.parquet as pq

        if self.blocks is not None and isinstance(self.identity, RemoteIdentity):
            remote = remote_bytes(self.path, self.identity, self.options, self.blocks, self.files)
            handle: Any = io.BufferedReader(RangeReader(remote.pread, remote.size), 1 << 20)
        else:
            try:
                handle = open(self.path, "rb")  # noqa: SIM115  (kept open for the process)
            except FileNotFoundError:
                raise SourceChanged(f"{self.path}: the file vanished after it was opened") from None
            self._handle = handle
            self._check()
        try:
            self._file = pq.ParquetFile(handle)
        except SourceError:
            raise
        except Exception as exc:
            raise SourceError(
                f"{self.path}: not a readable Parquet file ({type(exc).__name__}: {exc})"
            ) from None
        self._pid = os.getpid()
        return self._file

    def _check(self) -> None:
        if self._handle is None or not isinstance(self.identity, FileIdentity):
            return
        st = os.fstat(self._handle.fileno())
        if st.st_size != self.identity.size or st.st_mtime_ns != self.identity.mtime_ns:
            raise SourceChanged(
                f"{self.path}: the file changed after it was opened (size {self.identity.size} "
                f"-> {st.st_size}); re-open the source"
            )

    def group(self, g: int) -> Any:
        """Row group ``g`` as an Arrow table (from the cache, or read now)."""
        f = self.file()
        table = self._groups.get((self.path, g))
        if table is None:
            self._check()  # one fstat a row group read: a file rewritten in place is not read
            try:
                table = f.read_row_group(g)
            except (SourceError, SourceChanged):
                raise
            except Exception as exc:
                self._check()  # a file rewritten between the check and the read changed
                raise SourceError(
                    f"{self.path}: row group {g} cannot be read ({type(exc).__name__}: {exc})"
                ) from None
            self._groups.put((self.path, g), table)
        return table

    def __del__(self, _getpid: Any = os.getpid) -> None:  # bound: see _LocalBytes.__del__
        if self._handle is not None and self._pid == _getpid():
            self._handle.close()

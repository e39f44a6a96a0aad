r"""The cached byte-offset index of one data file: built once, stored as a sidecar, memory-mapped.

Sidecar layout (little-endian), in ``<cache>/index/<hash of the absolute path>-<name>.idx``::

    bytes 0..8      b"CHUTEIDX"
    bytes 8..12     header length (uint32)
    bytes 12..4096  header: JSON (format version, kind, file identity, counts), zero padded
    bytes 4096..    one ENTRY_DTYPE row per record: start, end, line (uint64 each)

The header holds the identity (size, mtime_ns, hash of both ends) of the file it describes; an
index whose identity no longer matches the file is rebuilt, never trusted because it exists.
Sidecars are written to a temporary file and renamed, so concurrent builders never corrupt one.
A file in object storage (``s3://...``) is indexed the same way, its identity being the
object's size and ETag (``RemoteIdentity.to_json``: the same bytes uploaded again keep their
index; see ``chute.sources.remote``).

Example:
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp()); p = d / "a.jsonl"
    >>> _ = p.write_text('{"a": 1}\n\n{"a": 2}\n')
    >>> ix = open_index(p, cache_dir=d / "cache")
    >>> len(ix), ix.blank_lines, ix.entries["line"].tolist()
    (2, 1, [1, 3])
"""

from __future__ import annotations

import hashlib
import logging
import mmap
import os
import re
import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
import orjson

from chute._internal.files import (
    CANNOT_WRITE,
    FileIdentity,
    atomic_file,
    cache_root,
    one_builder,
    warn_once,
    writable_folder,
)
from chute._internal.objects import RemoteIdentity, object_identity, open_binary
from chute._internal.progress import ProgressArg
from chute._internal.progress import progress as progress_of
from chute._internal.remote import DEFAULT_OPTIONS, check_url, is_url
from chute.errors import SourceChanged, SourceError
from chute.remote_options import RemoteOptions
from chute.sources.base import folder_glob
from chute.sources.decompress import COMPRESSED_SUFFIXES, decompressed_copy
from chute.sources.remote import remote_pread, spooled_array
from chute.sources.scan_array import ArrayScan, scan_array
from chute.sources.scan_lines import BOM, ENTRY_DTYPE, LineScan, scan_lines, scan_spans

__all__ = ["INDEX_VERSION", "FileIndex", "is_text_file", "open_index"]

log = logging.getLogger("chute.index")

INDEX_VERSION = 1
# Kinds whose records are lines (scanned alike; a text line is not parsed as JSON).
LINE_KINDS = ("jsonl", "text")
MAGIC = b"CHUTEIDX"
HEADER_SIZE = 4096

Progress = Callable[[int], None]


@dataclass
class FileIndex:
    """Record spans of one file, plus what was counted while scanning it.

    Attributes:
        path: the file as the user named it (shown in messages).
        data_path: the file actually read (a decompressed copy for ``.gz`` / ``.zst``; the
            URL of a remote object).
        kind: ``"jsonl"``, ``"json_array"`` or ``"text"`` (a ``.txt`` file: one document per
            line, read as ``{"text": line}``).
        identity: identity of ``data_path`` when the index was built.
        entries: ``ENTRY_DTYPE`` array (memory-mapped from the sidecar when one could be written).
        built: True when this call scanned the file, False when a valid sidecar was reused.
    """

    path: str
    data_path: str
    kind: str
    identity: FileIdentity | RemoteIdentity
    entries: np.ndarray
    lines: int
    blank_lines: int
    closed: bool
    built: bool
    seconds: float
    sidecar: Path | None

    def __len__(self) -> int:
        return len(self.entries)

    @property
    def bytes(self) -> int:
        return self.identity.size

    @property
    def remote(self) -> bool:
        """Whether the records are read from object storage (not from a local file)."""
        return is_url(self.data_path)

    def __getstate__(self) -> dict[str, Any]:
        # DataLoader workers and process pools get the sidecar's path, not a copy of the entries:
        # they map the same pages, so a worker's private memory does not grow with the file.
        state = dict(self.__dict__)
        if self.sidecar is not None:
            state["entries"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        if self.entries is None:
            loaded = _load(self.sidecar, self.identity) if self.sidecar else None
            if loaded is None:
                raise SourceChanged(
                    f"{self.path}: its index changed or vanished since the source was opened "
                    f"(was the file modified?); re-open the source"
                )
            self.entries = loaded[1]


def open_index(
    path: str | os.PathLike[str],
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    rebuild: bool = False,
    progress: ProgressArg = None,
    remote: RemoteOptions | None = None,
) -> FileIndex:
    """Open the index of ``path`` (a file or a URL), building it first when missing or stale.

    ``progress`` reports the scan of a build: ``None``, a bar on a terminal (else a log line
    now and then) on rank 0; ``False``: silent; or called with the bytes scanned.
    ``remote``: timeouts and retries for a URL (``RemoteOptions``; defaults otherwise).
    """
    t0 = time.perf_counter()
    options = remote or DEFAULT_OPTIONS
    shown = os.fspath(path)
    data_path = _data_path(shown, cache_dir, options)
    identity = object_identity(data_path, options)
    sidecar = _sidecar_path(data_path, cache_dir)

    def stored() -> FileIndex | None:
        loaded = _load(sidecar, identity)
        if loaded is None:
            return None
        header, entries = loaded
        kind = "text" if is_text_file(shown) else header["kind"]
        return _index_of(shown, data_path, kind, identity, header, entries, t0, sidecar, False)

    if not rebuild and (found := stored()) is not None:
        return found
    # one builder per machine: the other ranks of a node wait, then read what it wrote
    with one_builder(sidecar):
        if not rebuild and (found := stored()) is not None:
            return found
        name = f"index {shown.rsplit('/', 1)[-1]}"
        with progress_of(identity.size, name, unit="B", enabled=progress) as bar:
            return _build(shown, data_path, identity, sidecar, bar.update, t0, options)


def _data_path(path: str, cache_dir: str | os.PathLike[str] | None, options: RemoteOptions) -> str:
    if is_url(path):
        check_url(path)
        if path.endswith(COMPRESSED_SUFFIXES):
            return os.fspath(decompressed_copy(path, cache_root(cache_dir), options))
        return path
    p = Path(path)
    if p.is_dir():
        raise SourceError(
            f"{path}: is a directory; pass its data files or a glob such as '{folder_glob(path)}'"
        )
    if not p.exists():
        raise SourceError(f"{path}: no such file")
    if p.name.endswith(COMPRESSED_SUFFIXES):
        return os.fspath(decompressed_copy(p, cache_root(cache_dir)))
    return os.path.abspath(path)


def _sidecar_path(data_path: str, cache_dir: str | os.PathLike[str] | None) -> Path:
    return sidecar_path(data_path, cache_dir, ".idx")


def sidecar_path(data_path: str, cache_dir: str | os.PathLike[str] | None, suffix: str) -> Path:
    """Where the index of ``data_path`` lives: ``<cache>/index/<hash>-<name><suffix>``."""
    key = hashlib.blake2b(data_path.encode(), digest_size=8).hexdigest()
    name = re.sub(r"[^A-Za-z0-9._-]", "_", data_path.rsplit("/", 1)[-1])[-100:]
    return cache_root(cache_dir) / "index" / f"{key}-{name}{suffix}"


def sidecar_head(magic: bytes, header: dict[str, Any], shown: str) -> bytes:
    """The fixed ``HEADER_SIZE`` bytes that start an index file: magic, length, JSON header."""
    blob = orjson.dumps(header)
    if len(blob) > HEADER_SIZE - 12:
        raise SourceError(f"{shown}: index header too large ({len(blob)} bytes)")
    return (magic + struct.pack("<I", len(blob)) + blob).ljust(HEADER_SIZE, b"\0")


def read_sidecar_header(
    sidecar: Path, magic: bytes, version: int, identity: FileIdentity | RemoteIdentity
) -> dict[str, Any] | None:
    """The JSON header of an index file, or ``None`` where it cannot be used (then rebuilt).

    ``None``: the file is missing, not ``magic``'s, of another version, or of another state of
    the data file.
    """
    try:
        with open(sidecar, "rb") as f:
            head = f.read(HEADER_SIZE)
    except OSError:
        return None
    if len(head) < HEADER_SIZE or head[: len(magic)] != magic:
        return None
    (length,) = struct.unpack("<I", head[8:12])
    try:
        header: dict[str, Any] = orjson.loads(head[12 : 12 + length])
    except orjson.JSONDecodeError:
        return None
    if header.get("version") != version or header.get("identity") != identity.to_json():
        return None
    return header


def _load(
    sidecar: Path, identity: FileIdentity | RemoteIdentity
) -> tuple[dict[str, Any], np.ndarray] | None:
    header = read_sidecar_header(sidecar, MAGIC, INDEX_VERSION, identity)
    if header is None:
        return None
    n = header["records"]
    if sidecar.stat().st_size != HEADER_SIZE + n * ENTRY_DTYPE.itemsize:
        return None  # a damaged sidecar (it cannot be half-written, but disks fail)
    if n == 0:
        return header, np.empty(0, dtype=ENTRY_DTYPE)
    return header, np.memmap(sidecar, dtype=ENTRY_DTYPE, mode="r", offset=HEADER_SIZE, shape=(n,))


def _build(
    path: str,
    data_path: str,
    identity: FileIdentity | RemoteIdentity,
    sidecar: Path,
    progress: Progress | None,
    t0: float,
    options: RemoteOptions,
) -> FileIndex:
    kind = detect_kind(data_path, shown=path, remote=options)
    header: dict[str, Any] = {"version": INDEX_VERSION, "kind": kind, "path": data_path}
    scan = _Scan(path, data_path, kind, progress, options, sidecar.parent.parent)
    written = None
    if writable_folder(sidecar.parent):
        try:
            written = _written(scan, header, identity, sidecar, path, data_path, options)
        except OSError as exc:
            if exc.errno not in CANNOT_WRITE:
                raise
            # a full disk (or a quota) under the cache: as a read-only one, below
            log.warning("cannot write the index of %s to %s: %s", path, sidecar, exc.strerror)
    else:
        warn_once(
            log,
            "cannot write indexes under %s (read-only or not ours); keeping indexes in memory, "
            "in each process (set CHUTE_CACHE_DIR to a writable folder to keep them)",
            sidecar.parent,
        )
    if written is None:
        # A cache that cannot be written must not stop the job: the index lives in this process.
        entries, counts = scan.to_memory()
        header.update(counts)
        return _index_of(path, data_path, kind, identity, header, entries, t0, None, True)
    return _index_of(path, data_path, kind, identity, header, written, t0, sidecar, True)


def _written(
    scan: _Scan,
    header: dict[str, Any],
    identity: FileIdentity | RemoteIdentity,
    sidecar: Path,
    path: str,
    data_path: str,
    options: RemoteOptions,
) -> np.ndarray:
    """The entries of the index just written to ``sidecar`` (``header`` filled in)."""
    with atomic_file(sidecar) as out:
        out.seek(HEADER_SIZE)
        header.update(scan.into(out), identity=identity.to_json())
        out.seek(0)
        out.write(sidecar_head(MAGIC, header, path))
        if object_identity(data_path, options).to_json() != identity.to_json():
            raise SourceError(f"{path}: the file changed while it was being indexed; try again")
    loaded = _load(sidecar, identity)
    if loaded is None:
        raise SourceError(f"{path}: the index just written to {sidecar} does not read back")
    return loaded[1]


def _index_of(
    path: str,
    data_path: str,
    kind: str,
    identity: FileIdentity | RemoteIdentity,
    header: dict[str, Any],
    entries: np.ndarray,
    t0: float,
    sidecar: Path | None,
    built: bool,
) -> FileIndex:
    """The ``FileIndex`` of a header's counts and its entries, read or just built."""
    return FileIndex(
        path=path,
        data_path=data_path,
        kind=kind,
        identity=identity,
        entries=entries,
        lines=header["lines"],
        blank_lines=header["blank_lines"],
        closed=header["closed"],
        built=built,
        seconds=time.perf_counter() - t0,
        sidecar=sidecar,
    )


class _Scan:
    """How one file is scanned: lines or array elements, of a local file or a remote object."""

    def __init__(
        self,
        path: str,
        data_path: str,
        kind: str,
        progress: Progress | None,
        options: RemoteOptions,
        cache: Path,
    ):
        self.path, self.data_path, self.kind = path, data_path, kind
        self.progress, self.options, self.cache = progress, options, cache

    def into(self, out: IO[Any]) -> dict[str, Any]:
        """Write the entries to ``out``; returns the counts for the header."""
        totals: LineScan | ArrayScan
        if self.kind in LINE_KINDS:
            totals = LineScan()
            for entries in self._lines(totals):
                out.write(entries.tobytes())
            closed = True
        else:
            totals = ArrayScan()
            out.write(self._array(totals).tobytes())
            closed = totals.closed
        return {
            "records": totals.records,
            "lines": totals.lines,
            "blank_lines": totals.blank_lines,
            "bytes": totals.bytes,
            "closed": closed,
        }

    def to_memory(self) -> tuple[np.ndarray, dict[str, Any]]:
        if self.kind in LINE_KINDS:
            totals = LineScan()
            parts = list(self._lines(totals))
            entries = np.concatenate(parts) if parts else np.empty(0, dtype=ENTRY_DTYPE)
            counts = {"lines": totals.lines, "blank_lines": totals.blank_lines, "closed": True}
        else:
            array_totals = ArrayScan()
            entries = self._array(array_totals)
            counts = {"lines": array_totals.lines, "blank_lines": 0, "closed": array_totals.closed}
        return entries, counts

    def _lines(self, totals: LineScan) -> Iterator[np.ndarray]:
        if is_url(self.data_path):
            pread, size = remote_pread(self.data_path, self.options)
            yield from scan_spans(pread, size, totals, self.progress)
            return
        with open(self.data_path, "rb") as f:
            yield from scan_lines(f, totals, self.progress)

    def _array(self, totals: ArrayScan) -> np.ndarray:
        if not is_url(self.data_path):
            return _scan_array_file(self.path, self.data_path, totals, self.progress)

        def scan(data: np.ndarray) -> np.ndarray:
            if len(data) == 0:
                raise SourceError(f"{self.path}: empty file is not a JSON array")
            return scan_array(data, self.path, totals, self.progress)

        return spooled_array(self.data_path, self.options, self.cache / "tmp", scan)


def _scan_array_file(
    path: str, data_path: str, totals: ArrayScan, progress: Progress | None
) -> np.ndarray:
    with open(data_path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            raise SourceError(f"{path}: empty file is not a JSON array")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            data = np.frombuffer(mm, dtype=np.uint8)
            try:
                return scan_array(data, path, totals, progress)
            finally:
                del data  # release the buffer before the map closes


def is_text_file(path: str) -> bool:
    """Whether ``path`` names a plain-text file (``.txt``, possibly compressed).

    Example:
        >>> is_text_file("wiki.txt.gz"), is_text_file("c4.jsonl")
        (True, False)
    """
    name = os.path.basename(path)
    for suffix in COMPRESSED_SUFFIXES:
        name = name.removesuffix(suffix)
    return name.endswith(".txt")


def detect_kind(
    data_path: str, *, shown: str | None = None, remote: RemoteOptions = DEFAULT_OPTIONS
) -> str:
    """The kind of a data file: ``json_array``, ``text`` (``.txt``) or ``jsonl``.

    ``"json_array"`` is a ``.json`` file holding one array; ``"text"`` a ``.txt`` file.
    A ``.json`` file whose first line is a complete JSON value is JSON Lines (people often
    name JSONL files ``.json``). A ``.json`` file holding a single object is refused: it is a
    config or a dict of records, not a list of records.
    """
    shown = shown or data_path
    if is_text_file(shown):
        return "text"
    if not data_path.endswith(".json"):
        return "jsonl"
    with open_binary(data_path, remote, chunk=1 << 20) as f:
        first_line = f.readline(1 << 24)
        rest_has_content = any(line.strip() for line in _lines_after(f, 4))
    text = first_line[3:] if first_line.startswith(BOM) else first_line
    stripped = text.strip()
    if not stripped:
        return "jsonl"
    try:
        orjson.loads(stripped)
        complete_first_line = True
    except orjson.JSONDecodeError:
        complete_first_line = False
    if complete_first_line and (rest_has_content or stripped[:1] == b"{"):
        return "jsonl"
    if stripped[:1] == b"[":
        return "json_array"
    if stripped[:1] == b"{":
        raise SourceError(
            f"{shown}: the top level is one JSON object spanning several lines, not an array of "
            f"records or JSON Lines; chute reads [{{...}}, {{...}}] or one object per line"
        )
    return "jsonl"


def _lines_after(f: IO[bytes], limit: int) -> Iterator[bytes]:
    for _ in range(limit):
        line = f.readline(1 << 20)
        if not line:
            return
        yield line

r"""One object behind a URL: its identity, ranged reads, a stream; and local-or-remote helpers.

``RemoteFile`` is how every layer reads an object: ``read_range`` (stateless, safe from
threads, for scans), ``pinned_read`` (for readers that must never return bytes of a replaced
object: the identity is checked when the process first opens it and, on S3, every request
carries ``If-Match``), and ``stream`` (front to back). ``object_identity`` and ``open_binary``
take a local path or a URL alike.

Example:
    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "x"; _ = p.write_bytes(b"abc")
    >>> object_identity(str(p)).size
    3
    >>> with open_binary(str(p)) as f:
    ...     f.read()
    b'abc'
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass
from typing import Any, BinaryIO

from chute._internal.files import FileIdentity, file_identity
from chute._internal.remote import (
    DEFAULT_OPTIONS,
    is_url,
    redact,
    split,
    with_retries,
)
from chute.errors import SourceChanged, SourceError
from chute.remote_options import RemoteOptions

__all__ = [
    "ETAG_NOTE",
    "RangeReader",
    "RemoteFile",
    "RemoteIdentity",
    "identity_from_info",
    "object_full_hash",
    "object_identity",
    "open_binary",
]

# Bytes hashed at each end of an object whose store gives no ETag or version (as for files).
_EDGE_BYTES = 1 << 16


@dataclass(frozen=True)
class RemoteIdentity:
    """What the store says about an object: size, ETag, version, LastModified.

    ``edge_hash`` (a hash of both ends, as for local files) is filled in only when the store
    gives neither an ETag nor a version. Whether two objects hold the same bytes is decided by
    ``to_json`` (what fingerprints, index headers and resume states store and compare).
    """

    size: int
    etag: str | None = None
    version: str | None = None
    mtime: str | None = None
    edge_hash: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The fields that identify the object's bytes: size and ETag, when the store has one.

        LastModified and the version name an upload, not its bytes: uploading the same bytes
        again (same size, same ETag) leaves the object what it was, and a loader state, a
        partial build or a cache built from it goes on over it. A different ETag is a change
        even where the bytes are the same (a multipart upload's ETag, ``...-N``, depends on
        the part size; see ``ETAG_NOTE``). Without an ETag: the version; without either: the
        hash of both ends and LastModified (as a local file's edge hash and mtime).

        Example:
            >>> RemoteIdentity(3, "9a0364b9", "v2", "2026-01-02 03:04:05+00:00").to_json()
            {'size': 3, 'etag': '9a0364b9'}
            >>> sorted(RemoteIdentity(3, None, None, "2026-01-02", "ab12").to_json())
            ['edge_hash', 'mtime', 'size']
        """
        if self.etag is not None:
            return {"size": self.size, "etag": self.etag}
        if self.version is not None:
            return {"size": self.size, "version": self.version}
        return {"size": self.size, "mtime": self.mtime, "edge_hash": self.edge_hash}


# Said wherever a different ETag refuses an object (a resume state, a cache's source check).
ETAG_NOTE = (
    "An object's ETag changes when its bytes do, and also when the same bytes are uploaded "
    "another way (a multipart upload's ETag, ending in -N, depends on the part size), so a "
    "different ETag counts as a changed object. If the bytes are the same, upload them again "
    "as they were uploaded first (a single PUT, or the same part size)."
)


_ETAG_KEYS = ("ETag", "etag", "e_tag", "blob_id", "md5Hash", "content_md5")
_VERSION_KEYS = ("VersionId", "version_id", "generation")
_MTIME_KEYS = ("LastModified", "last_modified", "Last-Modified", "updated", "mtime", "created")


def identity_from_info(info: dict[str, Any]) -> RemoteIdentity:
    size = info.get("size")
    if not isinstance(size, int):
        raise SourceError(f"{redact(str(info.get('name')))}: the store reports no size")

    def first(keys: Iterable[str]) -> str | None:
        for k in keys:
            v = info.get(k)
            if v not in (None, "", "null"):
                return str(v).strip('"')
        return None

    lfs = info.get("lfs")
    etag = first(_ETAG_KEYS)
    if isinstance(lfs, dict) and lfs.get("sha256"):
        etag = str(lfs["sha256"])
    return RemoteIdentity(size, etag, first(_VERSION_KEYS), first(_MTIME_KEYS))


class RemoteFile:
    """One object behind a URL: its identity, ranged reads and a sequential stream.

    Pickles as its URL, options and identity; each process opens its own connection.

    Args:
        url: the object (no credentials in it: see ``check_url``).
        options: timeouts and retries.
        identity: the identity the object must still have (e.g. the one an index was built
            for); reads through ``pinned_read`` raise ``SourceChanged`` when it differs.
    """

    def __init__(
        self,
        url: str,
        options: RemoteOptions = DEFAULT_OPTIONS,
        identity: RemoteIdentity | None = None,
    ):
        self.url = url
        self.options = options
        self._identity = identity
        self._pinned: Any = None
        self._pid = -1
        self.requests = 0
        self.bytes_fetched = 0

    def __getstate__(self) -> dict[str, Any]:
        return {"url": self.url, "options": self.options, "_identity": self._identity}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["url"], state["options"], state["_identity"])  # type: ignore[misc]

    @property
    def shown(self) -> str:
        return redact(self.url)

    def _split(self) -> tuple[Any, str]:
        return split(self.url, self.options)

    def info(self) -> dict[str, Any]:
        fs, path = self._split()

        def stat() -> Any:
            fs.invalidate_cache(path)  # ask the store, never a listing cached earlier
            return fs.info(path)

        info = with_retries(stat, self.url, "stat", self.options)
        if info.get("type") == "directory":
            raise SourceError(f"{self.shown}: is a folder; pass its objects or a glob")
        return dict(info)

    def identity(self, *, refresh: bool = False) -> RemoteIdentity:
        """The object's identity now (asked once, or again with ``refresh``)."""
        if self._identity is None or refresh:
            ident = identity_from_info(self.info())
            if ident.etag is None and ident.version is None:
                ident = RemoteIdentity(**{**asdict(ident), "edge_hash": self._edge_hash(ident)})
            if refresh:
                return ident
            self._identity = ident
        return self._identity

    def _edge_hash(self, ident: RemoteIdentity) -> str:
        h = hashlib.blake2b(digest_size=16)
        h.update(self.read_range(0, min(_EDGE_BYTES, ident.size)))
        if ident.size > _EDGE_BYTES:
            h.update(self.read_range(max(_EDGE_BYTES, ident.size - _EDGE_BYTES), ident.size))
        return h.hexdigest()

    @property
    def size(self) -> int:
        return self.identity().size

    def read_range(self, start: int, end: int) -> bytes:
        """Bytes ``[start, end)``: one ranged request (retried), safe from several threads."""
        if end <= start:
            return b""
        fs, path = self._split()
        data = with_retries(
            lambda: fs.cat_file(path, start=start, end=end),
            self.url,
            f"read bytes {start}-{end}",
            self.options,
        )
        self.requests += 1
        self.bytes_fetched += len(data)
        return bytes(data)

    def pinned_read(self, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of the object as it was when ``identity`` was taken.

        The first read of a process opens the object and compares its identity with the one
        given (``SourceChanged`` when it differs); where the store supports it (S3) every
        request then carries ``If-Match`` with the ETag, so an object replaced while it is read
        raises ``SourceChanged`` too, never returns bytes of the new object.
        """
        if end <= start:
            return b""
        f = self._open_pinned()

        def call() -> bytes:
            f.seek(start)
            return bytes(f.read(end - start))

        data = with_retries(call, self.url, f"read bytes {start}-{end}", self.options)
        self.requests += 1
        self.bytes_fetched += len(data)
        return data

    def _open_pinned(self) -> Any:
        if self._pinned is not None and self._pid == os.getpid():
            return self._pinned
        expected = self.identity()
        fs, path = self._split()

        def open_() -> Any:
            fs.invalidate_cache(path)
            return fs.open(path, "rb", cache_type="none", block_size=self.options.block_size)

        f = with_retries(
            open_,
            self.url,
            "open",
            self.options,
        )
        details = getattr(f, "details", None)
        now = None
        if isinstance(details, dict) and (expected.etag or expected.version):
            seen = identity_from_info(details)  # what the open itself saw: no second request
            if seen.etag is not None or seen.version is not None:
                now = seen  # (some backends' file objects keep only the size: ask again)
        if now is None:
            now = self.identity(refresh=True)
        if not _same(expected, now):
            raise SourceChanged(
                f"{self.shown}: the object changed after it was indexed (size {expected.size} -> "
                f"{now.size}, etag {expected.etag} -> {now.etag}); re-open the source to "
                f"re-index it"
            )
        self._pinned, self._pid = f, os.getpid()
        return f

    def stream(self, chunk: int = 8 << 20) -> BinaryIO:
        """A buffered reader of the whole object, front to back, in ranged requests."""
        raw = RangeReader(lambda n, offset: self.read_range(offset, offset + n), self.size)
        return io.BufferedReader(raw, buffer_size=chunk)


def _same(a: RemoteIdentity, b: RemoteIdentity) -> bool:
    return a.to_json() == b.to_json()


class RangeReader(io.RawIOBase):
    """A raw, seekable binary stream over ``pread(n, offset)`` of an object of ``size`` bytes.

    Example:
        >>> data = b"0123456789"
        >>> r = RangeReader(lambda n, off: data[off : off + n], len(data))
        >>> _ = r.seek(4); r.read(3), r.tell()
        (b'456', 7)
    """

    def __init__(self, pread: Callable[[int, int], bytes], size: int):
        self.pread = pread
        self.size = size
        self.pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self.pos, 2: self.size}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        n = max(0, min(len(view), self.size - self.pos))
        data = self.pread(n, self.pos) if n else b""
        view[: len(data)] = data
        self.pos += len(data)
        return len(data)


# -- local or remote, one call -----------------------------------------------------------------


def object_identity(
    path: str | os.PathLike[str], options: RemoteOptions = DEFAULT_OPTIONS
) -> FileIdentity | RemoteIdentity:
    """The identity of a local file or of an object behind a URL."""
    if is_url(path):
        return RemoteFile(str(path), options).identity()
    return file_identity(path)


@contextlib.contextmanager
def open_binary(
    path: str | os.PathLike[str], options: RemoteOptions = DEFAULT_OPTIONS, chunk: int = 8 << 20
) -> Iterator[BinaryIO]:
    """A local file or a remote object, opened for reading front to back."""
    if not is_url(path):
        with open(path, "rb") as local:
            yield local
        return
    f = RemoteFile(str(path), options).stream(chunk)
    try:
        yield f
    finally:
        f.close()


def object_full_hash(path: str | os.PathLike[str], options: RemoteOptions = DEFAULT_OPTIONS) -> str:
    """blake2b of a whole local file or remote object (for ``--full-hash`` fingerprints)."""
    h = hashlib.blake2b(digest_size=16)
    with open_binary(path, options) as f:
        while block := f.read(1 << 22):
            h.update(block)
    return h.hexdigest()

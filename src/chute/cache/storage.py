r"""Where a cache's files live: a local folder, or a prefix in object storage.

The build and the reader name every file of a cache by its path under a *local root* and do
all their I/O through a ``Storage``:

* ``LocalStorage``: the local root is the cache directory itself; ``publish`` writes a
  temporary file, fsyncs and renames it (``chute.cache.layout.publish_parts``).
* ``RemoteStorage`` (``s3://``, ``gs://``, ``az://``, ... through fsspec): the local root is a
  *mirror* in the local cache (``<cache>/remote-caches/<hash of the URL>/``). ``publish``
  writes the file there, then uploads it with one PUT: object stores have no rename, but a PUT
  (multipart ones included) makes the whole object visible at once or not at all, so the commit
  order of the protocol carries over unchanged: a chunk's files, then its commit record; the
  global files, then ``manifest.json`` last. Reads (``fetch``) download a file into the mirror
  once, checked against the size (and hash) the manifest records, and are then local reads:
  the mirror is the local cache of chunk files that ``open_cache("s3://...")`` memory-maps.

::

    build (any rank, any node)                     object store                 reader
    ─────────────────────────────────              ──────────────────────       ──────────────
    chunk k: write in mirror ──PUT──►              chunks/00000k.arrow
             commit record   ──PUT──►              chunks/00000k.json
    last rank: global files  ──PUT──►              lengths.npy, rejects ...
               manifest      ──PUT── (last) ──►    manifest.json  ──GET──►   open_cache: complete?
                                                                  chunk ──GET once──► mirror ──► mmap

Example:
    >>> import tempfile
    >>> s = storage_for(tempfile.mkdtemp())
    >>> s.publish(s.root_path / "a.json", [b'{"x": 1}']); s.read(s.root_path / "a.json")
    b'{"x": 1}'
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import time
from collections.abc import Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from chute._internal.files import atomic_file, cache_root, temp_beside
from chute._internal.remote import (
    DEFAULT_OPTIONS,
    check_url,
    is_url,
    split,
    with_retries,
)
from chute.errors import CacheError, RemoteError
from chute.remote_options import RemoteOptions

__all__ = [
    "LocalStorage",
    "RemoteStorage",
    "Storage",
    "create",
    "fsync_dir",
    "publish",
    "publish_parts",
    "storage_for",
]


def publish(path: str | os.PathLike[str], data: Any) -> None:
    """Write ``data`` (bytes-like) to ``path`` atomically and durably.

    A temporary file beside it, fsync, rename, fsync of the folder: readers and resumed runs see
    the old file or the whole new one, after a crash too.
    """
    publish_parts(path, [data])


def publish_parts(path: str | os.PathLike[str], parts: Iterable[Any]) -> None:
    """``publish`` for content made of many parts (written one after another, never joined)."""
    path = Path(path)
    tmp = temp_beside(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_TRUNC)
    try:
        with os.fdopen(fd, "wb") as f:
            for part in parts:
                f.write(part)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


def create(path: str | os.PathLike[str], data: bytes) -> bool:
    """Write ``data`` to ``path`` only if no file is there; whether this call wrote it.

    Atomic against every other ``create`` of the same path, on this host or another sharing
    the filesystem: the bytes go to a temporary file first (fsynced), which is then hard-linked
    to ``path``; a link fails when the name exists, so exactly one creator succeeds and readers
    see the whole file or none. Where hard links are refused, ``O_EXCL`` creates the file
    (still one winner; a reader may then briefly see it short).
    """
    path = Path(path)
    tmp = temp_beside(path)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_TRUNC)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        except OSError:  # no hard links here (some FUSE and SMB mounts)
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                return False
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    fsync_dir(path.parent)
    return True


def fsync_dir(folder: str | os.PathLike[str]) -> None:
    """Make renames in ``folder`` durable (no-op where directories cannot be opened)."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class Storage:
    """A local cache directory (the base class); ``RemoteStorage`` overrides the I/O.

    Args:
        root: the cache directory.
    """

    remote = False

    def __init__(self, root: str | os.PathLike[str]):
        self.root_path = Path(os.path.abspath(os.fspath(root)))
        self.shown = str(self.root_path)

    def name(self, path: Path) -> str:
        """``path`` (under the local root) as a name relative to the root, ``/``-separated."""
        return path.relative_to(self.root_path).as_posix()

    def where(self, path: Path) -> str:
        """``path`` as the user should see it (the file, or its URL)."""
        return str(path)

    # -- reads ---------------------------------------------------------------------------------

    def read(self, path: Path) -> bytes | None:
        """The file's bytes, or ``None`` when it does not exist."""
        try:
            return path.read_bytes()
        except (FileNotFoundError, IsADirectoryError):
            return None

    def size(self, path: Path) -> int | None:
        try:
            return path.stat().st_size
        except FileNotFoundError:
            return None

    def listing(self, folder: Path) -> dict[str, int]:
        """Names and sizes of the files directly in ``folder`` (one listing)."""
        try:
            return {e.name: e.stat().st_size for e in os.scandir(folder) if e.is_file()}
        except FileNotFoundError:
            return {}

    def age(self, path: Path) -> float | None:
        """Seconds since ``path`` was last written, ``None`` when it does not exist."""
        try:
            return time.time() - path.stat().st_mtime
        except OSError:
            return None

    def fetch(self, path: Path, size: int | None = None, blake2b: str | None = None) -> Path:
        """A local file holding ``path``'s bytes (here: the file itself)."""
        return path

    def fetch_tree(self, folder: Path) -> Path:
        """A local folder holding ``folder``'s files (here: the folder itself)."""
        return folder

    # -- writes --------------------------------------------------------------------------------

    def publish(self, path: Path, parts: Iterable[Any]) -> None:
        """Write ``path`` all or nothing."""
        path.parent.mkdir(parents=True, exist_ok=True)
        publish_parts(path, parts)

    def create(self, path: Path, data: bytes) -> bool:
        """Write ``path`` all or nothing, only if it does not exist; whether this call did.

        Of several processes creating one path at once, on any hosts, exactly one succeeds.
        """
        path.parent.mkdir(parents=True, exist_ok=True)
        return create(path, data)

    def upload_tree(self, folder: Path, last: str = "manifest.json") -> None:
        """Make the files a stage wrote under ``folder`` visible (here they already are)."""

    def touch(self, path: Path, data: bytes | None = None) -> None:
        """Mark ``path`` as written now (a heartbeat), with ``data`` as its content if given."""
        with contextlib.suppress(OSError):
            if data is None:
                path.touch()
            else:
                self.publish(path, [data])

    def delete(self, path: Path) -> None:
        path.unlink(missing_ok=True)

    def delete_tree(self, folder: Path) -> None:
        shutil.rmtree(folder, ignore_errors=True)

    def is_dir_or_absent(self) -> bool:
        return not self.root_path.exists() or self.root_path.is_dir()

    def names(self) -> list[str]:
        """Names directly under the root (empty when it does not exist)."""
        try:
            return [p.name for p in self.root_path.iterdir()]
        except FileNotFoundError:
            return []

    def prepare(self) -> None:
        (self.root_path / "chunks").mkdir(parents=True, exist_ok=True)


LocalStorage = Storage


class RemoteStorage(Storage):
    """A cache under a URL prefix, with a local mirror that holds what was written or read.

    Args:
        url: the cache's URL (``s3://bucket/caches/run1``); no credentials in it.
        options: timeouts and retries.
        mirror: the local mirror (default ``<cache>/remote-caches/<hash of the URL>``).
    """

    remote = True

    def __init__(
        self,
        url: str,
        options: RemoteOptions = DEFAULT_OPTIONS,
        mirror: str | os.PathLike[str] | None = None,
    ):
        self.url = check_url(url.rstrip("/"), "out")
        self.options = options
        key = hashlib.blake2b(self.url.encode(), digest_size=12).hexdigest()
        folder = mirror if mirror is not None else cache_root() / "remote-caches" / key
        super().__init__(folder)
        self.shown = self.url

    def __getstate__(self) -> dict[str, Any]:
        return {"url": self.url, "options": self.options, "root_path": self.root_path}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["url"], state["options"], state["root_path"])  # type: ignore[misc]

    def _url(self, path: Path) -> str:
        name = self.name(path)
        return f"{self.url}/{name}" if name != "." else self.url

    def where(self, path: Path) -> str:
        return self._url(path)

    def _call(self, what: str, path: Path, fn: Any) -> Any:
        url = self._url(path)
        fs, remote = split(url, self.options)
        return with_retries(lambda: fn(fs, remote), url, what, self.options)

    # -- reads ---------------------------------------------------------------------------------

    def read(self, path: Path) -> bytes | None:
        try:
            return bytes(self._call("read", path, lambda fs, p: fs.cat_file(p)))
        except RemoteError as exc:
            if exc.missing:
                return None
            raise

    def _info(self, path: Path) -> dict[str, Any] | None:
        def stat(fs: Any, p: str) -> Any:
            fs.invalidate_cache(p)  # the store, not a listing cached earlier
            return fs.info(p)

        try:
            info = self._call("stat", path, stat)
        except RemoteError as exc:
            if exc.missing:
                return None
            raise
        return dict(info) if info.get("type") != "directory" else None

    def size(self, path: Path) -> int | None:
        info = self._info(path)
        return None if info is None else int(info["size"])

    def listing(self, folder: Path) -> dict[str, int]:
        def ls(fs: Any, p: str) -> Any:
            fs.invalidate_cache(p)
            try:
                return fs.ls(p, detail=True)
            except FileNotFoundError:
                return []

        entries = self._call("list", folder, ls)
        return {
            str(e["name"]).rstrip("/").rsplit("/", 1)[-1]: int(e.get("size") or 0)
            for e in entries
            if e.get("type") != "directory"
        }

    def age(self, path: Path) -> float | None:
        info = self._info(path)
        if info is None:
            return None
        stamp = info.get("LastModified") or info.get("last_modified") or info.get("mtime")
        if isinstance(stamp, datetime):
            return (datetime.now(timezone.utc) - stamp).total_seconds()
        if isinstance(stamp, int | float):
            return time.time() - float(stamp)
        return 0.0  # a store without times: treat the heartbeat as fresh

    def fetch(self, path: Path, size: int | None = None, blake2b: str | None = None) -> Path:
        """The mirror's copy of ``path``: downloaded once, checked against ``size``/``blake2b``."""
        with contextlib.suppress(FileNotFoundError):
            if size is None or path.stat().st_size == size:
                path.stat()  # present (and of the size the manifest records)
                return path
        data = self.read(path)
        if data is None:
            raise CacheError(f"{self._url(path)}: missing from the cache (it was listed)")
        if size is not None and len(data) != size:
            raise CacheError(
                f"{self._url(path)}: {len(data)} bytes, the manifest says {size}; the remote "
                f"cache is damaged: run the chute preprocess command again"
            )
        if blake2b is not None and hashlib.blake2b(data, digest_size=16).hexdigest() != blake2b:
            raise CacheError(
                f"{self._url(path)}: its bytes differ from the manifest's hash; the remote cache "
                f"is damaged: run the chute preprocess command again"
            )
        with atomic_file(path) as f:
            f.write(data)
        return path

    def fetch_tree(self, folder: Path) -> Path:
        """The mirror's copy of every file under ``folder`` (each downloaded once)."""

        def find(fs: Any, p: str) -> Any:
            fs.invalidate_cache(p)
            return fs.find(p, detail=True)

        base = self._url(folder)
        for name, info in sorted(self._call("list", folder, find).items()):
            relative = fs_relative(str(name), base)
            if relative:
                self.fetch(folder / relative, int(info.get("size") or 0))
        return folder

    # -- writes --------------------------------------------------------------------------------

    def publish(self, path: Path, parts: Iterable[Any]) -> None:
        super().publish(path, parts)  # the mirror's copy, then one PUT of it
        self._call("write", path, lambda fs, p: fs.put_file(str(path), p))

    def create(self, path: Path, data: bytes) -> bool:
        """One PUT that succeeds only when no object has the name (``If-None-Match: *``).

        S3 (and stores that honour the condition) let exactly one of several creators win; a
        filesystem that cannot make the PUT conditional checks existence first, which two
        creators can pass at once: the build's per-chunk check of the plan catches that.
        """

        def put(fs: Any, p: str) -> bool:
            try:
                fs.pipe_file(p, data, mode="create")
            except FileExistsError:
                return False  # another creator's (or this call's, answered late: see caller)
            except TypeError:  # an implementation without the mode
                if fs.exists(p):
                    return False
                fs.pipe_file(p, data)
            return True

        return bool(self._call("write", path, put))

    def upload_tree(self, folder: Path, last: str = "manifest.json") -> None:
        files = sorted(p for p in folder.rglob("*") if p.is_file())
        files.sort(key=lambda p: p.name == last)  # the folder's manifest goes up last
        for p in files:
            self._call("write", p, lambda fs, remote, p=p: fs.put_file(str(p), remote))

    def touch(self, path: Path, data: bytes | None = None) -> None:
        blob = data if data is not None else str(time.time()).encode()
        with contextlib.suppress(RemoteError):
            self._call("write", path, lambda fs, p: fs.pipe_file(p, blob))

    def delete(self, path: Path) -> None:
        super().delete(path)

        def rm(fs: Any, p: str) -> None:
            with contextlib.suppress(FileNotFoundError):
                fs.rm_file(p)

        self._call("delete", path, rm)

    def delete_tree(self, folder: Path) -> None:
        super().delete_tree(folder)

        def rm(fs: Any, p: str) -> None:
            with contextlib.suppress(FileNotFoundError):
                fs.rm(p, recursive=True)

        self._call("delete", folder, rm)

    def is_dir_or_absent(self) -> bool:
        return self.size(self.root_path) is None  # not an object with the folder's name

    def names(self) -> list[str]:
        def ls(fs: Any, p: str) -> Any:
            fs.invalidate_cache(p)
            try:
                return fs.ls(p, detail=False)
            except FileNotFoundError:
                return []

        found = self._call("list", self.root_path, ls)
        return [str(n).rstrip("/").rsplit("/", 1)[-1] for n in found]

    def prepare(self) -> None:
        super().prepare()  # the mirror's folders (objects need none)


def fs_relative(name: str, base_url: str) -> str:
    """The part of a listed object ``name`` (with or without its protocol) below ``base_url``."""
    base = base_url.split("://", 1)[-1].rstrip("/") + "/"
    bare = name.split("://", 1)[-1]
    return bare[len(base) :] if bare.startswith(base) else ""


def storage_for(root: str | os.PathLike[str], options: RemoteOptions | None = None) -> Storage:
    """``RemoteStorage`` for a URL, else a local ``Storage``."""
    text = os.fspath(root)
    if is_url(text):
        return RemoteStorage(text, options or DEFAULT_OPTIONS)
    return Storage(text)

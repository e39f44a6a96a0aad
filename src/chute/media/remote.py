r"""Media under a remote media root: fetched with limits, retries and a bounded local cache.

Images (and videos, audio clips) whose media root is a URL (``media_root="s3://b/images"``, or
a remote data file's own folder) are read by chute itself, with the rules of local media and
those of remote data::

    url ──► under the root of the record's data file? (MediaPaths.fetchable)  else url_not_allowed
        ──► local copy in <cache>/media/ already?  ──► use it
        ──► stat: size > max_bytes?                ──► image_too_large (nothing downloaded)
        ──► GET with retries and backoff           ──► media_unavailable after N failures,
                                                        image_missing when there is no object
        ──► written atomically into the cache, oldest copies deleted beyond cache_bytes
        ──► decoded like a local file (header checks, pixel limit, full decode)

A cached copy is reused without asking the store again: chute treats media objects as
immutable while cached, as MosaicML Streaming and LitData treat their shards (delete
``<cache>/media`` to fetch again). Each DataLoader worker fetches with its own connection.

Example:
    >>> fetcher = RemoteMedia(MediaPaths("s3://bucket/images"))  # doctest: +SKIP
    >>> fetcher.local("s3://bucket/images/cats/1.jpg", None)  # doctest: +SKIP
    '/home/me/.cache/chute/media/3f2a...-1.jpg'
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
from pathlib import Path
from typing import Any

from chute._internal.files import atomic_file, cache_root
from chute._internal.objects import RemoteFile
from chute._internal.remote import DEFAULT_OPTIONS, redact
from chute.errors import RemoteError, SampleError
from chute.media.images import DEFAULT_MAX_BYTES
from chute.media.paths import MediaPaths
from chute.remote_options import RemoteOptions

__all__ = ["DEFAULT_MEDIA_CACHE_BYTES", "RemoteMedia"]

DEFAULT_MEDIA_CACHE_BYTES = 4 << 30
# Downloads between two checks of the cache's size (a directory listing each time).
_SWEEP_EVERY = 64


class RemoteMedia:
    """Fetches media files under remote media roots into a bounded local cache.

    Args:
        paths: the recipe's ``MediaPaths`` (which URLs lie under a root).
        max_bytes: refuse larger files (``image_too_large``) before downloading them.
        cache_bytes: the most bytes of local copies kept (oldest deleted first).
        options: timeouts and retries.
        cache_dir: the cache root (default ``$CHUTE_CACHE_DIR`` or ``~/.cache/chute``).
    """

    def __init__(
        self,
        paths: MediaPaths,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        cache_bytes: int = DEFAULT_MEDIA_CACHE_BYTES,
        options: RemoteOptions = DEFAULT_OPTIONS,
        cache_dir: str | os.PathLike[str] | None = None,
    ):
        self.paths = paths
        self.max_bytes = max_bytes
        self.cache_bytes = cache_bytes
        self.options = options
        self.cache_dir = None if cache_dir is None else os.fspath(cache_dir)
        self._downloads = 0

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_downloads"}

    def __repr__(self) -> str:  # what it is, not where it lies (reports print it)
        return f"RemoteMedia(max_bytes={self.max_bytes}, cache_bytes={self.cache_bytes})"

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._downloads = 0

    @property
    def folder(self) -> Path:
        return cache_root(self.cache_dir) / "media"

    def local(self, url: str, data_path: str | None, kind: str = "image") -> str:
        """The path of a local copy of ``url`` (fetched now unless already cached).

        Raises:
            SampleError: ``url_not_allowed`` (not under a remote root of ``data_path``),
                ``{kind}_missing``, ``{kind}_too_large`` (before downloading),
                ``media_unavailable`` (still failing after the retries).
        """
        if not self.paths.fetchable(url, data_path):
            raise SampleError(
                "url_not_allowed",
                f"{redact(url)} is a URL outside the remote media root of its data file "
                f"({self.paths.describe_root(data_path)}); chute fetches only under a media root",
            )
        key = hashlib.blake2b(url.encode(), digest_size=16).hexdigest()
        name = re.sub(r"[^A-Za-z0-9._-]", "_", url.rsplit("/", 1)[-1])[-60:]
        path = self.folder / f"{key}-{name}"
        if path.is_file():
            with contextlib.suppress(OSError):
                os.utime(path)  # recently used: kept longest
            return str(path)
        remote = RemoteFile(url, self.options)
        try:
            size = remote.size
            if size > self.max_bytes:
                raise SampleError(
                    f"{kind}_too_large",
                    f"{redact(url)}: {size:,} bytes, more than max_bytes={self.max_bytes:,} "
                    f"(not downloaded)",
                )
            data = remote.read_range(0, size) if size else b""
        except RemoteError as exc:
            if exc.missing:
                raise SampleError(f"{kind}_missing", f"{redact(url)}: no such object") from None
            raise SampleError("media_unavailable", str(exc)) from None
        with atomic_file(path) as f:
            f.write(data)
        self._downloads += 1
        if self._downloads % _SWEEP_EVERY == 1:
            self.sweep()
        return str(path)

    def sweep(self) -> int:
        """Delete the least recently used copies beyond ``cache_bytes``; returns the count."""
        try:
            entries = [
                (e.stat().st_mtime, e.stat().st_size, e.path) for e in os.scandir(self.folder)
            ]
        except FileNotFoundError:
            return 0
        total = sum(size for _, size, _ in entries)
        removed = 0
        for _, size, path in sorted(entries):
            if total <= self.cache_bytes:
                break
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)  # a reader that opened it keeps its bytes (POSIX)
                removed += 1
            total -= size
        return removed

    def read(self, url: str, data_path: str | None, kind: str = "image") -> bytes:
        """The bytes of ``url``, through the local cache."""
        for _ in range(2):
            try:
                return Path(self.local(url, data_path, kind)).read_bytes()
            except FileNotFoundError:  # swept by another process between check and read
                continue
        raise SampleError("media_unavailable", f"{redact(url)}: its local copy keeps vanishing")

    def __call__(self, url: str) -> bytes:
        """The bytes of ``url`` (the media stage's ``fetch`` protocol)."""
        return self.read(url, None)

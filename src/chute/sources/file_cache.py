r"""A bounded folder of whole remote files, shared by every process of a node.

``RemoteOptions(cache_limit=...)`` turns it on: a remote data file (a JSONL or Parquet shard) is
downloaded once, whole, into ``<cache>/remote-files/`` and read locally; when the folder would
grow past ``cache_limit`` bytes the least recently used files go, never one that a live process
is reading. A file that cannot fit (larger than the limit, or the rest of the folder is in use)
is read with ranged requests through the process's block cache instead: nothing waits forever,
nothing is lost, the limit holds. So an epoch over data larger than the disk completes, and a
shard-window order (``plan="shards"``) makes each file's download serve all of its samples.

Protocol, safe across the DataLoader workers and ranks of one machine::

    <cache>/remote-files/
      .lock                  flock: every decision (pin, reserve, evict) is made holding it
      data/<key>             a complete file; its mtime is its last use (the LRU clock)
      pins/<key>.<token>     "process <owner> reads <key>": an evictor skips a pinned file
      reserve/<key>.<token>  "<owner> downloads <key>, <size> bytes": counted in the usage
      partial/<key>.<token>  the download in progress, renamed onto data/<key> when whole

    acquire(key):  lock ─► data/<key>? ─yes─► pin, touch ─► open (read it, unlocked)
                             └─no─► someone downloading? ─► unlock, wait, retry
                                    └─ evict unpinned LRU files until usage + size <= limit
                                       ├─ room: reserve + pin ─► unlock ─► download ─► rename
                                       └─ no room: None (the caller reads ranges instead)

``<key>`` hashes the URL and the object's identity (size, ETag or version), so a replaced object
is another file. A pin or reservation names its process (``chute._internal.owner``); one whose
process is provably gone is removed by the next evictor, so a killed worker leaks nothing. The
open descriptor would keep the bytes readable even if a file vanished (POSIX), but pins keep it
from happening at all, and keep the disk use of the folder, not just its names, under the limit.
The small marker files (under 200 bytes each, a few per process) are not counted.

Example:
    >>> import tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> cache = FileCache(folder, limit=10)
    >>> f = cache.acquire("k1", 6, lambda dst: dst.write(b"abcdef"))
    >>> f.pread(3, 2), cache.usage()
    (b'cde', 6)
    >>> g = cache.acquire("k2", 6, lambda dst: dst.write(b"ghijkl"))  # k1 unpinned, evicted
    >>> g.pread(2, 0), cache.usage(), [p.name for p in (folder / "data").iterdir()]
    (b'gh', 6, ['k2'])
    >>> cache.acquire("k3", 11, print) is None  # larger than the limit: read it remotely
    True
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from chute._internal.owner import Owner
from chute.errors import ConfigError

__all__ = ["CachedFile", "FileCache"]

# Files one process keeps pinned (and open) at once; older ones are unpinned, not deleted.
KEEP_OPEN = 4
_WAIT = 0.02  # seconds between looks while another process downloads the file we need
_WAIT_LIMIT = 600.0


class CachedFile:
    """A pinned local copy of one remote file: ``pread`` from an open descriptor."""

    def __init__(self, key: str, path: Path, token: str):
        self.key, self.path, self.token = key, path, token
        self.fd = os.open(path, os.O_RDONLY)
        self.size = os.fstat(self.fd).st_size

    def pread(self, n: int, offset: int) -> bytes:
        return os.pread(self.fd, n, offset)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)


class FileCache:
    """Whole files in ``folder``, at most ``limit`` bytes, least recently used out.

    One object per process (``acquire`` keeps that process's pins); any number of processes
    may share ``folder``.

    Args:
        folder: the shared folder (made if missing).
        limit: the most bytes of file data the folder holds (complete and in-progress files).
        keep_open: files this process keeps pinned; the least recently used is unpinned when
            another is acquired.
    """

    def __init__(self, folder: Path, limit: int, keep_open: int = KEEP_OPEN):
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ConfigError(f"remote.cache_limit: expected a number of bytes >= 1, got {limit!r}")
        self.folder = Path(folder)
        self.limit = limit
        self.keep_open = max(1, keep_open)
        for sub in ("data", "pins", "reserve", "partial"):
            (self.folder / sub).mkdir(parents=True, exist_ok=True)
        self._open: OrderedDict[str, CachedFile] = OrderedDict()
        # Threads of one process share its pins: a reader holds this from acquire to pread, so
        # no other thread closes the descriptor in between (by unpinning to make room).
        self.thread_lock = threading.RLock()
        self._pid = os.getpid()
        self._owner = Owner.here().to_bytes()
        self.downloads = 0
        self.bytes_downloaded = 0
        self.evictions = 0
        self.refusals = 0

    # -- this process's view -----------------------------------------------------------------

    def acquire(
        self, key: str, size: int, download: Callable[[BinaryIO], object]
    ) -> CachedFile | None:
        """The pinned local copy of ``key`` (``size`` bytes), or ``None``: no room now.

        A missing file is downloaded with ``download(dst)``; ``None`` means it cannot fit under
        the limit now (the caller reads it remotely).
        """
        self._check_process()
        held = self._open.get(key)
        if held is not None:
            self._open.move_to_end(key)
            return held
        if size > self.limit:
            self.refusals += 1
            return None
        waited = 0.0
        while True:
            with self._locked():
                found = self._pin_existing(key)
                if found is not None:
                    return self._keep(found)
                busy = self._downloading(key)
                if not busy:
                    if not self._make_room(size) and self._open:
                        self._release_all_locked()  # our own pins may be what blocks us
                    if not self._make_room(size):
                        self.refusals += 1
                        return None
                    token = self._token()
                    self._write(self.folder / "reserve" / f"{key}.{token}", self._reservation(size))
                    self._write(self.folder / "pins" / f"{key}.{token}", self._owner)
                    break
            time.sleep(_WAIT)
            waited += _WAIT
            if waited > _WAIT_LIMIT:
                self.refusals += 1
                return None
        return self._keep(self._download(key, size, token, download))

    def release(self, key: str) -> None:
        """Unpin ``key`` (its file stays until an evictor needs the room)."""
        held = self._open.pop(key, None)
        if held is not None:
            held.close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.folder / "pins" / f"{key}.{held.token}")

    def close(self) -> None:
        """Unpin everything this process holds."""
        if os.getpid() != self._pid:
            return
        for key in list(self._open):
            self.release(key)

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()

    def usage(self) -> int:
        """Bytes the folder accounts for: complete files plus reserved downloads."""
        with self._locked():
            return self._usage()

    # -- under the lock ----------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        fd = os.open(self.folder / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing drops the lock

    def _pin_existing(self, key: str) -> CachedFile | None:
        path = self.folder / "data" / key
        if not path.exists():
            return None
        token = self._token()
        self._write(self.folder / "pins" / f"{key}.{token}", self._owner)
        os.utime(path)  # the LRU clock
        return CachedFile(key, path, token)

    def _downloading(self, key: str) -> bool:
        live = False
        for marker in (self.folder / "reserve").glob(f"{key}.*"):
            if self._stale(marker):
                self._drop_download(marker)
            else:
                live = True
        return live

    def _usage(self) -> int:
        total = 0
        for entry in os.scandir(self.folder / "data"):
            with contextlib.suppress(FileNotFoundError):
                total += entry.stat().st_size
        for marker in (self.folder / "reserve").iterdir():
            if self._stale(marker):
                self._drop_download(marker)
                continue
            total += _reserved(marker)
        return total

    def _make_room(self, size: int) -> bool:
        usage = self._usage()
        if usage + size <= self.limit:
            return True
        pinned = self._pinned_keys()
        candidates = []
        for entry in os.scandir(self.folder / "data"):
            if entry.name not in pinned:
                with contextlib.suppress(FileNotFoundError):
                    st = entry.stat()
                    candidates.append((st.st_mtime_ns, entry.name, st.st_size))
        for _, name, bytes_ in sorted(candidates):
            if usage + size <= self.limit:
                break
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.folder / "data" / name)
                usage -= bytes_
                self.evictions += 1
        return usage + size <= self.limit

    def _pinned_keys(self) -> set[str]:
        keys = set()
        for pin in (self.folder / "pins").iterdir():
            if self._stale(pin):
                with contextlib.suppress(FileNotFoundError):
                    pin.unlink()
            else:
                keys.add(pin.name.rsplit(".", 1)[0])
        return keys

    def _stale(self, marker: Path) -> bool:
        try:
            data = marker.read_bytes()
        except FileNotFoundError:
            return True
        owner = Owner.parse(data.split(b"\n", 1)[-1] if marker.parent.name == "reserve" else data)
        return owner is not None and owner.gone()

    def _drop_download(self, marker: Path) -> None:
        for path in (
            marker,
            self.folder / "partial" / marker.name,
            self.folder / "pins" / marker.name,
        ):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    def _release_all_locked(self) -> None:
        for key, held in list(self._open.items()):
            held.close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.folder / "pins" / f"{key}.{held.token}")
            del self._open[key]

    # -- helpers -----------------------------------------------------------------------------

    def _download(
        self, key: str, size: int, token: str, download: Callable[[BinaryIO], object]
    ) -> CachedFile:
        partial = self.folder / "partial" / f"{key}.{token}"
        reservation = self.folder / "reserve" / f"{key}.{token}"
        try:
            with open(partial, "wb") as dst:
                download(dst)
                written = dst.tell()
            if written != size:
                raise OSError(f"downloaded {written} bytes of {key}, expected {size}")
            os.replace(partial, self.folder / "data" / key)
        except BaseException:
            with self._locked():
                self._drop_download(reservation)
            raise
        with contextlib.suppress(FileNotFoundError):
            reservation.unlink()
        self.downloads += 1
        self.bytes_downloaded += size
        return CachedFile(key, self.folder / "data" / key, token)

    def _keep(self, held: CachedFile) -> CachedFile:
        self._open[held.key] = held
        while len(self._open) > self.keep_open:
            self.release(next(iter(self._open)))
        return held

    def _check_process(self) -> None:
        # A forked worker inherits the parent's pins: they are the parent's to release.
        if os.getpid() != self._pid:
            self._open = OrderedDict()
            self._pid = os.getpid()
            self._owner = Owner.here().to_bytes()

    def _reservation(self, size: int) -> bytes:
        return f"{size}\n".encode() + self._owner

    def _token(self) -> str:
        return f"{os.getpid()}-{uuid.uuid4().hex[:8]}"

    @staticmethod
    def _write(path: Path, data: bytes) -> None:
        with open(path, "wb") as f:
            f.write(data)


def _reserved(marker: Path) -> int:
    try:
        head = marker.read_bytes().split(b"\n", 1)[0]
        return int(head)
    except (FileNotFoundError, ValueError):
        return 0

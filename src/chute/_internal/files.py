"""Small filesystem helpers shared by indexes and caches: cache location, identity, atomic writes."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import hashlib
import logging
import os
import secrets
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

from chute._internal.owner import Owner
from chute.errors import SourceError

__all__ = [
    "FileIdentity",
    "atomic_array",
    "atomic_file",
    "cache_root",
    "edge_hash",
    "file_identity",
    "first_in_process",
    "one_builder",
    "sweep_dead_writers",
    "temp_beside",
    "warn_once",
    "writable_folder",
]

# Bytes hashed at each end of a file for its identity: enough to catch an in-place rewrite that
# kept size and mtime (rare, but `cp -p` and some sync tools do it), cheap on a 100 GB file.
EDGE_BYTES = 1 << 16


def cache_root(override: str | os.PathLike[str] | None = None) -> Path:
    """Where chute keeps indexes and other derived files.

    ``override`` (an argument) wins, then ``$CHUTE_CACHE_DIR``, then ``$XDG_CACHE_HOME/chute``,
    then ``~/.cache/chute``.
    """
    if override is not None:
        return Path(override).expanduser()
    env = os.environ.get("CHUTE_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "chute"


@dataclass(frozen=True)
class FileIdentity:
    """What makes a file the same file: size, modification time and a hash of both ends."""

    size: int
    mtime_ns: int
    edge_hash: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def file_identity(path: str | os.PathLike[str]) -> FileIdentity:
    """Identity of ``path`` from one ``stat`` and two small reads.

    Example:
        >>> import tempfile, pathlib
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "x"; _ = p.write_bytes(b"abc")
        >>> file_identity(p).size
        3
    """
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            return FileIdentity(st.st_size, st.st_mtime_ns, edge_hash(f, st.st_size))
    except FileNotFoundError:
        raise SourceError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise SourceError(f"{path}: is a directory, not a data file") from None


def edge_hash(f: IO[bytes], size: int) -> str:
    """The hash of a file's first and last ``EDGE_BYTES`` (``FileIdentity.edge_hash``)."""
    h = hashlib.blake2b(digest_size=16)
    h.update(f.read(EDGE_BYTES))
    if size > EDGE_BYTES:
        f.seek(max(EDGE_BYTES, size - EDGE_BYTES))
        h.update(f.read(EDGE_BYTES))
    return h.hexdigest()


def full_hash(path: str | os.PathLike[str], block: int = 1 << 22) -> str:
    """blake2b of a whole file (for ``--full-hash`` fingerprints)."""
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        while chunk := f.read(block):
            h.update(chunk)
    return h.hexdigest()


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike[str], mode: str = "wb") -> Iterator[IO[Any]]:
    """Write ``path`` all-or-nothing: a temporary file beside it, fsync, then ``os.replace``.

    Readers see either the old file or the complete new one, never half of it, and two writers
    racing on one path both succeed (the last rename wins; both wrote the same content).
    """
    with _replaced(path) as tmp, open(tmp, mode) as f:
        yield f
        f.flush()
        os.fsync(f.fileno())


@contextlib.contextmanager
def atomic_array(path: str | os.PathLike[str], dtype: Any, shape: tuple[int, ...]) -> Iterator[Any]:
    """A ``.npy`` at ``path`` filled in place, all-or-nothing: yields a writable memory map.

    The array is a temporary file beside ``path`` until the block ends; then it is flushed,
    fsynced and renamed, as ``atomic_file`` does. Its pages are the file's, so an array larger
    than memory (8 bytes x 100M records) is written back by the kernel as it fills, not held.

    Example:
        >>> import tempfile, numpy as np
        >>> path = Path(tempfile.mkdtemp()) / "a.npy"
        >>> with atomic_array(path, np.int32, (3,)) as out:
        ...     out[:] = [1, 2, 3]
        >>> np.load(path).tolist()
        [1, 2, 3]
    """
    import numpy as np  # here: the module is imported by code that never writes an array

    with _replaced(path) as tmp:
        out = np.lib.format.open_memmap(tmp, mode="w+", dtype=dtype, shape=shape)
        _reserve(tmp)
        yield out
        out.flush()
        del out
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())


def _reserve(path: str) -> None:
    """Allocate a mapped file's blocks now: a full disk is an ``OSError`` here, not a SIGBUS.

    ``open_memmap`` makes a sparse file; a page written to it later with no block left for it
    kills the process (SIGBUS on tmpfs) or is lost at writeback. Linux's ``fallocate(2)``
    reserves the blocks without writing them; where the filesystem cannot (NFS, some FUSE:
    ``EOPNOTSUPP``) nothing changes. Not ``posix_fallocate``: glibc emulates it there by
    writing every block, a second pass over the disk for gigabytes of lengths.
    """
    fallocate = _fallocate()
    if fallocate is None:  # pragma: no cover - not on Linux
        return
    with open(path, "rb+") as f:
        size = os.fstat(f.fileno()).st_size
        if size and fallocate(f.fileno(), 0, 0, size) != 0:
            code = ctypes.get_errno()
            if code not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                raise OSError(code, os.strerror(code), path)


@functools.cache
def _fallocate() -> Any:
    """The C library's ``fallocate(fd, mode, offset, len)``, or ``None`` where there is none."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        call = libc.fallocate
    except (OSError, AttributeError):
        return None
    call.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    call.restype = ctypes.c_int
    return call


# What a write under chute's cache folder may meet that is about the folder, not the file:
# full, over a quota, read-only, not ours, a file where a folder should be. Derived files are
# then kept in memory (or refused with the fix); any other error stays an error.
CANNOT_WRITE = frozenset(
    {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOTDIR}
)


_WARNED: set[tuple[str, ...]] = set()


def first_in_process(*key: Any) -> bool:
    """Whether ``key`` is met here for the first time in this process (then remembered).

    >>> first_in_process("doc-example", 1), first_in_process("doc-example", 1)
    (True, False)
    """
    seen = tuple(map(str, key))
    if seen in _WARNED:
        return False
    _WARNED.add(seen)
    return True


def warn_once(log: logging.Logger, message: str, *args: Any) -> None:
    """``log.warning(message, *args)``, once a process for the same message and arguments.

    A folder that cannot be written is met by every file kept under it (each index, each
    epoch's plan): one warning says it, and what is done instead.
    """
    if first_in_process(message, *args):
        log.warning(message, *args)


def writable_folder(directory: str | os.PathLike[str]) -> bool:
    """Whether files can be created in ``directory`` (made if missing): a probe file, removed.

    Derived files go under ``cache_root()``, which may be read-only (a shared home, a
    container's image): the callers then keep what they derive in memory instead.
    """
    directory = Path(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=directory, prefix=".probe-")
    except OSError:
        return False
    os.close(fd)
    os.unlink(probe)
    return True


@contextlib.contextmanager
def _replaced(path: str | os.PathLike[str]) -> Iterator[str]:
    """A temporary file beside ``path``: renamed onto it if the block ends, else removed.

    Its name says which process writes it (``temp_beside``), so the temporaries a killed
    writer left (a lengths pass of 100M records: 2 GB, allocated) are removed by the next
    process that writes in the folder (``_sweep``).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _sweep(path.parent)
    tmp = temp_beside(path)
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def temp_beside(path: str | os.PathLike[str]) -> str:
    """A new, empty temporary file beside ``path``, named for the process writing it.

    ``.NAME.WRITER.RANDOM.tmp``, WRITER being the machine (host, boot, pid namespace), the pid
    and the process's start time: ``sweep_dead_writers`` removes it only once that process is
    provably gone. A pid alone is not enough: two containers sharing a host name (host
    networking) and a folder have pids of their own, and one would take the other's live
    writer for a dead one.
    """
    path = Path(path)
    while True:
        tmp = str(path.with_name(f".{path.name}.{_writer_tag()}.{secrets.token_hex(4)}.tmp"))
        try:  # 0o644 less the umask, as the published file should be (mkstemp would give 0o600)
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        except FileExistsError:
            continue
        return tmp


_SWEPT: set[str] = set()


_TAG: tuple[int, str] = (-1, "")


def _writer_tag() -> str:
    """This process in a file name: its machine (host, boot, pid namespace), pid, start time."""
    global _TAG
    if _TAG[0] != os.getpid():  # once a process (a forked worker is another)
        me = Owner.here()
        place = hashlib.blake2b(f"{me.host}|{me.boot}|{me.pidns}".encode(), digest_size=4)
        _TAG = (me.pid, f"{place.hexdigest()}-{me.pid}-{me.start if me.start is not None else 'x'}")
    return _TAG[1]


def _sweep(folder: Path) -> None:
    """``sweep_dead_writers(folder)``, once a process for each folder."""
    if str(folder) in _SWEPT:
        return
    _SWEPT.add(str(folder))
    sweep_dead_writers(folder)


def sweep_dead_writers(folder: str | os.PathLike[str]) -> int:
    """Remove the temporaries in ``folder`` whose writers are provably gone; how many.

    Only a writer of this machine can be judged (``Owner.gone``): a temporary of another host
    or pid namespace sharing the folder, of an older chute (no writer in its name) or of a
    live process stays.
    """
    me = Owner.here()
    place = _writer_tag().split("-", 1)[0]
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return 0
    removed = 0
    for entry in entries:
        parts = entry.name.split(".")
        # "", NAME (may hold dots), WRITER, RANDOM, "tmp"
        if len(parts) < 5 or parts[0] or parts[-1] != "tmp":
            continue
        writer = parts[-3].split("-")
        if len(writer) != 3 or writer[0] != place or not writer[1].isdigit():
            continue
        start = int(writer[2]) if writer[2].isdigit() else None
        if Owner(me.host, me.boot, me.pidns, int(writer[1]), start).gone():
            with contextlib.suppress(OSError):
                os.unlink(entry.path)
                removed += 1
    return removed


@contextlib.contextmanager
def one_builder(target: str | os.PathLike[str]) -> Iterator[None]:
    """Build ``target`` inside this block: one process of the machine at a time, the rest wait.

    Under ``torchrun`` every rank of a node opens the same files at the same moment; without
    this each would index (or decompress) them all at once, reading the disk eight times over.
    The first takes an exclusive ``flock`` on ``.<name>.lock`` beside ``target`` and builds;
    the others wait at the lock, then find ``target`` built (the caller looks again inside the
    block). The kernel drops the lock when its holder exits, killed or not, so a crash leaves
    nothing stale. Where the lock cannot be had (a read-only folder, a filesystem without
    ``flock``), nothing is held: builds then run side by side, each writing atomically.

    Example:
        >>> import tempfile
        >>> target = Path(tempfile.mkdtemp()) / "index.idx"
        >>> with one_builder(target):
        ...     if not target.exists():
        ...         _ = target.write_bytes(b"built")
        >>> target.read_bytes()
        b'built'
    """
    target = Path(target)
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not on POSIX
        yield
        return
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(target.with_name(f".{target.name}.lock"), os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        yield
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            _wait_for_lock(fd, target)
        except OSError:
            pass  # no flock on this filesystem: build without it
        yield
    finally:
        os.close(fd)  # releases the lock


def _wait_for_lock(fd: int, target: Path) -> None:
    """Take the lock once its holder lets go, showing the wait as a step (rank 0 only).

    The builder may be another rank, whose progress is not shown; so the wait is: a bar of the
    seconds waited on a terminal, else a log line now and then.
    """
    import fcntl

    from chute._internal.progress import progress  # here: indexes import this module early

    waited = 0
    t0 = time.monotonic()
    with progress(None, f"waiting for {target.name} (another process builds it)", unit="s") as bar:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                time.sleep(0.1)
            except OSError:
                return  # the lock went wrong: build without it
            now = int(time.monotonic() - t0)
            if now > waited:
                bar.update(now - waited)
                waited = now

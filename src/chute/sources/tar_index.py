r"""The member index of one tar shard (WebDataset layout): built once, cached, memory-mapped.

A WebDataset shard is a plain tar whose members are grouped into samples by *key*: the member
name up to the first dot of its file name (``shards/000005.jpg`` and ``shards/000005.json``
are the sample ``shards/000005``, extensions ``jpg`` and ``json``); consecutive members with
one key form one sample, as WebDataset groups them. The index records, for every member, where
its data starts and how long it is, so a sample's members are read by byte range, in place::

    sidecar <cache>/index/<hash of the path>-<name>.tidx
    bytes 0..8      b"CHUTETAR"
    bytes 8..12     header length (uint32)
    bytes 12..4096  header: JSON (version, identity of the shard, counts), zero padded
    then            SAMPLE_DTYPE rows (first member, member count, key length)
    then            MEMBER_DTYPE rows (data offset, size, name start, name length)
    then            the member names, UTF-8, back to back

Like a JSONL index (``chute.sources.index``) it is keyed by the shard's identity (size, mtime
and edge hash; a remote object's ETag): a replaced shard is indexed again, never trusted
because a sidecar exists. The arrays are memory-mapped, so a process holds O(1) of them in
private memory and DataLoader workers share the pages.

Example:
    >>> import tarfile, tempfile, pathlib, io
    >>> d = pathlib.Path(tempfile.mkdtemp()); p = d / "s.tar"
    >>> with tarfile.open(p, "w") as tar:
    ...     for name, body in [("a.txt", b"hi"), ("a.jpg", b"x"), ("b.txt", b"yo")]:
    ...         info = tarfile.TarInfo(name); info.size = len(body)
    ...         tar.addfile(info, io.BytesIO(body))
    >>> ix = open_tar_index(p, cache_dir=d / "cache")
    >>> len(ix), ix.key(0), [m[0] for m in ix.members_of(0)], ix.built
    (2, 'a', ['a.txt', 'a.jpg'], True)
    >>> open_tar_index(p, cache_dir=d / "cache").built
    False
"""

from __future__ import annotations

import logging
import os
import re
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from chute._internal.files import FileIdentity, atomic_file, one_builder
from chute._internal.objects import RemoteIdentity, object_identity, open_binary
from chute._internal.progress import ProgressArg
from chute._internal.progress import progress as progress_of
from chute._internal.remote import DEFAULT_OPTIONS, check_url, is_url
from chute.errors import SourceChanged, SourceError
from chute.remote_options import RemoteOptions
from chute.sources.index import HEADER_SIZE, read_sidecar_header, sidecar_head, sidecar_path

__all__ = [
    "MEMBER_DTYPE",
    "SAMPLE_DTYPE",
    "TAR_INDEX_VERSION",
    "TarIndex",
    "is_tar",
    "open_tar_index",
    "split_name",
]

log = logging.getLogger("chute.index")

TAR_INDEX_VERSION = 1
MAGIC = b"CHUTETAR"
TAR_SUFFIXES = (".tar",)
# Compressed tars cannot be read by byte range: a member's bytes are not at an offset.
_COMPRESSED_TARS = (".tar.gz", ".tgz", ".tar.bz2", ".tar.xz", ".tar.zst")

SAMPLE_DTYPE = np.dtype([("first", "<u8"), ("count", "<u4"), ("key_len", "<u4")])
MEMBER_DTYPE = np.dtype(
    [("offset", "<u8"), ("size", "<u8"), ("name_start", "<u8"), ("name_len", "<u8")]
)
# WebDataset's rule: the key is everything up to the first dot of the file name.
_KEY = re.compile(r"^((?:.*/|)[^./][^./]*)[.]([^/]+)$")


def is_tar(path: str) -> bool:
    """Whether ``path`` (a file or URL) names a tar shard, by its suffix.

    Example:
        >>> is_tar("s3://b/train-000001.tar"), is_tar("train.jsonl")
        (True, False)
    """
    name = path.split("?", 1)[0] if is_url(path) else path
    return name.lower().endswith(TAR_SUFFIXES + _COMPRESSED_TARS)


def split_name(name: str) -> tuple[str, str] | None:
    """``(key, extension)`` of a member name, or ``None`` for a name without an extension.

    Example:
        >>> split_name("shards/000005.seg.png"), split_name("README")
        (('shards/000005', 'seg.png'), None)
    """
    m = _KEY.match(name)
    return (m.group(1), m.group(2)) if m else None


@dataclass
class TarIndex:
    """Samples and members of one shard, plus what the scan met.

    Attributes:
        path: the shard as the user named it.
        data_path: the shard actually read (absolute path, or the URL).
        identity: the shard's identity when indexed.
        samples: ``SAMPLE_DTYPE`` rows, one per sample (memory-mapped).
        members: ``MEMBER_DTYPE`` rows, one per member, in archive order.
        names: the member names' bytes (``uint8``).
        skipped: entries that are no sample member (folders, links, names without a dot).
        built: True when this call scanned the shard.
    """

    path: str
    data_path: str
    identity: FileIdentity | RemoteIdentity
    samples: np.ndarray
    members: np.ndarray
    names: np.ndarray
    skipped: int
    built: bool
    seconds: float
    sidecar: Path | None

    kind = "tar"

    def __len__(self) -> int:
        return len(self.samples)

    @property
    def bytes(self) -> int:
        return self.identity.size

    @property
    def remote(self) -> bool:
        return is_url(self.data_path)

    def name(self, member: int) -> str:
        row = self.members[member]
        start, n = int(row["name_start"]), int(row["name_len"])
        return bytes(self.names[start : start + n]).decode("utf-8", "surrogateescape")

    def key(self, sample: int) -> str:
        first, _, key_len = self.samples[sample].tolist()
        return self.name(first)[:key_len]

    def members_of(self, sample: int) -> list[tuple[str, int, int]]:
        """``(name, data offset, size)`` of each member of sample ``sample``, in archive order."""
        first, count, _ = self.samples[sample].tolist()
        rows = self.members[first : first + count].tolist()  # one conversion, not one per field
        lo, hi = rows[0][2], rows[-1][2] + rows[-1][3]
        blob = self.names[lo:hi].tobytes()
        return [
            (blob[at - lo : at - lo + n].decode("utf-8", "surrogateescape"), offset, size)
            for offset, size, at, n in rows
        ]

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        if self.sidecar is not None:  # workers map the sidecar again, not a pickled copy
            state.update(samples=None, members=None, names=None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        if self.samples is None:
            loaded = _load(self.sidecar, self.identity) if self.sidecar else None
            if loaded is None:
                raise SourceChanged(
                    f"{self.path}: its member index changed or vanished since the source was "
                    f"opened (was the shard replaced?); re-open the source"
                )
            _, self.samples, self.members, self.names = loaded


def open_tar_index(
    path: str | os.PathLike[str],
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    rebuild: bool = False,
    progress: ProgressArg = None,
    remote: RemoteOptions | None = None,
) -> TarIndex:
    """Open the member index of a shard (a file or URL), building it when missing or stale."""
    t0 = time.perf_counter()
    options = remote or DEFAULT_OPTIONS
    shown = os.fspath(path)
    data_path = _data_path(shown)
    identity = object_identity(data_path, options)
    sidecar = _sidecar_path(data_path, cache_dir)

    def stored() -> TarIndex | None:
        loaded = _load(sidecar, identity)
        if loaded is None:
            return None
        header, samples, members, names = loaded
        return TarIndex(
            shown,
            data_path,
            identity,
            samples,
            members,
            names,
            header["skipped"],
            False,
            time.perf_counter() - t0,
            sidecar,
        )

    if not rebuild and (found := stored()) is not None:
        return found
    # one builder per machine: the other ranks of a node wait, then read what it wrote
    with one_builder(sidecar):
        if not rebuild and (found := stored()) is not None:
            return found
        return _build(shown, data_path, identity, sidecar, options, progress, t0)


def _build(
    shown: str,
    data_path: str,
    identity: FileIdentity | RemoteIdentity,
    sidecar: Path,
    options: RemoteOptions,
    progress: ProgressArg,
    t0: float,
) -> TarIndex:
    """Scan the shard, write its sidecar (or keep the index in memory where it cannot)."""
    with progress_of(
        identity.size, f"index {shown.rsplit('/', 1)[-1]}", unit="B", enabled=progress
    ) as bar:
        samples, members, names, skipped = _scan(
            shown, data_path, options, bar.update, identity.size
        )
    if object_identity(data_path, options).to_json() != identity.to_json():
        raise SourceError(f"{shown}: the shard changed while it was being indexed; try again")
    header = {
        "version": TAR_INDEX_VERSION,
        "path": data_path,
        "identity": identity.to_json(),
        "samples": len(samples),
        "members": len(members),
        "names": len(names),
        "skipped": skipped,
    }
    stored: Path | None = sidecar
    try:
        _write(sidecar, header, samples, members, names)
        loaded = _load(sidecar, identity)
        if loaded is None:
            raise SourceError(f"{shown}: the index just written to {sidecar} does not read back")
        _, samples, members, names = loaded
    except OSError as exc:  # a read-only cache must not stop the job
        log.warning("cannot write %s (%s); keeping the index of %s in memory", sidecar, exc, shown)
        stored = None
    return TarIndex(
        shown,
        data_path,
        identity,
        samples,
        members,
        names,
        skipped,
        True,
        time.perf_counter() - t0,
        stored,
    )


def _data_path(path: str) -> str:
    lowered = path.split("?", 1)[0].lower()
    if lowered.endswith(_COMPRESSED_TARS):
        raise SourceError(
            f"{path}: a compressed tar cannot be read in place (its members are not at byte "
            f"offsets); write uncompressed shards (chute shard does), or decompress it"
        )
    if is_url(path):
        return check_url(path)
    p = Path(path)
    if p.is_dir():
        raise SourceError(
            f"{path}: is a directory; pass its shards or a glob such as '{path}/*.tar'"
        )
    if not p.exists():
        raise SourceError(f"{path}: no such file")
    return os.path.abspath(path)


def _sidecar_path(data_path: str, cache_dir: str | os.PathLike[str] | None) -> Path:
    return sidecar_path(data_path, cache_dir, ".tidx")


def _scan(
    shown: str, data_path: str, options: RemoteOptions, progress: Any, size: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Walk the shard's headers (member data is skipped by seeking, never read)."""
    samples: list[tuple[int, int, int]] = []
    members: list[tuple[int, int, int, int]] = []
    names = bytearray()
    skipped = 0
    last_key: str | None = None
    done = 0
    # A remote shard is read in requests of remote.readahead bytes (8 MiB): members smaller than
    # that are walked within one buffer (a request per header would cost thousands of round
    # trips a shard); a larger member (a video) is skipped by seeking past it, unread.
    with open_binary(data_path, options, chunk=options.readahead) as f:
        try:
            tar = tarfile.open(  # noqa: SIM115  (closed by the with below)
                fileobj=f, mode="r:", encoding="utf-8", errors="surrogateescape"
            )
        except tarfile.ReadError as exc:
            raise SourceError(f"{shown}: not a readable tar archive ({exc})") from None
        with tar:
            last: tarfile.TarInfo | None = None
            while True:
                try:
                    info = tar.next()
                except tarfile.ReadError as exc:  # past the end, or a header that follows one
                    _check_end(shown, f, tar.offset, size, last)  # a truncation, named as such
                    raise SourceError(
                        f"{shown}: a damaged tar header at byte {tar.offset:,}{_after(last)} "
                        f"({exc}): {_LOST}"
                    ) from None
                if info is None:
                    _check_end(shown, f, tar.offset, size, last)
                    break
                last = info
                tar.members.clear()  # type: ignore[attr-defined]  # tarfile keeps every header: O(n)
                parts = split_name(info.name) if info.isfile() else None
                if parts is None:
                    skipped += 1
                    continue
                key = parts[0]
                encoded = info.name.encode("utf-8", "surrogateescape")
                if key != last_key:
                    samples.append((len(members), 0, len(key)))  # in characters
                    last_key = key
                first, count, key_len = samples[-1]
                samples[-1] = (first, count + 1, key_len)
                members.append((info.offset_data, info.size, len(names), len(encoded)))
                names += encoded
                if progress is not None and info.offset_data - done > 1 << 20:
                    progress(info.offset_data - done)
                    done = info.offset_data
    return (
        np.array(samples, dtype=SAMPLE_DTYPE),
        np.array(members, dtype=MEMBER_DTYPE),
        np.frombuffer(bytes(names), dtype=np.uint8),
        skipped,
    )


_LOST = (
    "the members from there on cannot be found, so the shard is refused rather than read "
    "as a shorter one; copy or write it again, or leave it out of the sources"
)


def _after(last: tarfile.TarInfo | None) -> str:
    return f" (after member {last.name!r})" if last is not None else ""


def _check_end(shown: str, f: Any, offset: int, size: int, last: tarfile.TarInfo | None) -> None:
    """The walk stopped at ``offset``: that must be tar's end-of-archive marker.

    ``tarfile`` ends its walk silently at a header it cannot read past the first one: a damaged
    header, a shard cut at a block boundary or inside a member. Each would make the shard a
    shorter dataset with nothing counted, so each is an error naming where the shard breaks.
    """
    block = b""
    if offset < size:
        f.seek(offset)
        block = f.read(tarfile.BLOCKSIZE)
    if block == tarfile.NUL * tarfile.BLOCKSIZE:
        return  # the end-of-archive marker (tarfile, like GNU tar, stops at its first block)
    if last is not None and not block:
        end = last.offset_data + last.size
        if size < end:
            raise SourceError(
                f"{shown}: the shard ends at byte {size:,}, inside member {last.name!r} "
                f"({size - last.offset_data:,} of its {last.size:,} bytes): it is truncated "
                f"(an interrupted copy or write); {_LOST}"
            )
    if len(block) < tarfile.BLOCKSIZE:
        where = "inside a header" if block else "without tar's end-of-archive marker"
        raise SourceError(
            f"{shown}: the shard ends at byte {size:,}{_after(last)} {where}: it is "
            f"truncated (an interrupted copy or write); {_LOST}"
        )
    raise SourceError(f"{shown}: a damaged tar header at byte {offset:,}{_after(last)}: {_LOST}")


def _layout(header: dict[str, Any]) -> tuple[int, int, int]:
    """Byte offsets of the samples, members and names sections (each 8-byte aligned)."""
    samples_at = HEADER_SIZE
    members_at = samples_at + header["samples"] * SAMPLE_DTYPE.itemsize
    names_at = members_at + header["members"] * MEMBER_DTYPE.itemsize
    return samples_at, members_at, names_at


def _write(
    sidecar: Path,
    header: dict[str, Any],
    samples: np.ndarray,
    members: np.ndarray,
    names: np.ndarray,
) -> None:
    sidecar.parent.mkdir(parents=True, exist_ok=True)
    head = sidecar_head(MAGIC, header, header["path"])
    with atomic_file(sidecar) as out:
        out.write(head)
        out.write(samples.tobytes())
        out.write(members.tobytes())
        out.write(names.tobytes())


def _load(
    sidecar: Path, identity: FileIdentity | RemoteIdentity
) -> tuple[dict[str, Any], np.ndarray, np.ndarray, np.ndarray] | None:
    header = read_sidecar_header(sidecar, MAGIC, TAR_INDEX_VERSION, identity)
    if header is None:
        return None
    samples_at, members_at, names_at = _layout(header)
    if sidecar.stat().st_size != names_at + header["names"]:
        return None  # a damaged sidecar
    return (
        header,
        _map(sidecar, SAMPLE_DTYPE, samples_at, header["samples"]),
        _map(sidecar, MEMBER_DTYPE, members_at, header["members"]),
        _map(sidecar, np.dtype(np.uint8), names_at, header["names"]),
    )


def _map(path: Path, dtype: np.dtype, offset: int, n: int) -> np.ndarray:
    if n == 0:
        return np.empty(0, dtype=dtype)
    # a plain view of the map: the same pages, without memmap's costly per-item indexing
    return np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=(n,)).view(np.ndarray)

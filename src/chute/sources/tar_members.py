r"""A member of a tar shard as a media reference: read by byte range, never extracted.

A ``TarSource`` record does not carry its image's bytes: its image field holds a *member
reference*, a short string naming the shard, the member, and where the member's bytes lie::

    tar:<offset>:<size>:<member name, %-quoted>:<shard path or URL>
    tar:1536:20480:000005.jpg:/data/shards/train-000000.tar

so a token cache row stores ~80 bytes per image instead of a base64 copy, and the recipe's
header read (image size for token counts) and the media stage's decode both read the member
in place: one ``pread`` (a local shard) or one ranged GET (a shard in object storage) of the
member's 512-byte tar header and its data. The header is checked on every read (checksum,
member name and size): a shard replaced after it was indexed, whose member no longer sits at
that offset, raises ``SourceChanged`` instead of decoding whatever bytes are there now.

A remote shard that a ``TarSource`` of this process reads under ``cache_limit`` is registered
here (``serve_shard``): its members are then read from the shard's whole local copy in the
bounded folder of remote files (downloaded once, ``If-Match`` its indexed ETag), or with one
ranged request pinned to that ETag while the folder has no room. A reference to a shard no
source of this process reads (a token cache's rows) is read with one ranged request.

Example:
    >>> ref = MemberRef("/data/train-000000.tar", "000005.jpg", 1536, 20480)
    >>> str(ref)
    'tar:1536:20480:000005.jpg:/data/train-000000.tar'
    >>> MemberRef.parse(str(ref)) == ref, ref.shown
    (True, 'train-000000.tar:000005.jpg')
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import tarfile
import weakref
from dataclasses import dataclass
from urllib.parse import quote, unquote

from chute._internal.objects import RangeReader, RemoteFile
from chute._internal.remote import DEFAULT_OPTIONS, is_url, redact
from chute.errors import RemoteError, SampleError, SourceChanged
from chute.remote_options import RemoteOptions
from chute.sources.remote import CachedBytes

__all__ = [
    "MEMBER_PREFIX",
    "MemberRef",
    "is_member_ref",
    "open_member",
    "read_member",
    "serve_shard",
    "shown_name",
]

MEMBER_PREFIX = "tar:"
# Names that quote() leaves as they are (the common case: skip the call).
_PLAIN = re.compile(r"[A-Za-z0-9_./~-]*")
_BLOCK = tarfile.BLOCKSIZE  # 512: a member's header sits in the block before its data
# Remote shards read through the bounded folder of whole files by a source of this process,
# by URL. Weak: a source dropped takes its readers (and their pins) with it.
_SERVED: weakref.WeakValueDictionary[str, CachedBytes] = weakref.WeakValueDictionary()


def serve_shard(reader: CachedBytes) -> None:
    """Read this process's member references into ``reader``'s shard from its local copy.

    ``TarSource`` calls it for each remote shard under ``cache_limit`` when it opens its
    readers (in every DataLoader worker, as the source is unpickled there), so the media
    stage's reads of the shard's members share the copy its records are read from.
    """
    _SERVED[reader.file.url] = reader


def is_member_ref(source: object) -> bool:
    """Whether ``source`` is a tar member reference (``tar:...``).

    Example:
        >>> is_member_ref("tar:1536:10:a.jpg:/x.tar"), is_member_ref("a.jpg")
        (True, False)
    """
    return isinstance(source, str) and source.startswith(MEMBER_PREFIX)


@dataclass(frozen=True)
class MemberRef:
    """Where one member of a tar shard lies.

    Attributes:
        shard: the shard, an absolute local path or a URL.
        name: the member's name in the archive (``000005.jpg``).
        offset: the first byte of the member's data (its header is the 512 bytes before).
        size: the member's size in bytes.
    """

    shard: str
    name: str
    offset: int
    size: int

    def __str__(self) -> str:
        # a name that is not UTF-8 (a tar from a latin-1 system) holds surrogates: its bytes
        # are quoted, and parse() takes them back
        plain = _PLAIN.fullmatch(self.name)
        name = self.name if plain else quote(_name_bytes(self.name), safe="/")
        return f"{MEMBER_PREFIX}{self.offset}:{self.size}:{name}:{self.shard}"

    @property
    def shown(self) -> str:
        """``shard.tar:member`` for messages (the shard's file name, credentials masked)."""
        return f"{redact(self.shard).rsplit('/', 1)[-1]}:{shown_name(self.name)}"

    @classmethod
    def parse(cls, text: str, kind: str = "image") -> MemberRef:
        """The reference ``text`` names.

        Raises:
            SampleError: ``{kind}_missing`` when ``text`` is not a well-formed reference.
        """
        fields = text[len(MEMBER_PREFIX) :].split(":", 3) if is_member_ref(text) else []
        if len(fields) == 4 and fields[0].isdigit() and fields[1].isdigit() and fields[3]:
            offset, size = int(fields[0]), int(fields[1])
            if offset >= _BLOCK and offset % _BLOCK == 0:
                return cls(fields[3], unquote(fields[2], errors="surrogateescape"), offset, size)
        raise SampleError(
            f"{kind}_missing",
            f"{text[:80]!r} is not a tar member reference (tar:<offset>:<size>:<name>:<shard>)",
        )


def read_member(
    ref: MemberRef,
    *,
    max_bytes: int | None = None,
    kind: str = "image",
    options: RemoteOptions = DEFAULT_OPTIONS,
) -> bytes:
    """The bytes of the member ``ref`` names, its tar header checked first.

    Raises:
        SampleError: ``{kind}_too_large`` (more than ``max_bytes``, nothing read),
            ``{kind}_corrupt`` (the member ends past the end of the shard: a truncated shard),
            ``media_unavailable`` (a remote shard still failing after the retries).
        SourceChanged: the shard vanished, or its header at the offset no longer describes
            the member (the shard was replaced after it was indexed).
    """
    if max_bytes is not None and ref.size > max_bytes:
        raise SampleError(
            f"{kind}_too_large",
            f"{ref.shown}: {ref.size:,} bytes, more than max_bytes={max_bytes:,} (not read)",
        )
    block = _pread(ref, ref.offset - _BLOCK, _BLOCK + ref.size, options)
    _check_header(ref, block[:_BLOCK])
    data = block[_BLOCK:]
    if len(data) < ref.size:
        raise SampleError(
            f"{kind}_corrupt",
            f"{ref.shown}: the member is cut short ({len(data):,} of {ref.size:,} bytes): the "
            f"shard is truncated",
        )
    return data


def open_member(ref: MemberRef, options: RemoteOptions = DEFAULT_OPTIONS) -> io.BufferedReader:
    """A seekable reader of the member's bytes that reads only what is asked (a header read).

    The header is checked before anything else is read (``SourceChanged`` as in
    ``read_member``).
    """
    _check_header(ref, _pread(ref, ref.offset - _BLOCK, _BLOCK, options))

    def pread(n: int, offset: int) -> bytes:
        return _pread(ref, ref.offset + offset, n, options)

    return io.BufferedReader(RangeReader(pread, ref.size), buffer_size=16 << 10)


def _pread(ref: MemberRef, offset: int, n: int, options: RemoteOptions) -> bytes:
    if is_url(ref.shard):
        served = _SERVED.get(ref.shard)
        try:
            if served is not None:
                return served.read_once(n, offset)
            return RemoteFile(ref.shard, options).read_range(offset, offset + n)
        except RemoteError as exc:
            if exc.missing:
                raise SourceChanged(f"{ref.shown}: the shard vanished ({exc})") from None
            raise SampleError("media_unavailable", f"{ref.shown}: {exc}") from None
    try:
        fd = os.open(ref.shard, os.O_RDONLY)
    except FileNotFoundError:
        raise SourceChanged(f"{ref.shard}: the shard vanished after it was indexed") from None
    try:
        parts, got = [], 0
        while got < n:  # one pread returns at most ~2 GiB
            part = os.pread(fd, n - got, offset + got)
            if not part:
                break
            parts.append(part)
            got += len(part)
        return b"".join(parts)
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)


def _name_bytes(name: str) -> bytes:
    return name.encode("utf-8", "surrogateescape")


def shown_name(name: str) -> str:
    r"""A member name as messages print it: bytes that are not UTF-8 as ``\xe9``.

    Example:
        >>> shown_name("caf\udce9.jpg"), shown_name("été.jpg")
        ('caf\\xe9.jpg', 'été.jpg')
    """
    if name.isascii():
        return name
    return _name_bytes(name).decode("utf-8", "backslashreplace")


def _same_name(in_header: str, indexed: str) -> bool:
    """Whether a member header's own name field names the member the index found there.

    The field holds 100 bytes: a longer name (GNU's long-name or PAX's extended header before
    it holds the whole) is cut; and under PAX (Python's and WebDataset's default) a name that
    is not ASCII stands there with each other character (or byte, for other writers) as ``?``.
    """
    stand_ins = (
        indexed,
        "".join(c if c.isascii() else "?" for c in indexed),
        _name_bytes(indexed).decode("ascii", "replace").replace("\ufffd", "?"),
    )
    return bool(in_header) and any(name.startswith(in_header) for name in stand_ins)


def _check_header(ref: MemberRef, block: bytes) -> None:
    """The 512 bytes before the member's data are its header: same name, same size."""
    try:
        info = tarfile.TarInfo.frombuf(block, "utf-8", "surrogateescape")
        ok = info.size == ref.size and _same_name(info.name, ref.name)
    except tarfile.HeaderError:
        ok = False
    if not ok:
        raise SourceChanged(
            f"{ref.shown}: the shard holds other bytes at offset {ref.offset} than when it was "
            f"indexed (no header of a {ref.size}-byte member {ref.name!r} there): the shard was "
            f"replaced or modified; re-open the source (and rebuild a cache made from it)"
        )

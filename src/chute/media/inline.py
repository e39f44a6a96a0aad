r"""Media whose bytes are not a file of their own: ``data:`` URLs and tar members, as files.

Video and audio decoders (PyAV, soundfile) read files by path, and their token counts come
from the file's header; a clip carried inline by a Parquet row (the Hub's ``Audio`` struct,
a binary column) or stored as a member of a tar shard therefore gets a local copy, once,
named by a hash of the reference, in ``<cache>/media/`` (the folder remote media use, swept
by the same bound). Images never need this: they decode from bytes.

Example:
    >>> import base64
    >>> url = "data:audio/wav;base64," + base64.b64encode(b"RIFF....WAVE").decode()
    >>> open(local_copy(url, "audio"), "rb").read()
    b'RIFF....WAVE'
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os

from chute._internal.files import CANNOT_WRITE, atomic_file, cache_root
from chute.errors import ConfigError, SampleError
from chute.media.images import DEFAULT_MAX_BYTES
from chute.media.paths import INLINE, MediaPaths
from chute.media.remote import RemoteMedia
from chute.sources.tar_members import MemberRef, is_member_ref, read_member

__all__ = ["is_inline", "local_copy"]

# Copies written between two sweeps of the media folder (a listing each time).
_SWEEP_EVERY = 64
_written = 0


def is_inline(source: str) -> bool:
    """Whether ``source`` carries or names bytes that are not a file: a ``data:`` URL or member."""
    return source.startswith(INLINE) or is_member_ref(source)


def local_copy(source: str, kind: str, max_bytes: int = DEFAULT_MAX_BYTES) -> str:
    """The path of a local file holding the bytes of ``source`` (written on first use).

    Raises:
        SampleError: ``{kind}_corrupt`` (not base64, empty), ``{kind}_too_large``.
    """
    key = hashlib.blake2b(source.encode(), digest_size=16).hexdigest()
    if is_member_ref(source):
        ref = MemberRef.parse(source, kind)
        suffix = "." + ref.name.rsplit(".", 1)[-1]
    else:
        ref = None
        mime = source[len(INLINE) :].split(";", 1)[0].split(",", 1)[0]
        suffix = "." + mime.rsplit("/", 1)[-1] if "/" in mime else ""
    path = cache_root() / "media" / f"inline-{key}{suffix[:8]}"
    if path.is_file():
        return str(path)
    if ref is not None:
        data = read_member(ref, max_bytes=max_bytes, kind=kind)
    else:
        head, _, payload = source.partition(",")
        if len(payload.rstrip("=")) * 3 // 4 > max_bytes:
            raise SampleError(
                f"{kind}_too_large", f"{head[:40]}: more than max_bytes={max_bytes:,} inline"
            )
        try:
            data = base64.b64decode(payload, validate=False)
        except (binascii.Error, ValueError) as exc:
            raise SampleError(f"{kind}_corrupt", f"{head[:40]}: not valid base64 ({exc})") from None
    if not data:
        raise SampleError(f"{kind}_corrupt", f"{source[:40]}...: no bytes")
    try:
        os.makedirs(path.parent, exist_ok=True)
        with atomic_file(path) as f:
            f.write(data)
    except OSError as exc:
        if exc.errno not in CANNOT_WRITE:
            raise
        # every such sample would fail alike: a setting to fix, not a bad sample to count
        raise ConfigError(
            f"a {kind} carried inline or in a tar shard is decoded from a local copy under "
            f"{path.parent}, which cannot be written ({exc.strerror}); set CHUTE_CACHE_DIR to "
            f"a writable folder with room"
        ) from exc
    global _written
    _written += 1
    if _written % _SWEEP_EVERY == 0:  # the remote media bound (oldest copies go first)
        RemoteMedia(MediaPaths()).sweep()
    return str(path)

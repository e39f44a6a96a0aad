"""Compressed JSON Lines (``.gz``, ``.zst``): decompressed once into the cache, then indexed.

Random access into a gzip or zstd stream would mean decompressing from the start for every
record, so chute decompresses a compressed file once, atomically, into
``<cache>/decompressed/`` (keyed by the compressed file's path and identity) and indexes that
copy. Sequential and random reads then cost the same as for a plain file; records still report
the compressed file's path and their line numbers in the decompressed text. The copy is
replaced when the compressed file changes. Budget disk space for it: about the uncompressed size.
A compressed object in remote storage follows the same rule: streamed and decompressed once
into the cache (keyed by its URL, size and ETag), then read locally.
"""

from __future__ import annotations

import gzip
import hashlib
import os
from pathlib import Path
from typing import IO

from chute._internal.files import atomic_file
from chute._internal.objects import object_identity, open_binary
from chute._internal.remote import DEFAULT_OPTIONS, RemoteOptions, is_url
from chute.errors import ChuteError, ConfigError, SourceError

__all__ = ["COMPRESSED_SUFFIXES", "decompressed_copy"]

COMPRESSED_SUFFIXES = (".gz", ".zst", ".zstd")


def decompressed_copy(
    path: str | os.PathLike[str], root: Path, options: RemoteOptions = DEFAULT_OPTIONS
) -> Path:
    """Path of the decompressed copy of ``path`` (a file or a URL) under ``root``, made if needed."""
    path = os.fspath(path)
    identity = object_identity(path, options)
    where = path if is_url(path) else os.path.abspath(path)
    key = hashlib.blake2b(where.encode(), digest_size=8).hexdigest()
    name = path.rsplit("/", 1)[-1]
    stem = name.rsplit(".", 1)[0]
    mark = hashlib.blake2b(repr(identity.to_json()).encode(), digest_size=8).hexdigest()
    tag = f"{identity.size}-{mark}"
    out = root / "decompressed" / f"{key}-{tag}-{stem}"
    if out.exists():
        return out
    for stale in out.parent.glob(f"{key}-*-{stem}"):
        stale.unlink(missing_ok=True)
    try:
        with (
            open_binary(path, options) as raw,
            _decompressor(name, raw) as stream,
            atomic_file(out) as dst,
        ):
            while block := stream.read(1 << 22):
                dst.write(block)
    except ChuteError:
        raise
    except (OSError, EOFError) as exc:
        if isinstance(exc, PermissionError):
            raise
        raise SourceError(f"{path}: cannot decompress ({exc}); is the file complete?") from None
    except Exception as exc:
        if type(exc).__name__ == "ZstdError":
            raise SourceError(f"{path}: cannot decompress ({exc}); is the file complete?") from None
        raise
    return out


def _decompressor(path: str, raw: IO[bytes]) -> IO[bytes]:
    if path.endswith(".gz"):
        return gzip.GzipFile(fileobj=raw)  # type: ignore[return-value]  # a binary file object
    try:
        import zstandard
    except ImportError:
        raise ConfigError(
            f"{path}: reading .zst files needs the zstandard package: pip install 'chute[zstd]'"
        ) from None
    return zstandard.ZstdDecompressor().stream_reader(raw)

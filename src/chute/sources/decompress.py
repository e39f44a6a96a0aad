"""Compressed JSON Lines (``.gz``, ``.zst``): decompressed once into the cache, then indexed.

Random access into a gzip or zstd stream would mean decompressing from the start for every
record, so chute decompresses a compressed file once, atomically, into
``<cache>/decompressed/`` (keyed by the compressed file's path and identity) and indexes that
copy. Sequential and random reads then cost the same as for a plain file; records still report
the compressed file's path and their line numbers in the decompressed text. The copy is
replaced when the compressed file changes. Budget disk space for it: about the uncompressed size.
"""

from __future__ import annotations

import gzip
import hashlib
import os
from pathlib import Path
from typing import IO

from chute._internal.files import atomic_file, file_identity
from chute.errors import ConfigError, SourceError

__all__ = ["COMPRESSED_SUFFIXES", "decompressed_copy"]

COMPRESSED_SUFFIXES = (".gz", ".zst", ".zstd")


def decompressed_copy(path: Path, root: Path) -> Path:
    """Path of the decompressed copy of ``path`` under ``root``, made first if needed."""
    identity = file_identity(path)
    key = hashlib.blake2b(os.path.abspath(path).encode(), digest_size=8).hexdigest()
    stem = path.name.rsplit(".", 1)[0]
    tag = f"{identity.size}-{identity.mtime_ns}-{identity.edge_hash[:16]}"
    out = root / "decompressed" / f"{key}-{tag}-{stem}"
    if out.exists():
        return out
    for stale in out.parent.glob(f"{key}-*-{stem}"):
        stale.unlink(missing_ok=True)
    try:
        with open(path, "rb") as raw, _decompressor(path, raw) as stream, atomic_file(out) as dst:
            while block := stream.read(1 << 22):
                dst.write(block)
    except (OSError, EOFError) as exc:
        if isinstance(exc, PermissionError):
            raise
        raise SourceError(f"{path}: cannot decompress ({exc}); is the file complete?") from None
    except Exception as exc:
        if type(exc).__name__ == "ZstdError":
            raise SourceError(f"{path}: cannot decompress ({exc}); is the file complete?") from None
        raise
    return out


def _decompressor(path: Path, raw: IO[bytes]) -> IO[bytes]:
    if path.name.endswith(".gz"):
        return gzip.GzipFile(fileobj=raw)  # type: ignore[return-value]  # a binary file object
    try:
        import zstandard
    except ImportError:
        raise ConfigError(
            f"{path}: reading .zst files needs the zstandard package: pip install 'chute[zstd]'"
        ) from None
    return zstandard.ZstdDecompressor().stream_reader(raw)

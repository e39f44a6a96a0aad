"""Compressed JSON Lines (``.gz``, ``.zst``): decompressed once into the cache, then indexed.

Random access into a gzip or zstd stream would mean decompressing from the start for every
record, so chute decompresses a compressed file once, atomically, into
``<cache>/decompressed/`` (keyed by the compressed file's path and identity) and indexes that
copy. Sequential and random reads then cost the same as for a plain file; records still report
the compressed file's path and their line numbers in the decompressed text. The copy is
replaced when the compressed file changes. Budget disk space for it: about the uncompressed size.
A compressed object in remote storage follows the same rule: streamed and decompressed once
into the cache (keyed by its URL, size and ETag), then read locally.

A truncated file is a ``SourceError`` ("cannot decompress ...; is the file complete?"), never
a shorter dataset: gzip checks its end-of-stream marker, and a zstd stream must end where a
frame ends (frames are followed one by one, so files of several frames read whole). A copy
carries a ``.complete`` mark once its stream was checked; a zstd copy made before chute
checked this (no mark) is checked once more, by decompressing without writing.
"""

from __future__ import annotations

import gzip
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from chute._internal.files import CANNOT_WRITE, atomic_file, one_builder, writable_folder
from chute._internal.objects import object_identity, open_binary
from chute._internal.remote import DEFAULT_OPTIONS, is_url
from chute.errors import ChuteError, ConfigError, SourceError
from chute.remote_options import RemoteOptions

__all__ = ["COMPRESSED_SUFFIXES", "decompressed_copy"]

COMPRESSED_SUFFIXES = (".gz", ".zst", ".zstd")


def decompressed_copy(
    path: str | os.PathLike[str], root: Path, options: RemoteOptions = DEFAULT_OPTIONS
) -> Path:
    """Path of the decompressed copy of ``path`` (a file or a URL) under ``root``, made if needed.

    Raises:
        SourceError: the file cannot be decompressed whole (truncated or damaged).
    """
    path = os.fspath(path)
    identity = object_identity(path, options)
    where = path if is_url(path) else os.path.abspath(path)
    key = hashlib.blake2b(where.encode(), digest_size=8).hexdigest()
    name = path.rsplit("/", 1)[-1]
    stem = name.rsplit(".", 1)[0]
    mark = hashlib.blake2b(repr(identity.to_json()).encode(), digest_size=8).hexdigest()
    tag = f"{identity.size}-{mark}"
    out = root / "decompressed" / f"{key}-{tag}-{stem}"
    complete = out.with_name(out.name + ".complete")
    if not out.exists() and not writable_folder(out.parent):
        raise SourceError(_no_room(path, out.parent, identity.size, "it cannot be written"))
    # one process of the machine decompresses, the other ranks of a node wait for its copy
    try:
        with one_builder(out):
            return _copy(path, name, options, out, complete, key, stem)
    except OSError as exc:
        if exc.errno not in CANNOT_WRITE:
            raise
        raise SourceError(_no_room(path, out.parent, identity.size, exc.strerror)) from exc


def _no_room(path: str, folder: Path, size: int, why: str | None) -> str:
    return (
        f"{path}: a compressed file is read through a decompressed copy under {folder}, and "
        f"{why}; set CHUTE_CACHE_DIR to a writable folder with room for it (several times "
        f"the {size:,} compressed bytes), or decompress the file yourself"
    )


def _copy(
    path: str, name: str, options: RemoteOptions, out: Path, complete: Path, key: str, stem: str
) -> Path:
    """The checked copy at ``out``: found, checked once, or made."""
    if out.exists():
        if complete.exists() or name.endswith(".gz"):  # gzip always checked its end
            return out
        try:  # a zstd copy from before the check: check its stream once (the copy stays)
            _decompress(path, name, options, None)
        except SourceError:
            out.unlink(missing_ok=True)
            raise
        complete.touch()
        return out
    for stale in out.parent.glob(f"{key}-*-{stem}*"):
        stale.unlink(missing_ok=True)
    with atomic_file(out) as dst:
        _decompress(path, name, options, dst)
    complete.touch()
    return out


def _decompress(path: str, name: str, options: RemoteOptions, dst: IO[bytes] | None) -> None:
    """Decompress ``path`` whole into ``dst`` (``None``: only check it decompresses whole)."""
    try:
        with open_binary(path, options) as raw:
            for block in _blocks(name, raw):
                if dst is not None:
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


def _blocks(name: str, raw: IO[bytes]) -> Iterator[bytes]:
    """The decompressed bytes of ``raw``; ``EOFError`` when the stream stops short."""
    if name.endswith(".gz"):
        with gzip.GzipFile(fileobj=raw) as stream:  # EOFError before its end-of-stream marker
            while block := stream.read(1 << 22):
                yield block
        return
    yield from _zstd_blocks(name, raw)


# Compressed bytes handed to zstd per call: what one call returns stays small (~100 KiB of
# ordinary text; at most ~256 MiB for a stream built to expand as much as zstd allows).
_ZSTD_STEP = 1 << 13


def _zstd_blocks(name: str, raw: IO[bytes]) -> Iterator[bytes]:
    """Every frame of a zstd stream, decompressed; ``EOFError`` when it ends inside a frame.

    zstandard's stream reader returns what it has when the input ends, without saying that a
    frame was cut; a decompression object says (``eof``), one frame at a time.
    """
    try:
        import zstandard
    except ImportError:
        raise ConfigError(
            f"{name}: reading .zst files needs the zstandard package: pip install 'chute[zstd]'"
        ) from None
    decompressor = zstandard.ZstdDecompressor()
    frame = decompressor.decompressobj()
    inside = False  # bytes of the current frame were given to it
    read = 0
    while chunk := raw.read(1 << 20):
        view = memoryview(chunk)
        for k in range(0, len(view), _ZSTD_STEP):
            data: Any = view[k : k + _ZSTD_STEP]
            while data:
                out = frame.decompress(data)
                inside = True
                if out:
                    yield out
                if not frame.eof:
                    break
                data = frame.unused_data  # the next frame begins in the same bytes
                frame = decompressor.decompressobj()
                inside = False
        read += len(chunk)
    if inside:
        raise EOFError(
            f"the zstd stream ends inside a frame after {read:,} compressed bytes (the file is "
            f"truncated)"
        )

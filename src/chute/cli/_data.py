"""The data files named on a command line: globs expanded, each indexed, unusable ones set aside.

A glob such as ``data/*.json`` easily catches a file that holds no records (LLaMA-Factory's
``dataset_info.json``: one JSON object over many lines; an empty file, a failed export). Such a
file is reported, one line on stderr naming it and why, and the command goes on with the others;
it then exits with status 1, so a script notices. With no usable file left it fails as before.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import typer

from chute.errors import ConfigError, SourceError
from chute.sources import expand_paths, open_index, open_parquet
from chute.sources.base import is_parquet
from chute.sources.tar_index import is_tar, open_tar_index

__all__ = ["DataFiles", "open_data_files"]


@dataclass
class DataFiles:
    """The usable files (in order, with their indexes) and the skipped ones, with why."""

    paths: list[str] = field(default_factory=list)
    indexes: list[Any] = field(default_factory=list)  # FileIndex, TarIndex, or a Parquet footer
    skipped: list[tuple[str, str]] = field(default_factory=list)

    def warn(self) -> None:
        """One line on stderr per skipped file."""
        for path, why in self.skipped:
            typer.secho(f"warning: skipped {path}: {why}", err=True, fg=typer.colors.YELLOW)

    def exit_code(self) -> int:
        """1 when a file was skipped, else 0."""
        return 1 if self.skipped else 0

    def to_json(self) -> list[dict[str, str]]:
        return [{"path": path, "error": why} for path, why in self.skipped]


def open_data_files(
    paths: Sequence[str | os.PathLike[str]],
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    rebuild: bool = False,
    progress: Callable[[int], None] | None = None,
) -> DataFiles:
    """Index every file ``paths`` name; a file that is no data (or missing) is set aside.

    Raises:
        SourceError: no usable file is left (the message names each skipped one).
    """
    out = DataFiles()
    for path in expand_paths(list(paths)):
        try:
            index: Any
            if is_parquet(path):
                index = open_parquet(path)  # its own index: the row groups in the footer
            elif is_tar(path):
                index = open_tar_index(
                    path, cache_dir=cache_dir, rebuild=rebuild, progress=progress
                )
            else:
                index = open_index(path, cache_dir=cache_dir, rebuild=rebuild, progress=progress)
        except (SourceError, OSError) as exc:
            message = str(exc)
            prefix = f"{path}: "
            out.skipped.append((path, message.removeprefix(prefix)))
            continue
        if len(index) == 0:  # an export that failed, a shard never written: say so, not "0"
            blank = getattr(index, "blank_lines", 0)
            why = f"only {blank} blank line(s)" if blank else _empty(path)
            out.skipped.append((path, f"holds no records ({why})"))
            continue
        unreadable = _not_utf8_lines(path, len(index))
        if unreadable:  # every record would be rejected for the file's encoding or line ends
            out.skipped.append((path, unreadable))
            continue
        out.paths.append(path)
        out.indexes.append(index)
    if not out.paths:
        if len(out.skipped) == 1:
            path, why = out.skipped[0]
            raise SourceError(f"{path}: {why}")
        names = "; ".join(f"{Path(p).name}: {why}" for p, why in out.skipped)
        raise SourceError(f"none of the {len(out.skipped)} files holds records ({names})")
    return out


def _empty(path: str) -> str:
    """Why a file with no records and no blank line holds none."""
    try:
        size = os.path.getsize(path)
    except OSError:  # a remote file
        return "an empty file"
    return "an empty file" if size == 0 else "an empty JSON array"


def _not_utf8_lines(path: str, records: int) -> str | None:
    """What makes a local text file unreadable as UTF-8 lines, or ``None``.

    A UTF-16 file (Windows Notepad's "Unicode") has a NUL in every other byte: each of its
    lines is rejected as ``nul_byte``, which does not name the cause; a file whose lines end
    with a lone CR (classic Mac OS) reads as one record.
    """
    compressed = str(path).endswith((".gz", ".zst", ".bz2", ".xz"))
    if is_parquet(path) or is_tar(path) or compressed or "://" in str(path):
        return None
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return None
    if head[:2] in (b"\xff\xfe", b"\xfe\xff") or head.count(b"\x00") > len(head) // 4:
        return "the file looks UTF-16 encoded (a byte-order mark or a NUL in every other byte): save it as UTF-8"
    lines = not head.lstrip(b"\xef\xbb\xbf \t").startswith(b"[")  # a JSON array: any line ends
    inner_cr = b"\r" in head.rstrip(b"\r \t")  # a trailing CR alone ends one record
    if lines and records == 1 and inner_cr and b"\n" not in head:
        return "its lines end with a lone CR (classic Mac OS line ends): convert them to \\n"
    return None


def the_cache_among(paths: Sequence[str]) -> str | None:
    """The one cache directory (``chute preprocess --out``) named on a command line, or ``None``.

    A command reads one cache, or data files: a cache with other paths is a ``ConfigError``.

    Example:
        >>> the_cache_among(["train.jsonl", "val.jsonl"]) is None
        True
    """
    from chute.cache import is_cache_dir

    caches = [p for p in paths if is_cache_dir(p)]
    if not caches:
        return None
    if len(paths) > 1:
        raise ConfigError(
            f"give one cache directory, or data files; got the cache {caches[0]} with "
            f"{len(paths) - 1} more path(s)"
        )
    return caches[0]

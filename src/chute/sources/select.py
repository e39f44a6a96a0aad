r"""``open_source``: the right source for a list of data files, by their suffix.

``.parquet`` (or ``.pq``) files open as a ``ParquetSource``, ``.tar`` shards (WebDataset
layout) as a ``TarSource``, everything else (``.jsonl``,
``.json``, ``.gz``, ``.zst``, ...) as a ``JsonlSource``; local paths, URLs and globs alike.
Every entry point that takes paths (``Loader``, ``chute validate``, ``chute preprocess``, ...)
opens them through this function.

Example:
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "a.jsonl").write_text('{"text": "one"}\n')
    >>> open_source(str(d / "*.jsonl"), cache_dir=d / "cache")  # doctest: +ELLIPSIS
    JsonlSource([a.jsonl], records=1)
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

from chute._internal.remote import DEFAULT_OPTIONS
from chute.errors import ConfigError
from chute.remote_options import RemoteOptions
from chute.sources.base import FileSource, expand_paths, is_parquet
from chute.sources.jsonl import JsonlSource
from chute.sources.parquet import ParquetSource
from chute.sources.tar import TarSource
from chute.sources.tar_index import is_tar

__all__ = ["open_source"]

PathLike = str | os.PathLike[str]


def open_source(
    paths: PathLike | Sequence[PathLike],
    *,
    cache_dir: PathLike | None = None,
    rebuild: bool = False,
    progress: Callable[[int], None] | None = None,
    remote: RemoteOptions | None = None,
) -> FileSource:
    """A ``ParquetSource`` for Parquet files, a ``TarSource`` for tar shards, else a ``JsonlSource``.

    Args:
        paths: files, globs or URLs (see ``JsonlSource``).
        cache_dir: where JSON indexes and tar member indexes live.
        rebuild: rebuild JSON (or tar member) indexes.
        progress: called with bytes scanned while indexing.
        remote: timeouts, retries and block cache for URLs.

    Raises:
        ConfigError: Parquet, tar and JSON files mixed in one source.
    """
    files = expand_paths(paths, remote or DEFAULT_OPTIONS)
    shards = [f for f in files if is_tar(f)]
    if shards and len(shards) != len(files):
        other = next(f for f in files if not is_tar(f))
        raise ConfigError(
            f"sources: tar shards ({shards[0]}) and other files ({other}) in one source; one "
            f"source reads one kind: convert one kind (chute shard writes shards), or train on "
            f"them as separate sources"
        )
    if shards:
        return TarSource(
            files, cache_dir=cache_dir, rebuild=rebuild, progress=progress, remote=remote
        )
    parquet = [f for f in files if is_parquet(f)]
    if parquet and len(parquet) != len(files):
        other = next(f for f in files if not is_parquet(f))
        raise ConfigError(
            f"sources: Parquet files ({parquet[0]}) and JSON files ({other}) in one source; "
            f"one source reads one kind: convert one kind, or train on them as separate sources"
        )
    if parquet:
        return ParquetSource(files, remote=remote)
    return JsonlSource(
        files, cache_dir=cache_dir, rebuild=rebuild, progress=progress, remote=remote
    )

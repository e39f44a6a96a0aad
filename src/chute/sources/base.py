"""What every file-backed source shares: files in a stable order, a global index over them.

``JsonlSource`` and ``ParquetSource`` differ in how a file's records are found and read; both
map a global record index to ``(file, record in file)`` with one ``searchsorted`` over the
per-file counts, expand globs the same way (local or remote), and name files alike in their
fingerprints.

Example:
    >>> expand_paths([])
    Traceback (most recent call last):
    ...
    chute.errors.SourceError: no data files given
"""

from __future__ import annotations

import glob
import logging
import os
import re
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from chute._internal.files import warn_once
from chute._internal.remote import DEFAULT_OPTIONS, absolute, check_url, glob_urls, is_url
from chute.errors import SourceError
from chute.remote_options import RemoteOptions
from chute.sources.record import Record

log = logging.getLogger("chute.sources")

__all__ = ["FileSource", "expand_braces", "expand_paths", "is_parquet", "shown_path"]

PathLike = str | os.PathLike[str]


class FileSource:
    """A sequence of records over files; subclasses set ``paths``, ``_starts`` and ``_read``."""

    kind = "files"
    paths: list[str]
    files: list[Any]  # one index per file: ``len()``, ``path``, ``identity``, ``bytes``
    _starts: np.ndarray

    def __len__(self) -> int:
        return int(self._starts[-1])

    def shard_bounds(self) -> np.ndarray:
        """The sample ranges of the files: file ``j`` holds ids ``b[j] .. b[j+1]-1`` (int64).

        What ``plan="shards"`` shuffles by (``chute.plan.shards``).

        Example:
            >>> JsonlSource(["a.jsonl", "b.jsonl"]).shard_bounds().tolist()  # doctest: +SKIP
            [0, 120, 250]
        """
        return np.array(self._starts, dtype=np.int64)

    def locate(self, index: int) -> tuple[int, int]:
        """(file number, record number within that file) of a global index."""
        n = len(self)
        if not -n <= index < n:
            raise IndexError(f"record index {index} out of range for a source of {n} records")
        index %= n
        file_no = int(np.searchsorted(self._starts, index, side="right")) - 1
        return file_no, index - int(self._starts[file_no])

    def __getitem__(self, key: int | slice) -> Any:
        if isinstance(key, slice):
            start, stop, step = key.indices(len(self))
            if step == 1:
                return list(self.records_between(start, stop))
            return [self[i] for i in range(start, stop, step)]
        if not isinstance(key, int | np.integer):
            raise TypeError(f"records are indexed by int or slice, not {type(key).__name__}")
        file_no, local = self.locate(int(key))
        return self._read(file_no, local)

    def __iter__(self) -> Iterator[Record]:
        return self.records_between(0, len(self))

    def records_between(self, i: int, j: int) -> Iterator[Record]:  # pragma: no cover
        raise NotImplementedError

    def _read(self, file_no: int, local: int) -> Record:  # pragma: no cover
        raise NotImplementedError

    def __repr__(self) -> str:
        names = ", ".join(p.rsplit("/", 1)[-1] for p in self.paths[:3])
        more = f", +{len(self.paths) - 3} more" if len(self.paths) > 3 else ""
        return f"{type(self).__name__}([{names}{more}], records={len(self)})"


def shown_path(path: str) -> str:
    """How a file is named in fingerprints: a URL as given, a local path made absolute."""
    return path if is_url(path) else os.path.abspath(path)


def is_parquet(path: str) -> bool:
    """Whether ``path`` (a file or URL) names a Parquet file, by its suffix."""
    name = path.split("?", 1)[0] if is_url(path) else path
    return name.lower().endswith((".parquet", ".pq"))


# Data files by how their names end, the longest endings first (".jsonl.gz" before ".gz").
_DATA_ENDINGS = (
    ".jsonl.gz", ".jsonl.zst", ".json.gz", ".json.zst", ".jsonl", ".json", ".parquet", ".pq",
    ".tar",
)  # fmt: skip


def folder_glob(folder: str) -> str:
    """A glob of the data files in ``folder`` (or one level below), for a message's fix.

    The most common data file ending wins: ``mllm_example_dataset/`` of Hugging Face's layout
    gives ``mllm_example_dataset/data/*.parquet``.

    Example:
        >>> import tempfile, pathlib
        >>> d = pathlib.Path(tempfile.mkdtemp()); (d / "data").mkdir()
        >>> for n in ("a.parquet", "b.parquet"): (d / "data" / n).touch()
        >>> folder_glob(str(d) + "/").endswith("/data/*.parquet")
        True
    """
    root = folder.rstrip("/") or folder
    counts: dict[tuple[str, str], int] = {}
    for here, dirs, files in os.walk(root):
        rel = os.path.relpath(here, root)
        # the folder and its subfolders (not theirs) are enough to guess from
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))[:32] if rel == "." else []
        for name in files:
            ending = next((e for e in _DATA_ENDINGS if name.lower().endswith(e)), None)
            if ending is not None and not name.startswith("."):
                key = ("" if rel == "." else rel, ending)
                counts[key] = counts.get(key, 0) + 1
    if not counts:
        return f"{root}/*.jsonl"
    (rel, ending), _ = max(counts.items(), key=lambda kv: kv[1])
    return os.path.join(root, rel, f"*{ending}")


_BRACE = re.compile(r"\{(\d+)\.\.(\d+)\}|\{([^{}]*,[^{}]*)\}")


def expand_braces(text: str) -> list[str]:
    """WebDataset's shard lists: ``{000000..000009}`` (zero padding kept) and ``{a,b}``.

    Example:
        >>> expand_braces("s3://b/train-{000..002}.tar")
        ['s3://b/train-000.tar', 's3://b/train-001.tar', 's3://b/train-002.tar']
        >>> expand_braces("data/{train,val}-{0..1}.jsonl")
        ['data/train-0.jsonl', 'data/train-1.jsonl', 'data/val-0.jsonl', 'data/val-1.jsonl']
    """
    m = _BRACE.search(text)
    if m is None:
        return [text]
    head, tail = text[: m.start()], text[m.end() :]
    if m.group(3) is not None:
        choices = m.group(3).split(",")
    else:
        lo, hi = m.group(1), m.group(2)
        width = len(lo) if lo.startswith("0") or len(lo) == len(hi) else 0
        step = 1 if int(hi) >= int(lo) else -1
        choices = [str(k).zfill(width) for k in range(int(lo), int(hi) + step, step)]
    return [out for c in choices for out in expand_braces(head + c + tail)]


def expand_paths(
    paths: PathLike | Sequence[PathLike], remote: RemoteOptions = DEFAULT_OPTIONS
) -> list[str]:
    """Turn a path, a glob or a list of them (local or URLs) into an ordered list of files.

    A URL is a glob when it holds ``*`` or ``[`` (a ``?`` starts its query); its matches are
    listed from the store and sorted. Brace ranges and lists (``train-{000000..000009}.tar``,
    ``{train,extra}.jsonl``, as WebDataset names shards) expand first, in their order.
    """
    items = [paths] if isinstance(paths, str | os.PathLike) else list(paths)
    # (a local file whose name really holds braces is taken as it is)
    items = [
        part
        for item in items
        for part in ([os.fspath(item)] if os.path.exists(item) else expand_braces(os.fspath(item)))
    ]
    out: list[str] = []
    for item in items:
        text = os.fspath(item)
        if is_url(text):
            text = absolute(text)  # "S3://" is "s3://"
            check_url(text)
            if "*" in text or "[" in text:
                matches = glob_urls(text, remote)
                if not matches:
                    raise SourceError(f"{text}: the pattern matches no objects")
                out.extend(matches)
            else:
                out.append(text)
        elif glob.has_magic(text):
            matches = sorted(m for m in glob.glob(text, recursive=True) if os.path.isfile(m))
            if not matches:
                raise SourceError(f"{text}: the pattern matches no files")
            out.extend(matches)
        else:
            out.append(text)
    if not out:
        raise SourceError("no data files given")
    _warn_repeats(out)
    return out


def _warn_repeats(files: list[str]) -> None:
    """Say when one file is listed more than once (a glob and a name it matches, ``./a``).

    Each listing is read, so its records come twice an epoch: meant as a weight now and then,
    a mistake more often, and silent either way.
    """
    if len(files) < 2:
        return
    counts = Counter(f if is_url(f) else os.path.realpath(f) for f in files)
    repeated = {f: n for f, n in counts.items() if n > 1}
    if repeated:
        shown = ", ".join(f"{f} ({n} times)" for f, n in list(repeated.items())[:3])
        more = f" and {len(repeated) - 3} more" if len(repeated) > 3 else ""
        warn_once(
            log,
            "%s%s listed more than once: each listing is read, so its records come that many "
            "times an epoch; list each file once (to weight one, use a Mixture: weight or "
            "repeat)",
            shown,
            more,
        )

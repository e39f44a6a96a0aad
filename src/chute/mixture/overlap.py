r"""Exact duplicates within and between datasets or splits, by content, in bounded memory.

``find_duplicates(groups)`` hashes every record of every group (``chute.mixture.hashes``: parse,
format adapter, normalise, 64-bit hash; no tokenizer) and finds the records whose content hash
repeats: inside one group (a dataset that holds the same sample twice) or across groups (an
evaluation set leaking into training, one dataset copied into another, a val split that shares
content with another dataset's train). Memory stays bounded at any size: the ``(hash, record)``
pairs (16 bytes each) are sorted in memory when they fit ``max_memory``, else spilled to
partition files by the hash's top bits and each partition sorted alone::

    group a ─┐  hashes   ┌─► partition 0 (top bits 00..) ─ sort ─► runs of equal hashes
    group b ─┼──────────►├─► partition 1                  ─ sort ─►  (duplicates)
    group c ─┘           └─► ...

Counts per group (records, unique contents, records repeating an earlier one of the group),
per pair of groups (contents found in both, records of each side), examples with
``path:line``, and with ``rejects=FILE`` one rejects-file line per duplicate record (``reason``
``duplicate``, the message naming the first copy, plus ``group``), the format of ``chute validate
--rejects``; lines come partition by partition (by hash), so no step holds every duplicate.

Example:
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "a.jsonl").write_text('{"text": "x"}\n{"text": "y"}\n{"text": "x"}\n')
    >>> _ = (d / "b.jsonl").write_text('{"text": "y"}\n{"text": "z"}\n')
    >>> report = find_duplicates({"a": d / "a.jsonl", "b": d / "b.jsonl"}, progress=False)
    >>> report.within["a"], report.between["a|b"]["contents"], report.duplicates
    (1, 1, 2)
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from chute._internal.progress import ProgressArg
from chute.errors import ConfigError, SampleError
from chute.formats import FormatSpec
from chute.mixture.hashes import content_hashes
from chute.sample.rejects import reject_entry
from chute.sources.record import Record

__all__ = ["DEFAULT_MEMORY", "Group", "OverlapReport", "find_duplicates", "mixture_groups"]

DEFAULT_MEMORY = 256 << 20  # bytes of (hash, record) pairs sorted at once
PAIR = np.dtype([("h", "<u8"), ("r", "<u8")])
_GROUP_SHIFT = 40  # a record reference: group << 40 | position in the group
_STREAM = 1 << 20  # hashes written to partitions per step


@dataclass
class Group:
    """Records checked as one unit: a source, how to read it, and optionally which records.

    Attributes:
        name: shown in reports (``alpaca``, ``alpaca:val``, a file name).
        source: the records (a ``JsonlSource``, ...).
        format: how records are read (hashes are taken of the canonical conversation).
        ids: the records of ``source`` in the group (``None``: all).
    """

    name: str
    source: Any
    format: FormatSpec = field(default_factory=lambda: FormatSpec("auto"))
    ids: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.source) if self.ids is None else len(self.ids)

    def record(self, position: int) -> Any:
        index = position if self.ids is None else int(self.ids[position])
        return self.source[index]


@dataclass
class OverlapReport:
    """What ``find_duplicates`` found (see the module docstring)."""

    groups: list[str]
    records: dict[str, int]
    unique: dict[str, int]
    within: dict[str, int]
    between: dict[str, dict[str, int]]
    duplicates: int
    examples: list[list[str]]
    partitions: int = 1
    seconds: float = 0.0
    rejects: str | None = None

    @property
    def records_per_s(self) -> float:
        total = sum(self.records.values())
        return total / self.seconds if self.seconds else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "groups": self.groups,
            "records": self.records,
            "unique": self.unique,
            "within": self.within,
            "between": self.between,
            "duplicates": self.duplicates,
            "examples": self.examples,
            "partitions": self.partitions,
            "seconds": round(self.seconds, 3),
            "records_per_s": round(self.records_per_s),
            "rejects": self.rejects,
        }


def mixture_groups(opened: Any) -> list[Group]:
    """One group per dataset of an opened mixture; ``name:train`` and ``name:val`` with ``val``."""
    from chute.mixture.opened import _spec

    out = []
    for d, ds in enumerate(opened.mixture):
        spec = _spec(opened.mixture, ds.name)
        source = opened.source.sources[d]
        if not ds.val:
            out.append(Group(ds.name, source, spec))
            continue
        for split in ("train", "val"):
            ids = opened.pools(split)[d]
            out.append(Group(f"{ds.name}:{split}", source, spec, ids))
    return out


def _as_groups(groups: Any) -> list[Group]:
    from chute.mixture.config import Mixture
    from chute.mixture.opened import OpenedMixture, open_mixture
    from chute.sources import open_source

    if isinstance(groups, Mixture):
        groups = open_mixture(groups)
    if isinstance(groups, OpenedMixture):
        return mixture_groups(groups)
    if isinstance(groups, Mapping):
        out = []
        for name, value in groups.items():
            if isinstance(value, Group):
                out.append(value)
            else:
                out.append(Group(str(name), open_source(value)))
        return out
    if isinstance(groups, Sequence) and all(isinstance(g, Group) for g in groups):
        return list(groups)
    raise ConfigError(
        f"groups must be a mapping of names to paths, a list of Group, or a Mixture, got "
        f"{type(groups).__name__}",
        param="groups",
    )


def find_duplicates(
    groups: Any,
    *,
    rejects: str | os.PathLike[str] | None = None,
    max_memory: int = DEFAULT_MEMORY,
    examples: int = 5,
    workers: int | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    progress: ProgressArg = None,
) -> OverlapReport:
    """Exact duplicates by content within and between ``groups`` (see the module docstring).

    Args:
        groups: ``{name: path(s)}``, a list of ``Group``, or a ``Mixture`` (each dataset a
            group; ``name:train`` and ``name:val`` for datasets with ``val``).
        rejects: write one rejects-file line per duplicate record (not the first copy).
        max_memory: bytes of ``(hash, record)`` pairs sorted at once; more are spilled to
            partition files in a temporary folder.
        examples: duplicate sets shown with ``path:line`` of every copy (at most 10 copies).
        workers: processes hashing (default: all cores).
        cache_dir: the cache root (hashes are cached like lengths).
        progress: as for every long step.
    """
    t0 = time.perf_counter()
    items = _as_groups(groups)
    if not items:
        raise ConfigError("give at least one group of records to check", param="groups")
    names = [g.name for g in items]
    if len(set(names)) != len(names):
        raise ConfigError(f"group names must be unique, got {names}", param="groups")
    hashes = []
    for g in items:
        all_h = content_hashes(
            g.source,
            g.format,
            workers=workers,
            cache_dir=cache_dir,
            progress=progress,
            desc=f"hashes {g.name}",
        )
        hashes.append(all_h if g.ids is None else all_h[np.asarray(g.ids, dtype=np.int64)])
    total = sum(len(h) for h in hashes)
    parts = _partitions(total, max_memory)
    tally = _Tally(len(items), examples)
    out = None
    if rejects is not None:
        Path(rejects).parent.mkdir(parents=True, exist_ok=True)
        out = open(rejects, "wb")  # noqa: SIM115 (closed below, written partition by partition)
    try:
        with tempfile.TemporaryDirectory(prefix="chute-overlap-") as tmp:
            for pairs in _partitioned(hashes, parts, Path(tmp)):
                found = tally.add(pairs)
                if out is not None and found is not None:
                    _write_rejects(items, *found, out)
    finally:
        if out is not None:
            out.close()
    report = OverlapReport(
        groups=names,
        records={n: len(h) for n, h in zip(names, hashes, strict=True)},
        unique={
            n: int(len(h) - tally.within[g])
            for g, (n, h) in enumerate(zip(names, hashes, strict=True))
        },
        within={n: int(tally.within[g]) for g, n in enumerate(names)},
        between={
            f"{names[a]}|{names[b]}": {
                "contents": int(tally.both[a, b]),
                f"records_{names[a]}": int(tally.side[a, b]),
                f"records_{names[b]}": int(tally.side[b, a]),
            }
            for a in range(len(names))
            for b in range(a + 1, len(names))
        },
        duplicates=int(tally.duplicates),
        examples=[[_where(items, int(r)) for r in run[:10]] for run in tally.examples],
        partitions=parts,
    )
    report.rejects = None if rejects is None else os.fspath(rejects)
    report.seconds = time.perf_counter() - t0
    return report


def _partitions(total: int, max_memory: int) -> int:
    need = total * PAIR.itemsize * 3  # the pairs, and the sort's order and copy
    parts = 1
    while parts * max(1, max_memory) < need and parts < 4096:
        parts *= 2
    return parts


def _partitioned(hashes: list[np.ndarray], parts: int, tmp: Path) -> Any:
    """Arrays of (hash, ref) pairs, one per partition (all in one when ``parts == 1``)."""
    if parts == 1:
        out = np.empty(sum(len(h) for h in hashes), dtype=PAIR)
        at = 0
        for g, h in enumerate(hashes):
            out["h"][at : at + len(h)] = h
            out["r"][at : at + len(h)] = (np.uint64(g) << np.uint64(_GROUP_SHIFT)) + np.arange(
                len(h), dtype=np.uint64
            )
            at += len(h)
        yield out
        return
    bits = np.uint64(64 - (parts.bit_length() - 1))
    files = [open(tmp / f"{p:04d}.bin", "wb") for p in range(parts)]  # noqa: SIM115
    try:
        for g, h in enumerate(hashes):
            for lo in range(0, len(h), _STREAM):
                block = np.empty(min(_STREAM, len(h) - lo), dtype=PAIR)
                block["h"] = h[lo : lo + len(block)]
                block["r"] = (np.uint64(g) << np.uint64(_GROUP_SHIFT)) + np.arange(
                    lo, lo + len(block), dtype=np.uint64
                )
                which = (block["h"] >> bits).astype(np.int64)
                order = np.argsort(which, kind="stable")
                bounds = np.searchsorted(which[order], np.arange(parts + 1))
                for p in np.flatnonzero(np.diff(bounds)).tolist():
                    block[order[bounds[p] : bounds[p + 1]]].tofile(files[p])
    finally:
        for f in files:
            f.close()
    for p in range(parts):
        path = tmp / f"{p:04d}.bin"
        pairs = np.fromfile(path, dtype=PAIR)
        path.unlink()
        yield pairs


class _Tally:
    """Counts over runs of equal hashes, partition by partition."""

    def __init__(self, groups: int, examples: int):
        self.g = groups
        self.within = np.zeros(groups, dtype=np.int64)
        self.both = np.zeros((groups, groups), dtype=np.int64)
        self.side = np.zeros((groups, groups), dtype=np.int64)  # [a, b]: records of a also in b
        self.duplicates = 0
        self.examples: list[list[int]] = []
        self.max_examples = examples

    def add(self, pairs: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """Count one partition; returns ``(duplicate refs, refs of their first copy)``."""
        if not len(pairs):
            return None
        pairs = pairs[np.lexsort((pairs["r"], pairs["h"]))]
        h, r = pairs["h"], pairs["r"]
        new = np.concatenate([[True], h[1:] != h[:-1]])
        run = np.cumsum(new) - 1
        sizes = np.bincount(run)
        dup = sizes[run] > 1
        if not dup.any():
            return None
        run, r = run[dup], r[dup]
        run = np.unique(run, return_inverse=True)[1]  # dense ids of the duplicate runs
        group = (r >> np.uint64(_GROUP_SHIFT)).astype(np.int64)
        starts = np.flatnonzero(np.concatenate([[True], run[1:] != run[:-1]]))
        self.duplicates += len(r) - len(starts)
        counts = np.zeros((len(starts), self.g), dtype=np.int64)
        np.add.at(counts, (run, group), 1)
        self.within += np.maximum(counts - 1, 0).sum(axis=0)
        present = counts > 0
        for a in range(self.g):
            if not present[:, a].any():
                continue
            for b in range(self.g):
                if a != b:
                    both = present[:, a] & present[:, b]
                    self.side[a, b] += int(counts[both, a].sum())
                    if a < b:
                        self.both[a, b] += int(both.sum())
        for s, e in zip(starts, [*starts[1:], len(r)], strict=True):
            if len(self.examples) >= self.max_examples:
                break
            self.examples.append(r[s:e].tolist())
        first = r[starts][run]
        later = np.ones(len(r), dtype=bool)
        later[starts] = False
        return r[later], first[later]


def _split_ref(ref: int) -> tuple[int, int]:
    return ref >> _GROUP_SHIFT, ref & ((1 << _GROUP_SHIFT) - 1)


def _where(groups: list[Group], ref: int) -> str:
    g, pos = _split_ref(ref)
    record = groups[g].record(pos)
    where = record.location if isinstance(record, Record) else f"record {pos}"
    return f"{groups[g].name} {where}"


def _write_rejects(groups: list[Group], dups: np.ndarray, firsts: np.ndarray, out: Any) -> None:
    """One rejects-file line per duplicate (this partition's, by group and record)."""
    order = np.argsort(dups, kind="stable")
    for dup, first in zip(dups[order].tolist(), firsts[order].tolist(), strict=True):
        g, pos = _split_ref(dup)
        record = groups[g].record(pos)
        message = f"same content as {_where(groups, first)}"
        if isinstance(record, Record):
            entry = reject_entry(record, SampleError("duplicate", message))
        else:
            entry = {
                "path": None,
                "line": None,
                "index": pos,
                "reason": "duplicate",
                "message": message,
                "field": None,
                "raw": None,
            }
        entry["group"] = groups[g].name
        out.write(orjson.dumps(entry) + b"\n")

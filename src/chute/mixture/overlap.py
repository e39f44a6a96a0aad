r"""Exact duplicates within and between datasets or splits, by content, in bounded memory.

``find_duplicates(groups)`` hashes every record of every group (``chute.mixture.hashes``: parse,
format adapter, normalise, 64-bit hash; no tokenizer) and finds the records whose content hash
repeats: inside one group (a dataset that holds the same sample twice) or across groups (an
evaluation set leaking into training, one dataset copied into another, a val split that shares
content with another dataset's train). Memory stays bounded at any size: the hashes are a memory
map of their cache file (``chute.mixture.hashes``), and the ``(hash, record)`` pairs (16 bytes
each) are counted in memory when the counting fits ``max_memory``, else spilled to partition
files by the hash's top bits, a block at a time, and each partition counted alone::

    group a ─┐  hashes   ┌─► partition 0 (top bits 00..) ─ sort ─► runs of equal hashes
    group b ─┼──────────►├─► partition 1                  ─ sort ─►  (duplicates)
    group c ─┘           └─► ...

Counts per group (records, unique contents, records repeating an earlier one of the group),
per pair of groups (contents found in both, records of each side), examples with
``path:line``, and with ``rejects=FILE`` one rejects-file line per duplicate record (``reason``
``duplicate``, the message naming the first copy, plus ``group``), the format of ``chute validate
--rejects``; lines come partition by partition (by hash), so no step holds every duplicate.

``max_memory`` bounds the arrays the check allocates (measured in
``tests/mixture/test_overlap_memory.py``), whatever the contents: one content repeated by more
than a partition's share of all records (every record empty, a boilerplate answer) fills one
partition past what may be sorted at once; that partition is counted a block at a time, each
block reduced to one entry per (content, group) and merged into the entries before it.

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

import itertools
import logging
import os
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from chute._internal.progress import ProgressArg
from chute._internal.progress import progress as progress_of
from chute.errors import ConfigError, SampleError
from chute.formats import FormatSpec
from chute.mixture.hashes import content_hashes
from chute.sample.rejects import reject_entry
from chute.sources.record import Record

__all__ = ["DEFAULT_MEMORY", "Group", "OverlapReport", "find_duplicates", "mixture_groups"]

log = logging.getLogger("chute.mixture")

DEFAULT_MEMORY = 256 << 20  # bytes the counting of one partition may allocate
PAIR = np.dtype([("h", "<u8"), ("r", "<u8")])
_GROUP_SHIFT = 40  # a record reference: group << 40 | position in the group
# Bytes one pair costs at the peak of counting its partition: the pairs, their sort order, the
# sorted hashes and refs, then the repeated records' refs, runs and (duplicate, first copy)
# refs. Measured (benchmarks/profile_overlap_pairs.py): 40 when no record repeats, 46 when every
# content is there exactly twice (the most runs); 96 leaves room for a partition above its
# share and for reading it from its file.
_PAIR_PEAK = 96
# Bytes one hash costs while it is spilled to its partition: the hash, its pair, partition
# number and place in the block's order (56 measured); the block spilled at once is sized by it.
_SPILL_PEAK = 64
_BLOCK_MAX = 1 << 20
_BLOCK_MIN = 1 << 12
EXAMPLE_COPIES = 10  # copies of a duplicated content an example shows


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
    from chute.lengths import Pieces
    from chute.mixture.opened import _spec

    out = []
    for d, ds in enumerate(opened.mixture):
        spec = _spec(opened.mixture, ds.name)
        source = opened.source.sources[d]
        # documents split into windows: their records are compared, not each window (the
        # windows of one document are not copies of each other)
        table = source.table if isinstance(source, Pieces) else None
        if isinstance(source, Pieces):
            source = source.source
        if not ds.val:
            out.append(Group(ds.name, source, spec))
            continue
        for split in ("train", "val"):
            ids = opened.pools(split)[d]
            if table is not None and ids is not None:
                ids = np.unique(np.searchsorted(table.first, ids, side="right") - 1)
            out.append(Group(f"{ds.name}:{split}", source, spec, ids))
    return out


def _as_groups(groups: Any) -> list[Group]:
    from chute.mixture.config import Mixture
    from chute.mixture.opened import OpenedMixture, open_mixture
    from chute.sources import open_source

    if isinstance(groups, Mixture):
        groups = open_mixture(groups, records_only=True)  # documents, hashed: no tokenizer
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
        max_memory: bytes the check may allocate to count (the ``(hash, record)`` pairs, their
            sort, the runs); more records are spilled to partition files in a temporary folder
            and counted a partition at a time.
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
    hashes = [
        _GroupHashes(
            content_hashes(
                g.source,
                g.format,
                workers=workers,
                cache_dir=cache_dir,
                progress=progress,
                desc=f"hashes {g.name}",
            ),
            g.ids,
        )
        for g in items
    ]
    total = sum(len(h) for h in hashes)
    parts = _openable(_partitions(total, max_memory))
    block = min(_BLOCK_MAX, max(_BLOCK_MIN, max_memory // _SPILL_PEAK))
    tally = _Tally(len(items), examples)
    out = None
    if rejects is not None:
        Path(rejects).parent.mkdir(parents=True, exist_ok=True)
        out = open(rejects, "wb")  # noqa: SIM115 (closed below, written partition by partition)
    # the bar counts each record spilled to its partition (when there are several), then counted
    steps = total * (2 if parts > 1 else 1)
    try:
        with (
            progress_of(steps, "duplicates", enabled=progress) as bar,
            tempfile.TemporaryDirectory(prefix="chute-overlap-") as tmp,
        ):
            cap = max(_BLOCK_MIN, max_memory // _PAIR_PEAK)  # pairs a partition may hold
            for part in _partitioned(hashes, parts, Path(tmp), block, bar.update, cap):
                if isinstance(part, _LargePartition):
                    for block_found in tally.add_large(part, bar.update):
                        if out is not None:
                            _write_rejects(items, *block_found, out)
                    continue
                h, r = part
                del part
                found = tally.add(h, r)
                bar.update(len(h))
                del h, r  # one partition's arrays at a time: the next is read after
                if out is not None and found is not None:
                    _write_rejects(items, *found, out)
                del found
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
        examples=[[_where(items, int(r)) for r in run] for run in tally.examples],
        partitions=parts,
    )
    report.rejects = None if rejects is None else os.fspath(rejects)
    report.seconds = time.perf_counter() - t0
    return report


@dataclass
class _GroupHashes:
    """One group's hashes: its source's (a memory map when cached), ``ids`` picking the group's."""

    all: np.ndarray
    ids: np.ndarray | None

    def __len__(self) -> int:
        return len(self.all) if self.ids is None else len(self.ids)

    def block(self, lo: int, hi: int) -> np.ndarray:
        """The hashes of the group's records ``lo`` to ``hi`` (read from the map, not held)."""
        if self.ids is None:
            return np.asarray(self.all[lo:hi])
        return np.asarray(self.all[np.asarray(self.ids[lo:hi], dtype=np.int64)])


def _partitions(total: int, max_memory: int) -> int:
    need = total * _PAIR_PEAK
    parts = 1
    while parts * max(1, max_memory) < need and parts < 4096:
        parts *= 2
    return parts


def _openable(parts: int, spare: int = 64) -> int:
    """``parts``, or fewer where this process may not hold that many files open at once.

    The spill keeps one file open per partition. A soft limit below ``parts + spare`` is raised
    up to the hard limit; if that is still too low, fewer partitions are used (each larger
    than ``max_memory`` wants) and a warning says so, rather than failing on the 1,025th file.
    """
    try:
        import resource
    except ImportError:  # pragma: no cover - not on POSIX
        return parts
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    unlimited = resource.RLIM_INFINITY
    if parts <= 1 or soft == unlimited or parts + spare <= soft:
        return parts
    want = parts + spare if hard == unlimited else min(parts + spare, hard)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
        soft = want
    except (ValueError, OSError):
        pass
    fitted = parts
    while fitted > 1 and fitted + spare > soft:
        fitted //= 2
    if fitted < parts:
        log.warning(
            "the duplicate check wants %d partition files open at once and this process may "
            "open %d files: counting in %d partitions, each larger than max_memory (raise "
            "`ulimit -n` or max_memory)",
            parts,
            soft,
            fitted,
        )
    return fitted


def _pairs(h: np.ndarray, g: int, lo: int) -> np.ndarray:
    """``(hash, ref)`` pairs of group ``g``'s records ``lo`` to ``lo + len(h)``."""
    pairs = np.empty(len(h), dtype=PAIR)
    pairs["h"] = h
    pairs["r"] = (np.uint64(g) << np.uint64(_GROUP_SHIFT)) + np.arange(
        lo, lo + len(h), dtype=np.uint64
    )
    return pairs


def _sorted(pairs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Hashes and refs ordered by hash, then ref.

    Pairs reach a partition in ref order (group by group, each in record order, and a block's
    share of a partition keeps its order), so a stable sort by hash alone orders by both.
    """
    order = np.argsort(pairs["h"], kind="stable")
    return pairs["h"][order], pairs["r"][order]


@dataclass
class _LargePartition:
    """A partition file with more pairs than may be sorted at once, counted ``block`` at a time.

    Its pairs are in ref order (spilled group by group, each in record order), which the
    counting in blocks relies on: a content's first copy is in the first block that holds it.
    """

    path: Path
    block: int

    def blocks(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Each block's ``(hashes, refs)``, sorted by hash then ref."""
        with open(self.path, "rb") as f:
            while True:
                pairs = np.fromfile(f, dtype=PAIR, count=self.block)
                if not len(pairs):
                    return
                part = _sorted(pairs)
                del pairs
                yield part
                del part


def _partitioned(
    hashes: list[_GroupHashes],
    parts: int,
    tmp: Path,
    block: int,
    spilled: Callable[[int], Any],
    cap: int,
) -> Iterator[tuple[np.ndarray, np.ndarray] | _LargePartition]:
    """Each partition's sorted ``(hashes, refs)`` (all in one when ``parts == 1``).

    Hashes are read ``block`` at a time, ``spilled(n)`` after each block written to the
    partition files; the caller holds one partition at a time. A partition file of more than
    1.5 ``cap`` pairs (one content repeated by more than a partition's share of all records:
    every record empty, say) comes as a ``_LargePartition``, counted in blocks of ``cap // 4``.
    """
    if parts == 1:
        pairs = np.concatenate(
            [_pairs(h.block(0, len(h)), g, 0) for g, h in enumerate(hashes)]
            or [np.empty(0, dtype=PAIR)]
        )
        part = _sorted(pairs)
        del pairs  # not held while the caller counts
        yield part
        return
    bits = np.uint64(64 - (parts.bit_length() - 1))
    # unbuffered: whole blocks are written, and 4,096 buffers would be 32 MB outside the budget
    files = [open(tmp / f"{p:04d}.bin", "wb", buffering=0) for p in range(parts)]  # noqa: SIM115
    try:
        for g, h in enumerate(hashes):
            for lo in range(0, len(h), block):
                pairs = _pairs(h.block(lo, min(len(h), lo + block)), g, lo)
                which = (pairs["h"] >> bits).astype(np.int64)
                order = np.argsort(which, kind="stable")
                bounds = np.searchsorted(which[order], np.arange(parts + 1))
                for p in np.flatnonzero(np.diff(bounds)).tolist():
                    pairs[order[bounds[p] : bounds[p + 1]]].tofile(files[p])
                spilled(len(pairs))
                del pairs, which, order
    finally:
        for f in files:
            f.close()
    for p in range(parts):
        path = tmp / f"{p:04d}.bin"
        # a partition's share is at most ``cap`` pairs; half as many again still counts within
        # the budget (46 bytes a pair measured against 96 allowed), so chance never sends a
        # partition of spread contents the slower way
        if path.stat().st_size > cap * 3 // 2 * PAIR.itemsize:
            yield _LargePartition(path, max(1, cap // 4))
            path.unlink()
            continue
        pairs = np.fromfile(path, dtype=PAIR)
        path.unlink()
        part = _sorted(pairs)
        del pairs
        yield part
        del part  # before the next partition is read


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

    def add(self, h: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """Count one partition (``_sorted``); returns ``(duplicate refs, their first copy's)``.

        Only the records whose hash repeats are kept past the first step, so a partition of
        distinct records costs its two arrays and two masks.
        """
        if len(h) < 2:
            return None
        same = h[1:] == h[:-1]
        if not same.any():
            return None
        repeated = np.zeros(len(h), dtype=bool)
        repeated[1:] = same
        repeated[:-1] |= same
        del same
        dup_h, r = h[repeated], r[repeated]
        del repeated
        start = np.ones(len(r), dtype=bool)  # the first record of each run of equal hashes
        start[1:] = dup_h[1:] != dup_h[:-1]
        del dup_h
        starts = np.flatnonzero(start)
        self.duplicates += len(r) - len(starts)
        group = (r >> np.uint64(_GROUP_SHIFT)).astype(np.int32)
        # the first record of each (run, group): refs ascend in a run, so groups do too
        first_of_group = start.copy()
        first_of_group[1:] |= group[1:] != group[:-1]
        self.within += np.bincount(group[~first_of_group], minlength=self.g)
        self._between(start, starts, group, first_of_group)
        need = self.max_examples - len(self.examples)
        if need > 0:  # the first runs only: no Python int per run of the partition
            bounds = starts[: need + 1].tolist()
            if len(bounds) <= need:
                bounds.append(len(r))
            for s, e in itertools.pairwise(bounds):
                self.examples.append(r[s : min(e, s + EXAMPLE_COPIES)].tolist())
        del group, first_of_group
        first = np.repeat(r[starts], np.diff(np.append(starts, len(r))))
        later = ~start
        return r[later], first[later]

    def add_large(
        self, part: _LargePartition, counted: Callable[[int], Any]
    ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Count a partition too large to sort at once; yields each block's rejects.

        Each block (in ref order) is reduced to one entry per (content, group): its first
        record and how many records, merged into the entries of the blocks before. A record is
        a duplicate unless it is its content's first copy, which is known once its block is
        merged (later blocks hold later refs). The entries are one per distinct content and
        group, so a content repeated by any number of records costs one. The counts are then
        those of ``add`` (tested equal); the examples are the first repeated contents, their
        copies gathered by a second read of the file.
        """
        seen = np.empty(0, dtype=_ENTRY)
        for h, r in part.blocks():
            counted(len(h))
            seen = _merged(seen, _entries(h, r))
            # the first copy of each content: its first entry's (entries go by hash, then ref)
            content = np.ones(len(seen), dtype=bool)
            content[1:] = seen["h"][1:] != seen["h"][:-1]
            heads = np.flatnonzero(content)
            del content
            first = seen["first"][heads][np.searchsorted(seen["h"][heads], h)]
            del heads
            later = r != first
            dups, of = r[later], first[later]
            del h, r, first, later
            yield dups, of
            del dups, of
        self._count_entries(seen, part)

    def _count_entries(self, seen: np.ndarray, part: _LargePartition) -> None:
        """``add``'s counts from one entry per (content, group) with its number of records."""
        if not len(seen):
            return
        start = np.ones(len(seen), dtype=bool)
        start[1:] = seen["h"][1:] != seen["h"][:-1]
        starts = np.flatnonzero(start)
        per_content = np.add.reduceat(seen["n"], starts)
        self.duplicates += int(per_content.sum()) - len(starts)
        group = (seen["first"] >> np.uint64(_GROUP_SHIFT)).astype(np.int32)
        self.within += np.bincount(group, weights=seen["n"] - 1, minlength=self.g).astype(np.int64)
        if self.g > 1:
            self._shared(np.cumsum(start) - 1, group, seen["n"])
        need = self.max_examples - len(self.examples)
        if need > 0:
            wanted = seen["h"][starts[per_content > 1][:need]]
            self.examples += _copies_of(part, wanted)

    def _between(
        self, start: np.ndarray, starts: np.ndarray, group: np.ndarray, first_of_group: np.ndarray
    ) -> None:
        """Contents and records shared by pairs of groups, over the runs that span groups."""
        if self.g < 2:
            return
        keys = np.flatnonzero(first_of_group)  # one per (run, group)
        key_run = np.cumsum(start[keys]) - 1
        self._shared(key_run, group[keys], np.diff(np.append(keys, len(group))))

    def _shared(self, key_run: np.ndarray, key_group: np.ndarray, records: np.ndarray) -> None:
        """``_between`` from one key per (run, group): its run, its group and its records."""
        spans = np.bincount(key_run)  # groups per run
        shared = spans[key_run] > 1
        if not shared.any():
            return
        records = records[shared]
        key_run, key_group = key_run[shared], key_group[shared]
        rows = np.unique(key_run, return_inverse=True)[1]
        counts = np.zeros((int(rows.max()) + 1, self.g), dtype=np.int64)
        counts[rows, key_group] = records
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


# One entry per (content, group) of a large partition: its hash, its first record, its records.
_ENTRY = np.dtype([("h", "<u8"), ("first", "<u8"), ("n", "<i8")])


def _entries(h: np.ndarray, r: np.ndarray) -> np.ndarray:
    """One ``_ENTRY`` per (hash, group) of a block sorted by hash then ref."""
    group = r >> np.uint64(_GROUP_SHIFT)
    key = np.ones(len(h), dtype=bool)
    key[1:] = (h[1:] != h[:-1]) | (group[1:] != group[:-1])
    del group
    keys = np.flatnonzero(key)
    del key
    out = np.empty(len(keys), dtype=_ENTRY)
    out["h"], out["first"] = h[keys], r[keys]
    out["n"] = np.diff(np.append(keys, len(h)))
    return out


def _merged(seen: np.ndarray, new: np.ndarray) -> np.ndarray:
    """``seen`` and ``new`` entries in one array by hash then first ref, equal keys summed.

    Both come sorted that way, and every ref of ``new`` (a later block) is after every ref of
    ``seen``; a first ref carries its group in its top bits. So each new entry goes after the
    seen entries of its hash (a merge, not a sort), and the entries of one key (hash, group)
    are neighbours: only a hash's last seen group can meet its first new one.
    """
    both = np.insert(seen, np.searchsorted(seen["h"], new["h"], side="right"), new)
    del seen, new
    group = both["first"] >> np.uint64(_GROUP_SHIFT)
    key = np.ones(len(both), dtype=bool)
    key[1:] = (both["h"][1:] != both["h"][:-1]) | (group[1:] != group[:-1])
    del group
    keys = np.flatnonzero(key)
    if len(keys) == len(both):
        return both
    n = np.add.reduceat(both["n"], keys)
    both = both[keys]  # the first of each key: the smallest first ref
    both["n"] = n
    return both


def _copies_of(part: _LargePartition, wanted: np.ndarray) -> list[list[int]]:
    """The first ``EXAMPLE_COPIES`` refs of each hash in ``wanted``, by a read of ``part``."""
    copies: list[list[int]] = [[] for _ in wanted]
    for h, r in part.blocks():  # blocks in ref order, each sorted by hash then ref
        los = np.searchsorted(h, wanted, "left").tolist()
        his = np.searchsorted(h, wanted, "right").tolist()
        for w, (lo, hi) in enumerate(zip(los, his, strict=True)):
            room = EXAMPLE_COPIES - len(copies[w])
            copies[w] += r[lo : min(hi, lo + room)].tolist()
        if all(len(c) == EXAMPLE_COPIES for c in copies):
            break
    return copies


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
    for lo in range(0, len(order), _REJECTS_STEP):  # Python ints a slice at a time
        step = order[lo : lo + _REJECTS_STEP]
        # a content repeated many times names the same first copy on every line: read it once
        # a slice (one content in most records made every line read two records, not one)
        shown: dict[int, str] = {}
        for dup, first in zip(dups[step].tolist(), firsts[step].tolist(), strict=True):
            if first not in shown:
                shown[first] = _where(groups, first)
            out.write(orjson.dumps(_duplicate_entry(groups, dup, shown[first])) + b"\n")


_REJECTS_STEP = 4096


def _duplicate_entry(groups: list[Group], dup: int, first: str) -> dict[str, Any]:
    """The rejects-file line of record ``dup``, a copy of ``first`` (where that one is)."""
    g, pos = _split_ref(dup)
    record = groups[g].record(pos)
    message = f"same content as {first}"
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
    return entry

"""The duplicate check counts what a plain dict count says, within the memory it is given."""

from __future__ import annotations

import random
import tracemalloc
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from chute.mixture.hashes import content_hashes
from chute.mixture.overlap import Group, find_duplicates
from chute.sources import JsonlSource


def _write(path: Path, texts: list[str]) -> Path:
    path.write_bytes(b"".join(orjson.dumps({"text": t}) + b"\n" for t in texts))
    return path


def _expected(groups: dict[str, list[str]]) -> dict[str, Any]:
    """What the check must report, counted with a dict of content -> [(group, position)]."""
    names = list(groups)
    copies: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for g, name in enumerate(names):
        for pos, text in enumerate(groups[name]):
            copies[text].append((g, pos))
    within = dict.fromkeys(names, 0)
    between = {
        f"{a}|{b}": {"contents": 0, f"records_{a}": 0, f"records_{b}": 0}
        for i, a in enumerate(names)
        for b in names[i + 1 :]
    }
    rejects = set()
    for refs in copies.values():
        per = [sum(1 for g, _ in refs if g == k) for k in range(len(names))]
        for k, n in enumerate(per):
            within[names[k]] += max(n - 1, 0)
        for i, a in enumerate(names):
            for j in range(i + 1, len(names)):
                if per[i] and per[j]:
                    b = names[j]
                    between[f"{a}|{b}"]["contents"] += 1
                    between[f"{a}|{b}"][f"records_{a}"] += per[i]
                    between[f"{a}|{b}"][f"records_{b}"] += per[j]
        first = min(refs)
        rejects |= {(names[g], pos + 1, names[first[0]], first[1] + 1) for g, pos in refs[1:]}
    total = sum(len(t) for t in groups.values())
    return {
        "within": within,
        "between": between,
        "duplicates": total - len(copies),
        "rejects": rejects,
    }


@pytest.mark.parametrize("max_memory", [1 << 30, 1 << 14])
def test_counts_equal_a_dict_count_in_memory_and_spilled(tmp_path: Path, max_memory: int) -> None:
    rng = random.Random(7)
    # three groups drawing from overlapping pools of contents: repeats inside each, shared
    # contents between every pair, and a group that is a subset (ids) of a fourth file
    texts = {
        "a": [f"t{rng.randrange(3000)}" for _ in range(4000)],
        "b": [f"t{rng.randrange(2000, 6000)}" for _ in range(3000)],
        "c": [f"t{rng.randrange(0, 9000, 3)}" for _ in range(2000)],
    }
    whole = [f"t{rng.randrange(5000, 7000)}" for _ in range(2500)]
    ids = np.array(sorted(rng.sample(range(len(whole)), 1200)), dtype=np.int64)
    groups = [Group(n, JsonlSource(_write(tmp_path / f"{n}.jsonl", t))) for n, t in texts.items()]
    subset = JsonlSource(_write(tmp_path / "d.jsonl", whole))
    groups.append(Group("d", subset, ids=ids))
    rejects = tmp_path / "dups.jsonl"
    report = find_duplicates(
        groups, rejects=rejects, max_memory=max_memory, workers=1, progress=False
    )
    assert (report.partitions > 1) == (max_memory < 1 << 20)
    want = _expected({**texts, "d": [whole[i] for i in ids]})
    assert report.within == want["within"]
    assert report.between == want["between"]
    assert report.duplicates == want["duplicates"]
    # one line per duplicate, naming the first copy (by group, then position); the lines of "d"
    # are its file's, mapped back to positions among its ids
    got = set()
    for entry in map(orjson.loads, rejects.read_bytes().splitlines()):
        where = entry["message"].removeprefix("same content as ").split()
        first_group, first_line = where[0], int(where[1].rsplit(":", 1)[1])
        line = entry["line"]
        if entry["group"] == "d":
            line = int(np.searchsorted(ids, line - 1)) + 1
        if first_group == "d":
            first_line = int(np.searchsorted(ids, first_line - 1)) + 1
        got.add((entry["group"], line, first_group, first_line))
    assert got == want["rejects"]


def test_one_content_in_most_records_is_counted_in_blocks_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A content repeated by more than a partition's share of all records (empty texts, a
    boilerplate answer) fills one partition past what may be sorted at once: that partition is
    counted block by block, with the counts, rejects and examples of counting it whole."""
    from chute.mixture import overlap

    rng = random.Random(11)
    texts = {
        g: [
            "the same answer" if rng.random() < 0.6 else f"t{rng.randrange(0, 400)}"
            for _ in range(size)
        ]
        for g, size in (("a", 8000), ("b", 5000), ("c", 3000))
    }
    texts["c"][:50] = [f"only in c {i % 7}" for i in range(50)]
    groups = [Group(n, JsonlSource(_write(tmp_path / f"{n}.jsonl", t))) for n, t in texts.items()]
    blocks = []
    real_blocks = overlap._LargePartition.blocks

    def counted_blocks(self: Any) -> Any:
        blocks.append(self.block)
        return real_blocks(self)

    monkeypatch.setattr(overlap._LargePartition, "blocks", counted_blocks)
    runs = {}
    for max_memory in (1 << 30, 1 << 14):
        rejects = tmp_path / f"dups-{max_memory}.jsonl"
        report = find_duplicates(
            groups, rejects=rejects, max_memory=max_memory, examples=1000, workers=1, progress=False
        )
        runs[max_memory] = (report, sorted(rejects.read_bytes().splitlines()))
    whole, (spilled, spilled_rejects) = runs[1 << 30], runs[1 << 14]
    assert whole[0].partitions == 1 and spilled.partitions > 1
    assert blocks and max(blocks) <= 1024  # the large partition came in blocks
    want = _expected(texts)
    for report, _ in (whole, (spilled, None)):
        assert report.within == want["within"]
        assert report.between == want["between"]
        assert report.duplicates == want["duplicates"]
    assert spilled.examples == whole[0].examples
    assert len(spilled.examples) > 400  # every repeated content, the common answer's ten copies
    assert max(len(e) for e in spilled.examples) == 10
    assert spilled_rejects == whole[1]
    assert len(spilled_rejects) == want["duplicates"]


@pytest.mark.parametrize(
    "repeats", [1, 2, 0], ids=["distinct", "every-content-twice", "one-content-in-most"]
)
def test_the_check_allocates_no_more_than_max_memory(tmp_path: Path, repeats: int) -> None:
    """40k records: their hashes (320 KB) and pairs (640 KB) exceed the 256 KB given."""
    n = 40_000
    if repeats:
        texts = [f"record {i // repeats} of the check" for i in range(n)]
    else:  # 70% one content: one partition holds most of the pairs
        texts = [f"record {i} of the check" if i % 10 < 3 else "empty" for i in range(n)]
    random.Random(3).shuffle(texts)
    source = JsonlSource(_write(tmp_path / "data.jsonl", texts))
    cache = tmp_path / "cache"
    max_memory = 1 << 18
    tracemalloc.start()
    try:
        # the hashes are computed into their cache file: no 8 bytes per record held
        hashes = content_hashes(source, "text", workers=1, cache_dir=cache, progress=False)
        del hashes
        computed = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        report = find_duplicates(
            [Group("data", source, "text")],
            max_memory=max_memory,
            workers=1,
            cache_dir=cache,
            progress=False,
        )
        checked = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    unique = n // repeats if repeats else n * 3 // 10 + 1
    assert report.duplicates == n - unique and report.partitions > 1
    assert computed < max_memory, computed
    assert checked < max_memory, checked


def test_a_low_open_file_limit_means_fewer_partitions_not_a_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """One file per partition is held open while spilling: a process that may open only a
    few files (a soft limit it cannot raise) counts in fewer partitions, with a warning."""
    import resource

    texts = {"a": [f"t{i % 700}" for i in range(3000)], "b": [f"t{i}" for i in range(500, 1500)]}
    groups = [Group(n, JsonlSource(_write(tmp_path / f"{n}.jsonl", t))) for n, t in texts.items()]
    limit = (80, 80)  # 64 kept for other files: room for 16 partitions
    monkeypatch.setattr(resource, "getrlimit", lambda kind: limit)

    def refuse(kind: int, value: tuple[int, int]) -> None:
        raise ValueError("not allowed above the hard limit")

    monkeypatch.setattr(resource, "setrlimit", refuse)
    with caplog.at_level("WARNING", logger="chute.mixture"):
        report = find_duplicates(groups, max_memory=1 << 10, workers=1, progress=False)
    assert report.partitions == 16
    assert "counting in 16 partitions" in caplog.text
    want = _expected(texts)
    assert (report.within, report.between, report.duplicates) == (
        want["within"],
        want["between"],
        want["duplicates"],
    )


def test_a_soft_open_file_limit_is_raised_up_to_the_hard_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import resource

    from chute.mixture import overlap

    raised: list[tuple[int, int]] = []
    monkeypatch.setattr(resource, "getrlimit", lambda kind: (80, 100_000))
    monkeypatch.setattr(resource, "setrlimit", lambda kind, value: raised.append(value))
    assert overlap._openable(512) == 512 and raised == [(576, 100_000)]
    assert overlap._openable(8) == 8 and len(raised) == 1  # within the soft limit: untouched


@pytest.mark.parametrize("block", [1, 3, 64, 10_000])
def test_counting_in_blocks_equals_counting_whole(tmp_path: Path, block: int) -> None:
    """Any block size, contents shared by groups across block bounds: the same tally."""
    from chute.mixture import overlap

    rng = np.random.default_rng(block)
    sizes = [700, 1, 400]
    refs = np.concatenate(
        [
            (np.uint64(g) << np.uint64(40)) + np.arange(n, dtype=np.uint64)
            for g, n in enumerate(sizes)
        ]
    )
    pairs = np.empty(len(refs), dtype=overlap.PAIR)
    pairs["h"] = rng.choice(np.array([5, 9, 2**63 + 1, 77, 12], dtype=np.uint64), len(refs))
    distinct = rng.random(len(refs)) < 0.3
    pairs["h"][distinct] = rng.integers(0, 2**64 - 1, int(distinct.sum()), dtype=np.uint64)
    pairs["r"] = refs
    path = tmp_path / "0000.bin"
    pairs.tofile(path)
    whole, blocked = overlap._Tally(3, 4), overlap._Tally(3, 4)
    dups, firsts = whole.add(*overlap._sorted(pairs))
    found = list(blocked.add_large(overlap._LargePartition(path, block), lambda n: None))
    got = {(int(d), int(f)) for ds, fs in found for d, f in zip(ds, fs, strict=True)}
    assert got == set(zip(dups.tolist(), firsts.tolist(), strict=True))
    assert sum(len(ds) for ds, _ in found) == len(dups)
    assert blocked.duplicates == whole.duplicates == len(dups)
    for name in ("within", "both", "side"):
        assert np.array_equal(getattr(blocked, name), getattr(whole, name)), name
    assert blocked.examples == whole.examples

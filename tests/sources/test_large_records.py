"""Large records (issue 27): read whole however many reads it takes, and rejected unread.

A record larger than ``max_record_bytes`` is rejected as ``record_too_large`` from its size in
the index, before a byte of it is read, by every entry point (validate with and without a
recipe, the Loader, the lengths pass, preprocess); a short ``pread`` (Linux returns at most
~2 GiB per call) is read on, not taken for a modified file. No test writes a large file: the
read cap is patched small, and the guard is tested with a small ``max_record_bytes``.
"""

from __future__ import annotations

import functools
import os
import pickle
import tracemalloc
from pathlib import Path
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

from cache_helpers import config, write_tokenizer
from chute import (
    JsonlSource,
    Loader,
    Recipe,
    SampleError,
    SourceChanged,
    World,
    open_cache,
    preprocess,
)
from chute.cli import app
from chute.lengths.compute import compute_lengths
from chute.recipe.validate import check_json_object, validate_source
from chute.sources import jsonl
from chute.sources.blocks import BlockCache
from chute.sources.record import check_size
from recipe_helpers import tiny_tokenizer

BIG = 3 << 20  # over the size a source hands over unread (1 MiB)


def write_records(path: Path, big: int = BIG, n: int = 8) -> tuple[Path, tuple[int, int]]:
    """``n`` small text records with one of ``big`` bytes at line 3; its byte span."""
    rows = [orjson.dumps({"text": f"small {i}"}) for i in range(n)]
    huge = orjson.dumps({"text": "w" * (big - 11)})  # {"text":"..."}: big bytes
    rows.insert(2, huge)
    path.write_bytes(b"\n".join(rows) + b"\n")
    start = sum(len(r) + 1 for r in rows[:2])
    return path, (start, start + len(huge))


class ReadSpy:
    """Every byte the local reader of ``jsonl`` reads, by offset."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.calls: list[tuple[int, int]] = []
        real = jsonl._LocalBytes.pread

        def pread(reader: Any, n: int, offset: int) -> bytes:
            data = real(reader, n, offset)
            self.calls.append((offset, len(data)))
            return data

        monkeypatch.setattr(jsonl._LocalBytes, "pread", pread)

    def inside(self, span: tuple[int, int]) -> int:
        """Bytes read from within ``span``."""
        lo, hi = span
        return sum(max(0, min(hi, off + n) - max(lo, off)) for off, n in self.calls)


def capped_pread(monkeypatch: pytest.MonkeyPatch, cap: int) -> list[int]:
    """``os.pread`` as Linux does it past 2 GiB: at most ``cap`` bytes per call."""
    real = os.pread
    sizes: list[int] = []

    def pread(fd: int, n: int, offset: int) -> bytes:
        sizes.append(n)
        return real(fd, min(n, cap), offset)

    monkeypatch.setattr(jsonl.os, "pread", pread)
    return sizes


# -- short reads ----------------------------------------------------------------------------


def test_short_reads_are_read_on_not_taken_for_a_modified_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = [{"id": i, "text": "x" * (50 * i)} for i in range(40)]
    p = tmp_path / "d.jsonl"
    p.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    src = JsonlSource(p)
    sizes = capped_pread(monkeypatch, 7)
    assert src[25].data == rows[25]
    assert [r.data for r in src.records_between(0, 40)] == rows
    assert max(sizes) > 7  # reads asked for more than one call returns


def test_a_record_over_the_read_cap_reads_whole_and_unread_ones_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p, (start, end) = write_records(tmp_path / "d.jsonl")
    src = JsonlSource(p)
    capped_pread(monkeypatch, 1 << 20)
    record = src[2]
    assert record.size == end - start  # from the index, before any read
    assert len(record.raw) == end - start and record.data["text"] == "w" * (BIG - 11)
    assert [len(r.raw) for r in src.records_between(0, 9)][2] == end - start


def test_a_block_cache_reads_on_after_a_part_answer() -> None:
    data = bytes(range(256)) * 64
    calls: list[tuple[int, int]] = []

    def fetch(lo: int, hi: int) -> bytes:  # a store answering at most 1000 bytes a request
        calls.append((lo, hi))
        return data[lo : min(hi, lo + 1000)]

    cache = BlockCache(block_size=1024, cache_bytes=4096, readahead=4096)
    assert cache.read("x", fetch, len(data), 100, 9000) == data[100:9000]  # read through
    assert cache.read("y", fetch, len(data), 2000, 3000) == data[2000:3000]  # in blocks
    assert len(calls) > 2


# -- the size guard: rejected unread ----------------------------------------------------------


def test_a_large_record_is_handed_over_unread_and_rejected_unread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p, span = write_records(tmp_path / "d.jsonl")
    src = JsonlSource(p)
    spy = ReadSpy(monkeypatch)
    record = src[2]
    with pytest.raises(SampleError, match=r"d.jsonl:3: record_too_large: 3,145,728 bytes"):
        check_size(record, 1000)
    records = list(src.records_between(0, len(src)))
    with pytest.raises(SampleError, match="record_too_large"):
        check_size(records[2], 1 << 20)
    assert spy.inside(span) <= 4  # the delimiters around it, nothing of it
    assert len(record.head(100)) == 100 and spy.inside(span) <= 104
    clone = pickle.loads(pickle.dumps(record))  # a record travels as its bytes
    assert clone.raw == record.raw and len(clone.raw) == BIG


def test_validate_rejects_a_large_record_unread_with_or_without_a_recipe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p, span = write_records(tmp_path / "d.jsonl", big=8 << 20)
    src = JsonlSource(p)
    spy = ReadSpy(monkeypatch)
    check = functools.partial(check_json_object, max_record_bytes=1 << 20)
    tracemalloc.start()
    try:
        report = validate_source(src, check, workers=1)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (report.valid, dict(report.tally.counts)) == (8, {"record_too_large": 1})
    assert peak < 2 << 20, peak  # the record is 8 MiB
    recipe = Recipe(tokenizer=tiny_tokenizer(), format="text", max_record_bytes=1 << 20)
    rejects = tmp_path / "rejects.jsonl"
    report = validate_source(src, recipe, workers=1, rejects=rejects)
    assert dict(report.tally.counts) == {"record_too_large": 1}
    entry = orjson.loads(rejects.read_bytes())
    assert (entry["line"], entry["reason"]) == (3, "record_too_large")
    assert entry["raw_truncated_from"] == 8 << 20 and len(entry["raw"]) == 1 << 20
    assert spy.inside(span) <= (1 << 20) + 8  # the rejects file's head, nothing more


def test_the_loader_and_the_lengths_pass_count_it_unread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p, span = write_records(tmp_path / "d.jsonl")
    src = JsonlSource(p)
    recipe = Recipe(tokenizer=tiny_tokenizer(), format="text", max_record_bytes=1 << 20)
    spy = ReadSpy(monkeypatch)
    loader = Loader(src, recipe, batch_size=3, world=World(), shuffle=False)
    seen = [i for batch in loader for i in batch["sample_ids"].tolist()]
    assert sorted(seen) == [0, 1, 3, 4, 5, 6, 7, 8]
    assert loader.stats == {"record_too_large": 1}
    lengths, _, tally = compute_lengths(src, recipe, workers=1)
    assert dict(tally.counts) == {"record_too_large": 1}
    assert lengths[0].tolist()[2] == -1 and min(lengths[0].tolist()[3:]) > 0  # rejected; kept
    assert spy.inside(span) <= 16


def test_preprocess_counts_it_unread_with_its_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p, span = write_records(tmp_path / "d.jsonl")
    tok = write_tokenizer(tmp_path / "tok")
    spy = ReadSpy(monkeypatch)
    preprocess(config(p, tok, format="text", max_record_bytes=1 << 20), out=tmp_path / "c")
    assert spy.calls, "the chunk ran in this process"
    assert spy.inside(span) <= (1 << 20) + 8  # the rejects file's head, nothing more
    cache = open_cache(tmp_path / "c")
    assert len(cache) == 8 and cache.summary["by_reason"] == {"record_too_large": 1}
    entry = orjson.loads((tmp_path / "c/rejects.jsonl").read_bytes())
    assert (entry["line"], entry["raw_truncated_from"]) == (3, BIG)


def test_chute_validate_without_a_tokenizer_rejects_it(tmp_path: Path) -> None:
    p, _ = write_records(tmp_path / "d.jsonl")
    runner = CliRunner()
    for extra in ([], ["--format", "text"]):
        args = ["validate", str(p), "--json", "--workers", "1", "--max-record-bytes", "100000"]
        result = runner.invoke(app, args + extra)
        assert result.exit_code == 0, result.output
        out = orjson.loads(result.stdout)
        assert out["by_reason"] == {"record_too_large": 1} and out["valid"] == 8
        assert out["examples"]["record_too_large"][0].startswith(f"{p}:3: record_too_large")


def test_a_changed_file_is_still_caught_for_a_record_read_late(tmp_path: Path) -> None:
    p, (start, _) = write_records(tmp_path / "d.jsonl")
    src = JsonlSource(p)
    record = src[2]  # unread
    st = p.stat()
    data = bytearray(p.read_bytes())
    data[start - 1 : start] = b" "  # the newline before it: same size, other bytes
    p.write_bytes(bytes(data))
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.raises(SourceChanged, match="no longer match the index"):
        record.raw
    with pytest.raises(SourceChanged, match="no longer match the index"):
        src[2]

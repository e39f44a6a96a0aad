"""JsonlSource: random access, provenance, edge cases, index caching and invalidation."""

from __future__ import annotations

import gzip
import multiprocessing
import os
import pickle
from pathlib import Path

import orjson
import pytest

from chute import JsonlSource, SampleError, SourceChanged, SourceError
from chute.sources import open_index


def write_jsonl(path: Path, rows: list[dict], trailing_newline: bool = True) -> Path:
    body = b"\n".join(orjson.dumps(r) for r in rows)
    path.write_bytes(body + (b"\n" if trailing_newline else b""))
    return path


def ids(source: JsonlSource) -> list[int]:
    return [r.data["id"] for r in source]


def test_random_access_line_numbers_and_paths(tmp_path: Path) -> None:
    p = tmp_path / "d.jsonl"
    p.write_bytes(b'{"id": 0}\n\n   \n{"id": 1}\r\n{"id": 2}')
    src = JsonlSource(p)
    assert len(src) == 3
    assert src.blank_lines == 2
    assert [src[i].line for i in range(3)] == [1, 4, 5]
    assert src[1].data == {"id": 1} and src[1].raw == b'{"id": 1}'
    assert src[-1].data == {"id": 2}
    assert src[2].path == str(p) and src[2].index == 2
    assert [r.data["id"] for r in src[0:3:2]] == [0, 2]
    with pytest.raises(IndexError, match="out of range"):
        src[3]


def test_a_file_listed_twice_is_read_twice_and_said(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A glob and a file it matches (or ``./a``): each listing is read, no longer silently."""
    from chute._internal import files

    monkeypatch.setattr(files, "_WARNED", set())  # as in a fresh process
    for name in ("a", "b"):
        (tmp_path / f"{name}.jsonl").write_text('{"n": 1}\n{"n": 2}\n')
    with caplog.at_level("WARNING", logger="chute.sources"):
        assert len(JsonlSource([tmp_path / "a.jsonl", tmp_path / "b.jsonl"])) == 4
        assert caplog.text == ""
        src = JsonlSource([str(tmp_path / "*.jsonl"), str(tmp_path / "." / "a.jsonl")])
    assert len(src) == 6  # what was asked for: a.jsonl twice
    assert f"{tmp_path / 'a.jsonl'} (2 times) listed more than once" in caplog.text
    assert "use a Mixture" in caplog.text


def test_many_files_and_globs_keep_a_stable_order(tmp_path: Path) -> None:
    for k in range(3):
        write_jsonl(tmp_path / f"part-{k}.jsonl", [{"id": 10 * k + i} for i in range(k + 2)])
    src = JsonlSource([tmp_path / "part-2.jsonl", str(tmp_path / "part-[01].jsonl")])
    assert ids(src) == [20, 21, 22, 23, 0, 1, 10, 11, 12]
    assert [r.index for r in src] == list(range(9))
    # records_between crosses file boundaries and matches random access
    assert [r.data["id"] for r in src.records_between(3, 8)] == [
        src[i].data["id"] for i in range(3, 8)
    ]


def test_json_array_file_has_element_numbers_and_lines(tmp_path: Path) -> None:
    p = tmp_path / "alpaca.json"
    p.write_text('[\n  {"id": 0},\n  {"id": 1,\n   "x": "]"}\n]\n')
    src = JsonlSource(p)
    assert ids(src) == [0, 1]
    assert [(r.line, r.element) for r in src] == [(2, 1), (3, 2)]
    assert src[1].location == f"{p}:3 (element 2)"
    assert src.files[0].kind == "json_array"


def test_json_file_holding_jsonl_is_read_as_lines(tmp_path: Path) -> None:
    p = write_jsonl(tmp_path / "really_lines.json", [{"id": 0}, {"id": 1}])
    assert ids(JsonlSource(p)) == [0, 1]


def test_single_object_json_file_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "config.json"
    p.write_text('{\n  "a": {"file_name": "x.json"}\n}\n')
    with pytest.raises(SourceError, match="one JSON object spanning several lines"):
        JsonlSource(p)


@pytest.mark.parametrize(
    ("raw", "kind"),
    [
        (b'{"a": "unterminated', "bad_json"),
        (b'{"a": "\xff\xfe"}', "bad_utf8"),
        (b'{"a": "x\x00y"}', "nul_byte"),
        (b"[" * 2000 + b"]" * 2000, "too_deep"),
    ],
)
def test_bad_records_are_typed_sample_errors_and_neighbours_survive(
    tmp_path: Path, raw: bytes, kind: str
) -> None:
    p = tmp_path / "d.jsonl"
    p.write_bytes(b'{"id": 0}\n' + raw + b'\n{"id": 2}\n')
    src = JsonlSource(p)
    assert src[0].data == {"id": 0} and src[2].data == {"id": 2}
    with pytest.raises(SampleError, match=rf"d.jsonl:2: {kind}") as info:
        src[1].data
    assert info.value.kind == kind and info.value.line == 2


def test_a_50mb_line_and_a_file_truncated_mid_line(tmp_path: Path) -> None:
    p = tmp_path / "d.jsonl"
    big = orjson.dumps({"id": 1, "text": "x" * (50 << 20)})
    p.write_bytes(b'{"id": 0}\n' + big + b'\n{"id": 2, "cut')
    src = JsonlSource(p)
    assert len(src) == 3
    assert len(src[1].data["text"]) == 50 << 20
    assert [r.line for r in src] == [1, 2, 3]
    with pytest.raises(SampleError, match="bad_json"):
        src[2].data


def test_missing_directory_empty_and_unmatched_glob(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="no such file"):
        JsonlSource(tmp_path / "nope.jsonl")
    with pytest.raises(SourceError, match=r"is a directory; .* glob such as '.*/\*\.jsonl'"):
        JsonlSource(tmp_path)
    # the glob it suggests is where the data files are, as they end (Hugging Face's layout)
    (tmp_path / "hub" / "data").mkdir(parents=True)
    for name in ("train-0.parquet", "train-1.parquet", "README.md"):
        (tmp_path / "hub" / "data" / name).touch()
    with pytest.raises(SourceError, match=r"glob such as '.*/hub/data/\*\.parquet'$"):
        JsonlSource(f"{tmp_path}/hub/")
    with pytest.raises(SourceError, match="matches no files"):
        JsonlSource(tmp_path / "*.jsonl")
    (tmp_path / "empty.jsonl").write_bytes(b"")
    (tmp_path / "blank.jsonl").write_bytes(b"\n \n\t\r\n")
    src = JsonlSource([tmp_path / "empty.jsonl", tmp_path / "blank.jsonl"])
    assert len(src) == 0 and src.blank_lines == 3
    assert list(src) == []


def test_index_is_cached_and_rebuilt_when_the_file_changes(tmp_path: Path) -> None:
    p = write_jsonl(tmp_path / "d.jsonl", [{"id": i} for i in range(5)])
    assert open_index(p).built
    assert not open_index(p).built  # reused
    # append
    with open(p, "ab") as f:
        f.write(b'{"id": 5}\n')
    ix = open_index(p)
    assert ix.built and len(ix) == 6
    # rewrite in place with the same size but a new mtime
    st = p.stat()
    p.write_bytes(p.read_bytes().replace(b'"id":3', b'"id":9'))
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert open_index(p).built
    assert ids(JsonlSource(p)) == [0, 1, 2, 9, 4, 5]


def test_same_size_and_mtime_but_new_bytes_is_caught_by_the_edge_hash(tmp_path: Path) -> None:
    p = write_jsonl(tmp_path / "d.jsonl", [{"id": i} for i in range(3)])
    open_index(p)
    st = p.stat()
    p.write_bytes(b'{"id":7}\n{"id":1}\n\n{"id":2}')  # same length, a blank line moved in
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert p.stat().st_size == st.st_size and p.stat().st_mtime_ns == st.st_mtime_ns
    src = JsonlSource(p)
    assert src.files[0].built
    assert ids(src) == [7, 1, 2]


def test_modified_or_truncated_while_open_is_detected(tmp_path: Path) -> None:
    p = write_jsonl(tmp_path / "d.jsonl", [{"id": i} for i in range(100)])
    src = JsonlSource(p)
    assert src[50].data == {"id": 50}
    with open(p, "r+b") as f:
        f.truncate(p.stat().st_size // 2)
    with pytest.raises(SourceChanged, match="d.jsonl: the file changed after it was indexed"):
        src[60]
    with pytest.raises(SourceChanged):
        list(src.records_between(0, 10))


def test_rewrite_with_identical_stat_is_caught_by_delimiter_checks(tmp_path: Path) -> None:
    p = write_jsonl(tmp_path / "d.jsonl", [{"id": i} for i in range(10)])
    src = JsonlSource(p)
    assert src[0].data == {"id": 0}  # opened here before the rewrite (its ends checked then)
    st = p.stat()
    data = p.read_bytes()
    shifted = b"{}\n" + data[: -len(b"{}\n")]  # every record moves by 3 bytes
    p.write_bytes(shifted)
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.raises(SourceChanged, match="no longer match the index"):
        src[5]


def test_after_a_middle_rewrite_that_kept_size_and_mtime_reopening_reindexes(
    tmp_path: Path,
) -> None:
    # the ends as before (the check on open passes), two lines in the middle one byte
    # shorter and longer: reading between them finds the index stale
    lines = [b'{"text": "%s"}' % (b"x" * (100 + i % 7)) for i in range(3000)]
    p = tmp_path / "d.jsonl"
    p.write_bytes(b"\n".join(lines) + b"\n")
    JsonlSource(p)
    st = p.stat()
    lines[1500] = lines[1500].replace(b"xx", b"x", 1)
    lines[1502] = lines[1502].replace(b"x", b"xx", 1)
    p.write_bytes(b"\n".join(lines) + b"\n")
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.raises(SourceChanged, match="re-open the source to re-index it"):
        JsonlSource(p)[1501]
    # as the error says, re-opening re-indexes (the stale index, which size and mtime could
    # not tell from a good one, was removed); it reused it, and raised again
    again = JsonlSource(p)
    assert again[1501].data == {"text": "x" * (100 + 1501 % 7)} and again.files[0].built


def test_pickled_source_maps_the_index_instead_of_copying_it(tmp_path: Path) -> None:
    p = write_jsonl(tmp_path / "d.jsonl", [{"id": i} for i in range(20_000)])
    src = JsonlSource(p)
    blob = pickle.dumps(src)
    assert len(blob) < 4096, "the index entries must not travel with the source"
    clone = pickle.loads(blob)
    assert clone[12_345].data == {"id": 12_345}


def test_a_rewrite_that_kept_size_and_mtime_is_caught_when_a_process_opens_it(
    tmp_path: Path,
) -> None:
    """``cp -p``-style: a DataLoader worker read the new bytes through the old index."""
    path = tmp_path / "a.jsonl"
    path.write_bytes(b"".join(b'{"n": %d}\n' % i for i in range(100, 140)))
    src = JsonlSource(path)
    assert src[0].data["n"] == 100
    shipped = pickle.dumps(src)  # as a DataLoader worker gets it
    st = os.stat(path)
    with open(path, "r+b") as f:  # the same size: other numbers of as many digits
        f.write(b"".join(b'{"n": %d}\n' % i for i in range(500, 540)))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.raises(SourceChanged, match="its size and mtime are as before, its content is"):
        pickle.loads(shipped)[0]


def test_pickled_source_refuses_a_changed_index(tmp_path: Path) -> None:
    p = write_jsonl(tmp_path / "d.jsonl", [{"id": i} for i in range(10)])
    blob = pickle.dumps(JsonlSource(p))
    with open(p, "ab") as f:
        f.write(b'{"id": 10}\n')
    JsonlSource(p)  # re-indexes: the old sidecar is replaced
    with pytest.raises(SourceChanged, match="re-open the source"):
        pickle.loads(blob)


def _build_index(path: str, barrier, results) -> None:  # type: ignore[no-untyped-def]
    barrier.wait()
    results.put(len(open_index(path, rebuild=True)))


def test_two_processes_building_one_index_concurrently(tmp_path: Path) -> None:
    p = write_jsonl(tmp_path / "d.jsonl", [{"id": i, "t": "x" * (i % 50)} for i in range(200_000)])
    ctx = multiprocessing.get_context("fork")
    barrier, results = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_build_index, args=(str(p), barrier, results)) for _ in range(2)]
    for proc in procs:
        proc.start()
    counts = [results.get(timeout=60) for _ in procs]
    for proc in procs:
        proc.join(timeout=60)
        assert proc.exitcode == 0
    assert counts == [200_000, 200_000]
    src = JsonlSource(p)
    assert not src.files[0].built, "the sidecar one of them left must be valid and reused"
    assert src[199_999].data["id"] == 199_999
    leftovers = [f for f in src.files[0].sidecar.parent.iterdir() if f.name.endswith(".tmp")]
    assert leftovers == []


def test_gzip_and_zstd_files_are_decompressed_once_and_randomly_accessible(tmp_path: Path) -> None:
    rows = [{"id": i} for i in range(1000)]
    body = b"".join(orjson.dumps(r) + b"\n" for r in rows)
    gz = tmp_path / "d.jsonl.gz"
    gz.write_bytes(gzip.compress(body))
    zstandard = pytest.importorskip("zstandard")
    zst = tmp_path / "d.jsonl.zst"
    zst.write_bytes(zstandard.ZstdCompressor().compress(body))
    src = JsonlSource([gz, zst])
    assert len(src) == 2000
    assert src[1500].data == {"id": 500} and src[1500].path == str(zst) and src[1500].line == 501
    assert not JsonlSource(gz).files[0].built


def test_corrupt_gzip_is_a_clear_error(tmp_path: Path) -> None:
    gz = tmp_path / "d.jsonl.gz"
    gz.write_bytes(gzip.compress(b'{"id": 1}\n' * 1000)[:40])
    with pytest.raises(SourceError, match="cannot decompress"):
        JsonlSource(gz)


def test_unwritable_cache_falls_back_to_an_in_memory_index(tmp_path: Path) -> None:
    cache = tmp_path / "not-a-dir"
    cache.write_text("a file where the cache directory should be")
    p = write_jsonl(tmp_path / "d.jsonl", [{"id": i} for i in range(10)])
    src = JsonlSource(p, cache_dir=cache)
    assert src.files[0].sidecar is None and ids(src) == list(range(10))


def test_a_file_is_closed_at_interpreter_exit_without_module_globals(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At exit, an object kept alive by an exception's traceback is collected after modules'
    globals became None: closing it printed "Exception ignored in _LocalBytes.__del__:
    TypeError" after every failed run (a killed DataLoader worker, here simulated)."""
    import contextlib

    from chute.sources import jsonl

    path = tmp_path / "d.jsonl"
    path.write_text('{"a": 1}\n{"a": 2}\n')
    source = JsonlSource(path)
    assert source[1].data == {"a": 2}  # opens the file
    io = source._readers[0].io
    fd = io._fd
    monkeypatch.setattr(jsonl, "os", None)
    monkeypatch.setattr(jsonl, "contextlib", None, raising=False)
    io.__del__()
    monkeypatch.undo()
    with pytest.raises(OSError):
        os.fstat(fd)  # closed
    with contextlib.suppress(OSError):
        os.close(fd)
    io._fd = None

"""Compressed sources (issue 27): a truncated file is an error for every codec, never fewer records.

zstandard's stream reader stops where its input stops, without a word; chute follows the zstd
frames and refuses a stream that ends inside one, as gzip refuses a stream without its end.
"""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from chute import JsonlSource, SourceError
from chute.cli import app
from chute.sources import decompress

zstandard = pytest.importorskip("zstandard")

ROWS = [{"id": i, "text": f"record {i} " + "abc" * (i % 17)} for i in range(20_000)]
BODY = b"".join(orjson.dumps(r) + b"\n" for r in ROWS)


def compress(suffix: str, body: bytes = BODY) -> bytes:
    if suffix == ".gz":
        return gzip.compress(body)
    return zstandard.ZstdCompressor().compress(body)


@pytest.mark.parametrize("suffix", [".gz", ".zst", ".zstd"])
def test_a_truncated_file_is_refused_for_every_codec(tmp_path: Path, suffix: str) -> None:
    whole = compress(suffix)
    p = tmp_path / f"d.jsonl{suffix}"
    p.write_bytes(whole[: len(whole) * 3 // 10])  # what an interrupted download leaves
    with pytest.raises(SourceError, match=r"d.jsonl.*cannot decompress .* is the file complete"):
        JsonlSource(p)
    copies = tmp_path / "cache"  # nothing is left for a later run to take as the data
    assert not [c for c in copies.rglob("*") if c.is_file() and "decompressed" in c.parts]
    p.write_bytes(whole)
    assert len(JsonlSource(p)) == len(ROWS)


def test_zstd_files_of_several_frames_read_whole(tmp_path: Path) -> None:
    half = len(BODY) // 2
    cut = BODY.index(b"\n", half) + 1
    skippable = struct.pack("<II", 0x184D2A50, 4) + b"meta"
    p = tmp_path / "d.jsonl.zst"
    p.write_bytes(compress(".zst", BODY[:cut]) + skippable + compress(".zst", BODY[cut:]))
    src = JsonlSource(p)
    assert len(src) == len(ROWS) and src[len(ROWS) - 1].data == ROWS[-1]
    second = compress(".zst", BODY[cut:])
    p.write_bytes(compress(".zst", BODY[:cut]) + second[:-5])  # the last frame cut
    with pytest.raises(SourceError, match="ends inside a frame"):
        JsonlSource(p)


def test_a_copy_made_before_the_check_is_checked_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    whole = compress(".zst")
    cut = tmp_path / "cut.jsonl.zst"
    cut.write_bytes(whole[: len(whole) // 2])
    good = tmp_path / "good.jsonl.zst"
    good.write_bytes(whole)
    root = tmp_path / "cache"

    def lenient(path, name, options, dst):  # type: ignore[no-untyped-def]
        # what chute wrote before: whatever the stream reader gave, no mark
        with open(path, "rb") as raw, zstandard.ZstdDecompressor().stream_reader(raw) as s:
            if dst is not None:
                dst.write(s.read())

    with monkeypatch.context() as m:
        m.setattr(decompress, "_decompress", lenient)
        old_cut = decompress.decompressed_copy(cut, root)
        old_good = decompress.decompressed_copy(good, root)
    for copy in (old_cut, old_good):
        copy.with_name(copy.name + ".complete").unlink()
    assert 0 < old_cut.stat().st_size < len(BODY)
    mtime = old_good.stat().st_mtime_ns
    assert decompress.decompressed_copy(good, root) == old_good
    assert old_good.stat().st_mtime_ns == mtime  # checked, not rewritten (its index stands)
    with pytest.raises(SourceError, match="is the file complete"):
        decompress.decompressed_copy(cut, root)
    assert not old_cut.exists()


def test_chute_validate_reports_a_truncated_file(tmp_path: Path) -> None:
    whole = compress(".zst")
    cut = tmp_path / "cut.jsonl.zst"
    cut.write_bytes(whole[: len(whole) // 3])
    good = tmp_path / "good.jsonl"
    good.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in ROWS[:30]))
    runner = CliRunner()
    alone = runner.invoke(app, ["validate", str(cut), "--quiet", "--workers", "1"])
    assert alone.exit_code == 2 and "is the file complete" in alone.output
    both = runner.invoke(app, ["validate", str(cut), str(good), "--json", "--workers", "1"])
    assert both.exit_code == 1, both.output  # a finding: the other file is checked
    out = orjson.loads(both.stdout)
    assert out["skipped"][0]["path"] == str(cut)
    assert "ends inside a frame" in out["skipped"][0]["error"]
    assert (out["records"], out["valid"]) == (30, 30)

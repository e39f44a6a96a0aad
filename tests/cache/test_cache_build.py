"""Building and reading a cache: round trip, determinism, resume, damage, rejects, stages."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute
import pytest

import chute
from cache_helpers import config, tree_digest, write_alpaca, write_tokenizer
from chute import CacheError, ErrorBudgetExceeded, JsonlSource, Recipe, open_cache, preprocess
from chute.cache.layout import Layout
from chute.cache.stages import ChunkStage
from chute.errors import SampleError

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def tok(tmp_path: Path) -> Path:
    return write_tokenizer(tmp_path / "tok")


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return write_alpaca(tmp_path / "train.jsonl", 300, broken=(5, 77, 150))


def assert_same_sample(got: dict, want: dict) -> None:
    assert np.array_equal(got["input_ids"], want["input_ids"])
    assert np.array_equal(got["labels"], want["labels"])
    assert got["labels"].dtype == np.int32
    for key in ("length", "index", "path", "line", "images", "videos", "audios"):
        assert got[key] == want[key], key
    assert got["num_image_tokens"] == want["num_image_tokens"]
    assert got["truncated"] == want["truncated"]


def test_round_trip_rejects_and_summary(tmp_path: Path, tok: Path, data: Path) -> None:
    cfg = config(data, tok, max_length=96)
    report = preprocess(cfg, out=tmp_path / "c")
    assert report.finalized and report.built == 5 and report.reused == 0
    cache = open_cache(tmp_path / "c")
    recipe = Recipe(**cfg["recipe"])
    want, kinds = [], []
    for record in JsonlSource(data):
        try:
            want.append(recipe(record))
        except SampleError as exc:
            kinds.append((record.line, exc.kind))
    assert len(cache) == len(want) == 292
    for i in range(len(cache)):
        assert_same_sample(cache[i], want[i])
    assert cache[-1]["index"] == 299 and cache[0]["input_ids"].dtype == np.uint16
    assert sorted(k for _, k in kinds) == sorted(
        ["bad_json", "missing_field", "unknown_format", *["no_trainable_tokens"] * 5]
    )
    assert np.array_equal(cache.lengths, [s["length"] for s in want])
    assert cache.lengths.dtype == np.int32 and isinstance(cache.lengths, np.memmap)
    assert any(s["truncated"] for s in want)
    summary = cache.summary
    assert summary["samples"] == 292 and summary["rejected"] == 8
    assert summary["by_reason"] == {
        "bad_json": 1,
        "missing_field": 1,
        "no_trainable_tokens": 5,
        "unknown_format": 1,
    }
    assert summary["tokens"] == sum(s["length"] for s in want)
    lines = [orjson.loads(x) for x in (tmp_path / "c/rejects.jsonl").read_bytes().splitlines()]
    assert [(x["line"], x["reason"]) for x in lines] == kinds
    assert set(lines[0]) >= {"path", "line", "index", "reason", "message", "field", "raw"}
    assert lines[0]["raw"] == '{"instruction": "cut'


def test_same_bytes_whatever_the_workers_and_resume_redoes_only_missing(
    tmp_path: Path, tok: Path, data: Path
) -> None:
    cfg = config(data, tok)
    preprocess(cfg, out=tmp_path / "one", workers=1)
    preprocess(cfg, out=tmp_path / "two", workers=2)
    reference = tree_digest(tmp_path / "one")
    assert tree_digest(tmp_path / "two") == reference
    # lose two chunks' commit records and one data file: the next run rebuilds just those
    layout = Layout(tmp_path / "two")
    layout.record(1).unlink()
    layout.record(3).unlink()
    layout.chunk(3).unlink()
    layout.manifest.unlink()
    again = preprocess(cfg, out=tmp_path / "two", workers=2)
    assert (again.built, again.reused) == (2, 3) and again.finalized
    assert tree_digest(tmp_path / "two") == reference
    # complete: a third run builds nothing and rewrites nothing
    third = preprocess(cfg, out=tmp_path / "two")
    assert (third.built, third.finalized) == (0, False)
    assert tree_digest(tmp_path / "two") == reference


def test_half_written_chunk_is_never_read(tmp_path: Path, tok: Path, data: Path) -> None:
    cfg = config(data, tok)
    preprocess(cfg, out=tmp_path / "ref")
    out = tmp_path / "c"
    preprocess(cfg, out=out)
    layout = Layout(out)
    full = layout.chunk(2).read_bytes()
    # a crash mid-write: a temp file of a dead process, a cut data file without its record
    (layout.chunks / ".000002.arrow.somehost.999999.tmp").write_bytes(full[:100])
    layout.chunk(2).write_bytes(full[: len(full) // 2])
    layout.record(2).unlink()
    layout.manifest.unlink()
    with pytest.raises(CacheError, match=r"not complete: 4 of 5 chunks are committed"):
        open_cache(out)
    preprocess(cfg, out=out)
    (layout.chunks / ".000002.arrow.somehost.999999.tmp").unlink()  # another host's: kept
    assert tree_digest(out) == tree_digest(tmp_path / "ref")


def test_damaged_chunk_refused_on_open_then_repaired(tmp_path: Path, tok: Path, data: Path):
    cfg = config(data, tok)
    out = tmp_path / "c"
    preprocess(cfg, out=out)
    reference = tree_digest(out)
    chunk = Layout(out).chunk(1)
    chunk.write_bytes(chunk.read_bytes()[:-8])
    with pytest.raises(CacheError, match=r"damaged: .*000001.arrow is \d+ bytes"):
        open_cache(out)
    assert preprocess(cfg, out=out).built == 1
    assert tree_digest(out) == reference


def test_pickles_as_a_path_and_workers_remap(tmp_path: Path, tok: Path, data: Path) -> None:
    preprocess(config(data, tok), out=tmp_path / "c")
    cache = open_cache(tmp_path / "c")
    _ = cache[200], cache.lengths
    blob = pickle.dumps(cache)
    assert len(blob) < 1500
    clone = pickle.loads(blob)
    assert clone.fingerprint() == cache.fingerprint()
    assert np.array_equal(clone[200]["input_ids"], cache[200]["input_ids"])
    fp = cache.fingerprint()
    assert set(fp) == {"kind", "format_version", "samples", "data_digest"}
    ids = cache[3]["input_ids"]
    assert not ids.flags.writeable and not ids.flags.owndata  # a view of the mapped file


def test_budget_stops_a_mostly_broken_dataset(tmp_path: Path, tok: Path) -> None:
    data = write_alpaca(tmp_path / "bad.jsonl", 1200, broken=tuple(range(0, 1200, 2)))
    # checked as chunks complete, once 1,000 records were seen: the 16th chunk of 64 stops it
    with pytest.raises(ErrorBudgetExceeded, match=r"512 of 1,024 records were rejected \(50.0%\)"):
        preprocess(config(data, tok), out=tmp_path / "c")
    assert not (tmp_path / "c/manifest.json").exists()
    report = preprocess(
        config(data, tok), out=tmp_path / "c", overrides=["cache.max_bad_fraction=0.6"]
    )
    assert (report.reused, report.built, report.samples) == (16, 3, 600)


class Trained(ChunkStage):
    name = "trained"

    def columns(self, samples):
        return {
            "trained": pa.array([int((s["labels"] != -100).sum()) for s in samples], pa.int32())
        }

    def files(self, chunk, samples):
        return {"trained.txt": f"{chunk}:{len(samples)}".encode()}

    def finish(self, folder, chunks):
        total = sum(int(pa.compute.sum(batch.column("trained")).as_py()) for batch in chunks())
        (folder / "total.txt").write_text(str(total))
        return {"total": total}


def test_extra_stage_columns_files_and_fingerprint(tmp_path: Path, tok: Path, data: Path):
    preprocess(config(data, tok), out=tmp_path / "c", stages=[Trained(unit="tokens")])
    cache = open_cache(tmp_path / "c")
    sample = cache[10]
    assert sample["trained"] == int((sample["labels"] != -100).sum())
    assert (tmp_path / "c/chunks/000001.trained.txt").read_text() == "1:63"  # record 77 is broken
    assert cache.manifest["fingerprint"]["stages"] == {
        "trained": {"name": "trained", "version": 1, "options": {"unit": "tokens"}}
    }
    total = sum(int((s["labels"] != -100).sum()) for s in cache)
    assert cache.manifest["stage_outputs"] == {"trained": {"total": total}}
    assert (tmp_path / "c/trained/total.txt").read_text() == str(total)
    with pytest.raises(chute.FingerprintMismatch, match="stages.trained.options.unit"):
        preprocess(config(data, tok), out=tmp_path / "c", stages=[Trained(unit="words")])
    preprocess(config(data, tok), out=tmp_path / "c", overwrite=True)
    assert not (tmp_path / "c/trained").exists()
    assert "trained" not in open_cache(tmp_path / "c")[0]


def test_datasets_load_from_disk_reads_the_cache(tmp_path: Path, tok: Path, data: Path):
    datasets = pytest.importorskip("datasets")
    preprocess(config(data, tok), out=tmp_path / "c")
    cache = open_cache(tmp_path / "c")
    ds = datasets.load_from_disk(str(tmp_path / "c"))
    assert len(ds) == len(cache)
    for i in (0, 100, len(cache) - 1):
        row, sample = ds[i], cache[i]
        assert row["input_ids"] == sample["input_ids"].tolist()
        labels = chute.cache.labels_from_spans(np.array(row["input_ids"]), row["label_spans"])
        assert np.array_equal(labels, sample["labels"])
        assert row["line"] == sample["line"] and row["length"] == sample["length"]


def test_errors_name_the_problem(tmp_path: Path, tok: Path, data: Path) -> None:
    with pytest.raises(chute.ConfigError, match="out: no output directory"):
        preprocess(config(data, tok))
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine/notes.txt").write_text("precious")
    with pytest.raises(chute.ConfigError, match="not empty and holds no chute cache"):
        preprocess(config(data, tok), out=tmp_path / "mine", overwrite=True)
    assert (tmp_path / "mine/notes.txt").exists()
    with pytest.raises(CacheError, match="no such cache directory"):
        open_cache(tmp_path / "nothing")
    with pytest.raises(CacheError, match="not a chute cache"):
        open_cache(tmp_path / "mine")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(chute.ConfigError, match="hold no records"):
        preprocess(config(empty, tok), out=tmp_path / "e")
    with pytest.raises(chute.ConfigError, match="--shard"):
        preprocess(config(data, tok), out=tmp_path / "s", shard="2/2")
    assert not (tmp_path / "s").exists()


def test_audio_and_video_references_round_trip(tmp_path: Path) -> None:
    sf = pytest.importorskip("soundfile")
    tok = write_tokenizer(tmp_path / "tok", extra_tokens=("<audio>",))
    rate = 16000
    sf.write(tmp_path / "a.wav", np.zeros(int(1.5 * rate), dtype=np.float32), rate)
    rows = [
        {
            "audios": ["a.wav"],
            "messages": [
                {"role": "user", "content": "<audio>What is it?"},
                {"role": "assistant", "content": "Silence."},
            ],
        },
        {
            "videos": ["v.mp4"],
            "messages": [
                {"role": "user", "content": "<video>Hi"},
                {"role": "assistant", "content": "Hello"},
            ],
        },
    ]
    data = tmp_path / "m.jsonl"
    data.write_text("".join(orjson.dumps(r).decode() + "\n" for r in rows))
    recipe = {
        "tokenizer": str(tok),
        "template": "chatml",
        "audio_tokens": {"tokens_per_second": 25},
        "video_tokens": 6,
        "check_images": False,
    }
    cfg = {"sources": [str(data)], "recipe": recipe, "cache": {"workers": 1}}
    preprocess(cfg, out=tmp_path / "c")
    cache = open_cache(tmp_path / "c")
    want = [chute.cache.RecipeConfig(**recipe).build()(r) for r in JsonlSource(data)]
    assert want[0]["audios"][0]["seconds"] == 1.5 and want[0]["audios"][0]["num_tokens"] == 38
    for got, w in zip(cache, want, strict=True):
        assert_same_sample(got, w)


def test_writing_a_chunk_of_text_samples_does_not_import_pandas(tok: Path, data: Path) -> None:
    # pa.array() imports pandas to check for its objects: 0.2 s in every worker that writes
    pytest.importorskip("pandas", reason="only meaningful where pandas is installed")
    script = (
        "import sys, json; from chute import preprocess; "
        "preprocess(json.loads(sys.argv[1]), out=sys.argv[2], workers=1); "
        "assert 'pandas' not in sys.modules, 'pandas was imported'"
    )
    cfg = config(data, tok)
    out = data.parent / "no-pandas"
    proc = subprocess.run(
        [sys.executable, "-c", script, json.dumps(cfg), str(out)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert open_cache(out).fingerprint()

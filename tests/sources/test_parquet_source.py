"""ParquetSource: rows as records (random access by row group), the same adapters as JSON.

The real Hub-layout file of LLaMA-Factory (``mllm_example_dataset``) goes through the recipe;
alpaca data written as Parquet with small row groups must give the records the JSON file gives.
"""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from chute import ConfigError, ParquetSource, Recipe, SourceChanged, open_source
from chute.errors import SampleError
from chute.media import ImageTransform, MediaStage
from chute.sample.rejects import reject_entry

LF = "llama-factory"
QWEN = "tokenizers/qwen3"


def alpaca_parquet(shared_data: Path, path: Path, row_group_size: int = 37) -> list[dict]:
    rows = orjson.loads((shared_data / LF / "alpaca_en_demo.json").read_bytes())
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=row_group_size)
    return rows


@pytest.mark.shared_data
def test_rows_by_random_access_equal_the_json_records(shared_data: Path, tmp_path: Path) -> None:
    rows = alpaca_parquet(shared_data, tmp_path / "a.parquet")
    src = ParquetSource(tmp_path / "a.parquet", cache_bytes=1)  # one decoded group at a time
    assert len(src) == len(rows) == 999 and src.files[0].row_groups == 27
    order = list(range(len(src)))
    random.Random(0).shuffle(order)
    for i in order[:300]:
        r = src[i]
        assert r.data == rows[i] and r.index == i and r.line == i + 1
    assert [r.data for r in src.records_between(30, 80)] == rows[30:80]  # across groups
    assert [r.data for r in src] == rows
    assert src[-1].location == f"{tmp_path / 'a.parquet'}:999"


@pytest.mark.shared_data
def test_recipe_samples_equal_from_parquet_and_json(shared_data: Path, tmp_path: Path) -> None:
    alpaca_parquet(shared_data, tmp_path / "a.parquet")
    recipe = Recipe(tokenizer=str(shared_data / QWEN), template="qwen3", max_length=512)
    pq_src = open_source(str(tmp_path / "a.parquet"))
    js_src = open_source(str(shared_data / LF / "alpaca_en_demo.json"))
    assert isinstance(pq_src, ParquetSource)
    for i in (0, 411, 998):
        a, b = recipe(pq_src[i]), recipe(js_src[i])
        assert np.array_equal(a["input_ids"], b["input_ids"])
        assert np.array_equal(a["labels"], b["labels"])


@pytest.mark.shared_data
def test_hub_layout_parquet_with_images_by_path(shared_data: Path, tmp_path: Path) -> None:
    """mllm_example_dataset: messages with typed parts, images as {bytes: null, path}."""
    src = open_source(str(shared_data / LF / "mllm_example_dataset/data/train-*.parquet"))
    assert isinstance(src, ParquetSource) and len(src) == 3
    tok = str(shared_data / QWEN)
    # its paths are relative to the LLaMA-Factory repository, not to the data file's folder
    default = Recipe(tokenizer=tok, template="qwen3", image_tokens="qwen2-vl")
    with pytest.raises(SampleError, match=r"train-0.parquet:1: image_missing: .*data/data/images"):
        default(src[0])
    root = tmp_path / "repo"
    (root / "data/images").mkdir(parents=True)
    for i in (1, 2, 3):  # the same photos as mllm_demo_data
        shutil.copy(shared_data / LF / f"mllm_demo_data/{i}.jpg", root / f"data/images/{i}.jpg")
    recipe = Recipe(tokenizer=tok, template="qwen3", image_tokens="qwen2-vl", media_root=root)
    samples = [recipe(r) for r in src]
    assert [s["images"][0]["source"] for s in samples] == [
        f"data/images/{i}.jpg" for i in (1, 2, 3)
    ]
    assert [s["images"][0]["size"] for s in samples] == [[300, 168], [300, 199], [300, 166]]
    assert samples[0]["path"].endswith("train-0.parquet") and samples[2]["line"] == 3


@pytest.mark.shared_data
def test_images_given_as_bytes_are_inline(shared_data: Path, tmp_path: Path) -> None:
    """An image struct with bytes (the HF Image feature) wins over its path, as in datasets."""
    jpg = (shared_data / LF / "mllm_demo_data/2.jpg").read_bytes()
    rows = [
        {
            "messages": [
                {"role": "user", "content": "<image>Who is he?"},
                {"role": "assistant", "content": "Thomas Muller."},
            ],
            "images": [{"bytes": jpg, "path": "nowhere/2.jpg"}],
        }
    ]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "b.parquet")
    src = ParquetSource(tmp_path / "b.parquet")
    tok = str(shared_data / QWEN)
    recipe = Recipe(tokenizer=tok, template="qwen3", image_tokens=16, image_token="<|image_pad|>")
    sample = recipe(src[0])
    ref = sample["images"][0]
    assert ref["path"].startswith("data:image/jpeg;base64,") and ref["num_tokens"] == 16
    stage = MediaStage(ImageTransform(size=32, crop=32, tokens_per_image=16)).bind(recipe)
    assert stage(sample)["pixel_values"][0].shape == (3, 32, 32)
    entry = reject_entry(src[0], SampleError("too_long", "x"))  # raw shows the size, not bytes
    assert f'"<{len(jpg)} bytes>"' in entry["raw"] and entry["line"] == 1


def test_changed_file_and_mixed_kinds(tmp_path: Path) -> None:
    p = tmp_path / "t.parquet"
    pq.write_table(pa.table({"text": [f"row {i}" for i in range(10)]}), p, row_group_size=3)
    src = ParquetSource(p)
    assert src[4].data == {"text": "row 4"}
    pq.write_table(pa.table({"text": [f"new {i}" for i in range(12)]}), p, row_group_size=3)
    os.utime(p, ns=(1, 1))
    with pytest.raises(SourceChanged, match="changed after it was opened"):
        src[8]
    (tmp_path / "t.jsonl").write_text('{"text": "a"}\n')
    with pytest.raises(ConfigError, match="Parquet files .* and JSON files .* in one source"):
        open_source([str(p), str(tmp_path / "t.jsonl")])
    (tmp_path / "bad.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(Exception, match="not a readable Parquet file"):
        ParquetSource(tmp_path / "bad.parquet")


def test_a_file_rewritten_in_place_while_a_group_is_read_is_a_changed_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rewritten between the check and the read (another process copying over it), the read
    fails as pyarrow meets the new bytes: that is the file changing, not a broken file."""
    p = tmp_path / "t.parquet"
    pq.write_table(pa.table({"text": [f"row {i}" for i in range(10)]}), p, row_group_size=3)
    src = ParquetSource(p)
    assert src[0].data == {"text": "row 0"}
    reader = src._readers[0]

    def rewritten_mid_read(self: Any, g: int, *args: Any, **kwargs: Any) -> Any:
        p.write_bytes(b"PAR1" + b"\0" * 64)  # the copy lands mid-read: pyarrow's next read
        raise OSError("File too short: expected to be able to read 72263 bytes, got 0")

    monkeypatch.setattr(type(reader.file()), "read_row_group", rewritten_mid_read)
    with pytest.raises(SourceChanged, match="changed after it was opened"):
        src[7]


def test_pickles_without_tables(tmp_path: Path) -> None:
    import pickle

    p = tmp_path / "t.parquet"
    pq.write_table(pa.table({"text": ["x" * 1000] * 50}), p, row_group_size=10)
    src = ParquetSource(p)
    assert src[25].data["text"] == "x" * 1000
    blob = pickle.dumps(src)
    assert len(blob) < 4000  # no decoded row group travels to a worker
    assert pickle.loads(blob)[49].line == 50


@pytest.mark.shared_data
def test_preprocess_from_parquet_matches_json(shared_data: Path, tmp_path: Path) -> None:
    from chute import open_cache, preprocess

    alpaca_parquet(shared_data, tmp_path / "a.parquet", row_group_size=300)
    recipe = {"tokenizer": str(shared_data / QWEN), "template": "qwen3", "max_length": 256}
    cache = {"chunk_size": 400, "workers": 1}
    preprocess(
        sources=[str(tmp_path / "a.parquet")], recipe=recipe, cache=cache, out=tmp_path / "p"
    )
    json_src = str(shared_data / LF / "alpaca_en_demo.json")
    preprocess(sources=[json_src], recipe=recipe, cache=cache, out=tmp_path / "j")
    p, j = open_cache(tmp_path / "p"), open_cache(tmp_path / "j")
    assert len(p) == len(j) == 999
    assert np.array_equal(p.lengths, j.lengths)
    assert all(np.array_equal(p[i]["input_ids"], j[i]["input_ids"]) for i in (0, 500, 998))
    assert p[7]["path"].endswith("a.parquet") and p[7]["line"] == 8

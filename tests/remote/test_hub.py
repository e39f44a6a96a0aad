"""``hf://datasets/...`` through fsspec, with a local folder standing in for the Hub's protocol.

No network exists here, so the ``hf`` protocol is served by a small fsspec filesystem over a
local folder laid out as a Hub dataset repository; chute's code path (the fsspec filesystem of
the protocol, globs, ranged reads, identity without an ETag, media under the data file's own
remote folder) is the one it takes with the real ``HfFileSystem``.
"""

from __future__ import annotations

import importlib
import os
import shutil
from pathlib import Path
from typing import Any

import fsspec
import pytest
from fsspec.implementations.local import LocalFileSystem

from chute import JsonlSource, ParquetSource, Recipe, open_source
from chute.media import DynamicResolution, MediaStage

LF = "llama-factory"


class HubStandIn(LocalFileSystem):
    """``hf://datasets/org/name/path`` served from ``root/datasets/org/name/path``."""

    protocol = "hf"
    root = "/nonexistent"

    @classmethod
    def _strip_protocol(cls, path: Any) -> str:
        text = str(path)
        if text.startswith(cls.root):
            return text
        return os.path.join(cls.root, text.removeprefix("hf://"))

    def unstrip_protocol(self, name: str) -> str:
        return "hf://" + os.path.relpath(name, self.root)


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(HubStandIn, "root", str(tmp_path / "hub"))
    registry = importlib.import_module("fsspec.registry")  # the module, not fsspec.registry
    monkeypatch.setitem(registry._registry, "hf", HubStandIn)
    repo = tmp_path / "hub/datasets/llamafactory/demo"
    (repo / "data").mkdir(parents=True)
    return repo


@pytest.mark.shared_data
def test_hub_dataset_files_read_through_fsspec(hub: Path, shared_data: Path) -> None:
    shutil.copy(shared_data / LF / "mllm_example_dataset/data/train-0.parquet", hub / "data")
    shutil.copy(shared_data / LF / "c4_demo.jsonl", hub / "data")
    pq_src = open_source("hf://datasets/llamafactory/demo/data/train-*.parquet")
    assert isinstance(pq_src, ParquetSource)
    assert pq_src.paths == ["hf://datasets/llamafactory/demo/data/train-0.parquet"]
    local = ParquetSource(shared_data / LF / "mllm_example_dataset/data/train-0.parquet")
    assert [r.data for r in pq_src] == [r.data for r in local]
    assert pq_src.fingerprint()["files"][0]["edge_hash"]  # no ETag here: both ends hashed
    js = JsonlSource("hf://datasets/llamafactory/demo/data/c4_demo.jsonl")
    assert js.files[0].remote and [r.raw for r in js] == [
        r.raw for r in JsonlSource(shared_data / LF / "c4_demo.jsonl")
    ]


@pytest.mark.shared_data
def test_hub_images_under_the_data_files_own_folder(hub: Path, shared_data: Path) -> None:
    """A remote data file's default media root is its own folder: its images are fetched."""
    (hub / "data/images").mkdir()
    shutil.copy(shared_data / LF / "mllm_demo_data/1.jpg", hub / "data/images/1.jpg")
    (hub / "data/train.jsonl").write_text(
        '{"messages": [{"role": "user", "content": "<image>Who?"}, '
        '{"role": "assistant", "content": "Kane."}], "images": ["images/1.jpg"]}\n'
        '{"messages": [{"role": "user", "content": "<image>Who?"}, '
        '{"role": "assistant", "content": "Kane."}], "images": ["../../secret.jpg"]}\n'
    )
    src = open_source("hf://datasets/llamafactory/demo/data/train.jsonl")
    recipe = Recipe(
        tokenizer=str(shared_data / "tokenizers/qwen3"), template="qwen3", image_tokens="qwen2-vl"
    )
    sample = recipe(src[0])
    ref = sample["images"][0]
    assert ref["path"] == "hf://datasets/llamafactory/demo/data/images/1.jpg"
    assert ref["size"] == [300, 168]  # the header of the fetched copy
    with pytest.raises(Exception, match="unsafe_path"):
        recipe(src[1])
    stage = MediaStage(DynamicResolution()).bind(recipe)
    assert list(stage(sample)["image_grid_thw"][0]) == ref["grid_thw"]


def test_memory_filesystem_is_another_remote(tmp_path: Path) -> None:
    fs = fsspec.filesystem("memory")
    fs.pipe("/chute-test/a.jsonl", b'{"n": 1}\n{"n": 2}\n')
    try:
        src = JsonlSource("memory://chute-test/a.jsonl")
        assert [r.data["n"] for r in src] == [1, 2] and src.files[0].remote
    finally:
        fs.rm("/chute-test", recursive=True)

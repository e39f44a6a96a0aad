"""Engines without Ray: failures named by chunk and record, options, pixels fanned out.

The Ray engine itself runs in ``test_cache_ray.py`` (a local 2-CPU Ray).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from cache_helpers import (
    FailsAt,
    register_slow_stage,
    tree_digest,
    write_alpaca,
    write_image_records,
    write_tokenizer,
)
from chute import ChunkFailed, ConfigError, JsonlSource, SourceError, preprocess
from chute.cache import PreprocessConfig, RecipeConfig
from chute.cache.engines import LocalEngine, RayEngine, chunk_failure, make_engine
from chute.cache.engines.ray_engine import init_arguments
from chute.cache.layout import Layout
from chute.cache.writer import ChunkJob
from chute.cli import app


@pytest.fixture
def data(tmp_path: Path) -> dict[str, Any]:
    tok = write_tokenizer(tmp_path / "tok")
    path = write_alpaca(tmp_path / "d.jsonl", 400, broken=(17,))
    return {
        "path": path,
        "config": {
            "sources": [str(path)],
            "recipe": {"tokenizer": str(tok), "template": "chatml", "max_length": 128},
            "cache": {"chunk_size": 100},
        },
    }


def _job(data: dict[str, Any], root: Path, fails_at: int) -> ChunkJob:
    (root / "chunks").mkdir(parents=True)
    recipe = RecipeConfig(**data["config"]["recipe"]).build()
    source = JsonlSource(data["path"])
    return ChunkJob(source, FailsAt(recipe, fails_at), str(root), 100, "uint16", [0])


@pytest.mark.parametrize("workers", [1, 2])
def test_a_failed_chunk_names_itself_and_the_record_that_stopped_it(
    data: dict[str, Any], tmp_path: Path, workers: int
) -> None:
    job = _job(data, tmp_path / "c", fails_at=250)
    where = f"{data['path']}:251"
    # a job-level error keeps its type; its message now says where it was met
    with pytest.raises(SourceError, match=rf"^chunk 2 \(records 200-299\) failed at {where}: "):
        LocalEngine(workers).run_chunks(job, [0, 1, 2, 3], on_done=lambda k, r: None)
    committed = Layout(job.root).recorded()
    assert 0 in committed and 2 not in committed  # what was built stays committed
    error = chunk_failure(job, 2, SourceError("gone"), records_done=0)
    assert type(error) is SourceError and (error.chunk, error.record) == (2, where)
    assert "record 250 cannot be read" not in str(error) and "run the same command again" in str(
        error
    )
    crash = chunk_failure(job, 3, OSError("disk full"), records_done=100)  # past its records
    assert isinstance(crash, ChunkFailed) and (crash.chunk, crash.record) == (3, None)
    assert str(crash).startswith("chunk 3 (records 300-399) failed: OSError: disk full")


def test_a_failure_past_the_records_names_the_chunk_only(
    data: dict[str, Any], tmp_path: Path
) -> None:
    register_slow_stage()
    (tmp_path / "m").mkdir()
    config = {**data["config"], "stages": {"slow": {"markers": str(tmp_path / "m"), "sleep": 0}}}
    match = r"^chunk 1 \(records 100-199\) failed: RuntimeError: the slow stage fails in chunk 1"
    with pytest.raises(ChunkFailed, match=match):
        preprocess(config, out=tmp_path / "c", overrides=["stages.slow.fail_chunk=1"], workers=1)
    result = CliRunner().invoke(
        app, ["preprocess", str(_yaml(tmp_path, config)), "--out", str(tmp_path / "d"), "-q"]
    )
    assert result.exit_code == 0  # the same build without the failing chunk


def _yaml(folder: Path, config: dict[str, Any]) -> Path:
    path = folder / "cfg.yaml"
    path.write_text(PreprocessConfig.from_dict(config).to_yaml())
    return path


def test_engine_options_are_checked(data: dict[str, Any], tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"cache.engine: expected one of local, ray, got 'spark'"):
        PreprocessConfig.from_dict(data["config"], ["cache.engine=spark"])
    with pytest.raises(
        ConfigError, match=r"cache.address: 'auto' is for the ray engine; add --engine ray"
    ):
        preprocess(data["config"], out=tmp_path / "c", address="auto")
    config = _yaml(tmp_path, data["config"])
    result = CliRunner().invoke(
        app, ["preprocess", str(config), "--out", str(tmp_path / "c"), "--address", "auto"]
    )
    assert result.exit_code == 2 and "cache.address: 'auto' is for the ray engine" in result.stderr
    result = CliRunner().invoke(app, ["preprocess", str(config), "--engine", "spark"])
    assert result.exit_code == 2 and "--engine: expected one of local, ray, got 'spark'" in (
        result.stderr
    )
    cfg = PreprocessConfig.from_dict(data["config"], ["cache.engine=ray", "cache.address=auto"])
    assert "engine" not in cfg.to_dict(shaping_only=True)["cache"]  # not part of the cache
    engine = make_engine(cfg.cache)
    assert isinstance(engine, RayEngine) and engine.address == "auto"


def test_without_ray_the_error_names_the_extra(
    data: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # as if Ray were not installed
    with pytest.raises(ImportError, match=r"needs Ray: pip install 'chute\[ray\]'"):
        preprocess(data["config"], out=tmp_path / "c", engine="ray")


def test_ray_address_conventions(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert init_arguments(None, 3) == {"address": "local", "num_cpus": 3}  # never a stray Ray
    assert init_arguments("auto", 3) == {"address": "auto"}
    monkeypatch.setenv("RAY_ADDRESS", "head:6379")  # as `ray job submit` sets it
    assert init_arguments(None, 3) == {"address": None}  # ray.init reads RAY_ADDRESS


class CountingEngine(LocalEngine):
    """The local engine, recording the finishing tasks it ran."""

    def __init__(self, workers: int):
        super().__init__(workers)
        self.mapped: list[tuple[str, int, int | None]] = []

    def map(self, fn: Any, items: Any, *, limit: int | None = None) -> list[Any]:
        self.mapped.append((fn.__name__, len(items), limit))
        return super().map(fn, items, limit=limit)


def test_pixels_decode_on_the_engine_byte_identical_to_one_process(tmp_path: Path) -> None:
    data = write_image_records(tmp_path, 1100)  # three decoding tasks of 512 images
    config = {
        "sources": [str(data)],
        "recipe": {"tokenizer": str(write_tokenizer(tmp_path / "tok")), "template": "chatml"},
        "cache": {"chunk_size": 400},
    }
    config["recipe"]["image_tokens"] = 16
    one = preprocess(config, out=tmp_path / "one", workers=1, pixels={"size": 16})
    engine = CountingEngine(workers=2)
    two = preprocess(config, out=tmp_path / "two", engine=engine, pixels={"size": 16})
    assert engine.mapped == [("_write_chunk_task", 3, None)]  # a process pool of 2
    assert two.manifest["stage_outputs"]["pixels"]["images"] == 1100
    assert (one.engine, two.engine) == ("local, 1 process", "local, 2 processes")
    assert tree_digest(tmp_path / "two") == tree_digest(tmp_path / "one")
    assert len(list((tmp_path / "two" / "pixels").glob("chunk-*.bin"))) == 3

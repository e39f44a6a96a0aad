"""The default chunk size: a function of the record count alone, and kept by a resumed build."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pytest
import yaml

from cache_helpers import config, write_alpaca, write_tokenizer
from chute import FingerprintMismatch, open_cache, preprocess
from chute.cache.chunking import (
    CHUNK_MULTIPLE,
    MAX_CHUNK,
    MIN_CHUNK,
    TARGET_CHUNKS,
    chunk_size_for,
    default_chunk_size,
)

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("records", [1, 1999, 2000, 127_999, 128_000, 200_000, 639_999])
def test_small_sources_get_enough_chunks_for_16_workers(records: int) -> None:
    size = default_chunk_size(records)
    chunks = -(-records // size)
    assert MIN_CHUNK <= size <= MAX_CHUNK
    if records >= MIN_CHUNK * TARGET_CHUNKS:
        assert chunks == TARGET_CHUNKS  # 4 chunks for each of 16 workers
    else:
        assert size == MIN_CHUNK  # the floor: a chunk's fixed work stays a small share


@pytest.mark.parametrize(
    "records", [640_000, 640_001, 1_000_000, 1_000_001, 2_570_000, 9_999_999, 10**7, 99_800_000]
)
def test_large_sources_get_whole_waves_of_chunks(records: int) -> None:
    size = default_chunk_size(records)
    chunks = -(-records // size)
    assert MIN_CHUNK <= size <= MAX_CHUNK
    assert chunks % CHUNK_MULTIPLE == 0  # 16, 8, 4 or 2 workers: no part-empty last wave
    # as large as the multiple allows: the next multiple of 16 would need smaller chunks
    assert -(-records // (chunks - CHUNK_MULTIPLE)) > MAX_CHUNK or chunks == TARGET_CHUNKS


def test_whole_waves_hold_over_the_documented_range() -> None:
    # the module docstring's claim, sampled from 128,000 to 99.8M records
    rng = np.random.default_rng(0)
    for records in rng.integers(128_000, 99_800_001, 20_000).tolist():
        size = default_chunk_size(records)
        assert MIN_CHUNK <= size <= MAX_CHUNK
        assert -(-records // size) % CHUNK_MULTIPLE == 0, records


@pytest.mark.parametrize(
    ("records", "size"), [(640_000, 10_000), (1_000_000, 8_929), (10**7, 9_921), (10**8, 10_000)]
)
def test_large_default_sizes(records: int, size: int) -> None:
    assert default_chunk_size(records) == size


def test_given_size_wins_and_a_build_in_out_is_kept() -> None:
    existing = {"records": 50_000, "chunk_size": 10_000}
    assert chunk_size_for(50_000, None, None) == 2_000
    assert chunk_size_for(50_000, None, existing) == 10_000
    assert chunk_size_for(50_000, 700, existing) == 700
    # another source's build is not this one's: the default (the claim then refuses it)
    assert chunk_size_for(60_000, None, existing) == 2_000
    assert chunk_size_for(50_000, None, {"records": 50_000, "chunk_size": "big"}) == 2_000


@pytest.fixture
def unset(tmp_path: Path) -> dict:
    data = write_alpaca(tmp_path / "train.jsonl", 4_500)
    cfg = config(data, write_tokenizer(tmp_path / "tok"), max_length=512)
    del cfg["cache"]["chunk_size"]
    return cfg


def test_default_cuts_the_cache_and_the_kept_config_says_so(tmp_path: Path, unset: dict) -> None:
    report = preprocess(unset, out=tmp_path / "c")
    assert report.chunks == 3 and report.built == 3  # 2,000 + 2,000 + 500
    assert open_cache(tmp_path / "c").manifest["chunk_size"] == 2_000
    kept = yaml.safe_load((tmp_path / "c/config.yaml").read_text())
    assert kept["cache"]["chunk_size"] == 2_000
    # the kept config rebuilds the same cache: nothing to do
    again = preprocess(tmp_path / "c/config.yaml", out=tmp_path / "c")
    assert again.built == 0 and again.reused == 3


def test_a_build_started_with_another_size_resumes(tmp_path: Path, unset: dict) -> None:
    explicit = {**unset, "cache": {**unset["cache"], "chunk_size": 1_000}}
    first = preprocess(explicit, out=tmp_path / "c")
    assert first.chunks == 5
    (tmp_path / "c/manifest.json").unlink()  # as if stopped before finishing
    resumed = preprocess(unset, out=tmp_path / "c")
    assert resumed.chunks == 5 and resumed.reused == 5 and resumed.built == 0
    plan = orjson.loads((tmp_path / "c/plan.json").read_bytes())
    assert plan["chunk_size"] == 1_000
    # --overwrite starts afresh: the default again
    fresh = preprocess(unset, out=tmp_path / "c", overwrite=True)
    assert fresh.chunks == 3


def test_an_explicit_other_size_is_still_refused(tmp_path: Path, unset: dict) -> None:
    preprocess(unset, out=tmp_path / "c")
    other = {**unset, "cache": {**unset["cache"], "chunk_size": 1_500}}
    with pytest.raises(FingerprintMismatch, match="chunk_size"):
        preprocess(other, out=tmp_path / "c")

"""A preprocess that fails on its configuration never blocks the corrected run.

A configuration the first records already show to be unusable fails before the output directory
exists; one first met later (past the probe) commits no chunk and releases its plan, so the fixed
config then claims the directory without ``--overwrite``. A directory holding committed chunks of
another config is still refused, and so is the plan of a run killed before its first commit
(another build may be running there: ``--overwrite`` once none is).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

from cache_helpers import config, write_alpaca, write_tokenizer
from chute import ConfigError, FingerprintMismatch, open_cache, preprocess
from chute.cache.layout import Layout

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def tok(tmp_path: Path) -> Path:
    return write_tokenizer(tmp_path / "tok")


def write_late_image(path: Path, text_records: int) -> Path:
    """``text_records`` alpaca records, then one with an image (a 32x32 PNG beside the data)."""
    write_alpaca(path, text_records)
    Image.new("RGB", (32, 32), "red").save(path.parent / "cat.png")
    record = {
        "messages": [
            {"role": "user", "content": "<image>What is it?"},
            {"role": "assistant", "content": "A cat."},
        ],
        "images": ["cat.png"],
    }
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")
    return path


def test_a_config_the_first_records_refuse_fails_before_the_directory_exists(
    tmp_path: Path, tok: Path
) -> None:
    data = write_late_image(tmp_path / "d.jsonl", 0)  # the image is the first record
    out = tmp_path / "cache"
    with pytest.raises(ConfigError, match=r"recipe\.image_tokens: the data has images") as info:
        preprocess(config(data, tok, image_tokens=None), out=out)
    assert info.value.param == "image_tokens"
    assert "recipe.image_tokens=576" in str(info.value)  # the override that fixes it
    assert not out.exists()
    preprocess(config(data, tok), out=out)  # the default (auto) counts the image
    assert len(open_cache(out)) == 1


def test_a_run_that_failed_mid_way_on_config_does_not_block_its_fix(
    tmp_path: Path, tok: Path
) -> None:
    data = write_late_image(tmp_path / "d.jsonl", 100)  # past the probe of the first records
    out = tmp_path / "cache"
    failing = config(data, tok, image_tokens=None)
    failing["cache"]["chunk_size"] = 1000  # one chunk: it fails before any commit
    with pytest.raises(ConfigError, match="image_tokens"):
        preprocess(failing, out=out)
    layout = Layout(out)
    assert not layout.plan.exists() and not layout.recorded()  # released, nothing committed
    report = preprocess(config(data, tok), out=out)  # no --overwrite needed
    assert report.finalized and len(open_cache(out)) == 101


def test_the_plan_of_a_run_killed_before_its_first_commit_refuses_another_config(
    tmp_path: Path, tok: Path
) -> None:
    data = write_alpaca(tmp_path / "d.jsonl", 100)
    preprocess(config(data, tok, max_length=256), out=tmp_path / "other")
    out = tmp_path / "cache"
    out.mkdir()  # what a SIGKILL right after the claim leaves: the plan alone
    (out / "plan.json").write_bytes((tmp_path / "other" / "plan.json").read_bytes())
    with pytest.raises(FingerprintMismatch, match="max_length differs") as info:
        preprocess(config(data, tok, max_length=512), out=out)
    assert "No chunk of it is committed yet: another build may be running" in str(info.value)
    assert "--overwrite" in str(info.value)
    report = preprocess(config(data, tok, max_length=512), out=out, overwrite=True)
    assert report.finalized and open_cache(out).max_length == 512


def test_a_directory_with_committed_chunks_of_another_config_is_still_refused(
    tmp_path: Path, tok: Path
) -> None:
    data = write_alpaca(tmp_path / "d.jsonl", 100)
    out = tmp_path / "cache"
    preprocess(config(data, tok, max_length=256), out=out)
    with pytest.raises(FingerprintMismatch, match="max_length differs"):
        preprocess(config(data, tok, max_length=512), out=out)
    assert open_cache(out).max_length == 256

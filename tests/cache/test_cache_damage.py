"""A finished cache damaged on disk: every kind is named, and the fix each message gives works.

A disk that filled while a copy ran, a copy stopped midway, a bit flipped in storage: each is
found (at open where its size shows it, by ``chute validate DIR`` where only the bytes do),
and following the message's own advice restores the cache byte for byte.
"""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cache_helpers import config, tree_digest, write_alpaca, write_tokenizer
from chute import CacheError, open_cache, preprocess
from chute.cache.layout import Layout
from chute.cache.verify import verify_cache
from chute.cli import app

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("damage")
    tok = write_tokenizer(root / "tok")
    data = write_alpaca(root / "d.jsonl", 300, broken=(5,))
    cfg = config(data, tok)
    preprocess(cfg, out=root / "reference")
    return {"root": root, "config": cfg, "digest": tree_digest(root / "reference")}


def _copy(built: dict, name: str) -> Path:
    out = built["root"] / name
    shutil.copytree(built["root"] / "reference", out)
    return out


def _flip(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))


def _follow(advice: str) -> None:
    """Do what a problem's message says: ``delete FILE and run COMMAND: ...``."""
    found = re.search(
        r"delete (?:its commit record )?(\S+) and run (chute preprocess .+?): it", advice
    )
    assert found, advice
    Path(found.group(1)).unlink()
    result = CliRunner().invoke(app, [*shlex.split(found.group(2))[1:], "--quiet"])
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("name", ["lengths.npy", "image_tokens.npy"])
def test_a_per_sample_array_cut_short_is_named_at_open_and_a_rerun_writes_it(
    built: dict, name: str
) -> None:
    out = _copy(built, f"short-{name}")
    array = out / name
    array.write_bytes(array.read_bytes()[:-40])
    with pytest.raises(CacheError, match=rf"damaged: {name} is \d+ bytes, 299 samples make \d+"):
        open_cache(out)
    report = preprocess(built["config"], out=out)
    assert report.built == 0 and report.finalized  # no chunk built again: written from them
    assert tree_digest(out) == built["digest"]


def test_an_unreadable_manifest_is_damage_and_a_rerun_writes_it(built: dict) -> None:
    out = _copy(built, "manifest")
    (out / "manifest.json").write_bytes(b'{"format": "chute-cache", "chun')
    with pytest.raises(CacheError, match=r"damaged: .*manifest.json cannot be read \(5 of 5"):
        open_cache(out)
    assert preprocess(built["config"], out=out).finalized
    assert tree_digest(out) == built["digest"]


def test_a_chunk_changed_in_place_is_found_by_validate_and_its_advice_rebuilds_it(
    built: dict,
) -> None:
    """Same size, other bytes: opening cannot see it (sizes only); the deep check can."""
    out = _copy(built, "flipped")
    _flip(Layout(out).chunk(2), 300)
    open_cache(out)  # sizes agree: not found here, by design (reading every byte is validate's)
    assert preprocess(built["config"], out=out).built == 0  # nor by a rerun: it trusts sizes
    check = verify_cache(out)  # the hash, and here the file no longer parses either
    assert all("chunks/000002.arrow" in p for p in check.problems), check.problems
    assert re.search(r"000002.arrow: its content changed since it was written", check.problems[0])
    _follow(check.problems[0])
    assert verify_cache(out).ok
    assert tree_digest(out) == built["digest"]


def test_a_length_changed_in_place_is_found_by_validate_and_its_advice_writes_it(
    built: dict,
) -> None:
    out = _copy(built, "length-flipped")
    _flip(out / "lengths.npy", (out / "lengths.npy").stat().st_size - 4 * 10)
    check = verify_cache(out)
    assert len(check.problems) == 1, check.problems
    assert re.search(r"chunk \d: its length column differs from lengths.npy", check.problems[0])
    _follow(check.problems[0])
    assert verify_cache(out).ok
    assert tree_digest(out) == built["digest"]


def test_an_array_header_numpy_cannot_read_is_a_cache_error_and_a_problem(built: dict) -> None:
    out = _copy(built, "header")
    _flip(out / "lengths.npy", 12)  # inside the header's dict: same size, unparsable
    cache = open_cache(out)
    with pytest.raises(CacheError, match=r"damaged: lengths.npy cannot be read .*; delete "):
        _ = cache.lengths
    check = verify_cache(out)  # reported, where it raised numpy's error from inside
    assert any("lengths.npy cannot be read" in p for p in check.problems), check.problems
    result = CliRunner().invoke(app, ["validate", str(out)])
    assert result.exit_code == 1 and "lengths.npy cannot be read" in result.output
    _follow(next(p for p in check.problems if "cannot be read" in p))
    assert tree_digest(out) == built["digest"]


@pytest.mark.parametrize("damage", ["cut", "gone"])
def test_rejects_jsonl_cut_or_gone_is_found_by_validate_and_its_advice_writes_it(
    built: dict, damage: str
) -> None:
    """It is derived at finalize, and nothing checked it: a cut copy passed validate and
    ``--rejects`` copied what was left."""
    out = _copy(built, f"rejects-{damage}")
    rejects = out / "rejects.jsonl"
    assert rejects.read_bytes().count(b"\n") == 1  # the one broken line of the data
    if damage == "cut":
        rejects.write_bytes(b"")
    else:
        rejects.unlink()
    (problem,) = verify_cache(out).problems
    if damage == "cut":
        assert "holds 0 of the 1 rejects counted" in problem
        _follow(problem)
    else:
        run = re.search(r"is missing; run (chute preprocess .+?): it", problem)
        assert run, problem
        result = CliRunner().invoke(app, [*shlex.split(run.group(1))[1:], "--quiet"])
        assert result.exit_code == 0, result.output
    assert verify_cache(out).ok
    assert tree_digest(out) == built["digest"]

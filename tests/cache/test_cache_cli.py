"""The CLI in-process: chute preprocess, and chute inspect / validate given a cache directory."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pytest
import yaml
from typer.testing import CliRunner

from cache_helpers import write_alpaca, write_tokenizer
from chute import open_cache
from chute.cache.layout import Layout
from chute.cli import app

pytestmark = pytest.mark.timeout(120)
runner = CliRunner()


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("cli")
    tok = write_tokenizer(root / "tok")
    data = write_alpaca(root / "d.jsonl", 400, broken=(3, 200))
    cfg = root / "cfg.yaml"
    config = {
        "sources": [str(data)],
        "recipe": {"tokenizer": str(tok), "template": "chatml", "max_length": 512},
        "cache": {"chunk_size": 100, "workers": 1},
    }
    cfg.write_text(yaml.safe_dump(config))
    out = root / "c"
    result = runner.invoke(
        app, ["preprocess", str(cfg), "--out", str(out), "recipe.max_length=128", "--json"]
    )
    assert result.exit_code == 0, result.output
    return {"root": root, "cfg": cfg, "out": out, "tok": tok, "report": orjson.loads(result.stdout)}


def test_preprocess_json_report_and_overrides(built: dict) -> None:
    report = built["report"]
    assert report["records"] == 400 and report["samples"] == 398 and report["rejected"] == 2
    assert report["by_reason"] == {"bad_json": 1, "missing_field": 1}
    assert report["chunks"] == 4 and report["chunks_built"] == 4 and report["finalized"]
    assert report["bytes_per_token"] < 3.5  # uint16 ids (418 in the vocabulary) + ~55 B/sample
    assert open_cache(built["out"]).manifest["fingerprint"]["recipe"]["max_length"] == 128
    stored = yaml.safe_load((built["out"] / "config.yaml").read_text())
    assert stored["recipe"]["max_length"] == 128 and "workers" not in stored["cache"]
    again = runner.invoke(
        app, ["preprocess", str(built["out"] / "config.yaml"), "-o", str(built["out"])]
    )
    assert again.exit_code == 0, again.output
    assert "reused 4 already committed" in again.output and "2 rejected" in again.output


def test_preprocess_errors_exit_2_naming_the_key(built: dict, tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["preprocess", str(built["cfg"]), "-o", str(tmp_path / "x"), "recipe.max_lenght=9"]
    )
    assert result.exit_code == 2
    assert "recipe.max_lenght: unknown key (did you mean max_length?)" in result.output
    result = runner.invoke(app, ["preprocess", str(built["cfg"]), "-o", str(built["out"])])
    assert result.exit_code == 2
    assert "recipe.max_length differs" in result.output and "--overwrite" in result.output
    result = runner.invoke(app, ["preprocess", str(tmp_path / "nope.yaml"), "-o", str(tmp_path)])
    assert result.exit_code == 2 and "no such file" in result.output


def test_inspect_a_cached_sample(built: dict) -> None:
    result = runner.invoke(app, ["inspect", str(built["out"]), "--index", "5", "--json"])
    assert result.exit_code == 0, result.output
    out = orjson.loads(result.stdout)
    sample = open_cache(built["out"])[5]
    assert out["input_ids"] == sample["input_ids"].tolist()
    assert out["labels"] == sample["labels"].tolist()
    assert (out["path"], out["line"], out["index"]) == (sample["path"], 7, 6)  # line 4 broken
    assert "Answer 6:" in out["trained_text"] and "Question 6:" not in out["trained_text"]
    result = runner.invoke(app, ["inspect", str(built["out"]), "-i", "-1", "--no-color"])
    assert result.exit_code == 0 and "sample 397 of 398" in result.output
    assert "[[Answer 399:" in result.output
    result = runner.invoke(app, ["inspect", str(built["out"]), "--max-length", "9"])
    assert result.exit_code == 2 and "do not apply" in result.output


def test_validate_a_cache(built: dict, tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["validate", str(built["out"]), "--json", "--rejects", str(tmp_path / "r.jsonl")]
    )
    assert result.exit_code == 0, result.output
    out = orjson.loads(result.stdout)
    assert (out["records"], out["valid"], out["rejected"]) == (400, 398, 2)
    assert out["cache"]["ok"] and out["cache"]["chunks"] == 4
    assert (out["target"], out["ok"]) == ("cache", True)
    assert len((tmp_path / "r.jsonl").read_text().splitlines()) == 2
    assert runner.invoke(app, ["validate", str(built["out"]), "--strict"]).exit_code == 1
    tok = str(built["tok"])
    result = runner.invoke(
        app, ["validate", str(built["out"]), "--tokenizer", tok, "--template", "chatml", "--json"]
    )
    assert result.exit_code == 1 and orjson.loads(result.stdout)["ok"] is False
    assert (
        "max_length differs: cache 128, recipe None"
        in orjson.loads(result.stdout)["cache"]["problems"][0]
    )


def test_stats_of_a_cache_counts_the_records_its_build_read_and_rejected(built: dict) -> None:
    args = ["stats", str(built["out"]), "--max-length", "128", "--batch-size", "4", "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    out = orjson.loads(result.stdout)
    assert (out["records"], out["samples"]) == (400, 398)  # the build's records, not its rows
    assert sum(out["rejected"].values()) == 2


def test_stats_and_inspect_of_a_stale_cache_warn(tmp_path: Path, built: dict) -> None:
    from chute.cache import preprocess

    data = write_alpaca(tmp_path / "d.jsonl", 20)
    recipe = {"tokenizer": str(built["tok"]), "template": "chatml"}
    preprocess(sources=[str(data)], recipe=recipe, cache={"workers": 1}, out=tmp_path / "c")
    stats = ["stats", str(tmp_path / "c"), "--max-length", "128", "--batch-size", "4", "-q"]
    inspect = ["inspect", str(tmp_path / "c"), "--index", "0"]
    for args in (stats, inspect):
        assert "changed since" not in runner.invoke(app, args).output
    with open(data, "a") as f:
        f.write('{"instruction": "one more", "output": "record"}\n')
    for args in (stats, inspect):
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output  # the cache as built, with a warning
        assert "built from files that changed since (" in result.output
        assert f"chute validate {tmp_path / 'c'}" in result.output


def test_validate_a_cache_names_its_rejects_file_only_when_records_were_rejected(
    built: dict, tmp_path: Path
) -> None:
    rejects = tmp_path / "r.jsonl"
    result = runner.invoke(app, ["validate", str(built["out"]), "--rejects", str(rejects)])
    assert result.exit_code == 0, result.output
    assert f"rejected records written to {rejects}" in result.output
    cfg = tmp_path / "clean.yaml"
    config = {
        "sources": [str(write_alpaca(tmp_path / "clean.jsonl", 20))],
        "recipe": {"tokenizer": str(built["tok"]), "template": "chatml"},
        "cache": {"chunk_size": 100, "workers": 1},
    }
    cfg.write_text(yaml.safe_dump(config))
    out = tmp_path / "clean"
    assert runner.invoke(app, ["preprocess", str(cfg), "--out", str(out), "--json"]).exit_code == 0
    result = runner.invoke(app, ["validate", str(out), "--rejects", str(rejects)])
    assert result.exit_code == 0, result.output
    assert f"no record was rejected ({rejects} is empty)" in result.output
    assert "rejected records written to" not in result.output


def test_validate_finds_a_flipped_byte(built: dict, tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(built["out"], copy)
    chunk = Layout(copy).chunk(2)
    blob = bytearray(chunk.read_bytes())
    blob[-200] ^= 0xFF
    chunk.write_bytes(bytes(blob))
    assert len(open_cache(copy)) == 398  # same size: opening (cheap) does not read every byte
    result = runner.invoke(app, ["validate", str(copy), "--json"])
    assert result.exit_code == 1
    problems = orjson.loads(result.stdout)["cache"]["problems"]
    assert len(problems) == 1 and "000002.arrow: its content changed" in problems[0]
    assert np.array_equal(open_cache(built["out"]).lengths, open_cache(copy).lengths)


def test_inspect_of_a_cache_as_json_has_a_data_files_fields(tmp_path: Path, built: dict) -> None:
    from chute.cache import preprocess

    data = write_alpaca(tmp_path / "d.jsonl", 5)
    recipe = {"tokenizer": str(built["tok"]), "template": "chatml"}
    preprocess(sources=[str(data)], recipe=recipe, cache={"workers": 1}, out=tmp_path / "c")
    args = ["--index", "1", "--json"]
    of_file = runner.invoke(app, ["inspect", str(data), "--tokenizer", str(built["tok"]),
                                  "--template", "chatml", *args])  # fmt: skip
    of_cache = runner.invoke(app, ["inspect", str(tmp_path / "c"), *args])
    assert of_file.exit_code == of_cache.exit_code == 0, of_cache.output
    file_keys, cache_keys = set(orjson.loads(of_file.stdout)), set(orjson.loads(of_cache.stdout))
    assert file_keys <= cache_keys and cache_keys - file_keys == {"cache", "sample"}
    assert orjson.loads(of_cache.stdout)["input_ids"] == orjson.loads(of_file.stdout)["input_ids"]

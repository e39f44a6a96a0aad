"""chute bench in-process, on tiny generated data: the table, --json, and its errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from chute.cli import app
from chute.cli.bench_cmd import parse_workers
from chute.errors import ConfigError
from recipe_helpers import tiny_tokenizer

runner = CliRunner()


@pytest.fixture
def tok(tmp_path: Path) -> Path:
    path = tmp_path / "tokenizer.json"
    path.write_text(tiny_tokenizer().rust.to_str())
    return path


@pytest.fixture
def data(tmp_path: Path) -> Path:
    rows = []
    for i in range(60):
        rows.append(
            {"instruction": f"Question {i}: " + "how are you? " * (i % 7), "output": "Fine."}
        )
        if i % 10 == 3:
            rows[-1] = {"instruction": "no answer"}  # rejected: missing output
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_bench_json_measures_each_worker_count(data: Path, tok: Path) -> None:
    args = [
        "bench",
        str(data),
        "--tokenizer",
        str(tok),
        "--template",
        "chatml",
        "--batch-size",
        "4",
        "--workers",
        "0,1",
        "--steps",
        "20",
        "--step-ms",
        "1",
        "--json",
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["samples"] == 60 and out["batches_per_epoch"] == 15
    assert [r["workers"] for r in out["runs"]] == [0, 1]
    for r in out["runs"]:
        # 15 batches in the epoch (fewer than --steps): every valid sample once, 6 rejected
        assert r["batches"] == 15 and r["samples"] == 54 and r["rejected"] == 6
        assert 0 < r["padding_efficiency"] <= 1 and r["starvation"] is not None
        assert r["tokens_per_s"] > 0 and r["padded_tokens_per_s"] >= r["tokens_per_s"]
    assert out["profile"]["samples"] == 60 and out["profile"]["rejected"] == 6
    assert {a["rule"] for a in out["advice"]} >= {"step_time"}
    assert out["recipe"].startswith("Recipe(")


def test_bench_table_and_advice(data: Path, tok: Path) -> None:
    args = ["bench", str(data), "--tokenizer", str(tok), "--template", "chatml", "-b", "8"]
    result = runner.invoke(app, [*args, "--workers", "0", "--steps", "3", "--quiet"])
    assert result.exit_code == 0, result.output
    assert "samples/s" in result.stdout and "padding eff" in result.stdout
    assert "where a sample's time goes" in result.stdout
    assert "advice:" in result.stdout and "--step-ms" in result.stdout


def test_bench_pretokenized_records_need_no_tokenizer(tmp_path: Path) -> None:
    path = tmp_path / "tok.jsonl"
    path.write_text("".join(json.dumps({"input_ids": [1] * (1 + i % 3)}) + "\n" for i in range(40)))
    result = runner.invoke(app, ["bench", str(path), "-b", "4", "--workers", "0", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["recipe"] is None and out["runs"][0]["samples"] == 40
    assert "preprocess" not in {a["rule"] for a in out["advice"]}


def test_bench_of_records_without_a_tokenizer_stops_and_says_to_pass_one(data: Path) -> None:
    result = runner.invoke(app, ["bench", str(data), "-b", "4", "--workers", "0", "--steps", "20"])
    assert result.exit_code == 2, result.output
    # at once, before a batch is built (it stopped after an epoch of placeholder batches)
    assert "error: recipe: the records are not tokenized: pass --tokenizer to build input_ids" in (
        result.output
    )
    assert "(the records hold 'instruction', 'output', no input_ids)" in result.output


def test_bench_errors_are_one_line(data: Path, tok: Path) -> None:
    result = runner.invoke(app, ["bench", str(data), "-b", "4", "--template", "chatml"])
    assert result.exit_code == 2 and "--template need --tokenizer" in result.output
    result = runner.invoke(app, ["bench", str(data), "-b", "4", "--workers", "one"])
    assert result.exit_code == 2 and "--workers: expected worker counts" in result.output
    result = runner.invoke(app, ["bench", str(data), "-b", "0"])
    assert result.exit_code == 2 and "batch_size must be an int >= 1, got 0" in result.output


def test_parse_workers() -> None:
    assert parse_workers("0,1,2") == (0, 1, 2)
    assert parse_workers("0-2,4") == (0, 1, 2, 4)
    with pytest.raises(ConfigError, match="got 'x'"):
        parse_workers("x")


@pytest.fixture
def images_data(tmp_path: Path) -> Path:
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for k in range(3):
        pixels = rng.integers(0, 256, size=(120 + 40 * k, 160, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(tmp_path / f"img{k}.png")
    rows = [
        {
            "messages": [
                {"role": "user", "content": "<image>What is it?"},
                {"role": "assistant", "content": "Noise."},
            ],
            "images": [f"img{i % 3}.png"],
        }
        for i in range(24)
    ]
    path = tmp_path / "mm.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_bench_decodes_images_when_the_records_have_them(images_data: Path, tok: Path) -> None:
    from chute.media import DynamicResolution, build_pixel_store

    base = ["bench", str(images_data), "--tokenizer", str(tok), "--template", "chatml", "-b", "4"]
    base += ["--workers", "0", "--steps", "3", "--json"]
    result = runner.invoke(app, base)
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert "DynamicResolution" in out["media"] and "store=None" in out["media"]
    assert out["runs"][0]["samples"] == 12 and out["runs"][0]["rejected"] == 0
    assert out["profile"]["seconds"]["media"] > 0

    off = json.loads(runner.invoke(app, [*base, "--media", "off"]).stdout)
    assert off["media"] is None and off["profile"]["seconds"]["media"] == 0

    store = images_data.parent / "store"
    paths = [str(images_data.parent / f"img{k}.png") for k in range(3)]
    build_pixel_store(paths, DynamicResolution(), store, workers=1)
    stored = json.loads(runner.invoke(app, [*base, "--pixel-store", str(store)]).stdout)
    assert "PixelStore" in stored["media"]
    assert "predecode_media" not in {a["rule"] for a in stored["advice"]}


def test_bench_media_options_need_a_recipe_and_images(data: Path, tok: Path) -> None:
    result = runner.invoke(app, ["bench", str(data), "-b", "4", "--media", "on"])
    assert result.exit_code == 2 and "need --tokenizer" in result.output
    args = ["bench", str(data), "--tokenizer", str(tok), "--template", "chatml", "-b", "4"]
    result = runner.invoke(app, [*args, "--pixel-store", str(data.parent)])
    assert result.exit_code == 2 and "the first records have no images" in result.output
    result = runner.invoke(app, [*args, "--media", "maybe"])
    assert result.exit_code == 2 and "--media must be auto, on or off, got 'maybe'" in result.output


def test_bench_packed_plan_pads_less_and_reports_the_excluded(data: Path, tok: Path) -> None:
    args = ["bench", str(data), "--tokenizer", str(tok), "--template", "chatml", "--json"]
    args += ["--workers", "0", "--steps", "50", "--max-length", "128"]
    random = json.loads(runner.invoke(app, [*args, "-b", "4"]).stdout)
    result = runner.invoke(app, [*args, "-b", "2", "--plan", "packed"])
    assert result.exit_code == 0, result.output
    packed = json.loads(result.stdout)
    run = packed["runs"][0]
    # the 6 bad records are excluded by the lengths pass; the other 54 arrive, each once
    assert sum(packed["excluded"].values()) == 6 and run["samples"] == 54
    assert run["rejected"] == 0 and packed["setup_s"] > 0
    assert run["padding_efficiency"] > random["runs"][0]["padding_efficiency"]
    assert "packing" not in {a["rule"] for a in packed["advice"]}


def test_bench_packed_needs_a_row_length(data: Path, tok: Path) -> None:
    args = ["bench", str(data), "--tokenizer", str(tok), "--template", "chatml", "-b", "2"]
    result = runner.invoke(app, [*args, "--plan", "packed"])
    assert result.exit_code == 2 and "--plan packed needs the row length" in result.output
    ok = runner.invoke(app, [*args, "--plan", "packed", "--plan-option", "max_length=128"])
    assert ok.exit_code == 0, ok.output


def test_bench_reads_a_token_cache(data: Path, tok: Path, tmp_path: Path) -> None:
    from chute.cache import preprocess

    recipe = {"tokenizer": str(tok), "template": "chatml", "max_length": 128}
    preprocess(sources=[str(data)], recipe=recipe, cache={"workers": 1}, out=tmp_path / "tc")
    args = ["bench", str(tmp_path / "tc"), "-b", "4", "--workers", "0", "--steps", "50", "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    # the cache holds the 54 valid samples; nothing is tokenized while training
    assert out["samples"] == 54 and out["runs"][0]["samples"] == 54
    assert "Cache(" in out["source"] and out["profile"]["seconds"]["recipe"] < 0.05
    assert "preprocess" not in {a["rule"] for a in out["advice"]}
    packed = runner.invoke(app, [*args, "--plan", "packed", "--plan-option", "max_length=128"])
    assert packed.exit_code == 0, packed.output
    assert json.loads(packed.stdout)["runs"][0]["samples"] == 54
    # --max-length alone (no recipe over a cache) is the packed plan's row length, as its
    # error says: it was refused for want of --tokenizer
    rows = runner.invoke(app, [*args, "--plan", "packed", "--max-length", "128"])
    assert rows.exit_code == 0, rows.output
    assert json.loads(rows.stdout)["runs"][0]["samples"] == 54
    # the recipe is checked against the one that built the cache
    other = ["--tokenizer", str(tok), "--template", "chatml", "--max-length", "64"]
    result = runner.invoke(app, [*args, *other])
    assert result.exit_code == 2 and "max_length" in result.output
    result = runner.invoke(app, [*args[:2], str(data), *args[2:]])
    assert result.exit_code == 2 and "give one cache directory" in result.output

"""The CLI over a mixture: preprocess (one cache per dataset), stats (per-dataset table, PNG),
validate --overlap (groups, leakage exit status, duplicates file)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
import yaml
from typer.testing import CliRunner

from chute.cli import app

runner = CliRunner()


@pytest.fixture
def mixture_yaml(shared_data: Path, tmp_path: Path) -> Path:
    d = shared_data
    path = tmp_path / "mix.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "recipe": {
                    "tokenizer": str(d / "tokenizers/qwen3/tokenizer.json"),
                    "template": "qwen3",
                    "max_length": 1024,
                },
                "datasets": {
                    "alpaca": {
                        "sources": [str(d / "llama-factory/alpaca_en_demo.json")],
                        "weight": 0.6,
                        "val": 0.02,
                    },
                    "tools": {
                        "sources": [str(d / "llama-factory/glaive_toolcall_en_demo.json")],
                        "format": "sharegpt",
                        "columns": {"messages": "conversations", "tools": "tools"},
                        "weight": 0.4,
                    },
                },
                "cache": {"chunk_size": 500},
            }
        )
    )
    return path


def test_stats_of_a_mixture_prints_the_dataset_table_and_plot(
    mixture_yaml: Path, tmp_path: Path
) -> None:
    pytest.importorskip("matplotlib")
    png = tmp_path / "mix.png"
    args = ["stats", str(mixture_yaml), "--max-length", "1024", "--batch-size", "8"]
    result = runner.invoke(app, [*args, "--plot", str(png)])
    assert result.exit_code == 0, result.output
    assert "epoch samples" in result.output and "alpaca" in result.output
    assert png.read_bytes()[:4] == b"\x89PNG"
    out = orjson.loads(runner.invoke(app, [*args, "--json"]).stdout)
    rows = out["datasets"]
    assert rows["alpaca"]["records"] == 999 and rows["tools"]["records"] == 300
    assert abs(rows["alpaca"]["sample_share"] - 0.6) < 0.005  # weights 0.6 / 0.4
    assert sum(r["epoch_samples"] for r in rows.values()) == out["epoch"]["samples"]
    assert set(rows["tools"]["efficiency"]) >= {"random", "grouped", "budget", "packed"}
    assert out["plans"]["random"]["samples"] == out["epoch"]["samples"]
    # the packing bound is over what the plans pack (the epoch's selection): no plan beats it
    bound = out["packing_bound"]
    assert bound["rows"] <= out["plans"]["packed"]["rows"]
    assert bound["efficiency"] >= out["efficiency"]["packed"]
    assert bound["rows"] * 1024 >= out["epoch"]["tokens"] > (bound["rows"] - 1) * 1024
    # the hold-out as drawn (a hash threshold: about, not exactly, 2% of 1,000), as --overlap
    # counts the val group, and a column for it in the table
    groups = orjson.loads(
        runner.invoke(app, ["validate", "--overlap", str(mixture_yaml), "--json"]).stdout
    )
    assert (
        rows["alpaca"]["val"] == groups["records"]["alpaca:val"] > 0 and rows["tools"]["val"] == 0
    )
    assert " val " in result.output


def test_overlap_finds_leakage_and_exits_1(
    mixture_yaml: Path, shared_data: Path, tmp_path: Path
) -> None:
    dups = tmp_path / "dups.jsonl"
    alpaca = str(shared_data / "llama-factory/alpaca_en_demo.json")
    result = runner.invoke(
        app, ["validate", "--overlap", str(mixture_yaml), alpaca, "--rejects", str(dups), "--json"]
    )
    assert result.exit_code == 1, result.output  # the file is the mixture's alpaca: leakage
    report = orjson.loads(result.stdout)
    assert (report["target"], report["ok"]) == ("overlap", False)
    assert report["groups"] == ["alpaca:train", "alpaca:val", "tools", alpaca]
    assert report["between"][f"alpaca:val|{alpaca}"]["contents"] == report["unique"]["alpaca:val"]
    assert report["between"]["alpaca:train|alpaca:val"]["contents"] == 0
    entries = [orjson.loads(x) for x in dups.read_bytes().splitlines()]
    assert len(entries) == report["duplicates"] and {e["reason"] for e in entries} == {"duplicate"}
    alone = runner.invoke(app, ["validate", "--overlap", str(mixture_yaml)])
    assert alone.exit_code == 0, alone.output  # repeats inside a dataset are no leakage
    assert "no content is shared between groups" in alone.output
    strict = runner.invoke(app, ["validate", "--overlap", str(mixture_yaml), "--strict"])
    assert strict.exit_code == 1


def test_preprocess_a_mixture_config(mixture_yaml: Path, tmp_path: Path) -> None:
    out = tmp_path / "cache"
    result = runner.invoke(
        app, ["preprocess", str(mixture_yaml), "--out", str(out), "--workers", "2"]
    )
    assert result.exit_code == 0, result.output
    assert "== dataset alpaca" in result.output and "== dataset tools" in result.output
    assert (out / "caches.json").is_file() and (out / "hashes" / "tools.npy").is_file()
    again = runner.invoke(
        app,
        [
            "preprocess",
            str(mixture_yaml),
            "--out",
            str(out),
            "--json",
            "datasets.alpaca.weight=0.9",
        ],
    )
    report = orjson.loads(again.stdout)
    assert all(r["chunks_built"] == 0 for r in report["datasets"].values())
    stats = runner.invoke(
        app, ["stats", str(out), "--max-length", "1024", "--batch-size", "8", "--json"]
    )
    assert stats.exit_code == 0, stats.output
    # the caches' mixture.yaml took the new weight (0.9 against 0.4); nothing was rebuilt
    share = orjson.loads(stats.stdout)["datasets"]["alpaca"]["sample_share"]
    assert abs(share - 0.9 / 1.3) < 0.005


def test_stats_of_a_mixture_cuts_documents_as_its_recipe_says(
    shared_data: Path, tmp_path: Path
) -> None:
    """A mixture whose recipe says overflow: split is measured in windows, as the Loader cuts
    it (the command's own --overflow default, truncate, overrode it)."""
    path = tmp_path / "split.yaml"
    recipe = {"tokenizer": str(shared_data / "tokenizers/qwen3"), "max_length": 512}
    path.write_text(
        yaml.safe_dump(
            {
                "recipe": {**recipe, "overflow": "split", "stride": 16},
                "datasets": {
                    "c4": {"sources": [str(shared_data / "llama-factory/c4_demo.jsonl")]},
                },
            }
        )
    )
    args = ["stats", str(path), "--max-length", "512", "--batch-size", "8", "--json"]
    as_written = orjson.loads(runner.invoke(app, args).stdout)
    explicit = orjson.loads(runner.invoke(app, [*args, "--overflow", "split"]).stdout)
    truncated = orjson.loads(runner.invoke(app, [*args, "--overflow", "truncate"]).stdout)
    no_overlap = orjson.loads(runner.invoke(app, [*args, "--stride", "0"]).stdout)
    assert as_written["epoch"] == explicit["epoch"]  # the YAML's stride with --overflow split
    assert no_overlap["epoch"]["samples"] < as_written["epoch"]["samples"]
    assert as_written["epoch"]["samples"] > truncated["epoch"]["samples"] == 300

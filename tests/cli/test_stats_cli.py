"""``chute stats`` in-process: the --json contract, the table, --plot, pre-tokenized input, real data."""

from __future__ import annotations

import builtins
import json
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from chute.cli import app
from recipe_helpers import tiny_tokenizer

runner = CliRunner()


@pytest.fixture
def tokens_file(tmp_path: Path) -> Path:
    """Pre-tokenized records of lengths 1..40 (cycling), one broken line, one over 64 tokens."""
    lines = [json.dumps({"input_ids": [7] * (1 + i % 40)}) for i in range(400)]
    lines[10] = '{"input_ids": [1, 2'
    lines[20] = json.dumps({"input_ids": [5] * 100})
    path = tmp_path / "tokens.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def stats_json(*args: str) -> dict:
    result = runner.invoke(app, ["stats", *args, "--json"])
    assert result.exit_code == 0, result.output
    return orjson.loads(result.stdout)


def test_json_contract_on_pre_tokenized_records(tokens_file: Path) -> None:
    out = stats_json(
        str(tokens_file), "--max-length", "64", "--batch-size", "4", "--world-size", "2"
    )
    assert out["samples"] == 399 and out["records"] == 400
    assert out["rejected"] == {"bad_json": 1}
    expected = sum(1 + i % 40 for i in range(400) if i not in (10, 20)) + 64  # 100 cut to 64
    assert out["tokens"] == expected and out["truncated"] == 1
    assert set(out["efficiency"]) == {"random", "grouped", "budget", "packed"}
    assert all(0 < v <= 1 for v in out["efficiency"].values())
    eff = out["efficiency"]
    assert eff["packed"] > 0.98 and eff["grouped"] > eff["random"]
    for name, plan in out["plans"].items():
        assert plan["efficiency"] == eff[name] and plan["tokens"] == out["tokens"]
        assert plan["steps"] > 0 and plan["truncated"] == 1 and plan["dropped"] == 0
    assert out["plans"]["packed"]["rows"] <= out["packing_bound"]["rows"] * 1.01
    assert out["lengths"]["max"] == 100 and out["lengths"]["p50"] in range(19, 23)
    assert sum(out["histogram"]["counts"]) == 398 and out["histogram"]["over"] == 1


def test_overflow_drop_leaves_long_samples_out_of_every_plan(tokens_file: Path) -> None:
    out = stats_json(
        str(tokens_file), "--max-length", "64", "--batch-size", "4", "--overflow", "drop"
    )
    assert out["samples"] == 398 and out["dropped"] == 1 and out["truncated"] == 0
    assert all(p["dropped"] == 1 for p in out["plans"].values())


def test_lengths_and_histogram_leave_out_the_samples_rejected_here(tokens_file: Path) -> None:
    out = stats_json(
        str(tokens_file), "--max-length", "64", "--batch-size", "4", "--overflow", "drop"
    )
    assert out["rejected"] == {"bad_json": 1, "too_long": 1}
    assert out["lengths"]["max"] == 40  # not the 100 tokens of the sample dropped as too_long
    assert sum(out["histogram"]["counts"]) == out["samples"] == 398
    assert out["histogram"]["over"] == 0
    result = runner.invoke(
        app, ["stats", str(tokens_file), "--max-length", "64", "--batch-size", "4",
              "--overflow", "drop"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "max 40," in result.stdout and "max 100" not in result.stdout


def test_the_table_names_every_plan_and_warns_about_a_small_window(tokens_file: Path) -> None:
    result = runner.invoke(
        app,
        ["stats", str(tokens_file), "--max-length", "64", "--batch-size", "4", "--window", "3"],
    )
    assert result.exit_code == 0, result.output
    for name in ("random", "grouped", "budget", "packed", "packing bound"):
        assert name in result.output
    assert "warning: packing reaches" in result.output and "--window" in result.output


def test_plot_writes_a_png(tokens_file: Path, tmp_path: Path) -> None:
    png = tmp_path / "stats.png"
    out = stats_json(
        str(tokens_file), "--max-length", "64", "--batch-size", "4", "--plot", str(png)
    )
    assert out["plot"] == str(png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_plot_without_matplotlib_says_how_to_install_it(
    tokens_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):  # type: ignore[no-untyped-def]
        if name.startswith("matplotlib"):
            raise ImportError("No module named 'matplotlib'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    result = runner.invoke(
        app,
        ["stats", str(tokens_file), "--max-length", "64", "--batch-size", "4", "--plot",
         str(tmp_path / "x.png")],
    )  # fmt: skip
    assert result.exit_code == 2
    assert "pip install 'chute[plot]'" in result.output and "Traceback" not in result.output


def test_with_a_recipe_and_its_options(tmp_path: Path) -> None:
    folder = tmp_path / "tok"
    folder.mkdir()
    (folder / "tokenizer.json").write_text(tiny_tokenizer().rust.to_str())
    rows = [{"instruction": "Hello there " * (1 + i % 9), "output": "Hi!"} for i in range(50)]
    rows.append({"instruction": "no answer"})
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = stats_json(
        str(data), "--tokenizer", str(folder), "--template", "chatml",
        "--max-length", "128", "--batch-size", "2",
    )  # fmt: skip
    assert out["samples"] == 50 and out["rejected"] == {"missing_field": 1}
    assert "chatml" in out["input"]["recipe"]


def test_bad_arguments_are_refused(tokens_file: Path) -> None:
    result = runner.invoke(
        app, ["stats", str(tokens_file), "--max-length", "0", "--batch-size", "4"]
    )
    assert result.exit_code == 2 and "max_length must be a positive int, got 0" in result.output
    result = runner.invoke(
        app,
        ["stats", str(tokens_file), "--max-length", "8", "--batch-size", "2", "--overflow", "x"],
    )
    assert (
        result.exit_code == 2 and "overflow must be 'truncate', 'drop' or 'split'" in result.output
    )
    result = runner.invoke(
        app, ["stats", str(tokens_file), "--max-length", "8", "--batch-size", "2", "--template",
              "qwen3"],
    )  # fmt: skip
    assert result.exit_code == 2 and "--template need --tokenizer" in result.output


@pytest.mark.shared_data
def test_real_data_with_the_qwen3_tokenizer(shared_data: Path) -> None:
    out = stats_json(
        str(shared_data / "torchtune/alpaca_tiny.json"),
        str(shared_data / "llama-factory/identity.json"),
        "--tokenizer", str(shared_data / "tokenizers/qwen3/tokenizer.json"),
        "--template", "qwen3", "--max-length", "1024", "--batch-size", "4", "--world-size", "2",
    )  # fmt: skip
    assert out["samples"] == 191 and out["rejected"] == {}
    assert out["plans"]["packed"]["rows"] <= out["packing_bound"]["rows"] + 1
    assert min(out["efficiency"]["packed"], out["efficiency"]["grouped"]) > 0.9
    assert out["efficiency"]["random"] < 0.6


def test_text_records_without_a_tokenizer_are_an_error_not_100_percent(tmp_path: Path) -> None:
    data = tmp_path / "c4.jsonl"
    data.write_text("".join(json.dumps({"text": f"document {i}"}) + "\n" for i in range(30)))
    result = runner.invoke(app, ["stats", str(data), "--max-length", "64", "--batch-size", "4"])
    assert result.exit_code == 2
    assert (
        "none of the 30 records is a usable sample (missing_field 30); records that are not "
        "tokenized need --tokenizer" in result.output
    )
    as_json = runner.invoke(
        app, ["stats", str(data), "--max-length", "64", "--batch-size", "4", "--json"]
    )
    assert "missing_field 30" in orjson.loads(as_json.stdout)["error"]["message"]

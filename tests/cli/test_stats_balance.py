"""Per-step imbalance in ``padding_stats`` and ``chute stats``, and ``--balance``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import orjson
import pytest
import yaml
from typer.testing import CliRunner

from chute.cli import app
from chute.errors import ConfigError
from chute.lengths import Lengths
from chute.stats import padding_stats

runner = CliRunner()


def multimodal(n: int = 6000, seed: int = 0) -> Lengths:
    rng = np.random.default_rng(seed)
    image = np.where(rng.random(n) < 0.3, rng.integers(200, 900, n), 0)
    return Lengths(
        (rng.integers(20, 400, n) + image).astype(np.int32), image_tokens=image.astype(np.int32)
    )


def test_every_plan_reports_its_imbalance_and_balance_cuts_it() -> None:
    lens = multimodal()
    options = dict(max_length=2048, batch_size=2, world_size=8)
    plain = padding_stats(lens, **options)  # type: ignore[arg-type]
    even = padding_stats(lens, balance=True, **options)  # type: ignore[arg-type]
    assert plain["balance"] is None
    assert even["balance"] == {"weights": {"tokens": 1.0, "patches": 1.0}, "tolerance": 0.05}
    for name, report in plain["plans"].items():
        imb = report["imbalance"]
        assert set(imb) == {"tokens", "patches", "cost", "patch_steps"}, name
        assert 1.0 <= imb["tokens"]["mean"] <= imb["tokens"]["worst"]
        assert 1.0 <= imb["patches"]["mean"] <= imb["patches"]["worst"] <= 8.0
    for name in ("budget", "packed"):
        before = plain["plans"][name]["imbalance"]["patches"]
        after = even["plans"][name]["imbalance"]["patches"]
        assert after["mean"] < before["mean"] - 0.1 and after["epoch"] < before["epoch"], name
        assert "unbalanced_steps" in even["plans"][name]
        assert even["plans"][name]["efficiency"] >= plain["plans"][name]["efficiency"] - 0.005
    # random and grouped take no balance: the same plan either way
    assert even["plans"]["random"] == {**plain["plans"]["random"], "seconds": even["plans"][
        "random"]["seconds"]}  # fmt: skip
    with pytest.raises(ConfigError, match="balance: dimensions must be among"):
        padding_stats(lens, balance="flops", **options)  # type: ignore[arg-type]


def test_text_only_data_reports_no_patches(tmp_path: Path) -> None:
    path = tmp_path / "tokens.jsonl"
    path.write_text(
        "".join(json.dumps({"input_ids": [7] * (1 + i % 40)}) + "\n" for i in range(300))
    )
    args = ["stats", str(path), "--max-length", "64", "--batch-size", "4", "--world-size", "3"]
    result = runner.invoke(app, [*args, "--balance", "tokens"])
    assert result.exit_code == 0, result.output
    assert "tokens max/mean" in result.output and "patches max/mean" in result.output
    assert "balanced ({'tokens': 1.0})" in result.output
    out = orjson.loads(runner.invoke(app, [*args, "--json", "--balance", "tokens=1"]).stdout)
    assert out["balance"]["weights"] == {"tokens": 1.0}
    for report in out["plans"].values():
        assert report["imbalance"]["patches"] == {"mean": None, "worst": None, "epoch": None}
        assert report["imbalance"]["tokens"]["mean"] >= 1.0
    bad = runner.invoke(app, [*args, "--balance", "tokens=lots"])
    assert bad.exit_code != 0 and "tokens='lots' is not a number" in bad.output


@pytest.mark.shared_data
def test_real_images_and_text_over_eight_ranks(shared_data: Path, tmp_path: Path) -> None:
    d = shared_data
    mix = tmp_path / "mix.yaml"
    mix.write_text(
        yaml.safe_dump(
            {
                "recipe": {"tokenizer": str(d / "tokenizers/qwen3"), "template": "qwen3"},
                "datasets": {
                    "alpaca": {"sources": [str(d / "llama-factory/alpaca_en_demo.json")]},
                    "images": {
                        "sources": [str(d / "llama-factory/mllm_demo.json")],
                        "format": "sharegpt",
                        "columns": {"messages": "messages", "images": "images"},
                        "tags": {
                            "role_tag": "role",
                            "content_tag": "content",
                            "user_tag": "user",
                            "assistant_tag": "assistant",
                        },
                        "image_tokens": "qwen2-vl",
                        "repeat": 60,
                    },
                },
            }
        )
    )
    args = ["stats", str(mix), "--max-length", "1024", "--batch-size", "2", "--world-size", "8"]
    plain = orjson.loads(runner.invoke(app, [*args, "--json"]).stdout)
    even = orjson.loads(runner.invoke(app, [*args, "--json", "--balance", "true"]).stdout)
    before = plain["plans"]["packed"]["imbalance"]["patches"]
    after = even["plans"]["packed"]["imbalance"]["patches"]
    assert plain["plans"]["packed"]["imbalance"]["patch_steps"] > 0
    assert after["epoch"] < before["epoch"] and after["mean"] < before["mean"]
    table = runner.invoke(app, [*args, "--balance", "patches"])
    assert table.exit_code == 0, table.output
    assert "patches max/mean" in table.output and "balanced ({'patches': 1.0})" in table.output


def long_documents(n: int = 3000, seed: int = 0) -> Lengths:
    """Short samples, and 2% of documents cut into full windows of 8192 tokens."""
    rng = np.random.default_rng(seed)
    length = np.where(rng.random(n) < 0.02, 8192, rng.integers(30, 900, n))
    return Lengths(length.astype(np.int32))


def test_compute_is_reported_for_every_plan_and_balance_cost_evens_it() -> None:
    lens = long_documents()
    options = dict(max_length=8192, batch_size=1, world_size=8)
    plain = padding_stats(lens, **options)  # type: ignore[arg-type]
    even = padding_stats(lens, balance="cost", **options)  # type: ignore[arg-type]
    # 8192 tokens with Llama-3-8B's shape: attention is 8192 / (57256 + 8192) of the cost
    assert plain["cost"]["attention_share"] == pytest.approx(8192 / (57256 + 8192), abs=1e-4)
    assert plain["cost"]["long_samples"] and plain["cost"]["model"]["name"] == "llama3-8b"
    model = {k: v for k, v in plain["cost"]["model"].items() if k != "name"}
    assert even["balance"] == {"weights": {"cost": 1.0}, "tolerance": 0.05, "cost": model}
    before = plain["plans"]["packed"]["imbalance"]["cost"]
    after = even["plans"]["packed"]["imbalance"]["cost"]
    assert before["mean"] > 1.05 and after["mean"] < 1.02 and after["epoch"] < before["epoch"]
    other = padding_stats(lens, cost={"b": 1, "c": 1}, **options)  # type: ignore[arg-type]
    assert other["cost"]["model"] == {"a": 0.0, "b": 1.0, "c": 1.0, "name": ""}
    assert other["balance"] is None  # a model for the report alone balances nothing
    tilted = other["plans"]["packed"]["imbalance"]["cost"]["mean"]
    assert tilted > before["mean"]  # attention weighs more in this model: rows differ more


def test_the_table_shows_compute_for_long_documents_or_when_balanced(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    lines = [{"input_ids": [7] * int(rng.integers(20, 300))} for _ in range(200)]
    short = tmp_path / "short.jsonl"
    short.write_text("".join(json.dumps(r) + "\n" for r in lines))
    long = tmp_path / "long.jsonl"
    long.write_text(
        "".join(json.dumps(r) + "\n" for r in [*lines, *[{"input_ids": [7] * 8192}] * 6])
    )
    args = ["--max-length", "8192", "--batch-size", "1", "--world-size", "4"]
    quiet = runner.invoke(app, ["stats", str(short), *args])
    assert quiet.exit_code == 0, quiet.output
    assert "cost max/mean" not in quiet.output  # short samples: compute follows tokens
    for path, extra in ((long, []), (short, ["--balance", "cost"])):
        shown = runner.invoke(app, ["stats", str(path), *args, *extra])
        assert shown.exit_code == 0, shown.output
        header = next(line for line in shown.output.splitlines() if line.startswith("plan "))
        assert header.split()[:4] == ["plan", "efficiency", "cost", "max/mean"], header
        assert "compute: llama3-8b: a + b*n + c*n^2 with a=0, b=4.5028e+10, c=786432" in (
            shown.output
        )
    out = orjson.loads(
        runner.invoke(app, ["stats", str(long), *args, "--json", "--cost", "b=1,c=0.001"]).stdout
    )
    assert out["cost"]["model"] == {"a": 0.0, "b": 1.0, "c": 0.001, "name": ""}
    assert out["plans"]["packed"]["imbalance"]["cost"]["mean"] >= 1.0
    named = orjson.loads(
        runner.invoke(app, ["stats", str(long), *args, "--json", "--cost", "qwen3-8b"]).stdout
    )
    assert named["cost"]["model"]["name"] == "qwen3-8b"
    bad = runner.invoke(app, ["stats", str(long), *args, "--cost", "b=lots"])
    assert bad.exit_code != 0 and "--cost: b='lots' is not a number" in bad.output
    unknown = runner.invoke(app, ["stats", str(long), *args, "--cost", "gpt-9"])
    assert unknown.exit_code != 0 and "--cost: no cost model is named 'gpt-9'" in unknown.output

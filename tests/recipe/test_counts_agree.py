"""Every entry point judges a record the same: counts by kind agree on real data.

``chute stats``, ``chute validate``, ``chute preprocess`` and the Loader (its lengths pass for a
length-aware plan, and its workers for a random plan) run over the same shared files with the
same recipe; kept, truncated and rejected-by-kind counts must be equal. At ``--max-length 2048``
glaive_toolcall_en_demo line 7497 loses every trained token to truncation: it is
``no_trainable_tokens`` everywhere (it once was "1 truncated" in ``chute stats`` only).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

from chute import JsonlSource, Loader, Recipe, World, preprocess
from chute.cli import app

pytestmark = pytest.mark.shared_data
runner = CliRunner()

CASES = [
    # (files under llama-factory/, max_length, overflow)
    (["glaive_toolcall_en_demo.json"], 2048, "truncate"),
    (["glaive_toolcall_en_demo.json"], 1024, "drop"),
    # images (mllm_demo), paths that do not resolve (v1_multimodal_demo: image_missing), long
    # prompts whose answers a 128-token cut removes (no_trainable_tokens), many truncated
    (
        ["alpaca_en_demo.json", "v1_sft_demo.jsonl", "mllm_demo.json", "v1_multimodal_demo.jsonl"],
        128,
        "truncate",
    ),
]


def _cli(*args: str) -> dict[str, Any]:
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code in (0, 1), result.output
    return orjson.loads(result.stdout)


@pytest.mark.parametrize(("names", "max_length", "overflow"), CASES)
def test_every_entry_point_counts_the_same(
    shared_data: Path, tmp_path: Path, names: list[str], max_length: int, overflow: str
) -> None:
    files = [str(shared_data / "llama-factory" / n) for n in names]
    tokenizer = str(shared_data / "tokenizers" / "qwen3")
    recipe_flags = [
        "--tokenizer",
        tokenizer,
        "--max-length",
        str(max_length),
        "--overflow",
        overflow,
    ]
    counts: dict[str, tuple[int, dict[str, int]]] = {}  # entry point -> (kept, rejected by kind)
    truncated: dict[str, int] = {}

    stats = _cli("stats", *files, *recipe_flags, "--batch-size", "8")
    counts["stats"] = (stats["samples"], stats["rejected"])
    truncated["stats"] = stats["truncated"]

    report = _cli("validate", *files, *recipe_flags, "--no-decode", "--workers", "1")
    counts["validate"] = (report["valid"], report["by_reason"])
    truncated["validate"] = report["truncated"]

    recipe_keys = {"tokenizer": tokenizer, "max_length": max_length, "overflow": overflow}
    built = preprocess(sources=files, recipe=recipe_keys, out=tmp_path / "cache").to_json()
    counts["preprocess"] = (built["samples"], built["by_reason"])
    truncated["preprocess"] = built["truncated"]

    recipe = Recipe(**recipe_keys)
    source = JsonlSource(files)
    packed = Loader(source, recipe, batch_size=4, plan="packed", world=World(), num_workers=0)
    counts["loader lengths pass"] = (packed.lengths.num_valid, packed.excluded)
    truncated["loader lengths pass"] = packed.lengths.num_truncated

    loader = Loader(source, recipe, batch_size=16, world=World(), num_workers=0, shuffle=False)
    seen = [int(i) for batch in loader for i in batch["sample_ids"].tolist() if i >= 0]
    counts["loader workers"] = (len(seen), loader.stats)

    first = counts["stats"]
    assert all(got == first for got in counts.values()), counts
    assert len(set(truncated.values())) == 1, truncated
    kept, rejected = counts["stats"]
    assert kept + sum(rejected.values()) == len(source)


def test_glaive_line_7497_is_no_trainable_tokens_everywhere(shared_data: Path) -> None:
    glaive = str(shared_data / "llama-factory" / "glaive_toolcall_en_demo.json")
    flags = ["--tokenizer", str(shared_data / "tokenizers" / "qwen3"), "--max-length", "2048"]
    stats = _cli("stats", glaive, *flags, "--batch-size", "8")
    report = _cli("validate", glaive, *flags, "--no-decode")
    assert stats["rejected"] == report["by_reason"] == {"no_trainable_tokens": 1}
    assert stats["truncated"] == report["truncated"] == 0
    # its length (11,544 tokens) is no sample's: lengths and histogram leave it out
    assert stats["lengths"]["max"] <= 2048 and stats["histogram"]["over"] == 0
    assert report["examples"]["no_trainable_tokens"][0].startswith(f"{glaive}:7497:")
    # named in the user's syntax: the flags, not Python keywords
    assert "--max-length 2048" in report["examples"]["no_trainable_tokens"][0]

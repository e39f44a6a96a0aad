"""``--geometry`` on the command line: validate, inspect and stats run the same recipe."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest
from PIL import Image
from typer.testing import CliRunner

from chute.cli import app
from recipe_helpers import tiny_tokenizer

runner = CliRunner()


@pytest.fixture
def qwen(tmp_path: Path) -> list[str]:
    """Recipe flags with a small tokenizer that has Qwen's <|image_pad|>."""
    folder = tmp_path / "tok"
    folder.mkdir()
    (folder / "tokenizer.json").write_text(tiny_tokenizer().rust.to_str())
    (folder / "tokenizer_config.json").write_text(
        json.dumps({"bos_token": "<s>", "eos_token": "</s>"})
    )
    return ["--tokenizer", str(folder), "--template", "chatml", "--image-tokens", "qwen2-vl"]


def _data(tmp_path: Path) -> Path:
    Image.new("RGB", (150, 100), (128, 128, 128)).save(tmp_path / "a.png")
    rows = []
    for box in [
        "(100,200),(300,400)",
        "(100,200),(1300,400)",
        "(500,200),(300,400)",
        "(0,0),(1000,1000)",
    ]:
        rows.append(
            {
                "messages": [
                    {"role": "user", "content": "<image>Where is it?"},
                    {"role": "assistant", "content": f"<|box_start|>{box}<|box_end|>"},
                ],
                "images": ["a.png"],
            }
        )
    path = tmp_path / "boxes.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_validate_counts_invalid_boxes_with_geometry(tmp_path: Path, qwen: list[str]) -> None:
    data = _data(tmp_path)
    args = ["validate", str(data), *qwen, "--workers", "1", "--max-bad-fraction", "0.9", "--json"]
    result = runner.invoke(app, [*args, "--geometry", "qwen2-vl"])
    assert result.exit_code == 0, result.output
    out = orjson.loads(result.stdout)
    # 1300 is past qwen2-vl's 0-1000; (500,200),(300,400) has its corners swapped
    assert out["valid"] == 2 and out["by_reason"] == {"box_invalid": 2}


def test_inspect_shows_the_box_in_the_resized_images_pixels(
    tmp_path: Path, qwen: list[str]
) -> None:
    Image.new("RGB", (300, 168), (128, 128, 128)).save(tmp_path / "b.png")
    record = {
        "messages": [
            {"role": "user", "content": "<image>Where?"},
            {"role": "assistant", "content": json.dumps({"bbox_2d": [30, 20, 150, 100]})},
        ],
        "images": ["b.png"],
    }
    data = tmp_path / "one.jsonl"
    data.write_text(json.dumps(record) + "\n")
    args = ["inspect", str(data), *qwen[:-1], "qwen2.5-vl", "--json"]
    before = orjson.loads(runner.invoke(app, args).stdout)["text"]
    after = orjson.loads(runner.invoke(app, [*args, "--geometry", "qwen2.5-vl"]).stdout)["text"]
    assert '{"bbox_2d": [30, 20, 150, 100]}' in before
    # 300x168 -> 308x168 (sides multiples of 28): x * 308/300, floor the first corner, ceil
    # the second: 30.8 -> 30, 154.0 -> 154; y unchanged
    assert '{"bbox_2d": [30, 20, 154, 100]}' in after

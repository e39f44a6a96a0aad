"""The CLI in-process: chute inspect, and chute validate running the recipe."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from chute.cli import app
from recipe_helpers import tiny_tokenizer

runner = CliRunner()


@pytest.fixture
def tok_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "tok"
    folder.mkdir()
    (folder / "tokenizer.json").write_text(tiny_tokenizer().rust.to_str())
    (folder / "tokenizer_config.json").write_text(
        json.dumps({"bos_token": "<s>", "eos_token": "</s>"})
    )
    return folder


@pytest.fixture
def data(tmp_path: Path) -> Path:
    rows = [
        {"instruction": "Hello there", "output": "Hi!"},
        {"conversations": [{"from": "human", "value": "2+2?"}, {"from": "gpt", "value": "4"}]},
        {"instruction": "only a prompt"},
        {"instruction": "x " * 80, "output": "y"},
    ]
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_inspect_json_contract(tok_dir: Path, data: Path) -> None:
    result = runner.invoke(
        app,
        [
            "inspect",
            str(data),
            "--index",
            "1",
            "--tokenizer",
            str(tok_dir),
            "--template",
            "chatml",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    out = orjson.loads(result.stdout)
    tok = tiny_tokenizer()
    assert out["path"] == str(data) and out["line"] == 2 and out["index"] == 1
    assert out["format"] == "sharegpt" and out["template"] == "chatml"
    assert out["text"] == tok.decode(out["input_ids"])
    assert out["text"] == "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n"
    assert len(out["labels"]) == len(out["input_ids"]) == out["length"]
    assert out["trained_text"] == "4<|im_end|>"
    assert out["trained"] + out["masked"] == out["length"]


def test_inspect_text_marks_trained_spans(tok_dir: Path, data: Path) -> None:
    result = runner.invoke(
        app, ["inspect", str(data), "--tokenizer", str(tok_dir), "--template", "chatml"]
    )
    assert result.exit_code == 0, result.output
    assert "<|im_start|>assistant\n[[Hi!<|im_end|>]]\n" in result.stdout
    assert "format alpaca, template chatml" in result.stdout
    assert (
        "tokens 17: trained 4 ([[...]]), masked 13; images 0 (0 tokens); truncated: no"
        in result.stdout
    )
    colour = runner.invoke(
        app, ["inspect", str(data), "--tokenizer", str(tok_dir), "--template", "chatml", "--color"]
    )
    assert "\x1b[" in colour.stdout and "[[" not in colour.stdout


def test_inspect_shows_images_collapsed(tok_dir: Path, tmp_path: Path) -> None:
    from PIL import Image

    Image.new("RGB", (300, 168)).save(tmp_path / "a.png")
    path = tmp_path / "mm.jsonl"
    path.write_text(
        json.dumps(
            {
                "messages": [
                    {"role": "user", "content": "<image>What?"},
                    {"role": "assistant", "content": "A."},
                ],
                "images": ["a.png"],
            }
        )
        + "\n"
    )
    result = runner.invoke(
        app,
        [
            "inspect",
            str(path),
            "--tokenizer",
            str(tok_dir),
            "--template",
            "chatml",
            "--image-tokens",
            "qwen2-vl",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "<|vision_start|><image x 66><|vision_end|>What?" in result.stdout
    assert "images 1 (66 tokens)" in result.stdout


def test_inspect_a_trl_pair_with_an_image_shows_each_side(tok_dir: Path, tmp_path: Path) -> None:
    """TRL's prompt/chosen/rejected stopped inspect with unknown_format (validate took it)."""
    from PIL import Image

    Image.new("RGB", (300, 168)).save(tmp_path / "a.png")
    pair = {
        "prompt": [{"role": "user", "content": "<image>Who?"}],
        "chosen": [{"role": "assistant", "content": "Kane."}],
        "rejected": [{"role": "assistant", "content": "Nobody at all."}],
        "images": ["a.png"],
    }
    path = tmp_path / "pairs.jsonl"
    path.write_text(json.dumps(pair) + "\n")
    args = ["inspect", str(path), "--task", "preference", "--tokenizer", str(tok_dir)]
    args += ["--template", "chatml", "--image-tokens", "qwen2-vl"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "format preference (chosen, images, prompt, rejected)" in result.stdout
    assert result.stdout.count("<|vision_start|><image x 66><|vision_end|>Who?") == 2  # each side
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    out = orjson.loads(result.stdout)
    chosen, rejected = out["sides"]["chosen"], out["sides"]["rejected"]
    assert chosen["trained_text"] == "Kane.<|im_end|>\n"
    assert rejected["trained_text"] == "Nobody at all.<|im_end|>\n"
    assert chosen["length"] + rejected["length"] == out["length"]
    assert chosen["text"].endswith("<|im_start|>assistant\nKane.<|im_end|>\n")


def test_inspect_rejected_record_and_bad_index(tok_dir: Path, data: Path) -> None:
    result = runner.invoke(
        app,
        ["inspect", str(data), "--index", "2", "--tokenizer", str(tok_dir), "--template", "chatml"],
    )
    assert result.exit_code == 1
    assert f"{data}:3: missing_field" in result.stdout
    as_json = runner.invoke(
        app,
        [
            "inspect",
            str(data),
            "-i",
            "2",
            "--tokenizer",
            str(tok_dir),
            "--template",
            "chatml",
            "--json",
        ],
    )
    assert orjson.loads(as_json.stdout)["error"]["reason"] == "missing_field"
    bad = runner.invoke(
        app,
        ["inspect", str(data), "--index", "9", "--tokenizer", str(tok_dir), "--template", "chatml"],
    )
    assert bad.exit_code == 2 and "--index: 9 is out of range; " in bad.output
    nope = runner.invoke(
        app, ["inspect", str(data), "--tokenizer", str(tok_dir), "--template", "nope"]
    )
    assert nope.exit_code == 2 and "'nope' is not a built-in template" in nope.output


def test_validate_runs_the_recipe(tok_dir: Path, data: Path, tmp_path: Path) -> None:
    rejects = tmp_path / "rejects.jsonl"
    args = [
        "validate",
        str(data),
        "--tokenizer",
        str(tok_dir),
        "--template",
        "chatml",
        "--max-length",
        "64",
        "--overflow",
        "drop",
        "--workers",
        "1",
        "--rejects",
        str(rejects),
        "--json",
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 1, result.output  # half rejected: over the Loader's budget
    out = orjson.loads(result.stdout)
    assert out["valid"] == 2 and out["by_reason"] == {"missing_field": 1, "too_long": 1}
    assert out["check"].startswith("Recipe(format='auto', template='chatml'")
    assert [json.loads(x)["reason"] for x in rejects.read_text().splitlines()] == [
        "missing_field",
        "too_long",
    ]
    text = runner.invoke(app, [*args[:-1], "--strict"])
    assert text.exit_code == 1
    assert f"{data}:4: too_long: " in text.stdout


def test_validate_format_only_and_option_errors(data: Path) -> None:
    result = runner.invoke(
        app, ["validate", str(data), "--format", "alpaca", "--workers", "1", "--json"]
    )
    out = orjson.loads(result.stdout)
    assert out["check"] == "format alpaca"
    assert out["by_reason"] == {"missing_field": 2}  # the sharegpt row and the prompt-only row
    mapped = runner.invoke(
        app,
        [
            "validate",
            str(data),
            "--format",
            "alpaca",
            "--columns",
            "response=instruction",
            "--json",
            "--workers",
            "1",
        ],
    )
    assert orjson.loads(mapped.stdout)["by_reason"] == {"missing_field": 1}
    bad = runner.invoke(app, ["validate", str(data), "--max-length", "10"])
    assert bad.exit_code == 2 and "--max-length need --tokenizer" in bad.output
    pairs = runner.invoke(app, ["validate", str(data), "--format", "alpaca", "--columns", "prompt"])
    assert pairs.exit_code == 2 and "--columns: expected key=value pairs" in pairs.output
    # --columns given twice maps both (the first was dropped, silently)
    twice = ["--columns", "response=instruction", "--columns", "prompt=instruction"]
    both = runner.invoke(app, ["validate", str(data), "--format", "alpaca", *twice, "--json"])
    once = ["--columns", "response=instruction,prompt=instruction"]
    comma = runner.invoke(app, ["validate", str(data), "--format", "alpaca", *once, "--json"])
    assert orjson.loads(both.stdout)["by_reason"] == orjson.loads(comma.stdout)["by_reason"]


@pytest.mark.shared_data
def test_inspect_real_qwen3_template(shared_data: Path) -> None:
    result = runner.invoke(
        app,
        [
            "inspect",
            str(shared_data / "llama-factory/alpaca_zh_demo.json"),
            "--tokenizer",
            str(shared_data / "tokenizers/qwen3"),
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    out = orjson.loads(result.stdout)
    assert out["template"] == "tokenizer"  # the tokenizer's own chat_template by default
    assert out["text"].startswith("<|im_start|>user\n识别并解释给定列表中的两个科学理论")
    assert out["trained_text"].startswith("<think>\n\n</think>\n\n细胞理论是生物科学的一个理论")

"""What a new user trips over, run as one would: the CLI on the shared data (issue 15).

One default for image tokens everywhere; validate's exit status follows the Loader's error
budget; errors are one line, in the user's syntax (flags, config keys), without a traceback
even where torch is missing; a glob that catches a non-data file goes on with the rest; help
and version; a warning printed once; the demo takes the other commands' recipe options.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
import typer
from typer.testing import CliRunner

from chute import Recipe
from chute.cache.config import RecipeConfig
from chute.cli import app
from chute.cli._options import RECIPE_OPTIONS, RecipeArgs

runner = CliRunner()
REPO = Path(__file__).resolve().parents[2]


def _flags(command: str) -> set[str]:
    cmd = typer.main.get_command(app).commands[command]  # type: ignore[attr-defined]
    return {opt for param in cmd.params for opt in param.opts}


# -- 1. one default for image tokens --------------------------------------------------------


@pytest.mark.shared_data
def test_validate_and_preprocess_agree_on_images_by_default(
    shared_data: Path, tmp_path: Path
) -> None:
    data = str(shared_data / "llama-factory/mllm_demo.json")
    tok = str(shared_data / "tokenizers/qwen3")
    report = orjson.loads(
        runner.invoke(app, ["validate", data, "--tokenizer", tok, "--json"]).stdout
    )
    config = tmp_path / "mllm.yaml"
    config.write_text(f"sources: [{data}]\nrecipe:\n  tokenizer: {tok}\n")
    result = runner.invoke(app, ["preprocess", str(config), "--out", str(tmp_path / "c"), "--json"])
    assert result.exit_code == 0, result.output
    built = orjson.loads(result.stdout)
    assert report["valid"] == built["samples"] == 6 and built["image_tokens"] > 0
    # Python, the config, the CLI flags (and so the Loader and chute stats): the same rule
    media = [
        Recipe(tokenizer=tok).fingerprint()["media"],
        RecipeConfig(tokenizer=tok).build().fingerprint()["media"],
        RecipeArgs(tokenizer=tok).build().fingerprint()["media"],
    ]
    assert media[0] == media[1] == media[2] and media[0]["image_tokens"]["rule"] == "dynamic"


# -- 4. validate's exit status --------------------------------------------------------------


@pytest.mark.shared_data
def test_validate_fails_when_the_loader_would_stop(shared_data: Path) -> None:
    data = str(shared_data / "llama-factory/v1_multimodal_demo.jsonl")  # every image path off
    tok = str(shared_data / "tokenizers/qwen3")
    result = runner.invoke(app, ["validate", data, "--tokenizer", tok, "--quiet"])
    assert result.exit_code == 1
    assert "24 of 24 records rejected (100.0%), above --max-bad-fraction 0.25" in result.output
    allowed = ["validate", data, "--tokenizer", tok, "--quiet", "--max-bad-fraction", "1"]
    assert runner.invoke(app, allowed).exit_code == 0
    assert runner.invoke(app, [*allowed, "--strict"]).exit_code == 1
    help_text = runner.invoke(app, ["validate", "--help"]).output
    assert "--max-bad-fraction" in help_text and "--strict" in help_text


# -- 5. one-line errors in the user's syntax --------------------------------------------------


def _without_torch(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``chute ARGS`` in a fresh interpreter where ``import torch`` fails."""
    blocker = tmp_path / "no_torch"
    blocker.mkdir(exist_ok=True)
    (blocker / "sitecustomize.py").write_text(
        "import sys\n"
        "class _NoTorch:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'torch' or name.startswith('torch.'):\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, _NoTorch())\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(blocker), str(REPO / "src")])}
    code = "from chute.cli import main; main()"
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


@pytest.mark.parametrize(
    "args",
    [
        ["bench", "{data}", "--batch-size", "2", "--quiet"],
        ["demo", "--out", "{out}"],
    ],
)
def test_bench_and_demo_without_torch_print_one_line(tmp_path: Path, args: list[str]) -> None:
    data = tmp_path / "d.jsonl"
    data.write_text('{"input_ids": [1, 2, 3]}\n' * 4)
    filled = [a.format(data=data, out=tmp_path / "demo") for a in args]
    done = _without_torch(tmp_path, *filled)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "PyTorch" in lines[0]
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "demo").exists()  # the demo said so before any step


@pytest.mark.shared_data
def test_errors_name_flags_on_the_command_line_and_keys_in_a_config(
    shared_data: Path, tmp_path: Path
) -> None:
    data = str(shared_data / "llama-factory/mllm_demo.json")
    tok = str(shared_data / "tokenizers/qwen3")
    result = runner.invoke(app, ["validate", data, "--tokenizer", tok, "--image-tokens", "many"])
    assert result.exit_code == 2
    assert "error: --image-tokens: unknown preset many" in result.output
    missing = str(tmp_path / "nowhere")
    result = runner.invoke(app, ["validate", data, "--tokenizer", tok, "--media-root", missing])
    assert (
        result.exit_code == 2 and f"error: --media-root: {missing} is not a folder" in result.output
    )
    config = tmp_path / "c.yaml"
    config.write_text(f"sources: [{data}]\nrecipe:\n  tokenizer: {tok}\n  media_root: {missing}\n")
    result = runner.invoke(app, ["preprocess", str(config), "--out", str(tmp_path / "c")])
    assert result.exit_code == 2
    assert f"error: recipe.media_root: {missing} is not a folder" in result.output
    config.write_text(f"sources: [{data}]\nrecipe:\n  tokenizer: {tok}\n  image_tokens: null\n")
    result = runner.invoke(app, ["preprocess", str(config), "--out", str(tmp_path / "c")])
    assert "pass recipe.image_tokens=576" in result.output and "image_tokens=576 " not in (
        result.output.replace("recipe.image_tokens=576", "")
    )
    for output in (result.output,):
        assert "Traceback" not in output and "media_root=" not in output


@pytest.mark.shared_data
def test_a_glob_that_catches_a_non_data_file_reports_it_and_goes_on(shared_data: Path) -> None:
    pattern = str(shared_data / "llama-factory/*.json")  # catches dataset_info.json
    result = runner.invoke(app, ["index", pattern, "--json"])
    assert result.exit_code == 1
    out = orjson.loads(result.stdout)
    assert [s["path"].rsplit("/", 1)[-1] for s in out["skipped"]] == ["dataset_info.json"]
    indexed = {f["path"].rsplit("/", 1)[-1] for f in out["files"]}
    assert {"alpaca_en_demo.json", "mllm_demo.json"} <= indexed
    assert "dataset_info.json" not in indexed
    assert "warning: skipped" in result.output and "dataset_info.json" in result.output


def test_an_empty_data_file_is_reported_not_counted_as_zero_records(tmp_path: Path) -> None:
    # a failed export or a shard never written: "0 records" with status 0 hid it, and stats
    # called the plans of no data 100% efficient
    data, empty, blank = tmp_path / "d.jsonl", tmp_path / "e.jsonl", tmp_path / "b.jsonl"
    data.write_text('{"text": "a"}\n{"text": "b"}\n')
    empty.write_text("")
    blank.write_text("\n\n")
    result = runner.invoke(app, ["index", str(data), str(empty), str(blank), "--json"])
    assert result.exit_code == 1
    out = orjson.loads(result.stdout)
    assert [(s["path"], s["error"]) for s in out["skipped"]] == [
        (str(empty), "holds no records (an empty file)"),
        (str(blank), "holds no records (only 2 blank line(s))"),
    ]
    assert [f["path"] for f in out["files"]] == [str(data)]
    result = runner.invoke(app, ["validate", str(empty)])
    assert result.exit_code == 2
    assert f"error: {empty}: holds no records (an empty file)" in result.output


# -- 9. small things ------------------------------------------------------------------------


def test_help_lists_every_command_and_version_prints() -> None:
    help_text = runner.invoke(app, ["--help"]).output
    for name in ("index", "validate", "inspect", "stats", "preprocess", "bench", "demo"):
        assert f" {name} " in help_text
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.startswith("chute ")


def test_python_dash_m_chute_is_the_program(tmp_path: Path) -> None:
    """Where the ``chute`` script is not on ``PATH`` (a venv not activated, a notebook)."""
    data = tmp_path / "d.jsonl"
    data.write_text('{"a": 1}\n' * 10)
    run = subprocess.run(
        [sys.executable, "-m", "chute", "index", str(data), "--quiet"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert "10 records" in run.stdout
    usage = subprocess.run(
        [sys.executable, "-m", "chute", "--help"], capture_output=True, text=True, timeout=120
    )
    assert "Usage: python -m chute [OPTIONS] COMMAND" in usage.stdout


def test_index_prints_a_rate_with_sensible_precision(tmp_path: Path) -> None:
    data = tmp_path / "d.jsonl"
    data.write_text('{"a": 1}\n' * 1000)
    line = runner.invoke(app, ["index", str(data), "--quiet"]).output.splitlines()[-1]
    rate = line.rsplit(", ", 1)[-1].removesuffix(" GB/s")
    digits = rate.replace(",", "").replace(".", "").lstrip("0")
    assert len(digits) <= 4, line  # "0.052", not "0.051928"


def test_bench_says_what_the_lengths_pass_excluded_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("torch")
    from chute._internal import files

    monkeypatch.setattr(files, "_WARNED", set())  # as in a fresh `chute bench` process
    data = tmp_path / "d.jsonl"
    rows = ['{"input_ids": [1, 2, 3]}'] * 40 + ['{"input_ids": "broken"}']
    data.write_text("\n".join(rows) + "\n")
    args = ["bench", str(data), "-b", "4", "--plan", "grouped", "--workers", "0,1"]
    args += ["--steps", "2", "--profile-samples", "0"]
    with caplog.at_level("WARNING", logger="chute.loader"):
        result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    said = [r for r in caplog.records if "left out of the plan" in r.getMessage()]
    assert len(said) == 1  # three loaders (setup, then one per worker count), one warning


def test_demo_takes_the_recipe_options_of_the_other_commands() -> None:
    demo = _flags("demo")
    assert {flag.decls[0] for flag in RECIPE_OPTIONS if flag.name != "max_length"} <= demo
    cmd = typer.main.get_command(app).commands["demo"]  # type: ignore[attr-defined]
    template = next(p for p in cmd.params if p.name == "template")
    assert template.default is None  # the tokenizer's chat template, as everywhere
    result = runner.invoke(app, ["demo", "--image-tokens", "qwen2-vl"])
    assert result.exit_code == 2 and "apply to --data" in result.output


def test_stats_says_which_figures_are_before_max_length(tmp_path: Path) -> None:
    """The total counts what the plans feed (after max_length), the lengths line the samples
    as long as they are: each says which, where truncation makes them differ."""
    from cache_helpers import write_alpaca, write_tokenizer

    data = write_alpaca(tmp_path / "d.jsonl", 60)
    tok = write_tokenizer(tmp_path / "tok")
    args = ["stats", str(data), "--tokenizer", str(tok), "--template", "chatml", "--quiet"]
    cut = runner.invoke(app, [*args, "--max-length", "60", "--batch-size", "4"])
    assert cut.exit_code == 0, cut.output
    lines = cut.output.splitlines()
    assert "tokens (after max_length 60)" in lines[0]
    assert lines[2].startswith("lengths before max_length 60: min ")
    whole = runner.invoke(app, [*args, "--max-length", "4096", "--batch-size", "4"]).output
    assert whole.splitlines()[2].startswith("lengths: min ")

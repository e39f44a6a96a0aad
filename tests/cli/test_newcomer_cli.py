"""What a newcomer trips over on the command line (issue 27): one-line errors, not tracebacks;
mixture YAMLs and overrides everywhere; the migrate command's warnings; tokenizer folders."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from chute.cli import app

runner = CliRunner()


def _one_line_error(result: object, *, code: int = 2) -> str:
    """The error line of a failed command, checked to be one clean line with its exit code."""
    assert result.exit_code == code, result.output  # type: ignore[attr-defined]
    assert "Traceback" not in result.output  # type: ignore[attr-defined]
    assert result.exception is None or isinstance(result.exception, SystemExit)  # type: ignore[attr-defined]
    lines = [ln for ln in result.output.splitlines() if ln.startswith("error: ")]  # type: ignore[attr-defined]
    assert len(lines) == 1, result.output  # type: ignore[attr-defined]
    return lines[0]


# -- operating-system and encoding errors are one line ----------------------------------------


def _text_config(tmp_path: Path) -> Path:
    from chute.demo.data import write_demo_tokenizer

    tok = write_demo_tokenizer(tmp_path / "tok") / "tokenizer.json"
    (tmp_path / "d.jsonl").write_text('{"text": "hello there"}\n')
    config = tmp_path / "c.yaml"
    config.write_text(
        f"sources: [{tmp_path / 'd.jsonl'}]\nrecipe:\n  tokenizer: {tok}\n  format: text\n"
    )
    return config


def test_preprocess_into_a_folder_that_cannot_be_made_is_one_line(tmp_path: Path) -> None:
    config = _text_config(tmp_path)
    (tmp_path / "a_file").write_text("x")
    out = tmp_path / "a_file" / "cache"  # its parent is a file: the folder cannot be made
    result = runner.invoke(app, ["preprocess", str(config), "--out", str(out)])
    line = _one_line_error(result)
    assert str(tmp_path / "a_file") in line and "check the path" in line


@pytest.mark.parametrize("data", ["lines.jsonl", "one.jsonl", "records.json"])
def test_a_data_file_given_as_the_config_shows_a_config_that_works(
    tmp_path: Path, data: str
) -> None:
    """A newcomer's first ``chute preprocess data.jsonl`` met "is not valid YAML" (or a list,
    or unknown keys); it says what the command takes, and the config it shows runs."""
    import json

    from chute.demo.data import write_demo_tokenizer

    tok = write_demo_tokenizer(tmp_path / "tok") / "tokenizer.json"
    records = [{"instruction": f"Say {i}.", "output": f"{i}."} for i in range(3)]
    path = tmp_path / data
    if data == "records.json":
        path.write_text(json.dumps(records))
    else:
        rows = records[:1] if data == "one.jsonl" else records
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = runner.invoke(app, ["preprocess", str(path), "--out", str(tmp_path / "c")])
    line = _one_line_error(result)
    assert f"{path} is a data file; this command takes a preprocessing config" in line
    shown = result.output.split(line, 1)[1].split("saved as config.yaml")[0]
    config = tmp_path / "config.yaml"
    config.write_text(shown.replace("path/to/tokenizer", str(tok)))
    result = runner.invoke(app, ["preprocess", str(config), "--out", str(tmp_path / "c")])
    assert result.exit_code == 0, result.output


def test_migrate_a_missing_xtuner_config_is_one_line(tmp_path: Path) -> None:
    result = runner.invoke(app, ["migrate", "xtuner", str(tmp_path / "missing.py")])
    line = _one_line_error(result)
    assert "missing.py" in line and "no such file" in line.lower()


def test_a_folder_where_a_file_is_expected_is_one_line(tmp_path: Path) -> None:
    result = runner.invoke(app, ["migrate", "xtuner", str(tmp_path)])
    line = _one_line_error(result)
    assert str(tmp_path) in line


def test_a_config_that_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_bytes(b"\xff\xfe sources: [a.jsonl]\n")
    result = runner.invoke(app, ["preprocess", str(config), "--out", str(tmp_path / "o")])
    line = _one_line_error(result)
    assert "c.yaml" in line and "utf-8" in line.lower()


def test_os_error_message_names_path_reason_and_fix() -> None:
    import errno

    from chute.cli._output import os_error_message

    assert os_error_message(PermissionError(errno.EACCES, "Permission denied", "/x")) == (
        "/x: Permission denied (check its permissions, or use a path you may read or write)"
    )
    assert "disk is full" in os_error_message(OSError(errno.ENOSPC, "No space left", "/y"))
    assert os_error_message(OSError("plain")) == "plain"


def test_a_bug_keeps_its_traceback(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Only errors about the user's input become one line: a bug in chute still shows."""
    import chute.mixture.migrate as migrate

    def broken(*args: object, **kwargs: object) -> None:
        raise KeyError("a bug")

    monkeypatch.setattr(migrate, "migrate_xtuner", broken)
    script = tmp_path / "x.py"
    script.write_text("x = 1\n")
    result = runner.invoke(app, ["migrate", "xtuner", str(script)])
    assert isinstance(result.exception, KeyError)


# -- --tokenizer DIR without tokenizer.json ----------------------------------------------------


def test_a_tokenizer_folder_without_tokenizer_json_is_named(tmp_path: Path) -> None:
    (tmp_path / "d.jsonl").write_text('{"text": "hello"}\n')
    folder = tmp_path / "tok"
    folder.mkdir()
    (folder / "tokenizer_config.json").write_text('{"tokenizer_class": "Qwen2Tokenizer"}')
    result = runner.invoke(app, ["validate", str(tmp_path / "d.jsonl"), "--tokenizer", str(folder)])
    line = _one_line_error(result)
    assert line.startswith(
        f"error: --tokenizer: no tokenizer.json in {folder} (it holds tokenizer_config.json)"
    )


# -- --media-allowed-roots, which the unsafe_path hint names -----------------------------------


def test_media_allowed_roots_is_a_flag_where_the_hint_names_it(tmp_path: Path) -> None:
    from chute.demo.data import write_demo_tokenizer
    from chute.demo.multimodal import write_multimodal_demo

    made = write_multimodal_demo(tmp_path / "gen", records=20)
    tok = write_demo_tokenizer(tmp_path / "tok", made.corpus) / "tokenizer.json"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "red.png").write_bytes((made.root / "images" / "red_circle.png").read_bytes())
    data = tmp_path / "data"
    data.mkdir()
    (data / "images").symlink_to(elsewhere)  # images -> elsewhere: outside the data's folder
    (data / "d.jsonl").write_text(
        '{"image": "images/red.png", "conversations": [{"from": "human", "value": '
        '"<image>\\nWhat?"}, {"from": "gpt", "value": "A red circle."}]}\n'
    )
    args = ["validate", str(data / "d.jsonl"), "--tokenizer", str(tok), "--template", "chatml"]
    args += ["--image-tokens", "4", "--json"]
    refused = runner.invoke(app, args)
    assert refused.exit_code == 1
    assert "name the target's folder in --media-allowed-roots" in refused.output
    allowed = runner.invoke(app, [*args, "--media-allowed-roots", str(elsewhere)])
    assert allowed.exit_code == 0, allowed.output
    assert '"valid": 1' in allowed.output


# -- a mixture YAML, with dotted overrides, wherever data goes ---------------------------------


@pytest.fixture
def mixture(tmp_path: Path) -> Path:
    """Two datasets (a: 60 demo records with 3 planted faults; b: 40 alpaca records + 1 broken)."""
    import json

    import yaml

    from chute.demo.data import write_demo_dataset, write_demo_tokenizer

    write_demo_dataset(tmp_path / "a.jsonl", 60)
    tok = write_demo_tokenizer(tmp_path / "tok") / "tokenizer.json"
    lines = [
        json.dumps({"instruction": f"Say {i}", "output": f"{i} " * (i % 7 + 1)}) for i in range(40)
    ]
    (tmp_path / "b.jsonl").write_text("\n".join([*lines, "{broken"]) + "\n")
    path = tmp_path / "mix.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "recipe": {"tokenizer": str(tok), "template": "chatml", "max_length": 128},
                "datasets": {
                    "a": {"sources": [str(tmp_path / "a.jsonl")], "weight": 0.5},
                    "b": {
                        "sources": [str(tmp_path / "b.jsonl")],
                        "format": "alpaca",
                        "weight": 0.5,
                    },
                },
            }
        )
    )
    return path


def test_validate_a_mixture_runs_each_datasets_recipe(mixture: Path, tmp_path: Path) -> None:
    import orjson

    rejects = tmp_path / "rejects.jsonl"
    result = runner.invoke(app, ["validate", str(mixture), "--rejects", str(rejects)])
    assert result.exit_code == 0, result.output
    assert "check: mixture" in result.output and "bad_json" in result.output
    out = runner.invoke(app, ["validate", str(mixture), "--json"])
    report = orjson.loads(out.stdout)
    assert report["records"] == 101 and report["rejected"] == 4
    assert (report["target"], report["ok"]) == ("mixture", True)
    assert {n: r["rejected"] for n, r in report["datasets"].items()} == {"a": 3, "b": 1}
    assert len(rejects.read_text().splitlines()) == 4
    # an override reaches the dataset: b read as sharegpt rejects every record, and exits 1
    broken = runner.invoke(app, ["validate", str(mixture), "datasets.b.format=sharegpt", "-q"])
    assert broken.exit_code == 1
    assert "error: dataset 'b': 41 of 41 records rejected" in broken.output


def test_recipe_flags_with_a_mixture_say_to_override_its_keys(mixture: Path) -> None:
    result = runner.invoke(app, ["validate", str(mixture), "--max-length", "64"])
    line = _one_line_error(result)
    assert "is a mixture: each dataset's recipe comes from it; leave out --max-length" in line
    assert "recipe.max_length=4096" in line


def test_inspect_a_mixture_record_with_its_datasets_recipe(mixture: Path) -> None:
    import orjson

    args = ["inspect", str(mixture), "datasets.b.system=Be brief.", "--dataset", "b", "-i", "3"]
    result = runner.invoke(app, [*args, "--no-color"])
    assert result.exit_code == 0, result.output
    assert "record 3 of 41 of dataset b; format alpaca" in result.output
    assert "Be brief." in result.output and "Say 3" in result.output
    shown = orjson.loads(runner.invoke(app, [*args, "--json"]).stdout)
    assert shown["dataset"] == "b" and shown["line"] == 4
    # without --dataset the index runs over the datasets end to end: 60 of a, then b
    whole = orjson.loads(runner.invoke(app, ["inspect", str(mixture), "-i", "63", "--json"]).stdout)
    assert whole["dataset"] == "b" and whole["line"] == 4


def test_stats_takes_overrides_after_a_mixture(mixture: Path) -> None:
    import orjson

    args = ["stats", str(mixture), "--max-length", "128", "--batch-size", "4", "--json"]
    result = runner.invoke(app, [*args, "datasets.a.weight=null", "datasets.a.samples=10"])
    assert result.exit_code == 0, result.output
    stats = orjson.loads(result.stdout)
    assert stats["datasets"]["a"]["epoch_samples"] == 10
    assert stats["input"]["overrides"] == ["datasets.a.weight=null", "datasets.a.samples=10"]


def test_index_of_a_mixture_indexes_every_dataset(mixture: Path) -> None:
    import orjson

    result = runner.invoke(app, ["index", str(mixture), "--json"])
    assert result.exit_code == 0, result.output
    files = orjson.loads(result.stdout)["files"]
    assert [(Path(f["path"]).name, f["records"]) for f in files] == [
        ("a.jsonl", 60),
        ("b.jsonl", 41),
    ]


def test_bench_a_mixture(mixture: Path) -> None:
    pytest.importorskip("torch")
    import orjson

    args = ["bench", str(mixture), "--batch-size", "4", "--workers", "0", "--steps", "2"]
    result = runner.invoke(app, [*args, "--profile-samples", "0", "--json", "-q"])
    assert result.exit_code == 0, result.output
    report = orjson.loads(result.stdout)
    assert report["source"].startswith("MixtureSource(a: 60, b: 41)")
    assert "from the mixture" in report["recipe"]


def test_overrides_after_data_files_and_yaml_that_is_no_mixture_are_named(
    mixture: Path, tmp_path: Path
) -> None:
    data = str(tmp_path / "a.jsonl")
    line = _one_line_error(runner.invoke(app, ["validate", data, "recipe.max_length=64"]))
    assert "recipe.max_length=64: dotted key=value overrides apply to a mixture YAML" in line
    line = _one_line_error(
        runner.invoke(app, ["stats", str(mixture), data, "--max-length", "8", "--batch-size", "2"])
    )
    assert f"{data}: after the mixture {mixture}, chute stats takes only dotted key=value" in line
    config = tmp_path / "config.yaml"
    config.write_text(f"sources: [{data}]\nrecipe: {{tokenizer: x}}\n")
    line = _one_line_error(runner.invoke(app, ["validate", str(config)]))
    assert "a YAML file without datasets: is neither a mixture nor data" in line
    assert f"chute preprocess {config} --out DIR" in line


def test_demo_names_a_mixture_given_as_data(mixture: Path, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    result = runner.invoke(
        app, ["demo", "--data", str(mixture), "--tokenizer", str(tmp_path / "tok")]
    )
    line = _one_line_error(result)
    assert "is a mixture YAML; chute demo runs on one JSONL / JSON data file" in line


def test_demo_refuses_records_with_data_instead_of_ignoring_it(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    data = tmp_path / "d.jsonl"
    data.write_text('{"instruction": "a", "output": "b"}\n')
    args = ["demo", "--data", str(data), "--tokenizer", str(tmp_path / "tok"), "--records", "30"]
    line = _one_line_error(runner.invoke(app, args))
    assert "--records sizes the generated data; with --data the demo reads every record" in line

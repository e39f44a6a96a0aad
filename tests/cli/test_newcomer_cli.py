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

    monkeypatch.setattr(migrate, "from_xtuner", broken)
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

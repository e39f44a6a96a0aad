"""Each ``chute`` subcommand is imported when it runs, not on every start."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer
import typer.core
from typer.testing import CliRunner

from cache_helpers import config, write_alpaca, write_tokenizer
from chute.cli import _COMMANDS, app

TESTS = Path(__file__).resolve().parents[1]
OTHERS = [f"chute.cli.{name}_cmd" for name in _COMMANDS if name != "preprocess"]


def imported_after(args: list[str]) -> list[str]:
    """The other subcommands' modules imported by ``chute *args`` (run in a fresh process)."""
    code = (
        "import json, sys\n"
        "from chute.cli import app\n"
        f"try:\n    app({args!r})\nexcept SystemExit:\n    pass\n"
        f"print(json.dumps(sorted(m for m in {OTHERS!r} if m in sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])  # the names printed last


def test_one_command_imports_no_other() -> None:
    assert imported_after(["preprocess", "--help"]) == []


def test_the_group_help_lists_every_command() -> None:
    assert sorted(imported_after(["--help"])) == sorted(OTHERS)


def test_every_command_is_found_by_name_in_the_declared_order() -> None:
    group = typer.main.get_command(app)
    assert list(group.commands) == _COMMANDS  # type: ignore[attr-defined]
    for name in _COMMANDS:
        assert group.commands[name].name == name  # type: ignore[attr-defined]


def test_a_mistyped_command_is_matched_against_all_of_them() -> None:
    if "suggest_commands" not in inspect.signature(typer.core.TyperGroup.__init__).parameters:
        pytest.skip("this typer suggests no commands (typer 0.20 and later do)")
    result = CliRunner().invoke(app, ["preprocss"])
    assert result.exit_code == 2
    assert "Did you mean 'preprocess'?" in result.output


@pytest.mark.parametrize("args", [[name] for name in _COMMANDS] + [["migrate", "xtuner"]])
def test_help_paragraphs_are_not_broken_at_the_docstrings_lines(args: list[str]) -> None:
    # typer keeps a docstring's line breaks and the terminal wraps each line again: on a wide
    # terminal every paragraph of the help must come out as one line
    module = __import__(f"chute.cli.{args[0]}_cmd", fromlist=["register"])
    holder = typer.Typer()
    holder.callback()(lambda: None)
    module.register(holder)
    raw = typer.main.get_command(holder).commands[args[0]]  # type: ignore[attr-defined]
    for name in args[1:]:
        raw = raw.commands[name]
    paragraphs = [" ".join(p.split()) for p in inspect.cleandoc(raw.help).split("\n\n")]
    result = CliRunner().invoke(app, [*args, "--help"], env={"COLUMNS": "1000"})
    assert result.exit_code == 0, result.output
    lines = {" ".join(line.strip(" │").split()) for line in result.output.splitlines()}
    assert all(p in lines for p in paragraphs), (paragraphs, result.output)


# What a text-only ``chute preprocess`` on a built-in template never needs, imported by none
# of its steps: they were most of the program's start that was not chute's work (typer 0.29's
# pydantic about 0.09 s, jinja2 and PIL's filters about 0.03 s on two cores; docs/benchmarks.md)
NOT_FOR_TEXT = ("jinja2", "PIL.ImageFilter", "PIL.ImageEnhance", "pydantic")


def test_a_text_preprocess_on_a_builtin_template_imports_no_jinja_pydantic_or_filters(
    tmp_path: Path,
) -> None:
    tok = write_tokenizer(tmp_path / "tok")
    cfg = tmp_path / "run.json"
    cfg.write_text(json.dumps(config(write_alpaca(tmp_path / "a.jsonl", 40), tok)))
    code = (
        "import json, sys\n"
        "from chute.cli import app\n"
        "try:\n    app(sys.argv[1:])\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
        f"print(json.dumps([m for m in {NOT_FOR_TEXT!r} if m in sys.modules]))\n"
    )
    args = ["preprocess", str(cfg), "--out", str(tmp_path / "out"), "--quiet", "--json"]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
    }
    out = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, check=True
    )
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
    assert (tmp_path / "out" / "config.yaml").is_file()  # the run itself went through


def test_a_jinja_template_still_loads_when_first_asked_for() -> None:
    from chute.templates import JinjaTemplate, get_template

    template = get_template("{% for m in messages %}{{ m.content }}{% endfor %}")
    assert isinstance(template, JinjaTemplate)
    assert template.spec()["kind"] == "jinja"

"""Each ``chute`` subcommand is imported when it runs, not on every start."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys

import pytest
import typer
import typer.core
from typer.testing import CliRunner

from chute.cli import _COMMANDS, app

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

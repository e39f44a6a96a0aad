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

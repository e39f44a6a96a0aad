"""The shared option groups: declared once in chute.cli._options, present on every command."""

from __future__ import annotations

import dataclasses

import pytest
import typer

from chute.cli import app
from chute.cli._options import RECIPE_OPTIONS, OutputArgs, RecipeArgs, recipe_options

RECIPE_FLAGS = {flag.decls[0] for flag in RECIPE_OPTIONS}


def _flags(command: str) -> set[str]:
    cmd = typer.main.get_command(app).commands[command]  # type: ignore[attr-defined]
    return {opt for param in cmd.params for opt in param.opts}


@pytest.mark.parametrize(
    ("command", "own"),
    [
        ("validate", set()),
        ("inspect", set()),
        ("bench", set()),
        # stats declares --max-length, --overflow and --stride itself (plan-wide meanings); its
        # recipe runs without max_length, so which part a cut keeps (--truncation) cannot apply
        ("stats", {"--truncation"}),
    ],
)
def test_every_recipe_command_takes_every_recipe_flag(command: str, own: set[str]) -> None:
    assert RECIPE_FLAGS - own <= _flags(command)


@pytest.mark.parametrize("command", ["index", "validate", "stats", "bench", "preprocess"])
def test_output_flags_on_every_reporting_command(command: str) -> None:
    assert {"--json", "--quiet", "-q"} <= _flags(command)


def test_the_flags_and_the_value_class_name_the_same_fields() -> None:
    assert {f.name for f in dataclasses.fields(RecipeArgs)} == {f.name for f in RECIPE_OPTIONS}


def test_unknown_option_names_are_refused_at_definition() -> None:
    with pytest.raises(TypeError, match="unknown recipe options"):
        recipe_options(exclude=("max_lenght",))


def test_given_lists_flags_set_by_the_user() -> None:
    args = RecipeArgs(tokenizer="t", max_length=512, format="auto", overflow="drop")
    assert args.given() == {"--max-length": 512, "--overflow": "drop"}
    assert OutputArgs(as_json=True).progress is False

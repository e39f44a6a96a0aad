"""The shared option groups: declared once in chute.cli._options, present on every command."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from chute._internal.config_checks import kinds_of, option
from chute.cli import app
from chute.cli._options import RECIPE_OPTIONS, OutputArgs, RecipeArgs, recipe_options
from chute.errors import ConfigError
from chute.recipe.config import RecipeConfig
from recipe_helpers import tiny_tokenizer

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


def test_every_flag_is_a_declared_recipe_option_and_reads_back_as_its_keyword() -> None:
    declared = {f.name for f in dataclasses.fields(RecipeConfig)}
    assert {f.name for f in RECIPE_OPTIONS} <= declared
    keywords = RecipeArgs().keywords()
    assert set(keywords) == {f.name for f in RECIPE_OPTIONS}
    assert keywords["image_tokens"] == "auto"  # left out: the Recipe's default
    assert RecipeArgs(columns="prompt=q").keywords()["columns"] == {"prompt": "q"}


def test_a_recipe_option_declared_once_is_a_checked_config_key_and_a_flag_on_every_command(
    tmp_path: Path,
) -> None:
    # --max-image-pixels was added as one cli=CliFlag(...) on RecipeConfig.max_image_pixels
    for command in ("validate", "inspect", "bench", "stats"):
        assert "--max-image-pixels" in _flags(command)
    recipe = RecipeArgs(
        tokenizer=tiny_tokenizer(), template="chatml", max_image_pixels=1000
    ).build()
    assert recipe.media.max_image_pixels == 1000
    with pytest.raises(ConfigError, match="max_image_pixels: expected a positive integer, got 0"):
        RecipeConfig(tokenizer="t", max_image_pixels=0)
    data = tmp_path / "d.jsonl"
    data.write_text('{"instruction": "hi", "output": "ho"}\n')
    result = CliRunner().invoke(app, ["validate", str(data), "--max-image-pixels", "0", "--json"])
    assert result.exit_code == 2
    assert "--max-image-pixels need --tokenizer" in result.output  # named by its flag


def test_config_checks_are_read_from_the_annotations() -> None:
    kinds = RecipeConfig.KINDS
    assert kinds["max_length"] == "int+?" and kinds["stride"] == "int0"
    assert kinds["image_token_id"] == "int?" and kinds["columns"] == "map[str]"
    assert kinds["overflow"][1] == "one of truncate, drop, split"

    @dataclasses.dataclass
    class Unchecked:
        mystery: complex = option(1j)

    with pytest.raises(TypeError, match=r"Unchecked.mystery: cannot check"):
        kinds_of(Unchecked)


def test_an_integers_minimum_holds_for_an_optional_one_too() -> None:
    from chute._internal.config_checks import check_fields
    from chute.recipe.options import check_plain

    @dataclasses.dataclass
    class Counts:
        at_least_zero: int | None = option(None, minimum=0)
        any_integer: int | None = option(None, minimum=None)
        positive: int | None = option(None)

    kinds = kinds_of(Counts)
    assert kinds == {"at_least_zero": "int0?", "any_integer": "int?", "positive": "int+?"}
    assert check_fields(kinds, {"at_least_zero": -1, "any_integer": -200, "positive": None}) == [
        ("at_least_zero", "expected an integer >= 0 or null, got -1")
    ]
    # LLaVA's own code writes -200 for image tokens: allowed, as declared
    assert check_plain({"image_token_id": -200}) == []
    assert check_plain({"image_token_id": "x"}) == [
        ("image_token_id", "expected an integer or null, got 'x'")
    ]

    @dataclasses.dataclass
    class Odd:
        n: int = option(0, minimum=5)

    with pytest.raises(TypeError, match=r"Odd.n: minimum is 1, 0 or None"):
        kinds_of(Odd)


def test_unknown_option_names_are_refused_at_definition() -> None:
    with pytest.raises(TypeError, match="unknown recipe options"):
        recipe_options(exclude=("max_lenght",))


def test_given_lists_flags_set_by_the_user() -> None:
    args = RecipeArgs(tokenizer="t", max_length=512, format="auto", overflow="drop")
    assert args.given() == {"--max-length": 512, "--overflow": "drop"}
    assert OutputArgs(as_json=True).progress is False

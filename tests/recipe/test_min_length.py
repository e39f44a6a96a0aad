"""``min_length``: a sample with fewer tokens is a counted reject (``too_short``), everywhere.

The option was added as one declaration (a ``RecipeOptions`` field): these tests show it as a
``Recipe`` keyword, a config key, a flag of every command that takes a recipe, and a
fingerprint entry, and its use as a counted skip through every entry point.
"""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from cache_helpers import write_tokenizer
from chute import Recipe
from chute.cache.config import PreprocessConfig
from chute.cli import app
from chute.errors import SAMPLE_ERROR_KINDS, ConfigError, SampleError
from chute.recipe.validate import validate_source
from chute.sources import JsonlSource
from recipe_helpers import tiny_tokenizer

TOK = tiny_tokenizer()
SHORT = {"instruction": "hi", "output": "ho"}
LONG = {"instruction": "The quick brown fox jumps over the lazy dog. " * 3, "output": "Yes."}


def _length(record: dict) -> int:
    return int(Recipe(tokenizer=TOK, template="chatml")(record)["length"])


@pytest.fixture
def data(tmp_path: Path) -> Path:
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in [SHORT, LONG, SHORT, LONG]))
    return path


def test_a_shorter_sample_is_rejected_as_too_short() -> None:
    short, long = _length(SHORT), _length(LONG)
    assert short < long
    recipe = Recipe(tokenizer=TOK, template="chatml", min_length=short + 1)
    assert recipe(LONG)["length"] == long  # kept, unchanged
    with pytest.raises(
        SampleError, match=rf"^too_short: {short} tokens, fewer than min_length="
    ) as e:
        recipe(SHORT)
    assert e.value.kind == "too_short" and "too_short" in SAMPLE_ERROR_KINDS
    # at its length exactly, a sample is kept
    assert Recipe(tokenizer=TOK, template="chatml", min_length=short)(SHORT)["length"] == short
    # the batched path decides the same
    out = recipe.batch([SHORT, LONG])
    assert isinstance(out[0], SampleError) and out[0].kind == "too_short"
    assert isinstance(out[1], dict) and out[1]["length"] == long


def test_rejects_are_counted_by_every_pass(data: Path) -> None:
    recipe = Recipe(tokenizer=TOK, template="chatml", min_length=_length(SHORT) + 1)
    report = validate_source(JsonlSource(data), recipe, workers=1)
    assert report.valid == 2
    assert report.tally.counts == {"too_short": 2}


def test_it_is_in_the_fingerprint_only_when_set() -> None:
    """Caches built before the option existed stay valid; one built with another value does not."""
    plain = Recipe(tokenizer=TOK, template="chatml").fingerprint()
    assert "min_length" not in plain
    set_ = Recipe(tokenizer=TOK, template="chatml", min_length=4).fingerprint()
    assert set_ == {**plain, "min_length": 4}


def test_checked_as_a_keyword_and_against_max_length() -> None:
    with pytest.raises(
        ConfigError, match=r"^min_length: expected a positive integer or null, got 0"
    ):
        Recipe(tokenizer=TOK, template="chatml", min_length=0)
    with pytest.raises(ConfigError, match=r"^min_length: 65 is more than max_length=64"):
        Recipe(tokenizer=TOK, template="chatml", max_length=64, min_length=65)
    # windows of a long document: the document's length counts, so more than max_length is fine
    Recipe(tokenizer=TOK, template="chatml", max_length=64, overflow="split", min_length=65)


def test_a_config_key(tmp_path: Path) -> None:
    tok = str(write_tokenizer(tmp_path / "tok"))
    config = PreprocessConfig.from_dict(
        {"sources": ["d.jsonl"], "recipe": {"tokenizer": tok, "template": "chatml"}},
        overrides=["recipe.min_length=9"],
    )
    assert config.recipe.min_length == 9
    assert "min_length: 9" in config.to_yaml()
    assert config.recipe.build().fingerprint()["min_length"] == 9
    with pytest.raises(ConfigError, match=r"recipe.min_length: expected a positive integer"):
        PreprocessConfig.from_dict(
            {"sources": [], "recipe": {"tokenizer": tok, "min_length": "short"}}
        )


def test_a_flag_of_every_recipe_command(tmp_path: Path, data: Path) -> None:
    tok = str(write_tokenizer(tmp_path / "tok"))
    help_text = CliRunner().invoke(app, ["validate", "--help"]).output
    assert "--min-length" in help_text and "too_short" in help_text
    args = ["validate", str(data), "--tokenizer", tok, "--template", "chatml", "--workers", "1"]
    minimum = str(_length(SHORT) + 1)
    result = CliRunner().invoke(app, [*args, "--min-length", minimum, "--json"])
    out = orjson.loads(result.stdout)
    assert out["valid"] == 2 and out["by_reason"] == {"too_short": 2}, result.output

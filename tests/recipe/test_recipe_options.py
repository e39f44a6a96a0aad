"""Every recipe option declared once: the Recipe's keywords are RecipeOptions' fields.

Also the option groups ``TokenizerSpec`` and ``TemplateSpec``: given as one value or as their
keywords, never both, with the same samples and fingerprint either way.
"""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from cache_helpers import write_tokenizer
from chute import Recipe
from chute.cache.config import RecipeConfig
from chute.errors import ConfigError
from chute.recipe import LengthPolicy, RecipeOptions, TemplateSpec, TokenizerSpec
from chute.recipe.options import OPTION_NAMES, option_defaults
from recipe_helpers import tiny_tokenizer

TOK = tiny_tokenizer()
RECORD = {"instruction": "Say hi", "output": "Hello there!"}


def test_the_recipe_takes_every_declared_option_and_nothing_else() -> None:
    """The signature help() and IDEs' runtime completion show is the declarations'."""
    params = inspect.signature(Recipe).parameters
    declared = {f.name: f for f in dataclasses.fields(RecipeOptions)}
    groups = {"length", "media"}  # groups of options, not options
    assert set(params) == set(declared) | groups
    defaults = option_defaults()
    for name in set(declared) - {"tokenizer"}:
        assert params[name].default == defaults[name], name
        assert params[name].kind is inspect.Parameter.KEYWORD_ONLY
    assert set(OPTION_NAMES) == set(declared) == {f.name for f in dataclasses.fields(RecipeConfig)}


def test_every_option_is_documented_in_the_recipe_docstring() -> None:
    doc = Recipe.__doc__ or ""
    for f in dataclasses.fields(RecipeOptions):
        assert f.metadata["doc"], f"{f.name} has no doc="
        assert f"        {f.name}: " in doc, f.name


def test_an_unknown_keyword_names_the_nearest_option() -> None:
    with pytest.raises(TypeError, match=r"'max_lenght' \(did you mean max_length\?\)"):
        Recipe(tokenizer=TOK, template="chatml", max_lenght=8)


def test_a_plain_value_is_held_to_the_declared_check() -> None:
    """The same check as a config's key, for an option no part of the recipe checks itself."""
    with pytest.raises(ConfigError, match=r"^check_images: expected true or false, got 'yes'"):
        Recipe(tokenizer=TOK, template="chatml", check_images="yes")
    with pytest.raises(
        ConfigError, match=r"^tokenizer_backend: expected one of auto, .*got .fast."
    ):
        Recipe(tokenizer=TOK, template="chatml", tokenizer_backend="fast")


def _same(a: Recipe, b: Recipe) -> None:
    assert a.fingerprint() == b.fingerprint()
    sa, sb = a(RECORD), b(RECORD)
    assert sa["input_ids"].tolist() == sb["input_ids"].tolist()
    assert sa["labels"].tolist() == sb["labels"].tolist()


def test_a_tokenizer_spec_is_its_keywords(tmp_path) -> None:
    path = str(write_tokenizer(tmp_path / "tok"))
    loose = Recipe(tokenizer=path, template="chatml", special_tokens={"pad": "</s>"})
    spec = TokenizerSpec(path, special_tokens={"pad": "</s>"})
    _same(loose, Recipe(tokenizer=spec, template="chatml"))
    assert spec.keywords()["special_tokens"] == {"pad": "</s>"}


def test_a_template_spec_is_its_keywords() -> None:
    loose = Recipe(
        tokenizer=TOK,
        template="chatml",
        system="Be brief.",
        train_on="all",
        template_vars={"x": 1},
    )
    spec = TemplateSpec("chatml", system="Be brief.", train_on="all", variables={"x": 1})
    grouped = Recipe(tokenizer=TOK, template=spec)
    _same(loose, grouped)
    assert grouped.system == "Be brief."
    assert grouped.options["train_on"] == loose.options["train_on"] == "all"


def test_specs_serialise_as_the_config_keys(tmp_path) -> None:
    """In YAML the groups are the flat keys they always were: the same config, same fingerprint."""
    path = write_tokenizer(tmp_path / "tok")
    tok = TokenizerSpec(str(path), backend="hf")
    tpl = TemplateSpec("chatml", system="Be brief.")
    config = RecipeConfig(**tok.keywords(), **tpl.keywords(), max_length=64)
    assert config == RecipeConfig(
        tokenizer=str(path),
        tokenizer_backend="hf",
        template="chatml",
        system="Be brief.",
        max_length=64,
    )
    built = Recipe(tokenizer=tok, template=tpl, length=LengthPolicy(max_length=64))
    assert config.build().fingerprint() == built.fingerprint()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (
            {"tokenizer": TokenizerSpec(TOK), "tokenizer_backend": "hf"},
            r"^tokenizer: tokenizer options given twice: tokenizer=TokenizerSpec\(\.\.\.\) and "
            r"tokenizer_backend; set them in the TokenizerSpec",
        ),
        (
            {
                "tokenizer": TOK,
                "template": TemplateSpec("chatml"),
                "system": "S",
                "train_on": "all",
            },
            r"^template: template options given twice: template=TemplateSpec\(\.\.\.\) and "
            r"system, train_on",
        ),
    ],
)
def test_a_spec_and_its_keywords_are_never_both_given(kwargs: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        Recipe(**kwargs)


def test_specs_check_themselves_when_made() -> None:
    with pytest.raises(ConfigError, match=r"^train_on: expected one of assistant, last, all"):
        TemplateSpec("chatml", train_on="both")
    with pytest.raises(ConfigError, match=r"^tokenizer: required"):
        TokenizerSpec("")
    with pytest.raises(ConfigError, match=r"^special_tokens: expected a mapping of names"):
        TokenizerSpec("tok.json", special_tokens={"pad": 3})  # type: ignore[dict-item]
    spec = TemplateSpec("chatml", variables={"a": 1})
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.system = "x"  # type: ignore[misc]

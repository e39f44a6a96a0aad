"""Mixture definitions: YAML and Python, every problem named by its key, run-wide vs per-dataset."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from chute import Mixture, MixtureEntry
from chute.errors import ConfigError
from chute.mixture import PER_DATASET, RUN_WIDE


def test_yaml_round_trip_and_dotted_overrides(tmp_path: Path) -> None:
    data = {
        "recipe": {"tokenizer": "tok.json", "template": "qwen3", "system": "Be kind."},
        "datasets": {
            "a": {"sources": ["a.jsonl"], "weight": 3, "val": 0.01},
            "b": {
                "sources": "b.jsonl",
                "proportion": 1,
                "system": "Be brief.",
                "media_root": "imgs",
            },
        },
        "batching": "per_dataset",
    }
    path = tmp_path / "mix.yaml"
    path.write_text(yaml.safe_dump(data))
    mix = Mixture.load(path, ["datasets.a.weight=2", "epoch_samples=100"])
    assert mix.names == ["a", "b"] and mix["a"].weight == 2 and mix["b"].weight == 1
    assert mix.epoch_samples == 100 and mix.batching == "per_dataset"
    assert mix.recipe_config("a").system == "Be kind."  # the mixture's default
    assert mix.recipe_config("b").system == "Be brief."  # its own
    assert mix.recipe_config("b").template == "qwen3"  # run-wide
    again = Mixture.from_dict(yaml.safe_load(mix.to_yaml()))
    assert again.to_dict() == mix.to_dict()
    listed = Mixture.from_dict({"datasets": [{"name": "x", "sources": ["x.jsonl"]}]})
    assert listed.names == ["x"] and listed.recipe is None


def test_every_problem_is_named_by_its_key() -> None:
    bad = {
        "recipe": {"tokenizer": "t", "max_lenght": 5},
        "datasets": {
            "a": {"sources": [], "weight": 1, "repeat": 2},
            "b": {"sources": ["b.jsonl"], "tokenizer": "other", "val": 1.5, "formatt": "x"},
        },
        "batching": "shuffled",
    }
    with pytest.raises(ConfigError) as info:
        Mixture.from_dict(bad)
    text = str(info.value)
    for expected in (
        "recipe.max_lenght: unknown key (did you mean max_length?)",
        "datasets.a.sources: expected a non-empty list",
        "datasets.a.repeat: give one of weight, repeat or samples, not weight and repeat",
        "datasets.b.tokenizer: run-wide (it defines the model)",
        "datasets.b.val: expected a fraction in (0, 1), a count >= 0, or null, got 1.5",
        "datasets.b.formatt: unknown key (did you mean format?)",
        "batching: expected one of mixed, per_dataset, got 'shuffled'",
    ):
        assert expected in text, (expected, text)


def test_another_tools_name_for_the_files_points_to_sources() -> None:
    """``path:`` is a newcomer's first guess; the nearest spelling ("repeat") would mislead."""
    bad = {"datasets": {"a": {"path": "a.jsonl"}, "b": {"data_files": ["b.jsonl"]}}}
    with pytest.raises(ConfigError) as info:
        Mixture.from_dict(bad)
    text = str(info.value)
    assert "datasets.a.path: unknown key (chute calls it sources (a list of paths" in text
    assert "datasets.b.data_files: unknown key (chute calls it sources" in text
    assert "did you mean repeat" not in text


def test_python_names_the_same_problems() -> None:
    with pytest.raises(ConfigError, match=r"datasets\.x\.samples: expected an integer >= 0"):
        MixtureEntry("x", "x.jsonl", samples=-1)
    with pytest.raises(ConfigError, match=r"datasets\.a: the name is used more than once"):
        Mixture([MixtureEntry("a", "1.jsonl"), MixtureEntry("a", "2.jsonl")])
    with pytest.raises(ConfigError, match=r"recipe\.tokenizer: required"):
        Mixture([MixtureEntry("a", "1.jsonl")], recipe={"template": "qwen3"})


def test_run_wide_and_per_dataset_options_split_the_recipe() -> None:
    assert {"tokenizer", "template", "max_length", "overflow", "image_token"} <= set(RUN_WIDE)
    assert {"format", "columns", "tags", "system", "media_root", "image_tokens"} <= set(PER_DATASET)
    assert not set(RUN_WIDE) & set(PER_DATASET)


def test_a_dataset_recipe_error_names_the_dataset(tmp_path: Path, shared_data: Path) -> None:
    from chute.mixture import open_mixture

    data = tmp_path / "a.jsonl"
    data.write_text('{"instruction": "a", "output": "b"}\n')
    mix = Mixture(
        [MixtureEntry("ok", data), MixtureEntry("broken", data, image_tokens="no-such-preset")],
        recipe={"tokenizer": str(shared_data / "tokenizers/qwen3/tokenizer.json")},
    )
    with pytest.raises(ConfigError, match=r"dataset 'broken'"):
        open_mixture(mix)

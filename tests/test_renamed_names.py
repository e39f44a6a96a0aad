"""Public names that moved or were renamed keep working: old spellings resolve to the new objects.

A renamed class warns on each use of its old name (``DeprecationWarning``, naming the new one);
a pure move (``RemoteOptions``, the mixture plan modules that docs/mixtures.md named) re-exports
silently from the old path.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import warnings

import pytest

import chute
import chute.mixture
from chute.errors import ConfigError
from chute.mixture.entry import MixtureEntry


def test_chute_dataset_warns_and_is_mixture_entry() -> None:
    with pytest.warns(
        DeprecationWarning, match=r"chute\.Dataset is deprecated.*chute\.MixtureEntry"
    ):
        old = chute.Dataset
    assert old is MixtureEntry is chute.MixtureEntry
    # every use warns, not only the first (the name is not cached on the module)
    with pytest.warns(DeprecationWarning, match="chute.Dataset"):
        entry = chute.Dataset("a", "a.jsonl", weight=2)
    assert isinstance(entry, MixtureEntry) and entry.weight == 2


def test_from_imports_of_the_old_name_warn_too() -> None:
    with pytest.warns(DeprecationWarning, match=r"chute\.Dataset is deprecated"):
        from chute import Dataset
    with pytest.warns(DeprecationWarning, match=r"chute\.mixture\.Dataset is deprecated"):
        from chute.mixture import Dataset as FromPackage
    assert Dataset is FromPackage is MixtureEntry


def test_an_entry_made_by_the_old_name_builds_the_same_mixture() -> None:
    with pytest.warns(DeprecationWarning):
        old = chute.Dataset("a", "a.jsonl", repeat=2)
    mix = chute.Mixture([old, MixtureEntry("b", "b.jsonl")])
    assert mix.to_dict()["datasets"] == {
        "a": {"sources": ["a.jsonl"], "repeat": 2},
        "b": {"sources": ["b.jsonl"]},
    }
    with pytest.raises(ConfigError, match=r"expected a non-empty list of chute\.MixtureEntry"):
        chute.Mixture([{"a": "a.jsonl"}])


def test_the_new_name_does_not_warn_and_the_old_is_not_advertised() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert chute.MixtureEntry is chute.mixture.MixtureEntry is MixtureEntry
    assert "Dataset" not in chute.__all__ and "Dataset" not in dir(chute)
    assert "Dataset" not in chute.mixture.__all__
    with pytest.raises(AttributeError, match="has no attribute 'Datasets'"):
        chute.mixture.Datasets


def test_a_script_using_the_old_name_sees_the_warning_at_its_own_line() -> None:
    code = "import warnings; warnings.simplefilter('always')\nimport chute\nchute.Dataset\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "<string>:3: DeprecationWarning: chute.Dataset is deprecated" in out.stderr, out.stderr


def test_remote_options_keeps_every_path() -> None:
    from chute.remote_options import RemoteOptions, options_from_env

    internal = importlib.import_module("chute._internal.remote")
    sources = importlib.import_module("chute.sources")
    assert chute.RemoteOptions is RemoteOptions
    assert internal.RemoteOptions is RemoteOptions is sources.RemoteOptions
    assert internal.options_from_env is options_from_env
    assert RemoteOptions(cache_limit="1KiB").cache_limit == 1024


@pytest.mark.parametrize(
    ("old", "new", "names"),
    [
        (
            "chute.plan.mixture",
            "chute.plan.mixture_selection",
            ["Selection", "MixtureOrder", "Share", "counts_of", "valid_pools"],
        ),
        ("chute.plan.mixed", "chute.plan.mixture_planner", ["MixturePlanner", "Switch"]),
    ],
)
def test_the_mixture_plan_modules_docs_named_still_import(
    old: str, new: str, names: list[str]
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        shim, moved = importlib.import_module(old), importlib.import_module(new)
    for name in names:
        assert getattr(shim, name) is getattr(moved, name), name
    assert shim.__all__ == moved.__all__

"""Every example in every module's docstrings runs and stays true.

Modules are found by walking the package, so a new module's examples are tested without being
listed here. A module whose import needs an optional extra that is not installed is skipped with
the extra named.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import chute

DEPRECATED_ALIASES = {"chute.demo_data", "chute.collate_packed"}  # importing them warns
MODULES = sorted(
    m.name
    for m in pkgutil.walk_packages(chute.__path__, "chute.")
    if m.name not in DEPRECATED_ALIASES
)
# Imports an optional extra at module level: name -> the module it needs.
NEEDS = {"chute.demo.model": "torch", "chute.integrations.hf_trainer": "transformers"}


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    if name in NEEDS:
        pytest.importorskip(NEEDS[name], reason=f"{name} needs {NEEDS[name]}")
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} docstring example(s) failed in {name}"


def test_the_walk_reaches_deep_modules():
    wanted = {
        "chute.plan.packed",
        "chute.cache.stages",
        "chute.media.sizes",
        "chute.sample.contract",
    }
    assert wanted <= set(MODULES)


@pytest.mark.parametrize("name", sorted(DEPRECATED_ALIASES))
def test_deprecated_aliases_still_import_and_warn(name: str) -> None:
    import sys

    sys.modules.pop(name, None)
    with pytest.warns(DeprecationWarning, match="deprecated"):
        importlib.import_module(name)

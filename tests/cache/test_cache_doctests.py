"""The examples in the cache modules' docstrings run and stay true."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "chute.cache.build",
    "chute.cache.config",
    "chute.cache.config_checks",
    "chute.cache.fingerprint",
    "chute.cache.layout",
    "chute.cache.schema",
    "chute.cache.stages",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(
        importlib.import_module(name), optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    )
    assert result.attempted > 0, f"{name} has no examples"
    assert result.failed == 0

"""The examples in the media modules' docstrings run and stay true."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "chute.media.collate",
    "chute.media.images",
    "chute.media.paths",
    "chute.media.processor",
    "chute.media.sizes",
    "chute.media.tokens",
    "chute.media.transforms",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(
        importlib.import_module(name), optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    )
    assert result.attempted > 0, f"{name} has no examples"
    assert result.failed == 0

"""The examples in the docstrings of the loader, plan, lengths and collate modules run and stay true."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "chute.budget",
    "chute.collate",
    "chute.collate_packed",
    "chute.lengths",
    "chute.lengths.base",
    "chute.lengths.compute",
    "chute.loader.accounting",
    "chute.loader.core",
    "chute.loader.planning",
    "chute.loader.sample",
    "chute.loader.state",
    "chute.loader.transport",
    "chute.loader.watchdog",
    "chute.loader.worker",
    "chute.plan.base",
    "chute.plan.budget",
    "chute.plan.efficiency",
    "chute.plan.elastic",
    "chute.plan.grouped",
    "chute.plan.lengthed",
    "chute.plan.order",
    "chute.plan.pack",
    "chute.plan.packed",
    "chute.plan.registry",
    "chute.plan.shard",
    "chute.plan.shuffle",
    "chute.plan.table",
    "chute.testing",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(
        importlib.import_module(name), optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    )
    assert result.attempted > 0, f"{name} has no examples"
    assert result.failed == 0

"""The Loader's option groups: WorkerOptions and ErrorBudget as one value each, old keywords kept."""

from __future__ import annotations

import pytest

from chute import ErrorBudget, Loader, WorkerOptions, World
from chute.errors import ConfigError, ErrorBudgetExceeded


def test_worker_options_give_the_same_loader_as_the_keywords(id_source) -> None:  # type: ignore[no-untyped-def]
    source = id_source(12)
    grouped = Loader(
        source, batch_size=4, world=World(), workers=WorkerOptions(timeout=0, sample_timeout=None)
    )
    loose = Loader(source, batch_size=4, world=World(), timeout=0, sample_timeout=None)
    assert grouped.workers == loose.workers
    assert (grouped.timeout, grouped.sample_timeout) == (0.0, None)
    seen = sorted(i for batch in grouped for i in batch["sample_ids"].tolist())
    assert seen == list(range(12))


def test_worker_options_are_checked_and_given_once(id_source) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError, match="prefetch_factor needs num_workers > 0"):
        WorkerOptions(prefetch_factor=2)
    with pytest.raises(ConfigError, match="num_workers must be an int >= 0, got -1"):
        WorkerOptions(num_workers=-1)
    with pytest.raises(ConfigError, match=r"worker options given twice: .* and pin_memory"):
        Loader(id_source(4), world=World(), workers=WorkerOptions(), pin_memory=True)


def test_the_error_budget_is_one_value_and_the_loader_counts_in_its_own(id_source) -> None:  # type: ignore[no-untyped-def]
    budget = ErrorBudget(max_bad_fraction=None, max_consecutive_bad=2, min_samples=10)
    loader = Loader(id_source(8), world=World(), budget=budget)
    assert loader.books.budget.max_consecutive_bad == 2
    assert loader.books.budget is not budget  # the caller's value is not counted into
    with pytest.raises(ConfigError, match=r"error budget given twice: .* and max_bad_fraction"):
        Loader(id_source(4), world=World(), budget=budget, max_bad_fraction=0.5)
    broken = id_source(20, broken=range(5, 9), name="broken.jsonl")
    with pytest.raises(ErrorBudgetExceeded, match="consecutive"):
        list(Loader(broken, world=World(), shuffle=False, budget=budget))

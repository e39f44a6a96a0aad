"""ErrorBudget: fraction after a minimum, runs across batches, messages that name the limit."""

from __future__ import annotations

import pytest

from chute import ConfigError, ErrorBudget, ErrorBudgetExceeded
from chute.errors import RejectTally, SampleError


def tally_of(n: int, kind: str = "bad_json") -> RejectTally:
    t = RejectTally()
    for i in range(n):
        t.add(SampleError(kind, "broken", path="d.jsonl", line=i + 1))
    return t


def test_fraction_applies_only_after_min_samples() -> None:
    budget = ErrorBudget(max_bad_fraction=0.1, max_consecutive_bad=None, min_samples=20)
    budget.update([False, False, True, True], tally_of(2))  # 50% bad, but only 4 seen
    with pytest.raises(
        ErrorBudgetExceeded,
        match=r"(?s)3 of 20 samples were bad \(15.0%\), above max_bad_fraction=0.1 \(checked "
        r"once min_samples=20.*bad_json: 3  e.g. d.jsonl:1: bad_json: broken",
    ):
        budget.update([True] * 15 + [False], tally_of(3))
    assert budget.seen == 20 and budget.bad == 3


def test_exactly_at_the_limit_is_tolerated() -> None:
    budget = ErrorBudget(max_bad_fraction=0.25, max_consecutive_bad=None, min_samples=4)
    budget.update([False, True, True, True], tally_of(1))
    assert budget.fraction == 0.25


def test_runs_of_bad_samples_are_counted_across_batches() -> None:
    budget = ErrorBudget(max_bad_fraction=None, max_consecutive_bad=5)
    budget.update([True, False, False], tally_of(2))
    budget.update([False, False], tally_of(4))  # run of 4
    with pytest.raises(
        ErrorBudgetExceeded, match=r"5 bad samples in a row, reaching max_consecutive_bad=5"
    ):
        budget.update([False, True], tally_of(5))


def test_a_good_sample_resets_the_run() -> None:
    budget = ErrorBudget(max_bad_fraction=None, max_consecutive_bad=3)
    for _ in range(10):
        budget.update([False, False, True], tally_of(2))
    assert budget.run == 0
    budget.update([False, False], tally_of(2))
    assert budget.run == 2


def test_state_round_trips() -> None:
    budget = ErrorBudget(max_consecutive_bad=10)
    budget.update([True, False, False], tally_of(2))
    other = ErrorBudget(max_consecutive_bad=10)
    other.load_state_dict(budget.state_dict())
    assert (other.seen, other.bad, other.run) == (3, 2, 2)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"max_bad_fraction": 1.5}, "max_bad_fraction: must be a number in \\[0, 1\\]"),
        ({"max_bad_fraction": "0.1"}, "max_bad_fraction: must be a number"),
        ({"max_consecutive_bad": 0}, "max_consecutive_bad must be a positive int"),
        ({"min_samples": -1}, "min_samples must be an int >= 0"),
    ],
)
def test_bad_settings_are_refused(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ErrorBudget(**kwargs)

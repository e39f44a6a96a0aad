"""Plan strategies by name, for ``Loader(plan="random")`` and configs.

==========  ==================================================================================
name        options beyond the common ones (batch_size, shuffle, seed, drop_last, wrap)
==========  ==================================================================================
random      none
grouped     group_size, grad_accum, longest_first (needs lengths)
budget      max_tokens, max_length, max_rows, pad_to_multiple_of, group_size, grad_accum,
            longest_first, balance (needs lengths)
packed      max_length, split, window, overflow, balance (needs lengths)
shards      shard_window (needs the sample ranges of the source's files)
==========  ==================================================================================

Planners that need lengths say so with ``needs_lengths = True``; the ``Loader`` computes them
(``chute.lengths.lengths_of``) and passes ``lengths=``. ``balance`` evens out tokens and image
patches across the ranks of each step (``chute.plan.balance``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from chute.errors import ConfigError
from chute.plan.base import Planner
from chute.plan.budget import BudgetPlanner
from chute.plan.grouped import GroupedPlanner
from chute.plan.packed import PackedPlanner
from chute.plan.shard import RandomPlanner
from chute.plan.shards import ShardPlanner

__all__ = ["PLANNERS", "check_plan_options", "make_planner"]

PLANNERS: dict[str, type[Planner]] = {
    "random": RandomPlanner,
    "grouped": GroupedPlanner,
    "budget": BudgetPlanner,
    "packed": PackedPlanner,
    "shards": ShardPlanner,
}


def make_planner(
    plan: str | Planner,
    *,
    batch_size: int,
    shuffle: bool = True,
    seed: int = 0,
    drop_last: bool = False,
    wrap: bool = False,
    **options: Any,
) -> Planner:
    """The planner named ``plan`` with the loader's common options (or ``plan`` itself).

    Example:
        >>> make_planner("random", batch_size=4, seed=1).params()["batch_size"]
        4
    """
    if isinstance(plan, Planner):
        return plan
    if not isinstance(plan, str) or plan not in PLANNERS:
        raise ConfigError(
            f"plan must be one of {sorted(PLANNERS)} or a Planner instance, got {plan!r}"
        )
    cls: Any = PLANNERS[plan]
    try:
        return cls(
            batch_size=batch_size,
            shuffle=shuffle,
            seed=seed,
            drop_last=drop_last,
            wrap=wrap,
            **options,
        )
    except TypeError as exc:
        import inspect

        known = [
            name
            for name, p in inspect.signature(cls).parameters.items()
            if p.kind is p.KEYWORD_ONLY or p.kind is p.POSITIONAL_OR_KEYWORD
        ]
        known = [name for name in known if name not in _LOADER_ARGS]
        given = [name for name in options if name not in known]
        if not given:  # not an unknown name: the planner's own TypeError
            raise ConfigError(f"plan={plan!r} does not take these options: {exc}") from None
        hints = "; ".join(f"{name!r}{_did_you_mean(name, known)}" for name in given)
        raise ConfigError(
            f"plan={plan!r} has no option {hints}; its options: {', '.join(sorted(known))}",
            param="plan_options",
        ) from None


# what every planner takes from the Loader's own arguments, not from plan_options
_LOADER_ARGS = ("batch_size", "shuffle", "seed", "drop_last", "wrap", "lengths")


def check_plan_options(plan: Any, options: Mapping[str, Any]) -> None:
    """Refuse a Loader argument given in ``plan_options`` (Python said "multiple values").

    Example:
        >>> check_plan_options("packed", {"max_length": 8, "seed": 1})
        Traceback (most recent call last):
        ...
        chute.errors.ConfigError: plan_options: 'seed' is an argument of the Loader itself (Loader(seed=...)), not an option of plan='packed'
    """
    given = [name for name in options if name in _LOADER_ARGS and name != "lengths"]
    if given:
        raise ConfigError(
            f"{', '.join(map(repr, given))} {'is an argument' if len(given) == 1 else 'are arguments'}"
            f" of the Loader itself (Loader({given[0]}=...)), not an option of plan={plan!r}",
            param="plan_options",
        )


def _did_you_mean(name: str, known: list[str]) -> str:
    import difflib

    close = difflib.get_close_matches(name, known, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""

"""Moved to ``chute.plan.mixture_planner``: any plan over a mixture's selection.

Kept because docs/mixtures.md named this path (``chute.plan.mixed.MixturePlanner``) before;
removed in 0.3.

Example:
    >>> from chute.plan.mixed import MixturePlanner
    >>> from chute.plan.mixture_planner import MixturePlanner as Moved
    >>> MixturePlanner is Moved
    True
"""

from chute.plan.mixture_planner import BATCHING, MixturePlanner, Switch, multiset_minus

__all__ = ["BATCHING", "MixturePlanner", "Switch", "multiset_minus"]

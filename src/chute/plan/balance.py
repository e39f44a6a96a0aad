"""``balance``: what each rank carries in a step, and the option that evens it out.

In data-parallel training every rank waits for the slowest at each step. The language model's
cost follows the tokens a rank runs on; a vision encoder's follows the image patches, and one
rank's step can hold ten times the patches of another's (a row of three large images next to
rows of text). ``plan_options={"balance": ...}`` on the ``budget`` and ``packed`` plans shares
the image samples out evenly over the units a step is made of:

* ``packed``: rows are packed so every row carries about the same patches (the image samples,
  heaviest first, dealt over the rows in a snake, then the rest packed best-fit decreasing into
  the room left: ``chute.plan.pack.pack_spread``); the shuffled rows are grouped into steps of
  alike patches and the steps shuffled; with ``batch_size > 1`` each step's rows are dealt to
  its ranks by load (``chute.plan.rebalance.deal_rows``); a last step of fewer rows than ranks
  is repacked so every rank gets a share (``spread_tail``) instead of an empty batch;
* ``budget``: batches are cut as before (from mega-batches sorted by length), then the epoch's
  batches form steps by their patches, heaviest first, so the batches of a step carry alike
  patches (every batch already costs about ``max_tokens`` padded tokens, so any grouping keeps
  tokens even).

::

    8 ranks x 1 row of 4096, 30% of samples with images       patches per rank in one step
    plain     rows of 3 big images, rows of text only         3690 3690    0    0 3690    0 ...
    balance   2-3 images a row, text around them; a step's    3690 3710 3650 3690 3702 3688 ...
              rows alike (steps of 2-image rows elsewhere)

Every sample is still dealt exactly once per epoch, every rank gets the same number of batches,
and the plan is still a pure function of (lengths, seed, epoch, world size), so resume and
elastic resume are unchanged. Packing stays as tight (tested within 1% of the bound).

Dimensions, measured per sample (``DIMENSIONS``):

* ``tokens``: every token the language model runs on: text and image placeholders alike (the
  image tokens pass through every LLM layer too); a packed sample longer than ``max_length``
  counts as ``max_length``.
* ``patches``: the vision encoder's input, as the sample's **image tokens** (``Lengths.
  image_tokens``). A Qwen2-VL-family image of ``t`` tokens is ``t x merge_size**2`` (4) patches;
  a fixed-size one (LLaVA-1.5: 576 tokens) is as many patches as tokens. Within one recipe that
  factor is the same for every image, and balance compares each rank with the step's mean, so
  it cancels: patches are counted in image tokens.
* ``cost``: compute, ``a + b*n + c*n^2`` per sample of ``n`` tokens (``chute.plan.cost``:
  the dense layers per token, attention per token squared; a packed row costs the sum over its
  samples, which attend only within themselves). Long-context data needs it: a row holding
  one 32k-token document costs 1.57x a row of short samples of the same tokens (Llama-3-8B's
  shape, the default model; ``cost=`` sets another).

How the dimensions are evened out: ``patches`` are sparse (a few samples hold them all), so
packed plans share those samples out over the rows first (``spread``); ``cost`` is carried by
every sample and cannot be shared out that way (a row of fixed tokens holding one long document
costs more than any row of short samples can), so, like patches, it decides which rows (budget:
batches) form a step: alike ones (``load``).

The option's value (``Balance.of``): ``True`` or ``"tokens+patches"`` (both, equal weight),
``"tokens"``, ``"patches"``, ``"cost"``, names joined by ``+`` (``"cost+patches"``), or a
mapping of weights with an optional ``tolerance``: ``{"tokens": 1, "patches": 2, "tolerance":
0.1}``. Weights are relative importance (each dimension is first divided by the step's mean).
The tolerance (default 5%) is the goal per step: a step whose every rank is within
``1 + tolerance`` of the mean keeps its shuffled dealing; the plan counts the steps that stay
above it (``stats["unbalanced_steps"]``: an image's patches cannot be split, so a step holding
one image, or the epoch's last partial step, cannot be even).

Example:
    >>> b = Balance.of(True)
    >>> b.to_json()
    {'weights': {'tokens': 1.0, 'patches': 1.0}, 'tolerance': 0.05}
    >>> Balance.of({"patches": 1, "tolerance": 0.2}).names
    ('patches',)
    >>> Balance.of("cost", cost={"b": 1, "c": 0.001}).to_json()["cost"]
    {'a': 0.0, 'b': 1.0, 'c': 0.001}
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from chute.errors import ConfigError
from chute.lengths.base import Lengths
from chute.plan.base import Plan
from chute.plan.cost import DEFAULT_COST, CostModel, CostOption, sample_costs
from chute.plan.mixture_planner import as_table
from chute.plan.table import TablePlan

__all__ = [
    "DEFAULT_TOLERANCE",
    "DIMENSIONS",
    "Balance",
    "BalanceOption",
    "ImbalanceReport",
    "imbalance_report",
    "rank_loads",
]

DEFAULT_TOLERANCE = 0.05


def _tokens(lengths: Lengths, ids: np.ndarray) -> np.ndarray:
    return np.maximum(lengths.length[ids], 0).astype(np.int64)


def _patches(lengths: Lengths, ids: np.ndarray) -> np.ndarray:
    if lengths.image_tokens is None:
        return np.zeros(len(ids), dtype=np.int64)
    return np.maximum(np.asarray(lengths.image_tokens)[ids], 0).astype(np.int64)


def _cost(lengths: Lengths, ids: np.ndarray) -> np.ndarray:
    return sample_costs(DEFAULT_COST, lengths, ids)


# The cost of each dimension for the samples ``ids`` (global ids): non-negative int64. ``cost``
# here is the default model's; a ``Balance`` computes it with its own (``Balance.cost``).
DIMENSIONS: dict[str, Callable[[Lengths, np.ndarray], np.ndarray]] = {
    "tokens": _tokens,
    "patches": _patches,
    "cost": _cost,
}
# Dimensions every sample carries in proportion to its size: plans do not share their samples
# out over rows (``Balance.spread``), only group alike rows into steps (``Balance.load``).
_DENSE = ("tokens", "cost")


@dataclass(frozen=True)
class Balance:
    """Which dimensions to even out across the ranks of a step, their weights, the tolerance.

    Args:
        weights: ``(dimension, weight)`` pairs, weights > 0, dimensions from ``DIMENSIONS``.
        tolerance: a step is left alone once every rank is within ``1 + tolerance`` of the
            step's mean in every balanced dimension (max / mean <= 1 + tolerance).
        cost: the cost model of the ``cost`` dimension (``None`` when it is not balanced).

    Example:
        >>> Balance.of("tokens+patches") == Balance.of(True)
        True
        >>> Balance.of("cost").cost.name
        'llama3-8b'
    """

    weights: tuple[tuple[str, float], ...]
    tolerance: float = DEFAULT_TOLERANCE
    cost: CostModel | None = None

    @property
    def names(self) -> tuple[str, ...]:
        """The balanced dimensions, in order."""
        return tuple(name for name, _ in self.weights)

    @classmethod
    def of(cls, value: BalanceOption, cost: CostOption = None) -> Balance | None:
        """The ``balance`` option as a ``Balance`` (``None``/``False``: off).

        Args:
            value: the option (see the module docstring).
            cost: the ``cost`` dimension's model (``chute.plan.cost.CostModel.of``; ``None``:
                a ``Balance``'s own, else ``DEFAULT_COST``); only with ``cost`` balanced.

        Raises:
            ConfigError: naming ``balance`` (or ``cost``), the value and what it may be.
        """
        if value is None or value is False:
            if cost is not None:
                raise _cost_unused(value)
            return None
        if isinstance(value, Balance):
            if cost is None:
                return value
            if "cost" not in value.names:
                raise _cost_unused(value.names)
            return cls(value.weights, value.tolerance, CostModel.of(cost))
        if value is True:
            value = "tokens+patches"
        tolerance: Any = DEFAULT_TOLERANCE
        if isinstance(value, str):
            names = [n.strip() for n in value.split("+")]
            weights: dict[str, Any] = {n: 1.0 for n in names}
            if len(weights) != len(names) or not all(names):
                raise ConfigError(
                    f"expected dimension names joined by '+' ('tokens+patches'), got {value!r}",
                    param="balance",
                )
        elif isinstance(value, Mapping):
            weights = {str(k): v for k, v in value.items() if k != "tolerance"}
            tolerance = value.get("tolerance", DEFAULT_TOLERANCE)
        else:
            raise ConfigError(
                f"expected True, 'tokens+patches', 'tokens', 'patches', 'cost' or a mapping of "
                f"weights such as {{'tokens': 1, 'patches': 2}}, got {value!r}",
                param="balance",
            )
        unknown = sorted(set(weights) - set(DIMENSIONS))
        if unknown or not weights:
            raise ConfigError(
                f"dimensions must be among {sorted(DIMENSIONS)} (and 'tolerance' in a mapping), "
                f"got {unknown or 'none'}",
                param="balance",
            )
        checked = []
        for name in DIMENSIONS:  # a fixed order: equal options give equal params
            if name not in weights:
                continue
            w = weights[name]
            if isinstance(w, bool) or not isinstance(w, int | float) or not w > 0:
                raise ConfigError(
                    f"the weight of {name!r} must be a number > 0, got {w!r}; leave the "
                    f"dimension out to not balance it",
                    param="balance",
                )
            if not math.isfinite(w):
                raise ConfigError(f"the weight of {name!r} must be finite, got {w!r}")
            checked.append((name, float(w)))
        if (
            isinstance(tolerance, bool)
            or not isinstance(tolerance, int | float)
            or not 0 <= tolerance < math.inf
        ):
            raise ConfigError(
                f"tolerance must be a number >= 0 (0.05: every rank within 5% of the step's "
                f"mean), got {tolerance!r}",
                param="balance",
            )
        names = [name for name, _ in checked]
        if "cost" not in names and cost is not None:
            raise _cost_unused(names)
        model = CostModel.of(cost) if "cost" in names else None
        return cls(tuple(checked), float(tolerance), model)

    def without(self, name: str) -> Balance | None:
        """This balance without dimension ``name`` (``None`` if nothing is left).

        Example:
            >>> Balance.of(True).without("tokens").names
            ('patches',)
        """
        rest = tuple((n, w) for n, w in self.weights if n != name)
        if not rest:
            return None
        return Balance(rest, self.tolerance, self.cost if name != "cost" else None)

    def to_json(self) -> dict[str, Any]:
        """What a plan's ``params()`` records (a resume state compares it).

        The cost model appears only with ``cost`` balanced, so states saved before it existed
        compare equal.
        """
        out: dict[str, Any] = {"weights": dict(self.weights), "tolerance": self.tolerance}
        if self.cost is not None:
            out["cost"] = self.cost.to_json()
        return out

    def columns(self, lengths: Lengths, ids: np.ndarray, cap: int | None = None) -> np.ndarray:
        """``(len(ids), dimensions)`` int64: each sample's cost in each balanced dimension.

        ``cap``: tokens beyond it are not fed (a truncated packed sample).
        """
        ids = np.asarray(ids, dtype=np.int64)
        out = np.empty((len(ids), len(self.weights)), dtype=np.int64)
        for j, name in enumerate(self.names):
            if name == "cost":
                values = sample_costs(self.cost or DEFAULT_COST, lengths, ids, cap)
            else:
                values = DIMENSIONS[name](lengths, ids)
            if name == "tokens" and cap is not None:
                values = np.minimum(values, cap)
            out[:, j] = values
        return out

    def spread(self, cost: np.ndarray) -> np.ndarray | None:
        """Each sample's weight in the sparse balanced dimensions (image patches).

        Each dimension is divided by its total; ``None`` when no sample has any. ``cost`` is
        ``columns(...)`` of the samples. Packed plans share the samples with a weight out
        evenly over the rows before packing the rest. Tokens and compute (``cost``) are left
        out: every sample carries them.

        Example:
            >>> lens = Lengths(np.array([5, 5, 5]), image_tokens=np.array([3, 0, 1]))
            >>> b = Balance.of(True)
            >>> b.spread(b.columns(lens, np.arange(3))).tolist()
            [0.75, 0.0, 0.25]
        """
        return self._weight(cost, [j for j, n in enumerate(self.names) if n not in _DENSE])

    def load(self, cost: np.ndarray) -> np.ndarray | None:
        """Each sample's weight in the balanced dimensions other than tokens (patches, cost).

        As ``spread``, with compute (``cost``) too: plans group rows (budget: batches) of
        alike load into steps by it. ``None`` when no sample has any.

        Example:
            >>> lens = Lengths(np.array([5, 5, 10]), image_tokens=np.array([3, 0, 1]))
            >>> b = Balance.of({"patches": 1, "cost": 1}, cost={"b": 1})
            >>> b.load(b.columns(lens, np.arange(3))).tolist()
            [1.0, 0.25, 0.75]
        """
        return self._weight(cost, [j for j, n in enumerate(self.names) if n != "tokens"])

    def _weight(self, cost: np.ndarray, columns: list[int]) -> np.ndarray | None:
        if not columns or not len(cost):
            return None
        out = np.zeros(len(cost), dtype=np.float64)
        for j in columns:  # element-wise: the same on every machine
            total = int(cost[:, j].sum())
            if total > 0:
                out += cost[:, j] * (self.weights[j][1] / total)
        return out if (out > 0).any() else None

    def unbalanced(self, cost: np.ndarray, bounds: np.ndarray, world_size: int) -> int:
        """Steps where a rank is above ``1 + tolerance`` times the step's mean in a dimension.

        Args:
            cost: ``(units, dimensions)`` in dealing order (samples, or packed rows).
            bounds: offsets of each batch into the units, step-major.
            world_size: ranks.

        Example:
            >>> Balance.of("patches").unbalanced(np.array([[4], [4], [8], [0]]),
            ...                                  np.arange(5), 2)
            1
        """
        loads = _sums(cost, np.asarray(bounds, dtype=np.int64))
        loads = loads.reshape(-1, world_size, loads.shape[1])
        totals = loads.sum(axis=1)
        over = loads.max(axis=1) * world_size > totals * (1 + self.tolerance)
        return int(np.count_nonzero((over & (totals > 0)).any(axis=1)))


def _sums(values: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """``values`` (``(n, columns)``) summed between consecutive ``bounds`` (empty: 0)."""
    sums = np.zeros((len(values) + 1, values.shape[1]), dtype=np.int64)
    np.cumsum(values, axis=0, out=sums[1:])
    return sums[bounds[1:]] - sums[bounds[:-1]]


def rank_loads(plan: Plan, values: np.ndarray) -> np.ndarray:
    """``(steps, world_size, columns)``: the sum of ``values`` over each rank's batch per step.

    ``values`` is indexed by the plan's dealing position: one row per id of ``as_table(plan)``
    (``(n,)`` or ``(n, columns)``).

    Example:
        >>> from chute.plan.order import IdOrder
        >>> plan = TablePlan(IdOrder(np.arange(4)), 2, ids=np.arange(4),
        ...                  batch_bounds=np.array([0, 1, 2, 3, 4]))
        >>> rank_loads(plan, np.array([5, 1, 2, 2]))[:, :, 0].tolist()
        [[5, 1], [2, 2]]
    """
    table = _table(plan)
    values = np.asarray(values, dtype=np.int64)
    if values.ndim == 1:
        values = values[:, None]
    bounds = table.batch_bounds
    if table.row_bounds is not None:
        bounds = table.row_bounds[bounds]
    per_batch = _sums(values, bounds)
    return per_batch.reshape(table.num_batches, table.world_size, values.shape[1])


# What ``plan_options={"balance": ...}`` takes (see ``Balance.of``): on/off, dimensions joined
# by "+", a mapping of dimension weights (and "tolerance"), or a ``Balance``.
BalanceOption = bool | str | Mapping[str, float] | Balance | None


def _cost_unused(balance: object) -> ConfigError:
    return ConfigError(
        f"sets the model of the 'cost' dimension, but balance is {balance!r}, which does not "
        f"balance cost: add it (balance='cost', or 'tokens+cost') or leave cost out",
        param="cost",
    )


@dataclass
class ImbalanceReport:
    """Per-step imbalance of a plan in tokens, image patches and compute.

    A step's imbalance is the busiest rank's load over the mean across ranks (1.0: even).
    ``mean`` and ``worst`` are over steps; ``epoch`` is the sum over steps of the busiest rank's
    load over the sum of the means: how much longer a run that waits for its slowest rank at
    every step spends on that work than an even one would (a step with one small image weighs
    little there). A dimension's figures cover the steps where it is not zero (``patch_steps``
    hold an image); ``None`` where no step has any. ``cost`` is compute by ``cost_model``
    (``chute.plan.cost``: ``a + b*n + c*n^2`` per sample).
    """

    steps: int
    tokens: tuple[float, float, float] | None  # mean, worst, epoch
    patches: tuple[float, float, float] | None
    patch_steps: int
    cost: tuple[float, float, float] | None = None
    cost_model: CostModel | None = None

    def to_json(self) -> dict[str, Any]:
        def figures(values: tuple[float, float, float] | None) -> dict[str, float | None]:
            if values is None:
                return {"mean": None, "worst": None, "epoch": None}
            return dict(zip(("mean", "worst", "epoch"), (round(v, 4) for v in values), strict=True))

        return {
            "tokens": figures(self.tokens),
            "patches": figures(self.patches),
            "cost": figures(self.cost),
            "patch_steps": self.patch_steps,
        }


def imbalance_report(
    plan: Plan, lengths: Any, *, max_length: int | None = None, cost: CostOption = None
) -> ImbalanceReport:
    """How unevenly each step's tokens, image patches and compute fall on the ranks of ``plan``.

    Args:
        plan: any plan.
        lengths: the ``Lengths`` (or lengths array: no patches) of every global id.
        max_length: tokens beyond it are not fed (packed plans default to their row length).
        cost: the compute model (``chute.plan.cost.CostModel.of``; ``None``: ``DEFAULT_COST``).

    Example:
        >>> from chute.plan import RandomPlanner
        >>> plan = RandomPlanner(2, shuffle=False).build(4, epoch=0, world_size=2)
        >>> lens = Lengths(np.array([9, 1, 5, 5]), image_tokens=np.array([8, 0, 0, 0]))
        >>> report = imbalance_report(plan, lens, cost={"b": 1, "c": 1})
        >>> report.tokens, report.patches, round(report.cost[0], 3)  # cost 90 + 2 | 30 + 30
        ((1.0, 1.0, 1.0), (2.0, 2.0, 2.0), 1.211)
    """
    lengths = Lengths.of(lengths)
    model = CostModel.of(cost)
    table = _table(plan)
    ids = table.ids.astype(np.int64)
    cap = max_length or (table.stats.get("max_length") if table.row_bounds is not None else None)
    if table.spans is not None:
        tokens = (table.spans[1] - table.spans[0]).astype(np.int64)
        compute = model.units(np.minimum(tokens, int(cap)) if cap else tokens)
    else:
        tokens = _tokens(lengths, ids)
        compute = sample_costs(model, lengths, ids, int(cap) if cap else None)
    if cap:
        tokens = np.minimum(tokens, int(cap))
    loads = rank_loads(table, np.stack([tokens, _patches(lengths, ids), compute], axis=1))
    figures: list[tuple[float, float, float] | None] = []
    for j in range(3):
        load = loads[:, :, j]
        total = load.sum(axis=1)
        live = total > 0
        if not live.any():
            figures.append(None)
            continue
        busiest = load[live].max(axis=1)
        ratio = busiest * table.world_size / total[live]
        epoch = float(busiest.sum()) * table.world_size / float(total[live].sum())
        figures.append((float(ratio.mean()), float(ratio.max()), epoch))
    patch_steps = int(np.count_nonzero(loads[:, :, 1].sum(axis=1) > 0))
    return ImbalanceReport(
        table.num_batches, figures[0], figures[1], patch_steps, figures[2], model
    )


def _table(plan: Plan) -> TablePlan:
    return plan if isinstance(plan, TablePlan) else as_table(plan)

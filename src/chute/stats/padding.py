"""Padding statistics of a dataset: length percentiles, a histogram, and each plan's efficiency.

``padding_stats(lengths, max_length=..., batch_size=..., world_size=...)`` plans one epoch with
every strategy over the same lengths and reports, per plan, the padding efficiency (real tokens
/ tokens in padded rows), steps (batches per rank) and rows per epoch, samples dropped or
truncated, and how unevenly each step's tokens, image patches and compute fall on the ranks
(``imbalance``: max over mean across ranks, mean and worst over steps;
``chute.plan.balance.imbalance_report``; compute by the ``cost`` model, ``chute.plan.cost``);
``balance=`` plans ``budget`` and ``packed`` with that ``balance`` option. It is what ``chute stats`` prints; the input is a ``Lengths`` however
obtained (the lengths pass, the lengths cache, or a token cache), so other front ends can reuse
it.

Samples longer than ``max_length`` follow ``overflow``, the same for every plan and decided by
the recipe's own rule (``chute.recipe.outcome.overflow_outcome``): ``truncate`` (they count as
``max_length`` tokens, and as truncated; one whose every trained token lies past the cut is
rejected as ``no_trainable_tokens``), ``drop`` (rejected as ``too_long``), or ``split``
(windows of ``max_length`` tokens, ``stride`` overlapping: every token kept; ``split`` counts
the records cut and ``samples`` the windows). Rejected records are left out and counted by
reason in ``rejected``, as ``chute validate`` counts them.

When the data mixes samples with images and text-only samples, ``grouped_by_modality`` is
reported too: ``plan="grouped"`` with ``by_modality=True`` (LLaVA's
``group_by_modality_length``), with ``mixed_batches``, the batches holding both.

Example:
    >>> from chute.lengths import STATUS_TRUNCATED, Lengths
    >>> stats = padding_stats(Lengths.of([5, 9, 3, 12, 7, 2]), max_length=10, batch_size=2)
    >>> stats["samples"], stats["tokens"], sorted(stats["efficiency"])
    (6, 36, ['budget', 'grouped', 'packed', 'random'])
    >>> stats["plans"]["packed"]["rows"], stats["packing_bound"]["rows"]
    (4, 4)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from chute.errors import ConfigError
from chute.lengths import STATUS_TRUNCATED, Lengths, split_lengths
from chute.plan import (
    BudgetPlanner,
    GroupedPlanner,
    IdOrder,
    PackedPlanner,
    Planner,
    RandomPlanner,
    packing_bound,
    padding_report,
)
from chute.plan.balance import Balance, imbalance_report
from chute.plan.base import check_positive
from chute.plan.cost import CostModel, CostOption
from chute.plan.shuffle import Permutation
from chute.recipe.outcome import KEPT, OUTCOME_KINDS, TOO_LONG, TRUNCATED, overflow_outcome
from chute.recipe.windows import check_stride

__all__ = ["MODALITY_PLAN", "PERCENTILES", "PLAN_NAMES", "padding_stats", "plan_warnings"]

PLAN_NAMES = ("random", "grouped", "budget", "packed")
MODALITY_PLAN = "grouped_by_modality"
PERCENTILES = (10, 25, 50, 75, 90, 95, 99)
# Warn when packing reaches less than this share of the efficiency the lengths allow.
WARN_RATIO = 0.95
# Data has long samples when attention is at least this share of the longest one's cost.
LONG_SHARE = 0.05


def padding_stats(
    lengths: Lengths,
    *,
    max_length: int,
    batch_size: int,
    world_size: int = 1,
    overflow: str = "truncate",
    stride: int = 0,
    max_tokens: int | None = None,
    group_size: int = 50,
    window: int | None = None,
    seed: int = 0,
    bins: int = 20,
    plans: Sequence[str] = PLAN_NAMES,
    planner_for: Callable[[Planner, Lengths], Planner] | None = None,
    balance: Any = None,
    cost: CostOption = None,
) -> dict[str, Any]:
    """Length statistics and one epoch of each plan (see the module docstring).

    Args:
        lengths: per-sample lengths (negative: rejected).
        max_length: the longest sample fed, and the row length of packed plans.
        batch_size: samples (packed: rows) per batch per rank.
        world_size: ranks.
        overflow: samples over ``max_length``: ``"truncate"``, ``"drop"`` or ``"split"``.
        stride: with ``split``, the windows' overlap in tokens.
        max_tokens: the ``budget`` plan's padded tokens per batch (default ``batch_size x
            max_length``).
        group_size: optimizer steps per mega-batch of ``grouped`` and ``budget``.
        window: the ``packed`` plan's packing window (``None``: whole epoch).
        seed: the shuffle's seed (epoch 0 is planned).
        bins: histogram bins.
        plans: which plans to report (``grouped_by_modality`` is added for mixed data).
        planner_for: ``planner_for(planner, fed_lengths)``: the planner each plan is built
            with (e.g. over a mixture's selection, ``chute.stats.mixture``); default: itself.
        balance: the ``balance`` option of the ``budget`` and ``packed`` plans (``True``,
            ``"tokens+patches"``, ``"cost"``, ...; ``None``: off).
        cost: the compute model (``chute.plan.cost.CostModel.of``; ``None``: ``DEFAULT_COST``)
            of the ``cost`` imbalance, and of ``balance="cost"``.

    ``out["cost"]``: the ``model``, the ``longest`` sample fed (tokens), the part of its cost
    that is attention (``attention_share``, ``c*n^2``) and ``long_samples``: whether that part
    is 5% or more (8192 tokens: 13% with the default model).
    """
    max_length = check_positive("max_length", max_length)
    model = CostModel.of(cost)
    balance = Balance.of(balance)
    if balance is not None and "cost" in balance.names:  # else the model is the report's only
        balance = Balance.of(balance, model)
    if overflow not in ("truncate", "drop", "split"):
        raise ConfigError(f"overflow must be 'truncate', 'drop' or 'split', got {overflow!r}")
    unknown = sorted(set(plans) - {*PLAN_NAMES, MODALITY_PLAN})
    if unknown:
        raise ConfigError(f"plans must be among {[*PLAN_NAMES, MODALITY_PLAN]}, got {unknown}")
    records = len(lengths)
    split = 0
    if overflow == "split" and lengths.pieces is None:
        split = int(np.count_nonzero(lengths.length > max_length))
        lengths = split_lengths(lengths, max_length, check_stride(stride, max_length, overflow))
    image = lengths.image_tokens
    if image is not None and MODALITY_PLAN not in plans:
        valid_image = image[lengths.length >= 0]
        if (valid_image > 0).any() and (valid_image == 0).any():
            plans = [*plans, MODALITY_PLAN]
    raw = lengths.length
    valid = raw >= 0
    first = lengths.first_trained if lengths.first_trained is not None else np.zeros_like(raw)
    # what --max-length does to each sample: the rule the recipe applies (one code path)
    outcome = np.where(valid, overflow_outcome(raw, first, max_length, overflow), -1)
    kept_ids = (outcome == KEPT) | (outcome == TRUNCATED)
    fed = np.where(kept_ids, np.minimum(raw, max_length), -1).astype(np.int32)
    rejected = dict(lengths.rejected)
    for code, kind in OUTCOME_KINDS.items():
        n = int(np.count_nonzero(outcome == code))
        if n:
            rejected[kind] = rejected.get(kind, 0) + n
    dropped = int(np.count_nonzero(outcome == TOO_LONG))
    truncated = int(np.count_nonzero(outcome == TRUNCATED))
    if lengths.status is not None:  # cut by the recipe's own max_length, and kept here
        truncated += int(np.count_nonzero((lengths.status == STATUS_TRUNCATED) & (outcome == KEPT)))
    kept = fed[fed >= 0].astype(np.int64)
    tokens = int(kept.sum())
    out: dict[str, Any] = {
        "records": records,
        "samples": int(kept.size),
        "split": split,
        "tokens": tokens,
        "rejected": rejected,
        "dropped": dropped,
        "truncated": truncated,
        "max_length": max_length,
        "batch_size": batch_size,
        "world_size": world_size,
        # the samples fed, at their full length (truncated ones counted as "over"); a sample
        # rejected here (too_long, no_trainable_tokens) is not one
        "lengths": _describe(raw[kept_ids]),
        "histogram": _histogram(raw[kept_ids], bins, max_length),
    }
    bound = packing_bound(kept, max_length) if kept.size else 0
    out["packing_bound"] = {
        "rows": bound,
        "efficiency": round(tokens / (bound * max_length), 6) if bound else 1.0,
    }
    fed_lengths = Lengths(fed, image_tokens=image)
    reports: dict[str, Any] = {}
    for name in plans:
        t0 = time.perf_counter()
        plan = _plan(
            name,
            fed_lengths,
            batch_size,
            world_size,
            max_length,
            max_tokens,
            group_size,
            window,
            seed,
            planner_for,
            balance,
        )
        report = padding_report(plan, fed, max_length=max_length).to_json()
        imbalance = imbalance_report(plan, fed_lengths, max_length=max_length, cost=model)
        report["imbalance"] = imbalance.to_json()
        if "unbalanced_steps" in getattr(plan, "stats", {}):
            report["unbalanced_steps"] = plan.stats["unbalanced_steps"]
        report["dropped"] += dropped
        report["truncated"] = truncated
        report["seconds"] = round(time.perf_counter() - t0, 4)
        if "mixed_batches" in getattr(plan, "stats", {}):
            report["mixed_batches"] = plan.stats["mixed_batches"]
        reports[name] = report
    out["plans"] = reports
    out["efficiency"] = {name: r["efficiency"] for name, r in reports.items()}
    out["balance"] = None if balance is None else balance.to_json()
    longest = int(kept.max()) if kept.size else 0
    share = float(model.c * longest**2 / model.cost(np.array([longest]))[0]) if longest else 0.0
    out["cost"] = {
        "model": {**model.to_json(), "name": model.name},
        "longest": longest,
        "attention_share": round(share, 4),
        "long_samples": share >= LONG_SHARE,
    }
    out["warnings"] = plan_warnings(out)
    return out


def _plan(
    name: str,
    lengths: Lengths,
    batch_size: int,
    world_size: int,
    max_length: int,
    max_tokens: int | None,
    group_size: int,
    window: int | None,
    seed: int,
    planner_for: Callable[[Planner, Lengths], Planner] | None = None,
    balance: Balance | None = None,
) -> Any:
    n = len(lengths)
    if name == "random":
        random = RandomPlanner(batch_size, seed=seed)
        if planner_for is not None:
            return planner_for(random, lengths).build(n, epoch=0, world_size=world_size)
        valid = lengths.valid_ids()
        order = IdOrder(valid[Permutation(len(valid), seed, 0).materialize()])
        return random.build(n, epoch=0, world_size=world_size, order=order)
    if name in ("grouped", MODALITY_PLAN):
        planner: Any = GroupedPlanner(
            batch_size,
            group_size=group_size,
            seed=seed,
            lengths=lengths,
            by_modality=name == MODALITY_PLAN,
        )
    elif name == "budget":
        planner = BudgetPlanner(
            max_tokens,
            batch_size=batch_size,
            max_length=max_length,
            group_size=group_size,
            balance=balance,
            seed=seed,
            lengths=lengths,
        )
    else:
        planner = PackedPlanner(
            max_length,
            batch_size=batch_size,
            window=window,
            balance=balance,
            seed=seed,
            lengths=lengths,
        )
    if planner_for is not None:
        planner = planner_for(planner, lengths)
    return planner.build(n, epoch=0, world_size=world_size)


def _describe(values: np.ndarray) -> dict[str, Any]:
    if not values.size:
        return {"min": None, **{f"p{p}": None for p in PERCENTILES}, "max": None, "mean": None}
    pct = np.percentile(values, PERCENTILES, method="nearest")
    return {
        "min": int(values.min()),
        **{f"p{p}": int(v) for p, v in zip(PERCENTILES, pct, strict=True)},
        "max": int(values.max()),
        "mean": round(float(values.mean()), 2),
    }


def _histogram(values: np.ndarray, bins: int, max_length: int) -> dict[str, Any]:
    """Equal bins up to the longest sample or ``max_length``; longer samples counted in ``over``."""
    if not values.size:
        return {"edges": [], "counts": [], "over": 0}
    top = min(int(values.max()), max_length)
    width = max(1, -(-top // bins))
    edges = np.arange(0, width * bins + 1, width)
    counts, _ = np.histogram(values[values <= max_length], bins=edges)
    over = int(np.count_nonzero(values > max_length))
    return {"edges": edges.tolist(), "counts": counts.tolist(), "over": over}


def plan_warnings(stats: dict[str, Any]) -> list[str]:
    """What the statistics say to change (packing far below its bound, few usable records)."""
    out = []
    packed = stats["efficiency"].get("packed")
    allowed = stats["packing_bound"]["efficiency"]
    if packed is not None and packed < WARN_RATIO * allowed:
        out.append(
            f"packing reaches {packed:.1%} of each row, far below the {allowed:.1%} the lengths "
            f"allow; raise --window (or leave it out to pack the whole epoch)"
        )
    if stats["records"] and stats["samples"] < 0.5 * stats["records"]:
        out.append(
            f"only {stats['samples']} of {stats['records']} records are usable; check the "
            f"rejects (`chute validate ... --rejects FILE`) and --max-length/--overflow"
        )
    return out

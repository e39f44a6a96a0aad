"""Statistics of a mixture: each dataset's lengths and padding, and what an epoch takes of it.

``mixture_stats(opened, max_length=..., batch_size=...)`` reports, per dataset: records, usable
samples, tokens, mean and p99 length, the padding efficiency of every plan over that dataset
alone, and the *realized* share of one epoch (the selection of epoch 0 under the mixture's
amounts: samples and tokens per dataset). Over the whole mixture it is ``padding_stats`` with
every plan built over the epoch's selection, so ``efficiency`` is what training will see::

    dataset   records  tokens   mean  p99  | epoch samples  share  tokens share | random packed
    alpaca        999  212,741  212.9  512 |           730  49.9%         62.1% |  48.2%  99.1%
    tools         300  190,005  633.4 1024 |           584  39.9%         35.9% |  61.0%  98.7%

Example:
    >>> stats = mixture_stats(open_mixture("mix.yaml"), max_length=1024,
    ...                       batch_size=8)  # doctest: +SKIP
    >>> stats["datasets"]["alpaca"]["token_share"]  # doctest: +SKIP
    0.621
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from chute.lengths import Lengths, Pieces
from chute.mixture.opened import OpenedMixture
from chute.mixture.source import slice_lengths
from chute.plan import Planner
from chute.plan.cost import CostOption
from chute.plan.mixture_planner import MixturePlanner
from chute.plan.mixture_selection import Selection
from chute.plan.packed import packing_bound
from chute.stats.padding import PLAN_NAMES, padding_stats, plan_warnings

__all__ = ["mixture_stats"]


def mixture_stats(
    opened: OpenedMixture,
    *,
    max_length: int,
    batch_size: int,
    world_size: int = 1,
    overflow: str = "truncate",
    max_tokens: int | None = None,
    group_size: int = 50,
    window: int | None = None,
    seed: int = 0,
    plans: Sequence[str] = PLAN_NAMES,
    balance: Any = None,
    cost: CostOption = None,
) -> dict[str, Any]:
    """Per-dataset and whole-mixture statistics (see the module docstring).

    The options are ``padding_stats``'s; ``seed`` also draws the epoch's selection.
    """
    lengths = opened.source.lengths()
    options: dict[str, Any] = dict(
        max_length=max_length,
        batch_size=batch_size,
        world_size=world_size,
        overflow=overflow,
        max_tokens=max_tokens,
        group_size=group_size,
        window=window,
        seed=seed,
        plans=plans,
        balance=balance,
        cost=cost,
    )
    chosen: dict[str, Any] = {}

    def over_selection(inner: Planner, fed: Lengths) -> Planner:
        if "selection" not in chosen:  # the same selection for every plan
            chosen["selection"] = opened.selection(seed=seed, lengths=fed)
            chosen["fed"] = np.asarray(fed.length)
        return MixturePlanner(inner, chosen["selection"], batching=opened.mixture.batching)

    out = padding_stats(lengths, planner_for=over_selection, **options)
    selection: Selection = chosen["selection"]
    fed = chosen["fed"]
    ids = selection.order(0).materialize()
    dataset = selection.dataset_of(ids)
    n = len(opened.names)
    samples = np.bincount(dataset, minlength=n)
    tokens = np.bincount(dataset, weights=fed[ids], minlength=n)
    total_samples, total_tokens = int(samples.sum()), float(tokens.sum())
    # the hold-outs as drawn (a fraction is a hash threshold, so 10% of 60 may be 4 records)
    pools = opened.pools("val") if any(ds.val for ds in opened.mixture) else [None] * n
    held = [0 if pool is None else len(pool) for pool in pools]
    rows: dict[str, Any] = {}
    cut: list[int] = []  # per dataset of documents split into windows: the documents cut
    for d, name in enumerate(opened.names):
        lo, hi = int(opened.offsets[d]), int(opened.offsets[d + 1])
        own = padding_stats(slice_lengths(lengths, lo, hi), **options) if hi > lo else None
        source = opened.source.sources[d]
        windows = np.diff(source.table.first) if isinstance(source, Pieces) else None
        if windows is not None:
            cut.append(int(np.count_nonzero(windows > 1)))
        rows[name] = {
            "records": hi - lo if windows is None else len(windows),
            "samples": own["samples"] if own else 0,
            "tokens": own["tokens"] if own else 0,
            "mean": own["lengths"]["mean"] if own else None,
            "p99": own["lengths"]["p99"] if own else None,
            "val": held[d],
            "epoch_samples": int(samples[d]),
            "sample_share": round(int(samples[d]) / total_samples, 4) if total_samples else None,
            "epoch_tokens": int(tokens[d]),
            "token_share": round(float(tokens[d]) / total_tokens, 4) if total_tokens else None,
            "efficiency": own["efficiency"] if own else {},
            "rejected": own["rejected"] if own else {},
        }
    out["datasets"] = rows
    if cut:  # the samples are windows: count the documents as records, as for one dataset
        out["records"] = sum(r["records"] for r in rows.values())
        out["split"] = sum(cut)
    out["epoch"] = {"samples": total_samples, "tokens": int(total_tokens)}
    # the bound of what the plans pack: the epoch's selection (repeats, samples drawn, no
    # hold-out), not every record, which a plan over fewer tokens would seem to beat
    selected = fed[ids]
    selected = selected[selected >= 0].astype(np.int64)
    bound = packing_bound(selected, max_length) if selected.size else 0
    out["packing_bound"] = {
        "rows": bound,
        "efficiency": round(int(selected.sum()) / (bound * max_length), 6) if bound else 1.0,
    }
    out["warnings"] = plan_warnings(out)
    return out

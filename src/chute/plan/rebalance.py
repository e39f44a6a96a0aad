"""Packed steps, evened out: rows dealt to ranks by load, and a short last step spread.

A packed step is ``world_size x batch_size`` rows; plain dealing gives each rank the next
``batch_size`` shuffled rows. With ``balance`` and ``batch_size > 1``, a step whose ranks are
further from the mean than the tolerance has its rows dealt again, heaviest first, each to the
rank (with rows still to take) it evens out most: a greedy LPT over every balanced dimension at
once. Rows stay whole and in their step; every rank still gets ``batch_size`` rows::

    step of 2 ranks x 2 rows (patches)      shuffled   [900 850 | 0 40]       1750 | 40
                                            dealt      [900 0 | 850 40]        900 | 890

"Evens out most" is the least growth of ``sum over dimensions of weight x sum over ranks
(load / mean - 1)^2``; the result is kept only where that spread drops. All steps are dealt
together (one vectorised pass per row position, not a loop per step), with element-wise float
arithmetic and lowest-index tie-breaks, so every rank computes the same result.

``spread_tail``: a last step with fewer rows than ranks would leave ranks with an empty batch
(a placeholder row); its samples are packed again into a row per rank, evened out the same way.

Example:
    >>> from chute.plan.balance import Balance
    >>> cost = np.array([[900], [850], [0], [40]])
    >>> order, changed = deal_rows(cost, 2, 2, Balance.of("patches"))
    >>> order.tolist(), changed
    ([0, 2, 1, 3], 1)
"""

from __future__ import annotations

import numpy as np

from chute.plan.balance import Balance

__all__ = ["deal_rows"]


def deal_rows(
    cost: np.ndarray,
    world_size: int,
    rows_per_rank: int,
    balance: Balance,
    tail: np.ndarray | None = None,
) -> tuple[np.ndarray, int]:
    """The rows of each full step re-dealt to its ranks (see the module docstring).

    Args:
        cost: ``(rows, dimensions)``: each row's cost, rows in dealing order (step-major,
            ``rows_per_rank`` consecutive rows per rank).
        world_size: ranks.
        rows_per_rank: rows each rank gets per step (the packed plan's ``batch_size``).
        balance: the dimensions' weights and the tolerance.
        tail: the rows each rank gets in a last partial step (``None``: it is left as is);
            that step is re-dealt too, each rank keeping its count of rows.

    Returns:
        ``(order, changed)``: the new dealing order as positions into ``cost``, and how many
        steps changed.
    """
    cost = np.asarray(cost, dtype=np.int64)
    order = np.arange(len(cost), dtype=np.int64)
    w, b = world_size, rows_per_rank
    unit = w * b
    steps = len(cost) // unit
    changed = 0
    if w >= 2 and b >= 2 and steps:
        counts = np.full((steps, w), b, dtype=np.int64)
        done = _deal_steps(cost[: steps * unit].reshape(steps, unit, -1), counts, balance)
        for s, local in done:
            order[s * unit : (s + 1) * unit] = s * unit + local
        changed += len(done)
    rest = len(cost) - steps * unit
    if tail is not None and w >= 2 and rest >= 2 and int(np.sum(tail)) == rest:
        done = _deal_steps(cost[steps * unit :][None], np.asarray(tail)[None], balance)
        for _, local in done:
            order[steps * unit :] = steps * unit + local
        changed += len(done)
    return order, changed


def _deal_steps(
    rows: np.ndarray, counts: np.ndarray, balance: Balance
) -> list[tuple[int, np.ndarray]]:
    """Steps re-dealt by the greedy LPT: ``(step, its rows' new order)`` where it helps.

    ``rows``: ``(steps, rows of a step, dimensions)``; ``counts``: ``(steps, ranks)`` rows
    each rank takes (consecutive in the step now, and again after).
    """
    steps, unit, dims = rows.shape
    w = counts.shape[1]
    totals = rows.sum(axis=1)  # (steps, dims), exact
    mean = totals / w
    live = totals > 0
    safe = np.where(live, mean, 1.0)
    weights = np.array([wt for _, wt in balance.weights], dtype=np.float64)
    coef = np.where(live, weights / (safe * safe), 0.0)  # (steps, dims): weight / mean^2
    norm = np.where(live, weights / safe, 0.0)  # weight / mean
    if (counts == unit // w).all():  # full steps: every rank its batch_size rows, in a row
        before = rows.reshape(steps, w, unit // w, dims).sum(axis=2)  # (steps, w, dims)
    else:  # a last partial step (one): ranks of unequal counts
        before = np.zeros((steps, w, dims), dtype=np.int64)
        for s in range(steps):
            np.add.at(before[s], np.repeat(np.arange(w), counts[s]), rows[s])
    limit = mean * (1 + balance.tolerance)
    needs = ((before > limit[:, None, :]) & live[:, None, :]).any(axis=(1, 2))
    if not needs.any():
        return []
    todo = np.flatnonzero(needs)
    rows_f = rows[todo].astype(np.float64)
    mean, coef, norm = mean[todo], coef[todo], norm[todo]
    k = len(todo)
    key = np.zeros((k, unit), dtype=np.float64)
    for d in range(dims):
        key += rows_f[:, :, d] * norm[:, d][:, None]
    heaviest = np.argsort(-key, axis=1, kind="stable")
    loads = np.zeros((k, w, dims), dtype=np.float64)
    left = counts[todo].astype(np.int64).copy()
    rank = np.empty((k, unit), dtype=np.int64)
    steps_at = np.arange(k)
    for j in range(unit):
        row = heaviest[:, j]
        c = rows_f[steps_at, row]  # (k, dims)
        grow = np.zeros((k, w), dtype=np.float64)
        for d in range(dims):
            cd = c[:, d][:, None]
            grow += (
                coef[:, d][:, None] * cd * (2.0 * loads[:, :, d] + cd - 2.0 * mean[:, d][:, None])
            )
        grow[left == 0] = np.inf
        r = np.argmin(grow, axis=1)
        rank[steps_at, row] = r
        loads[steps_at, r] += c
        left[steps_at, r] -= 1
    better = (
        _spread(loads, mean, coef) < _spread(before[todo].astype(np.float64), mean, coef) - 1e-9
    )
    # rank by rank, rows in former order
    return [
        (s, np.lexsort((np.arange(unit), rank[i])))
        for i, s in zip(np.flatnonzero(better).tolist(), todo[better].tolist(), strict=True)
    ]


def _spread(loads: np.ndarray, mean: np.ndarray, coef: np.ndarray) -> np.ndarray:
    """``sum_d weight_d x sum_r (load[r, d] / mean_d - 1)^2`` per step (``coef = weight / mean^2``).

    Element-wise only (no reductions whose order a CPU could change): the same on every rank.
    """
    out = np.zeros(len(loads), dtype=np.float64)
    for d in range(loads.shape[2]):
        for r in range(loads.shape[1]):
            dev = loads[:, r, d] - mean[:, d]
            out += coef[:, d] * dev * dev
    return out


def spread_tail(
    cost: np.ndarray,
    size: np.ndarray,
    capacity: int,
    rows: int,
    world_size: int,
    balance: Balance,
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The samples of a last, partial step packed again so that every rank gets a share.

    A last step of fewer rows than ranks leaves ranks with an empty batch (a placeholder row).
    Its samples are repacked into ``ceil(rows / world_size)`` rows per rank (fewer if there are
    fewer samples): each sample, costliest first, goes to the rank it evens out most among
    those with a row it fits, into that rank's emptiest row. Rows that stay empty are left out.

    Args:
        cost: ``(samples, dimensions)`` of the step's samples.
        size: their tokens (each at most ``capacity``).
        capacity: tokens per row.
        rows: the rows the step has now.
        world_size: ranks.
        balance: the dimensions' weights.

    Returns:
        ``(order, row_counts, rows_per_rank)``: the samples' new order (positions into
        ``cost``), the samples in each new row, and each rank's rows; ``None`` when a sample
        fits no row (the step stays as it was).

    Example:
        >>> from chute.plan.balance import Balance
        >>> order, counts, per_rank = spread_tail(
        ...     np.array([[4], [3], [2], [1]]), np.array([4, 3, 2, 1]), 10, 1, 2,
        ...     Balance.of("tokens"))
        >>> order.tolist(), counts.tolist(), per_rank.tolist()
        ([0, 3, 1, 2], [2, 2], [1, 1])
    """
    cost = np.asarray(cost, dtype=np.int64)
    size = np.asarray(size, dtype=np.int64)
    n, w = len(size), world_size
    target = min(w * -(-rows // w), n)
    quota = target // w + (np.arange(w) < target % w)
    owner = np.repeat(np.arange(w), quota)
    totals = cost.sum(axis=0)
    mean = totals / w
    live = totals > 0
    safe = np.where(live, mean, 1.0)
    weights = np.array([wt for _, wt in balance.weights], dtype=np.float64)
    coef = np.where(live, weights / (safe * safe), 0.0)
    norm = np.where(live, weights / safe, 0.0)
    fcost = cost.astype(np.float64)
    key = np.zeros(n, dtype=np.float64)
    for d in range(cost.shape[1]):
        key += fcost[:, d] * norm[d]
    load = np.zeros(target, dtype=np.int64)
    loads = np.zeros((w, cost.shape[1]), dtype=np.float64)
    row_of = np.empty(n, dtype=np.int64)
    for i in np.lexsort((np.arange(n), -size, -key)).tolist():
        fits = load + size[i] <= capacity
        if not fits.any():
            return None
        grow = np.zeros(w, dtype=np.float64)
        for d in range(cost.shape[1]):
            c = fcost[i, d]
            grow += coef[d] * c * (2.0 * loads[:, d] + c - 2.0 * mean[d])
        open_ranks = np.zeros(w, dtype=bool)
        open_ranks[owner[fits]] = True
        grow[~open_ranks] = np.inf
        r = int(np.argmin(grow))
        row = int(np.argmin(np.where(fits & (owner == r), load, capacity + 1)))
        row_of[i] = row
        load[row] += size[i]
        loads[r] += fcost[i]
    counts = np.bincount(row_of, minlength=target)
    kept = counts > 0
    order = np.lexsort((np.arange(n), row_of))
    per_rank = np.bincount(owner[kept], minlength=w)
    return order, counts[kept], per_rank

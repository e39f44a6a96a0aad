"""The loader's few collectives: totals over ranks, and a check that ranks are in lockstep.

Each is a ``torch.distributed`` collective: every rank must call it at the same point. Without an
initialised process group they answer for this process alone.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from chute._internal.lazy_torch import require_torch
from chute.errors import LockstepError
from chute.world import World

__all__ = ["all_gather", "check_lockstep", "check_same_start", "dp_shares", "sum_over_ranks"]


def all_gather(value: Any, world_size: int | None = None) -> list[Any] | None:
    """``value`` from every rank, in rank order; ``None`` without a process group.

    With ``world_size`` (the caller's ``World``), also ``None`` where the process group has
    another size: the caller's ranks are not the group's (a loader given ``World()`` for one
    process inside a larger job), so the others would never join.
    """
    require_torch()
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return None
    if world_size is not None and dist.get_world_size() != world_size:
        return None
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, value)
    return gathered


def dp_shares(gathered: list[Any], world: World | None) -> list[Any]:
    """Of values gathered from every rank, those of each data-parallel rank's first rank.

    The ranks of one context-, sequence-, tensor- or pipeline-parallel group read the same
    samples; their counts are one data-parallel rank's, counted once.

    Example:
        >>> dp_shares(["r0", "r1", "r2", "r3"], World(world_size=4, cp=2))
        ['r0', 'r2']
    """
    if world is None or world.dp_size == world.world_size or len(gathered) != world.world_size:
        return gathered
    return [gathered[r] for r in world.dp_leaders()]


def sum_over_ranks(counts: dict[str, int], world: World | None = None) -> dict[str, int]:
    """``counts`` summed over every rank (over data-parallel ranks only, given ``world``)."""
    gathered = all_gather(counts)
    if gathered is None:
        return dict(counts)
    total: Counter[str] = Counter()
    for part in dp_shares(gathered, world):
        total.update(part)
    return dict(total)


def check_lockstep(position: tuple[Any, ...]) -> None:
    """Raise ``LockstepError`` unless every rank reports the same ``position``.

    The elastic resume relies on ranks consuming batches in lockstep (data-parallel training
    does: every step all-reduces), so that "k batches consumed" means the first k batches of
    every rank. Call this where checkpoints are taken to verify it.
    """
    gathered = all_gather(position)
    if gathered is None or all(p == gathered[0] for p in gathered):
        return
    shown = ", ".join(f"rank {r}: {p}" for r, p in enumerate(gathered))
    raise LockstepError(
        f"ranks are not in lockstep (epoch, batches consumed, earlier layouts): {shown}. A "
        f"resume state taken now would skip or repeat samples on some ranks; take loader "
        f"checkpoints after the same training step on every rank."
    )


def check_same_start(start: dict[str, Any], world: World) -> None:
    """Raise ``LockstepError`` unless every rank starts iterating from the same ``start``.

    ``start``: what a rank's plan and position are made of (samples, batches per rank, epoch,
    batches consumed, the planner's options). Ranks that differ read different data (a stale
    copy on one node), different options or different states: their plans yield different
    numbers of batches, and the first rank to run out waits in a collective the others never
    reach, until the process group's timeout. Gathered once, where every rank starts its first
    pass; nothing without a process group of ``world``'s size.
    """
    gathered = all_gather(start, world.world_size)
    if gathered is None or all(g == gathered[0] for g in gathered):
        return
    keys = [k for k in start if any(g.get(k) != gathered[0].get(k) for g in gathered)]
    shown = "; ".join(
        f"rank {r}: " + ", ".join(f"{k} {g.get(k)}" for k in keys) for r, g in enumerate(gathered)
    )
    raise LockstepError(
        f"ranks start from different data or positions ({shown}): every rank must read the "
        f"same data with the same options (a file that differs on one node, a stale copy?) "
        f"and load the same state; their plans would yield different numbers of batches, and "
        f"training would hang at the first collective one rank never reaches"
    )

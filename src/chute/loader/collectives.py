"""The loader's few collectives: totals over ranks, and a check that ranks are in lockstep.

Each is a ``torch.distributed`` collective: every rank must call it at the same point. Without an
initialised process group they answer for this process alone.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from chute._internal.lazy_torch import require_torch
from chute.errors import LockstepError

__all__ = ["all_gather", "check_lockstep", "sum_over_ranks"]


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


def sum_over_ranks(counts: dict[str, int]) -> dict[str, int]:
    """``counts`` summed over every rank."""
    gathered = all_gather(counts)
    if gathered is None:
        return dict(counts)
    total: Counter[str] = Counter()
    for part in gathered:
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

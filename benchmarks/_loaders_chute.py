"""chute's loaders in bench_loaders.py: on the raw JSONL, packed, and from its token cache.

* ``chute``: ``Loader(JsonlSource, Recipe)``, the recipe running in the workers;
* ``chute_packed``: the same with ``plan="packed"`` (its lengths pass is the prepare step);
* ``chute_cache`` / ``chute_cache_packed``: ``chute preprocess`` once, then
  ``Loader(open_cache(DIR))``, random or packed batches.
"""

from __future__ import annotations

import os
from typing import Any

from _loaders_common import TOKENIZER, Ctx


def chute_recipe(max_length: int | None = None) -> Any:
    from chute import Recipe

    return Recipe(
        tokenizer=str(TOKENIZER), template="qwen3", format="messages", max_length=max_length
    )


def chute_loader(ctx: Ctx, rank: int, world_size: int) -> Any:
    """Loader(JsonlSource, Recipe(template="qwen3")): the raw JSONL, tokenized in the workers."""
    from chute import JsonlSource, Loader, World

    return Loader(
        JsonlSource(ctx.data),
        chute_recipe(),
        batch_size=ctx.batch_size,
        num_workers=ctx.workers,
        seed=ctx.seed,
        world=World(rank=rank, world_size=world_size, local_rank=_local_rank()),
    )


# Packed rows: 1,024 tokens (the longest sample is 665), 6 rows a batch: 6,144 tokens per step,
# about what a random batch of 16 padded to its longest holds here (~6,000).
PACKED_LENGTH, PACKED_ROWS = 1024, 6


def chute_packed_prepare(ctx: Ctx) -> None:
    """The lengths pass a packed plan needs, once (cached by source and recipe fingerprint)."""
    from chute import JsonlSource
    from chute.lengths import lengths_of

    lengths_of(JsonlSource(ctx.data), chute_recipe(PACKED_LENGTH), workers=max(1, ctx.workers))


def chute_packed_loader(ctx: Ctx, rank: int, world_size: int) -> Any:
    """Loader(..., plan="packed"): rows of 1,024 tokens, no sample split, 6 rows a batch."""
    from chute import JsonlSource, Loader, World

    return Loader(
        JsonlSource(ctx.data),
        chute_recipe(PACKED_LENGTH),
        batch_size=PACKED_ROWS,
        num_workers=ctx.workers,
        seed=ctx.seed,
        plan="packed",
        world=World(rank=rank, world_size=world_size, local_rank=_local_rank()),
    )


def chute_cache_prepare(ctx: Ctx, out: str = "chute_tc") -> None:
    """chute preprocess: the recipe over every record once, into a fingerprinted Arrow cache."""
    from chute.cache import preprocess

    recipe = {
        "tokenizer": str(TOKENIZER),
        "template": "qwen3",
        "format": "messages",
        "max_length": PACKED_LENGTH,  # longer than any sample here: the same tokens as above
    }
    cache = {"workers": max(1, ctx.workers)}
    preprocess(sources=[str(ctx.data)], recipe=recipe, cache=cache, out=str(ctx.work / out))


def chute_cache_loader(ctx: Ctx, rank: int, world_size: int) -> Any:
    """Loader(open_cache(DIR)): memory-mapped token columns, no tokenizing while training."""
    from chute import Loader, World, open_cache

    return Loader(
        open_cache(ctx.work / "chute_tc"),
        batch_size=ctx.batch_size,
        num_workers=ctx.workers,
        seed=ctx.seed,
        world=World(rank=rank, world_size=world_size, local_rank=_local_rank()),
    )


def chute_cache_packed_prepare(ctx: Ctx) -> None:
    chute_cache_prepare(ctx, "chute_tc_packed")


def chute_cache_packed_loader(ctx: Ctx, rank: int, world_size: int) -> Any:
    """Loader(open_cache(DIR), plan="packed"): the cache's lengths, rows of 1,024 tokens."""
    from chute import Loader, World, open_cache

    return Loader(
        open_cache(ctx.work / "chute_tc_packed"),
        batch_size=PACKED_ROWS,
        num_workers=ctx.workers,
        seed=ctx.seed,
        plan="packed",
        plan_options={"max_length": PACKED_LENGTH},
        world=World(rank=rank, world_size=world_size, local_rank=_local_rank()),
    )


def _local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK", "0"))

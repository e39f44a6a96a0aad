"""The Loader's plan and collate, chosen from its arguments; lengths computed when a plan needs them.

``Loader(plan="grouped" | "budget" | "packed", plan_options={...})`` needs every sample's length
before the first batch. ``resolve_plan`` gets them once with ``chute.lengths.lengths_of`` (the
source's own lengths, the lengths cache, or one parallel pass of the recipe), binds them to the
planner, fills defaults from the recipe (``max_length``), and picks the matching collate
(``PackedCollate`` for packed plans). Samples the recipe rejects are excluded from the plan up
front; they are reported (``Loader.excluded``) and charged to the error budget at once.

Example:
    >>> data = [{"input_ids": [1] * n} for n in (5, 2, 7, 3)]
    >>> setup = resolve_plan(data, None, "packed", {"max_length": 8}, batch_size=1,
    ...                      shuffle=False, seed=0, drop_last=False, wrap=False)
    >>> type(setup.collate).__name__, setup.planner.max_length
    ('PackedCollate', 8)
"""

from __future__ import annotations

import copy
import inspect
import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from chute._internal.files import cache_root, first_in_process
from chute._internal.spelling import spell
from chute.collate import Collate, KTOCollate, PackedPreferenceCollate, PreferenceCollate
from chute.collate.packed import PackedCollate
from chute.errors import ConfigError, ErrorBudgetExceeded, SampleError
from chute.lengths import Lengths, Pieces, lengths_of
from chute.lengths.base import STATUS_REJECTED
from chute.loader.options import cache_image_rule, media_cache
from chute.media.positions import MRopePositions, positions_rule
from chute.plan import PLANNERS, LengthPlanner, PackedPlanner, Planner, make_planner
from chute.plan.registry import check_plan_options
from chute.plan.shards import ShardPlanner
from chute.plan.shared import PlanShare
from chute.recipe.contract import RecipeContract
from chute.recipe.outcome import sample_of
from chute.sample.budget import ErrorBudget
from chute.sample.rejects import item_reject_entry
from chute.world import World

__all__ = [
    "SLICES",
    "PlanSetup",
    "check_collate",
    "check_excluded",
    "check_packed_collate",
    "default_collate",
    "positions_of",
    "resolve_plan",
    "slice_collate",
    "slice_options",
    "split_source",
    "task_of",
    "warn_if_thrashing",
    "with_positions",
]

log = logging.getLogger("chute.loader")
SLICES = ("cp", "sp")


@dataclass
class PlanSetup:
    """The planner, its lengths (``None`` for the random plan) and the default collate."""

    planner: Planner
    collate: Callable[..., dict[str, Any]]
    lengths: Lengths | None = None
    excluded: dict[str, int] = field(default_factory=dict)

    @property
    def packed(self) -> bool:
        return isinstance(self.planner, PackedPlanner)


def resolve_plan(
    source: Any,
    recipe: RecipeContract | None,
    plan: str | Planner,
    plan_options: Mapping[str, Any] | None,
    *,
    batch_size: int,
    shuffle: bool,
    seed: int,
    drop_last: bool,
    wrap: bool,
    pad_id: int = 0,
    pad_to_multiple_of: int | None = None,
    local_rank: int = 0,
) -> PlanSetup:
    """The planner for ``plan`` with its lengths bound, and the default collate for it."""
    options = dict(plan_options or {})
    cls = PLANNERS.get(plan) if isinstance(plan, str) else type(plan)
    if options and not isinstance(plan, str):
        raise ConfigError(
            "plan_options configure a plan given by name; set the options on the Planner "
            "instance you pass as plan= instead"
        )
    needs = bool(getattr(cls, "needs_lengths", False))
    if options and not needs and not _takes_options(cls) and isinstance(plan, str):
        raise ConfigError(
            f"plan={plan!r} takes no plan_options (got {sorted(options)}); they are for "
            f"{sorted(k for k, c in PLANNERS.items() if _takes_options(c))}"
        )
    task = task_of(source, recipe)
    from_recipe = None  # the recipe's max_length where the plan's comes from it (for errors)
    if isinstance(plan, str) and needs:
        # the recipe's max_length; reading a cache (no recipe runs), the cache's recipe's
        max_length = (recipe.max_length if recipe is not None else None) or getattr(
            source, "max_length", None
        )
        recipe_length = max_length
        if plan == "packed" and max_length is not None and task == "preference":
            max_length *= 2  # a row must hold both sides of a pair (each up to max_length)
        if plan in ("packed", "budget") and max_length is not None:
            from_recipe = None if "max_length" in options else recipe_length
            options.setdefault("max_length", max_length)
        if plan == "budget" and pad_to_multiple_of is not None:
            options.setdefault("pad_to_multiple_of", pad_to_multiple_of)
    check_plan_options(plan, options)
    try:
        planner = make_planner(
            plan,
            batch_size=batch_size,
            shuffle=shuffle,
            seed=seed,
            drop_last=drop_last,
            wrap=wrap,
            **options,
        )
    except ConfigError as exc:
        if exc.param != "max_length" or from_recipe is None:
            raise
        # the row length is the recipe's: say where to change it (or how to set the plan's)
        said = str(exc).removeprefix(f"{spell('max_length')}: ")
        row = (
            "the recipe's max_length"
            if options["max_length"] == from_recipe
            else ("twice the recipe's max_length (a row holds both sides of a pair)")
        )
        raise ConfigError(
            f"{said} (the row length is {row}, {from_recipe}: change it there, or set the "
            f"plan's own: plan_options={{'max_length': N}})",
            param="max_length",
        ) from None
    if isinstance(planner, ShardPlanner) and planner.shard_bounds is None and planner.shuffle:
        planner = planner.with_shards(shard_bounds_of(source))
    warn_if_thrashing(source, planner)
    lengths = None
    if isinstance(planner, LengthPlanner):
        if planner.lengths is None:
            planner = planner.with_lengths(lengths_of(source, recipe, local_rank=local_rank))
        lengths = planner.require_lengths()
        if isinstance(planner, PackedPlanner) and not planner.split:
            planner, lengths = _media_longer_than_rows(planner, lengths)
        if planner.share is None and node_ranks() > 1:
            planner = planner.with_share(PlanShare(cache_root() / "plans"))
    collate = default_collate(
        planner, task, pad_id, pad_to_multiple_of, positions_of(source, recipe)
    )
    excluded = lengths.rejected if lengths is not None else {}
    return PlanSetup(planner, collate, lengths, excluded)


def _takes_options(cls: Any) -> bool:
    """Whether a named plan has options of its own (length plans, ``shards``)."""
    return bool(getattr(cls, "needs_lengths", False) or getattr(cls, "needs_shards", False))


def warn_if_thrashing(source: Any, planner: Planner) -> None:
    """Warn once when a full shuffle reads remote files far larger than their local cache.

    Under ``cache_limit`` each file is downloaded whole; a full permutation then needs most
    files at once and downloads them again and again (``docs/benchmarks.md``: 627 KB fetched per
    1.7 KB sample with a quarter of the data fitting). ``plan="shards"`` reads a few at a time.
    """
    limit = getattr(getattr(source, "remote", None), "cache_limit", None)
    files = getattr(source, "files", None) or []
    if limit is None or isinstance(planner, ShardPlanner) or not getattr(planner, "shuffle", False):
        return
    remote = [f for f in files if getattr(f, "remote", False)]
    total = sum(int(getattr(f, "bytes", 0) or getattr(f.identity, "size", 0)) for f in remote)
    # once per process for these files and limit (not per object: an id is reused after GC)
    key = "|".join(str(getattr(f, "path", "")) for f in remote)
    if total > 2 * limit and first_in_process("thrash", limit, key):
        log.warning(
            "a shuffled plan over %d remote files (%d bytes) with cache_limit=%d bytes downloads "
            "most files many times (each read needs a whole file, and most do not fit); use "
            "plan='shards' (plan_options={'shard_window': N}: N files at a time), or no "
            "cache_limit (ranged reads)",
            len(remote),
            total,
            limit,
        )


def shard_bounds_of(source: Any) -> Any:
    """The sample ranges of ``source``'s files, for ``plan="shards"``; else ``ConfigError``."""
    bounds = getattr(source, "shard_bounds", None)
    if not callable(bounds):
        raise ConfigError(
            f"plan='shards' shuffles by the files of a source, and {type(source).__name__} "
            f"has none (no shard_bounds()); read the files themselves (JsonlSource, "
            f"ParquetSource, a path or URL glob) or use plan='random'",
            param="plan",
        )
    return bounds()


def node_ranks() -> int:
    """Ranks on this node (``World.local_world_size``: torchrun's ``LOCAL_WORLD_SIZE``).

    With more than one, length-aware plans are built once per node and memory-mapped by every
    local rank (``chute.plan.shared``).
    """
    return World.detect().local_world_size


def split_source(source: Any, recipe: RecipeContract | None, local_rank: int = 0) -> Any:
    """``source`` itself, or with ``Recipe(overflow="split")`` the view of its windows.

    The windows are counted from the records' lengths (one cached pass), so every plan, the
    random one too, deals window ids: exact-once, resume and rejects count windows.
    """
    if recipe is None or recipe.overflow != "split" or getattr(source, "windowed", False):
        return source  # a mixture's datasets are each split when it is opened
    return Pieces(source, lengths_of(source, recipe, local_rank=local_rank))


def task_of(source: Any, recipe: RecipeContract | None) -> str:
    """The kind of samples: ``sft``, ``preference`` or ``kto`` (the recipe's, or the cache's)."""
    task = recipe.task if recipe is not None else getattr(source, "task", None)
    return task if isinstance(task, str) else "sft"


def default_collate(
    planner: Planner,
    task: str,
    pad_id: int,
    pad_to_multiple_of: int | None,
    positions: MRopePositions | None = None,
) -> Any:
    """The collate for the plan and the kind of samples (see ``chute.collate``).

    ``positions``: the 3-D positions of a Qwen-VL family (``positions_of``), else 1-D.
    """
    if isinstance(planner, PackedPlanner):  # rows max_length wide, or as wide as the fullest
        kind: Any = PackedPreferenceCollate if task == "preference" else PackedCollate
        aligned = {"align": planner.align} if planner.align > 1 else {}
        collate: Any = kind(
            planner.max_length,
            pad_id,
            pad_to_max_length=pad_to_multiple_of is None,
            pad_to_multiple_of=pad_to_multiple_of,
            positions=positions,
            **aligned,
        )
    elif task == "preference":
        collate = PreferenceCollate(pad_id, pad_to_multiple_of, positions=positions)
    else:
        collate = Collate(pad_id, pad_to_multiple_of, positions=positions)
    return KTOCollate(collate) if task == "kto" else collate


def positions_of(source: Any, recipe: RecipeContract | None) -> MRopePositions | None:
    """The positions rule of the samples: the family of the recipe's image-token rule.

    Over a token cache (no recipe runs) the rule the cache's recipe resolved, as its manifest
    records it. ``None``: 1-D positions (no model family with 3-D positions).

    Example:
        >>> positions_of(None, recipe).family  # doctest: +SKIP
        'qwen2-vl'
    """
    media = recipe.media if recipe is not None else None
    if media is not None:
        return positions_rule(media.image_rule)
    return positions_rule(cache_image_rule(media_cache(source)))


def check_collate(collate: Any, pad_id: Any, pad_to_multiple_of: Any) -> None:
    """Padding options configure the default collate only."""
    if collate is not None and (pad_id is not None or pad_to_multiple_of is not None):
        raise ConfigError(
            "pad_id and pad_to_multiple_of configure the default collate; with a custom "
            "collate=..., set padding on that collate instead"
        )


def with_positions(collate: Any, setup: PlanSetup) -> Any:
    """A chute collate given without ``positions``, with the recipe's 3-D positions rule.

    ``PackedCollate(max_length=..., pad_id=..., block_mask=True)`` (the SDPA recipe of
    docs/padding.md) over a Qwen-VL recipe made 1-D positions and no ``mm_token_type_ids``:
    the model then gave every image token a text position, silently. A copy is returned (the
    caller's object is left as it is); a collate of another kind is the caller's to fill.
    """
    rule = getattr(setup.collate, "positions", None)
    if collate is None or rule is None or not hasattr(collate, "positions"):
        return collate
    if collate.positions is not None:
        return collate
    filled = copy.copy(collate)
    filled.positions = rule
    return filled


def _media_longer_than_rows(
    planner: PackedPlanner, lengths: Lengths
) -> tuple[LengthPlanner, Lengths]:
    """Samples with images longer than a packed row, rejected before the plan deals them.

    A row cannot be cut through an image's tokens, so the Loader leaves such a sample out
    (``media_too_long_for_row``); dealt, it took a row of its own that became a placeholder,
    and the plan said it was cut. Videos are not counted in the lengths: the Loader still
    leaves those out when it meets them.
    """
    image = lengths.image_tokens
    if image is None:
        return planner, lengths
    over = (lengths.length > planner.max_length) & (np.asarray(image) > 0)
    if not over.any():
        return planner, lengths
    log.warning(
        "%d samples with images are longer than a packed row (max_length=%d): a row cannot "
        "be cut through an image, so they are left out (media_too_long_for_row); raise "
        "plan_options max_length, or set the recipe's max_length (its truncation stops "
        "before an image)",
        int(np.count_nonzero(over)),
        planner.max_length,
    )
    lengths = lengths.rejecting(over, "media_too_long_for_row")
    return planner.with_lengths(lengths), lengths


def check_packed_collate(setup: PlanSetup, collate: Any) -> None:
    """Refuse a custom collate that cannot take the rows of a packed plan."""
    if not setup.packed or collate is None:
        return
    try:
        params = inspect.signature(collate).parameters
    except (TypeError, ValueError):  # a builtin or C callable: let it try
        return
    takes_kwargs = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    if "rows" not in params and not takes_kwargs:
        raise ConfigError(
            f"plan='packed' calls collate(samples, rows=[samples per row]), but "
            f"{type(collate).__name__} takes no rows argument; use chute.PackedCollate (the "
            f"default for packed plans) or accept rows="
        )


def excluded_entries(source: Any, recipe: Any, lengths: Lengths) -> Iterator[dict[str, Any]]:
    """Rejects-file entries of the samples the lengths pass left out of the plan.

    Each record is judged again by the recipe for its message (the lengths store keeps its
    kind only); one the recipe now accepts (its media were judged too) keeps the stored kind.
    """
    status = lengths.status
    for index in np.flatnonzero(lengths.length < 0).tolist():
        item = source[index]
        try:
            sample_of(recipe, item)
            code = int(status[index]) - STATUS_REJECTED if status is not None else -1
            kind = lengths.kinds[code] if 0 <= code < len(lengths.kinds) else "rejected"
            error = SampleError(kind, "left out of the plan by the lengths pass")
        except SampleError as exc:
            error = exc
        yield item_reject_entry(item, index, error)


def check_excluded(setup: PlanSetup, budget: ErrorBudget) -> None:
    """Log the samples the lengths pass rejected, and stop now if they exceed the budget."""
    lengths = setup.lengths
    if lengths is None or not lengths.num_rejected:
        return
    total, bad = len(lengths), lengths.num_rejected
    seen = lengths.fingerprint()["hash"]
    # Several loaders over the same lengths (chute bench, one per worker count; a resumed run)
    # say it once per process.
    level = logging.WARNING if first_in_process("excluded", seen) else logging.DEBUG
    log.log(
        level,
        "%d of %d samples were rejected while computing lengths (by the recipe, or as longer "
        "than a packed row) and are left out of the plan (Loader.excluded):\n%s",
        bad,
        total,
        lengths.tally.summary(),
    )
    f = budget.max_bad_fraction
    if f is not None and total >= budget.min_samples and bad > f * total:
        raise ErrorBudgetExceeded(
            f"error budget exceeded: {bad} of {total} samples were rejected ({bad / total:.1%}) "
            f"while computing lengths, above max_bad_fraction={f}.\nBy reason:\n"
            f"{lengths.tally.summary()}\nFix or filter the data (`chute validate PATH` lists "
            f"every bad record with its line), or raise max_bad_fraction if this is expected.",
            lengths.tally,
        )


def slice_options(
    slices: Any,
    world: World,
    plan: str | Planner,
    plan_options: Mapping[str, Any] | None,
    task: str,
) -> dict[str, Any] | None:
    """``plan_options`` for ``Loader(slices=...)``: packed rows, samples aligned to ``2 * cp``.

    Refuses what cannot be sliced (another plan, preference pairs, ``cp`` and ``sp`` at once)
    with the fix; returns the options unchanged without slices.
    """
    options = None if plan_options is None else dict(plan_options)
    if slices is None:
        if (world.cp_size > 1 or world.sp_size > 1) and world.is_main:
            log.info(
                "world has cp=%d, sp=%d: every rank of a group gets the whole batch; pass "
                "slices='cp' or 'sp' to get each rank's slice",
                world.cp_size,
                world.sp_size,
            )
        return options
    if slices not in SLICES:
        raise ConfigError(
            f"slices must be 'cp' (zig-zag context-parallel slices), 'sp' (contiguous Ulysses "
            f"slices) or None (whole batches), got {slices!r}",
            param="slices",
        )
    other = "sp" if slices == "cp" else "cp"
    if getattr(world, f"{other}_size") > 1:
        raise ConfigError(
            f"slices={slices!r} with {other}={getattr(world, f'{other}_size')} in the World: "
            f"slicing for context and sequence parallelism at once is not supported; set one "
            f"of them (the other group's ranks would get the same slice)",
            param="slices",
        )
    if task != "sft":
        raise ConfigError(
            f"slices={slices!r} cuts packed rows of single samples; {task} samples (pairs) "
            f"cannot be sliced yet: drop slices",
            param="slices",
        )
    name = plan if isinstance(plan, str) else getattr(plan, "kind", type(plan).__name__)
    if name != "packed" or not isinstance(plan, str | PackedPlanner):
        raise ConfigError(
            f"slices={slices!r} cuts packed rows (each sample a segment with its own "
            f"positions); plan={name!r} makes padded rows: use plan='packed'",
            param="slices",
        )
    if slices == "sp":
        return options
    need = 2 * world.cp_size
    if isinstance(plan, PackedPlanner):
        if plan.align % need:
            raise ConfigError(
                f"slices='cp' with cp={world.cp_size} pads every sample to a multiple of "
                f"2 x cp = {need}, but the PackedPlanner packs with align={plan.align}; build "
                f"it with align={need} (or a multiple)",
                param="align",
            )
        return options
    options = options or {}
    align = options.setdefault("align", need)
    if isinstance(align, bool) or not isinstance(align, int) or align % need:
        raise ConfigError(
            f"slices='cp' with cp={world.cp_size} needs samples padded to a multiple of "
            f"2 x cp = {need}; plan_options align={align!r} is not one. Leave align out (it "
            f"defaults to {need}), or pin a multiple such as {4 * need} to resume later with a "
            f"larger cp",
            param="align",
        )
    return options


def slice_collate(collate: Any, slices: str | None, world: World) -> Any:
    """``collate`` wrapped to give this rank's slice of every batch (``Loader(slices=...)``)."""
    from chute.collate.slices import ContextParallelCollate, SequenceParallelCollate

    if slices is None:
        return collate
    if slices == "cp":
        return ContextParallelCollate(collate, world.cp_size, world.cp_rank)
    return SequenceParallelCollate(collate, world.sp_size, world.sp_rank)

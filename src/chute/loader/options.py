"""Checking and resolving the Loader's arguments (messages name the argument and the fix)."""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from chute._internal.spelling import spell, spell_set, spell_value
from chute.errors import ConfigError, as_sample_error
from chute.recipe.contract import RecipeContract
from chute.recipe.recipe import Recipe
from chute.world import World

__all__ = [
    "as_source",
    "check_seconds",
    "check_tokenized",
    "check_workers",
    "fingerprint_of",
    "media_guard",
    "media_stage_for",
    "pad_id_from",
    "rejects_path_for",
]

PathLike = str | os.PathLike[str]
log = logging.getLogger("chute.loader")


def as_source(source: Any) -> Any:
    """``source`` itself, a cache (a cache directory), or a source over paths (JSON or Parquet)."""
    if isinstance(source, str | os.PathLike):
        from chute.cache import is_cache_dir, open_cache

        if is_cache_dir(source):
            return open_cache(source)
    if isinstance(source, str | os.PathLike) or (
        isinstance(source, list | tuple)
        and source
        and all(isinstance(s, str | os.PathLike) for s in source)
    ):
        from chute.sources import open_source

        return open_source(source)
    if not (hasattr(source, "__len__") and hasattr(source, "__getitem__")):
        raise ConfigError(
            f"source must be a JsonlSource, a path or list of paths, a cache, or a map-style "
            f"dataset with len() and [i]; got {type(source).__name__}"
        )
    return source


def check_tokenized(source: Any) -> None:
    """Refuse, before the first batch, records read as samples that hold no ``input_ids``.

    Without a recipe the records are the samples. Raw records (text, conversations) used to
    be skipped one by one as bad samples: placeholder batches reached the model until the error
    budget stopped the run a hundred samples in. The first records of each file are probed;
    where every one that parses is an object without ``input_ids``, the fix is named now. A
    source with some tokenized records among the probed passes (the budget counts the rest).
    """
    from chute.recipe.outcome import probe_records
    from chute.sample.budget import reject_hint

    keys: list[str] | None = None
    records = probe_records(source, per_file=8, limit=64)
    while True:
        try:
            record = next(records)
        except StopIteration:
            break
        except Exception:  # a source that raises for an item: the budget judges its samples
            return
        try:
            data = getattr(record, "data", record)  # a Record parses here
        except Exception:  # a bad record says nothing of the others (the budget counts it)
            continue
        if not isinstance(data, dict):
            continue
        if "input_ids" in data:
            return
        keys = keys or sorted(data)
    if keys is not None:
        raise ConfigError(
            f"{reject_hint('missing_field', field='input_ids', recipe=False)} (the records "
            f"hold {', '.join(map(repr, keys[:8]))}, no input_ids)",
            param="recipe",
        )


def fingerprint_of(source: Any) -> Any:
    """The source's ``fingerprint()`` as plain JSON data, or its type and length."""
    fingerprint = getattr(source, "fingerprint", None)
    if callable(fingerprint):
        return orjson.loads(orjson.dumps(fingerprint(), option=orjson.OPT_SERIALIZE_NUMPY))
    cls = type(source)
    return {
        "kind": "dataset",
        "type": f"{cls.__module__}.{cls.__qualname__}",
        "records": len(source),
    }


def pad_id_from(recipe: RecipeContract | None, pad_id: int | None) -> int:
    """``pad_id``, else the recipe's (or its tokenizer's) ``pad_id`` / ``pad_token_id``, else 0."""
    if pad_id is not None:
        return pad_id
    for owner in (recipe, recipe.tokenizer if recipe is not None else None):
        for name in ("pad_id", "pad_token_id"):
            value = getattr(owner, name, None)
            if isinstance(value, int | np.integer) and not isinstance(value, bool) and value >= 0:
                return int(value)
    return 0


def media_stage_for(
    media: Any,
    recipe: RecipeContract | None,
    collate: Any,
    source: Any = None,
    lengths: Any = None,
) -> tuple[Any, Any]:
    """``(stage, collate)`` for ``Loader(media=...)``.

    The stage is bound to the recipe, the collate wrapped in ``MediaCollate``; without media,
    ``(None, collate)``. Over a cache built with ``--pixels`` the stage reads the cache's
    pre-decoded images: without ``media`` it is the cache's own (``Cache.media_stage()``), and a
    given stage without a ``store`` gets the cache's (``ConfigError`` if its geometry differs;
    ``MediaStage(store=False)`` decodes instead). ``media=False``: no media stage at all.

    Without ``media``, when the samples reference images (the lengths' image tokens, a cache's
    manifest, or the first records of each file), a recipe that counts image tokens gets the
    stage of its rule (``chute.media.stage.default_media_stage``: LLaVA-1.5's CLIP-336 for 576,
    Qwen2-VL's dynamic resolution for ``qwen2-vl``), or a ``ConfigError`` naming ``media=`` and
    ``media=False`` when its count has no default. Data whose first records have no media gets
    no stage, and the workers stop with a ``ConfigError`` at the first sample that has media
    (``media_guard``), so none is ever trained on without its pixels.
    """
    if media is False:
        return None, collate  # no media stage, even over a cache with pre-decoded images
    pixels = getattr(source, "pixels", None)
    if media is None and pixels is not None:
        media = _with_cache_videos(source.media_stage(), source)
    if media is None:
        # Images without pixels would train the model on placeholder tokens: when the recipe
        # counts images, its rule's default stage loads them (or a ConfigError names media=).
        media = _default_stage(recipe, source, lengths)
    if media is None:
        return None, collate
    import dataclasses

    from chute.collate.media import MediaCollate
    from chute.media.stage import as_media_stage

    stage = as_media_stage(media)
    if pixels is not None and stage.store is None and hasattr(stage.image, "prepare"):
        try:
            stage = dataclasses.replace(stage, store=pixels)
        except ConfigError as exc:
            root = getattr(source, "root", None)  # a mixture's caches have one each
            where = f"the cache {root}" if root else "a cache of the mixture"
            raise ConfigError(
                f"{where} holds images pre-decoded for another transform "
                f"than this media stage's. Leave media= out to use the cache's transform, pass "
                f"MediaStage(..., store=False) to decode every image with this one, or rebuild "
                f"the cache with its options. ({exc})",
                param="media",
            ) from None
    stage = stage.bind(recipe)
    if (
        stage.remote is None
        and stage.fetch is None
        and callable(getattr(source, "media_paths", None))
    ):
        # over a cache, without the recipe: images under its remote media roots are fetched
        # (a local root missing on this machine is no error here: its images are in the cache's
        # pixel store, or their absence is a counted skip at load time)
        from chute.media.remote import RemoteMedia

        with contextlib.suppress(ConfigError, OSError):
            stage = dataclasses.replace(stage, remote=RemoteMedia(source.media_paths()))
    return stage, collate if isinstance(collate, MediaCollate) else MediaCollate(collate)


def _with_cache_videos(stage: Any, source: Any) -> Any:
    """A cache's pixel stage (images pre-decoded) that also loads the videos its recipe counts.

    The pixel store holds images only; its stage had no ``video``, and a cache with videos
    stopped at its first batch.
    """
    rules = _cache_rules(source)
    video = rules[1] if rules is not None else None
    if stage is None or stage.video is not None or not hasattr(video, "fingerprint"):
        return stage
    import dataclasses

    return dataclasses.replace(stage, video=video)


def media_guard(media: Any, recipe: RecipeContract | None, source: Any = None) -> bool:
    """Whether workers must refuse samples with media: no stage, and none turned off on purpose.

    A recipe that counts images (or videos, audio) may meet them, and so may a cache read
    without its recipe, whose recipe counted them; ``media=False`` says the text alone is
    wanted, and a recipe without any media rule refuses media itself.
    """
    plan = recipe.media if recipe is not None else None
    counts = plan is not None and any(
        rule is not None for rule in (plan.image_rule, plan.video_tokens, plan.audio_tokens)
    )
    if recipe is None:
        rules = _cache_rules(source)
        counts = rules is not None and any(rule is not None for rule in rules)
    return media is None and counts


def _references_media(recipe: RecipeContract, source: Any, lengths: Any) -> bool:
    """Whether the samples reference media: a cache's manifest, the lengths, or a probe."""
    if cache_members(source):  # a cache (or caches): its samples are made already
        return _cache_references_media(source, _cache_rules(source))
    own = getattr(source, "lengths", None)
    lengths = lengths if lengths is not None else own
    image = getattr(lengths, "image_tokens", None)
    if image is not None and bool((np.asarray(image) > 0).any()):
        return True
    from chute.recipe.outcome import probe_records

    for record in probe_records(source, per_file=64, limit=256):
        try:
            sample = recipe(record)
        except Exception as exc:  # a bad record says nothing about media (the pass counts it)
            as_sample_error(exc, None, None)  # ... but a job-level error is raised
            continue
        if any(sample.get(key) for key in ("images", "videos", "audios")):
            return True
    return False


def _default_stage(recipe: RecipeContract | None, source: Any, lengths: Any = None) -> Any:
    """The default media stage of the recipe's image rule (the cache's recipe's), or ``None``."""
    from chute.media.stage import default_media_stage

    plan = recipe.media if recipe is not None else None
    if recipe is not None and plan is not None:
        if plan.image_rule is None or not _references_media(recipe, source, lengths):
            return None  # no sample references an image (or the recipe refuses them)
        stage = default_media_stage(plan.image_rule, plan.video_tokens, plan.audio_tokens)
    else:
        rules = _cache_rules(source)
        if rules is None or not _cache_references_media(source, rules):
            return None
        image, video = rules
        if image is None:
            return None
        stage = default_media_stage(image, video)
    log.info(
        "media: no media= given and the recipe counts image tokens; loading images with %r "
        "(media=False trains on the text alone)",
        stage.image,
    )
    rule = plan.image_rule if plan is not None else None
    if (
        rule is not None
        and getattr(rule, "patch_size", None)
        and getattr(rule, "family", 1) is None
    ):
        log.warning(
            "media: images are counted by a dynamic rule without a model family "
            "(image_tokens='auto' or a mapping), so batches carry 1-D positions; to train "
            "Qwen2-VL, Qwen2.5-VL or Qwen3-VL name the family (image_tokens='qwen2-vl', "
            "'qwen2.5-vl' or 'qwen3-vl') and batches carry its 3-D positions"
        )
    return stage


def cache_members(source: Any) -> list[Any]:
    """The token caches a source reads: a mixture's datasets' caches, or the source itself."""
    members = getattr(source, "sources", None)
    if isinstance(members, list):  # a mixture (its own manifest sums its datasets')
        return [s for s in members if isinstance(getattr(s, "manifest", None), dict)]
    return [source] if isinstance(getattr(source, "manifest", None), dict) else []


def media_cache(source: Any) -> Any:
    """The cache whose recipe's media rules a source's samples are prepared by, or ``None``.

    A cache itself; over a mixture of caches (``chute preprocess`` of a mixture), the dataset
    whose image rule names a Qwen-VL family, else the first that counts image tokens, else the
    first (as ``run_wide_media`` picks a mixture's recipe's: a preprocessed multimodal mixture
    was read with no media stage, its image tokens fed without pixels).

    Raises:
        ConfigError: two datasets' caches naming different model families.
    """
    from chute.media.positions import first_family

    members = cache_members(source)
    if len(members) <= 1:
        return members[0] if members else None
    named = first_family([str(m.root) for m in members], [cache_image_rule(m) for m in members])
    if named is not None:
        return members[named]
    return next((m for m in members if m.manifest.get("image_tokens")), members[0])


def _cache_rules(source: Any) -> tuple[Any, Any] | None:
    """``(image rule, video rule)`` of the recipe that built a cache; ``None``: not a cache.

    Read from the cache itself (its fingerprint and config), so a Loader over it without the
    recipe loads what its samples reference: images and videos alike (a cache of videos was
    read with no stage, and its video tokens trained on no pixels). Over a mixture of caches,
    ``media_cache``'s.
    """
    source = media_cache(source)
    manifest = getattr(source, "manifest", None)
    config = getattr(source, "recipe_config", None)
    if not isinstance(manifest, dict) or not callable(config):
        return None
    from chute.media.video_spec import video_tokens_rule

    image = cache_image_rule(source)
    try:
        value = config().recipe.video_tokens
        video = None if value is None else video_tokens_rule(value, getattr(image, "family", None))
    except ConfigError:  # a config an older chute wrote that no longer reads: its images only
        video = None
    return image, video


def _cache_references_media(source: Any, rules: tuple[Any, Any] | None) -> bool:
    """Whether a cache's samples reference media: image tokens counted, or videos in rows.

    The manifest counts image tokens only: where the cache's recipe counts videos, they are
    looked for in its first 256 rows (one chunk's reads, also from object storage). A video
    further on, with no stage, is refused by the workers (``media_guard``), not trained on.
    """
    members = cache_members(source)
    if any(m.manifest.get("image_tokens") for m in members):
        return True
    if rules is None or rules[1] is None:
        return False
    return any(m[i].get("videos") for m in members for i in range(min(len(m), 256)))


def cache_image_rule(source: Any) -> Any:
    """The image rule of the recipe that built a cache (``None``: it counts no images)."""
    manifest = getattr(source, "manifest", None)
    if not isinstance(manifest, dict):
        return None
    from chute.media.tokens import image_tokens_rule

    spec = dict(manifest["fingerprint"]["recipe"].get("media", {}).get("image_tokens") or {})
    kind = spec.pop("rule", None)
    if kind == "fixed":
        return image_tokens_rule(spec["tokens"])
    if kind == "anyres":  # LLaVA-NeXT / OneVision tiles
        return image_tokens_rule({"rule": kind, **spec})
    return image_tokens_rule(spec) if kind == "dynamic" else None


def rejects_path_for(path: PathLike, world: World) -> Path:
    """This rank's rejects file: ``{rank}`` filled in, or ``name.rank3.jsonl`` on many ranks."""
    text = os.fspath(path)
    if "{rank}" in text:
        return Path(text.replace("{rank}", str(world.rank)))
    p = Path(text)
    if world.world_size > 1:
        return p.with_name(f"{p.stem}.rank{world.rank}{p.suffix}")
    return p


def check_workers(num_workers: Any, persistent: bool, prefetch: Any) -> int:
    if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 0:
        raise ConfigError(f"num_workers must be an int >= 0, got {num_workers!r}")
    if persistent and num_workers == 0:
        raise ConfigError(
            "persistent_workers=True needs num_workers > 0 (there are no workers to keep)"
        )
    if prefetch is not None:
        if isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 1:
            raise ConfigError(f"prefetch_factor must be a positive int or None, got {prefetch!r}")
        if num_workers == 0:
            raise ConfigError("prefetch_factor needs num_workers > 0 (the main process reads)")
    return num_workers


def check_seconds(name: str, value: Any, *, allow_zero: bool) -> float | None:
    """``value`` as float seconds; ``None`` (and 0 unless ``allow_zero``) means no limit."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ConfigError(f"{name} must be a number of seconds >= 0 or None, got {value!r}")
    if value == 0 and not allow_zero:
        return None
    return float(value)


def geometry_follows_stage(
    recipe: RecipeContract | None, media: Any, source: Any = None
) -> RecipeContract | None:
    """The recipe whose coordinates follow the image transform of ``Loader(media=...)``.

    A recipe moves the boxes in the text as its rule's default stage prepares images; a media
    stage given with another transform (a centre crop where the default pads to a square)
    prepares other pixels (``Recipe.with_image_transform``). Over a cache with pre-decoded
    images, without ``media``, the cache's stage is the one (its samples were made so).
    """
    if recipe is None and not (media is None or isinstance(media, bool)):
        _check_cache_geometry(source, media)
    follow = getattr(recipe, "with_image_transform", None)
    if recipe is None or not callable(follow) or getattr(recipe, "geometry", None) is None:
        return recipe
    if media is None and getattr(source, "pixels", None) is not None:
        media = source.media_stage()
    if media is None or isinstance(media, bool):
        return recipe
    from chute.media.stage import as_media_stage

    try:
        image = getattr(as_media_stage(media), "image", None)
    except ConfigError:
        return recipe  # not a stage: refused with its own message where the stage is made
    return follow(image) if image is not None else recipe


def _check_cache_geometry(source: Any, media: Any) -> None:
    """Refuse a media stage that prepares a cache's images otherwise than its boxes assume.

    Read without a recipe, a cache's text is fixed: its boxes were placed for one transform.
    """
    manifest = getattr(source, "manifest", None)
    check = getattr(source, "check_recipe", None)
    if not isinstance(manifest, dict) or not callable(check):
        return
    geometry = manifest.get("fingerprint", {}).get("recipe", {}).get("geometry")
    if not geometry or geometry.get("convention", "none") == "none":
        return
    recipe = source.recipe_config().recipe.build()  # its tokenizer loaded: caches with boxes only
    check(geometry_follows_stage(recipe, media))


def lengths_recipe(recipe: RecipeContract | None, media: Any) -> RecipeContract | None:
    """The recipe the lengths pass runs: with crops or flips, one writing the widest coordinates.

    A crop rewrites a box in the text per draw, so the sample's length changes from epoch to
    epoch; plans are made once, from lengths counted with every coordinate at its widest form
    (``Recipe.widest_coordinates``), so an augmented sample is never longer than planned and a
    packed row never exceeds ``max_length``. A mixture's recipe gives each dataset's recipe so.
    """
    augment = getattr(media, "augment", None)
    widest = getattr(recipe, "widest_coordinates", None)
    if augment is None or not augment.geometric or not callable(widest):
        return recipe
    return widest()


def planning_inputs(
    source: Any, recipe: RecipeContract | None, media: Any
) -> tuple[Any, RecipeContract | None]:
    """The source and recipe a Loader's plan counts lengths with (``lengths_recipe``).

    A mixture counts each dataset's lengths under the recipes its source holds, so with crops
    or flips it plans over the same datasets holding the widest recipes
    (``MixtureSource.with_recipes``); its records read the same.
    """
    planning = lengths_recipe(recipe, media)
    recipes = getattr(planning, "recipes", None)
    if (
        planning is not recipe
        and recipes is not None
        and callable(getattr(source, "with_recipes", None))
    ):
        source = source.with_recipes(recipes)
    return source, planning


def check_augment(media: Any, recipe: RecipeContract | None) -> None:
    """Refuse augmentation whose crops or flips the text could not follow.

    A crop or flip moves what boxes in the text point at, and a flip falsifies "left" and
    "right": only a chute ``Recipe`` run in the worker, with its ``geometry`` set (``"none"``
    says the text holds no coordinates), rewrites and checks the text with the same draw.
    Colour jitter and pixel transforms alone need nothing of the text.
    """
    augment = getattr(media, "augment", None)
    if augment is None or not augment.geometric:
        return
    if recipe is None:
        raise ConfigError(
            "the media stage's augmentation crops or flips images, but the samples come "
            "tokenized (a token cache): boxes in their text cannot follow the pixels, nor can "
            "left/right be checked. Read the source with its recipe, or augment colours only "
            "(Augment(jitter=..., transform=...))",
            param="augment",
        )
    from chute.mixture.source import MixtureRecipe  # here: options is imported by every Loader

    if isinstance(recipe, MixtureRecipe):
        # each dataset's recipe follows the draw (and its lengths were counted at the widest
        # coordinates); the geometry is run-wide, the same in every one
        if recipe.overflow == "split":
            # its datasets were cut into windows when it was opened, by the plain lengths
            raise ConfigError(
                "the media stage's augmentation crops or flips images over a mixture split "
                "into windows (overflow: split): its windows were counted from lengths a crop "
                "could exceed. Augment colours only (Augment(jitter=..., transform=...)), or "
                "load the grounding datasets without overflow: split",
                param="augment",
            )
        others = [r for r in recipe.recipes if not isinstance(r, Recipe)]
        if others:
            raise ConfigError(
                f"the media stage's augmentation crops or flips images, but a dataset of the "
                f"mixture is read by {type(others[0]).__name__}, not a chute Recipe: its text "
                f"could not follow the pixels",
                param="augment",
            )
        recipe = recipe.recipes[0]
    task = getattr(recipe, "task", "sft")
    if isinstance(recipe, Recipe) and task != "sft":
        raise ConfigError(
            f"the media stage's augmentation crops or flips images, and coordinates in the "
            f"text follow the pixels for {spell_set('task', 'sft')} only (got "
            f"{spell_value(task)}): a {task} sample's two sides would need one draw; augment "
            f"colours only (Augment(jitter=..., transform=...))",
            param="augment",
        )
    if not isinstance(recipe, Recipe) or recipe.geometry is None:
        raise ConfigError(
            f"the media stage's augmentation crops or flips images, but the recipe says "
            f"nothing of coordinates in the text; pass {spell('geometry')} with the data's "
            f"convention (qwen2-vl, qwen2.5-vl, qwen3-vl, normalized, llava) so boxes follow "
            f"the pixels, "
            f"or {spell_set('geometry', 'none')} if the text holds none",
            param="geometry",
        )

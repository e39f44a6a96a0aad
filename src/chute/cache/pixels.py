"""The ``pixels`` cache stage: pre-decoded, resized uint8 images kept in the token cache.

``chute preprocess --pixels`` (or ``stages: {pixels: {...}}`` in the config) adds it. Once every
chunk is committed, the stage collects the resolved path of every image the cache's samples
reference, decodes each once and stores its transform's geometry (resize, crop or pad) as uint8
pixels in ``DIR/pixels/`` (a ``chute.media.PixelStore``). Training then reads those pixels from a
memory map and runs only the cheap part of the transform (rescale, normalise, patches)::

    chute preprocess  ──► chunks/ (token ids) ──► finish: pixels/ (PixelStore) ──► manifest.json
    Loader(open_cache(DIR))  ──► sample.images ──► cache.pixels.get(path) ──► transform.finish

The stage's options name the whole image transform (``fixed`` size or Qwen2-VL ``dynamic``
resolution, filled in from the recipe's image-token rule), so they are part of the cache's
fingerprint: a cache with other pixels is another build, named field by field. A Loader over the
cache builds its media stage from them (``Cache.media_stage()``) unless given one, and a
``MediaStage`` given with another geometry is refused (pass ``store=False`` to decode instead).

An image that cannot be stored (missing, corrupt, truncated after a valid header, too large) is
listed in ``pixels/failures.jsonl``; its sample stays in the cache and the media stage decodes
it at training time, where it is a counted skip like any other bad image. A lookup compares the
image file's size and mtime with the stored ones, so a changed image is decoded again, never
served stale; the raw images must therefore still be present where training runs.

Example:
    >>> stage = PixelsStage.from_options({"size": 336}, recipe=None)
    >>> stage.fingerprint()["options"]["transform"]["size"]
    336
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from functools import partial
from pathlib import Path
from typing import Any

import orjson
import pyarrow.compute as pc

from chute.cache.chunk_stage import ChunkStage, TaskRunner
from chute.errors import ConfigError
from chute.media.anyres import AnyresImageTokens
from chute.media.tiles import AnyresTransform
from chute.media.transforms import DynamicResolution, ImageTransform

__all__ = ["PixelsStage", "media_stage_from_options", "transform_from_options"]

log = logging.getLogger("chute.cache")

_FIXED_KEYS = (
    "size",
    "crop",
    "resample",
    "pad_to_square",
    "rescale",
    "normalize",
    "tokens_per_image",
)
_DYNAMIC_KEYS = (
    "patch_size",
    "merge_size",
    "temporal_patch_size",
    "min_pixels",
    "max_pixels",
    "resample",
    "rescale",
    "normalize",
)
_ANYRES_KEYS = ("resample", "rescale", "normalize")  # tiles and grids: the recipe's rule
_OTHER_KEYS = ("transform", "max_image_pixels", "workers")
_TRANSFORMS = {"fixed": ImageTransform, "dynamic": DynamicResolution, "anyres": AnyresTransform}


class PixelsStage(ChunkStage):
    """Stores every referenced image's resized pixels in ``DIR/pixels`` when the cache is done.

    Build one with ``PixelsStage.from_options(options, recipe)``: the options are checked and
    completed (every field of the transform spelled out), so the fingerprint names them all.

    Args:
        transform: the complete transform spec (``{"kind": "fixed"|"dynamic"|"anyres", ...}``).
        max_image_pixels: the decompression-bomb limit of decoding.
        workers: decoding tasks at once (default: the engine's: ``cache.workers`` processes,
            or twice the Ray cluster's CPUs); not part of the fingerprint: it changes no byte.
    """

    name = "pixels"
    version = 1

    def __init__(
        self, transform: Mapping[str, Any], max_image_pixels: int, workers: int | None = None
    ):
        super().__init__(transform=dict(transform), max_image_pixels=max_image_pixels)
        self.workers = workers
        self.transform = transform_from_options(self.options)  # checks the spec
        self.tasks: TaskRunner | None = None

    def with_tasks(self, tasks: TaskRunner) -> PixelsStage:
        """A copy that decodes on the build's engine (``workers`` tasks at most, if set)."""
        stage = copy.copy(self)
        stage.tasks = tasks
        return stage

    @classmethod
    def from_options(cls, options: Mapping[str, Any], recipe: Any) -> PixelsStage:
        """Check ``options`` (the config's ``stages.pixels``) and complete them from ``recipe``.

        Options: ``transform`` (``fixed``, ``dynamic`` or ``anyres``; default: ``dynamic`` when
        the recipe counts image tokens from image sizes, ``anyres`` for LLaVA-NeXT / OneVision
        tiles), the transform's fields (fixed: ``size``, ``crop``, ``resample``,
        ``pad_to_square``, ``rescale``, ``normalize``, ``tokens_per_image``; dynamic:
        ``temporal_patch_size``, ``resample``, ``rescale``, ``normalize``; its size fields come
        from the recipe; anyres: ``resample``, ``rescale``, ``normalize``; its tiles and grids
        come from the recipe), ``max_image_pixels`` (default:
        the recipe's) and ``workers``.

        Raises:
            ConfigError: an unknown option, a bad value, or a transform that would not give the
                features the recipe counted tokens for.
        """
        opts = dict(options or {})
        known = {*_FIXED_KEYS, *_DYNAMIC_KEYS, *_OTHER_KEYS}
        unknown = sorted(set(opts) - known)
        if unknown:
            raise ConfigError(
                f"{', '.join(unknown)}: unknown option(s); known: {', '.join(sorted(known))}"
            )
        plan = recipe.media if recipe is not None else None  # the RecipeContract's media plan
        rule = plan.image_rule if plan is not None else None
        anyres = isinstance(rule, AnyresImageTokens)  # LLaVA-NeXT / OneVision tiles
        dynamic_rule = rule is not None and hasattr(rule, "merge_size")
        kind = opts.pop("transform", "anyres" if anyres else "dynamic" if dynamic_rule else "fixed")
        if kind not in _TRANSFORMS:
            raise ConfigError(
                f"expected 'fixed', 'dynamic' or 'anyres', got {kind!r}", param="transform"
            )
        max_pixels = opts.pop("max_image_pixels", getattr(plan, "max_image_pixels", None))
        workers = opts.pop("workers", None)
        if workers is not None and (
            isinstance(workers, bool) or not isinstance(workers, int) or workers < 1
        ):
            raise ConfigError(f"expected a positive int, got {workers!r}", param="workers")
        allowed = {"fixed": _FIXED_KEYS, "dynamic": _DYNAMIC_KEYS, "anyres": _ANYRES_KEYS}[kind]
        wrong = sorted(set(opts) - set(allowed))
        if wrong:
            raise ConfigError(f"{', '.join(wrong)}: not an option of the {kind} transform")
        if kind == "dynamic" and dynamic_rule:
            for name in ("patch_size", "merge_size", "min_pixels", "max_pixels"):
                want = getattr(rule, name)
                if opts.setdefault(name, want) != want:
                    raise ConfigError(
                        f"{name}: {opts[name]} here but the recipe counts image tokens with "
                        f"{name}={want}; leave it out (it comes from the recipe)"
                    )
        if kind == "anyres":
            if not isinstance(rule, AnyresImageTokens):
                raise ConfigError(
                    "anyres tiles are counted by the recipe's anyres rule; set image_tokens to "
                    "llava-onevision or llava-next (or another AnyresImageTokens)",
                    param="transform",
                )
            opts["rule"] = rule
            opts.setdefault("normalize", "siglip" if rule.image_size == 384 else "clip")
        if kind == "fixed" and rule is not None and not dynamic_rule and not anyres:
            opts.setdefault("tokens_per_image", rule.tokens)
        if kind == "fixed":
            size = opts.setdefault("size", 336)
            opts.setdefault("crop", size if isinstance(size, int) else None)
        spec = _spec(kind, opts)
        stage = cls(spec, max_image_pixels=_max_pixels(max_pixels), workers=workers)
        if recipe is not None:
            from chute.media.stage import MediaStage

            MediaStage(image=stage.transform).bind(recipe)  # the recipe's counting rule agrees
        return stage

    def finish(self, folder: Path, chunks: Callable[[], Iterator[Any]]) -> Mapping[str, Any]:
        """Build the pixel store of every image the chunks reference (or keep an equal one)."""
        from chute.media.images import DecodeOptions
        from chute.media.paths import is_remote
        from chute.media.store import build_pixel_store

        paths: set[str] = set()
        for batch in chunks():
            # the chunk's image paths in Arrow (no Python object per sample), then unique ones
            refs = pc.list_flatten(batch.column("images"))
            paths.update(pc.unique(pc.struct_field(refs, "path")).to_pylist())
        ordered = sorted(p for p in paths if not is_remote(p))
        digest = _paths_digest(ordered, self.fingerprint())
        done = _read_manifest(folder)
        if done.get("build") == digest:
            log.info("%s: an equal pixel store is in place; kept", folder)
            return _facts(done)  # another rank (or an earlier run) built it
        # Build beside the folder, then rename it into place: a reader never sees half a store,
        # and ranks finishing at once each publish a whole (identical) one.
        _sweep_stale_builds(folder)
        tmp = folder.with_name(f".{folder.name}.tmp-{uuid.uuid4().hex[:12]}")
        try:
            build_pixel_store(
                ordered,
                self.transform,
                tmp,
                decode=DecodeOptions(max_pixels=self.options["max_image_pixels"]),
                workers=self.workers,
                extra={"build": digest},
                map_tasks=None
                if self.tasks is None
                else partial(self.tasks.map, limit=self.workers),
            )
            _publish_dir(tmp, folder, digest)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return _facts(_read_manifest(folder))


def transform_from_options(options: Mapping[str, Any]) -> Any:
    """The ``ImageTransform`` / ``DynamicResolution`` a pixels stage's options describe."""
    spec = dict(options.get("transform") or {})
    return _make_transform(spec.pop("kind", None), spec)


def _make_transform(kind: Any, fields: Mapping[str, Any]) -> Any:
    if kind not in _TRANSFORMS:
        raise ConfigError(
            f"expected kind 'fixed', 'dynamic' or 'anyres', got {kind!r}", param="transform"
        )
    try:
        return _TRANSFORMS[kind](**fields)
    except TypeError as exc:
        raise ConfigError(f"{exc}", param="transform") from None


def media_stage_from_options(options: Mapping[str, Any], store: Any) -> Any:
    """The ``MediaStage`` that reads ``store`` with the transform and limits of ``options``."""
    from chute.media.images import DecodeOptions
    from chute.media.stage import MediaStage

    return MediaStage(
        image=transform_from_options(options),
        decode=DecodeOptions(max_pixels=options["max_image_pixels"]),
        store=store,
    )


def _spec(kind: str, opts: dict[str, Any]) -> dict[str, Any]:
    """Every field of the transform, JSON-able (defaults filled in), so fingerprints name them."""
    made = _make_transform(kind, opts)
    fields = {f.name: getattr(made, f.name) for f in dataclasses.fields(made) if f.init}
    return {"kind": kind, **orjson.loads(orjson.dumps(fields))}


def _max_pixels(value: Any) -> int:
    from chute.media.images import DEFAULT_MAX_PIXELS

    if value is None:
        return DEFAULT_MAX_PIXELS
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"expected a positive int, got {value!r}", param="max_image_pixels")
    return value


def _paths_digest(paths: list[str], fingerprint: Mapping[str, Any]) -> str:
    h = hashlib.blake2b(digest_size=16)
    h.update(orjson.dumps(fingerprint, option=orjson.OPT_SORT_KEYS))
    for path in paths:
        h.update(path.encode() + b"\0")
    return h.hexdigest()


def _read_manifest(folder: Path) -> dict[str, Any]:
    try:
        data = orjson.loads((folder / "manifest.json").read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def _sweep_stale_builds(folder: Path, older_than: float = 3600.0) -> None:
    """Delete build folders of crashed runs, those untouched for an hour.

    A live build renames a finished chunk file into its folder every few seconds, which updates
    the folder's mtime, so an hour-old one belongs to no running build.
    """
    now = time.time()
    for old in folder.parent.glob(f".{folder.name}.tmp-*"):
        try:
            if now - old.stat().st_mtime > older_than:
                shutil.rmtree(old, ignore_errors=True)
        except OSError:
            pass


def _publish_dir(tmp: Path, folder: Path, digest: str) -> None:
    """Rename ``tmp`` to ``folder``; keep an equal store another rank published first."""
    for _ in range(3):
        try:
            os.rename(tmp, folder)  # replaces an empty directory atomically
            return
        except OSError:
            if _read_manifest(folder).get("build") == digest:
                return
            shutil.rmtree(folder, ignore_errors=True)  # a stale or partial store: replace it
    raise ConfigError(f"could not publish the pixel store at {folder}")


def _facts(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """What the cache's manifest records: counts only (no timings, so its bytes are stable)."""
    return {k: manifest.get(k) for k in ("images", "bytes", "failures")}

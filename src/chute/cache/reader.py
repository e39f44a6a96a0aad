"""``open_cache``: a finished cache as a map-style dataset of samples, checked before use.

Opening reads the manifest, refuses an incomplete cache, another format version, chunks of
another build than the manifest's, missing or resized chunk files, source files that changed
since the build and (with ``recipe=``) a recipe other than the one that built it, each time
naming the field, both values and the command that rebuilds the cache. Samples are then read
from memory-mapped Arrow files: ``input_ids`` is a zero-copy (read-only) view, ``labels`` is
rebuilt from the trained runs, and the per-sample ``lengths`` are one memory-mapped array, so
plans that need lengths tokenize nothing.

A ``Cache`` pickles as its directory and a few numbers: DataLoader workers map the same files,
they never receive copies of arrays.

A cache in object storage (``open_cache("s3://bucket/caches/run1")``) is read through a local
mirror (``chute.cache.storage``): the manifest is read from the store, each chunk file is
downloaded once when first read (checked against the size and hash the manifest records) and
memory-mapped from the mirror; a mirror left by another build of the same URL is cleared.

Example:
    >>> cache = open_cache("cache/", recipe=recipe)  # doctest: +SKIP
    >>> len(cache), cache.lengths[:3]  # doctest: +SKIP
    (99870, memmap([212, 87, 1304], dtype=int32))
    >>> sample = cache[7]  # doctest: +SKIP
    >>> sample["input_ids"][:4], sample["path"], sample["line"]  # doctest: +SKIP
    (array([151644, 872, 198, 5501], dtype=int32), '/data/train.jsonl', 8)
"""

from __future__ import annotations

import bisect
import os
import shlex
import shutil
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import orjson
import pyarrow as pa

from chute._internal.files import atomic_file
from chute._internal.remote import absolute, is_url
from chute.cache.cacheset import is_cache_set, open_cache_set
from chute.cache.finalize import array_problem, read_chunk
from chute.cache.fingerprint import (
    differences,
    mismatch,
    rebuild_command,
    resume_command,
    source_changes,
)
from chute.cache.layout import (
    CACHE_FORMAT,
    FORMAT_VERSION,
    READABLE_VERSIONS,
    Layout,
    read_json,
)
from chute.cache.rows import ChunkRows
from chute.errors import CacheError, ConfigError

__all__ = ["Cache", "is_cache_dir", "open_cache"]


def is_cache_dir(path: Any) -> bool:
    """Whether ``path`` is a directory (or URL prefix) holding a chute cache (complete or not)."""
    if not isinstance(path, str | os.PathLike):
        return False
    if is_cache_set(path):
        return True
    text = os.fspath(path)
    if is_url(text):
        if text.split("?", 1)[0].lower().endswith(_DATA_SUFFIXES):
            return False  # a data file: no request needed to know it is not a cache
        layout = Layout(text)
        return layout.exists(layout.manifest) or layout.exists(layout.plan)
    layout = Layout(path)
    return layout.root.is_dir() and (layout.manifest.is_file() or layout.plan.is_file())


_DATA_SUFFIXES = (".jsonl", ".json", ".parquet", ".pq", ".gz", ".zst", ".zstd", ".txt")


def open_cache(
    path: str | os.PathLike[str], recipe: Any = None, *, verify_sources: bool = True
) -> Cache:
    """Open the cache in ``path`` after checking it is complete and still valid.

    Args:
        path: the directory ``chute preprocess --out`` wrote, or its URL (``s3://...``).
        recipe: also check the cache was built by this recipe: a ``Recipe``, a
            ``RecipeConfig`` / its mapping, or a ``PreprocessConfig`` (recipe and sources).
        verify_sources: check the source files are unchanged (size, mtime, edge hash; the whole
            file when the cache was built with ``full_hash``). ``False`` uses the cache as built,
            e.g. on a machine without the raw data.

    Raises:
        CacheError: not a cache, not complete, or a chunk file is missing or damaged.
        FingerprintMismatch: another format version, changed sources, or another recipe.
    """
    if is_cache_set(path):  # one cache per dataset of a mixture
        if recipe is not None:
            raise ConfigError(
                f"{path} holds one cache per dataset of a mixture: check recipes with "
                f"Loader(open_cache(DIR), mixture=...)",
                param="recipe",
            )
        return open_cache_set(  # type: ignore[return-value]
            path, open_cache, verify_sources=verify_sources
        )
    layout = Layout(absolute(path))
    manifest = layout.read_json(layout.manifest)
    if not isinstance(manifest, dict):
        raise CacheError(_not_ready(layout))
    _check_version(layout, manifest)
    _check_builds(layout, manifest)
    _check_files(layout, manifest)
    if layout.remote:
        _refresh_mirror(layout, manifest)
    if verify_sources:
        diffs = source_changes(manifest["fingerprint"]["sources"])
        if diffs:
            raise mismatch(
                layout.root,
                "was built from source files that changed since",
                diffs,
                "now",
                fix="or open_cache(..., verify_sources=False) to use the cache as it was built",
            )
    cache = Cache(layout.shown, manifest)
    if recipe is not None:
        cache.check_recipe(recipe)
    return cache


def _not_ready(layout: Layout) -> str:
    if not layout.remote and not layout.root.is_dir():
        return f"{layout.root}: no such cache directory (build it with chute preprocess)"
    plan = layout.read_json(layout.plan)
    if isinstance(plan, dict) and "chunks" in plan:
        done = len(layout.recorded())
        if layout.exists(layout.manifest):  # there, but not JSON: cut short or overwritten
            return (
                f"the cache at {layout.shown} is damaged: {layout.where(layout.manifest)} cannot "
                f"be read ({done} of {plan['chunks']} chunks are committed). Run the same chute "
                f"preprocess command again: it writes the manifest again from the chunks"
            )
        return (
            f"the cache at {layout.shown} is not complete: {done} of {plan['chunks']} chunks are "
            f"committed and no manifest was written. Run the same chute preprocess command again "
            f"(it resumes), or wait for the ranks still building it"
        )
    if layout.remote:
        return f"{layout.shown}: no chute cache there (no manifest.json; build it with chute preprocess)"
    return f"{layout.root} is not a chute cache (no manifest.json)"


def _refresh_mirror(layout: Layout, manifest: dict[str, Any]) -> None:
    """Clear a local mirror that holds another build of this URL; then keep this manifest."""
    mirrored = read_json(layout.manifest)
    if isinstance(mirrored, dict) and mirrored.get("data_digest") == manifest["data_digest"]:
        return
    shutil.rmtree(layout.root, ignore_errors=True)
    with atomic_file(layout.manifest) as f:
        f.write(orjson.dumps(manifest))


def _check_version(layout: Layout, manifest: dict[str, Any]) -> None:
    if manifest.get("format") != CACHE_FORMAT:
        raise CacheError(
            f"{layout.where(layout.manifest)} is not a chute cache manifest (format "
            f"{manifest.get('format')!r})"
        )
    version = manifest.get("format_version")
    if version in READABLE_VERSIONS:  # version 1: no video timing (samples lack those keys)
        return
    newer = isinstance(version, int) and version > FORMAT_VERSION
    why = (
        "was written by a newer chute; upgrade chute to read it"
        if newer
        else "was written by an older chute, in a format this one no longer reads"
    )
    raise mismatch(layout.shown, why, [("format_version", version, FORMAT_VERSION)], "this chute")


def _check_builds(layout: Layout, manifest: dict[str, Any]) -> None:
    """Every chunk the manifest lists was built by the manifest's build (no I/O).

    A cache written before chunks named their build (no ``build_digest`` in any entry) is read
    as it is: nothing to check it against.
    """
    build = manifest.get("build_digest")
    named = [c.get("build_digest") for c in manifest["chunks"]]
    if all(b is None for b in named):
        return
    foreign = [k for k, b in enumerate(named) if b != build]
    if foreign:
        shown = ", ".join(map(str, foreign[:10])) + (", ..." if len(foreign) > 10 else "")
        raise CacheError(
            f"the cache at {layout.shown} mixes two builds: chunk(s) {shown} of "
            f"{len(named)} were built for another fingerprint than its manifest's (build digest "
            f"{named[foreign[0]]}, the manifest's {build}). Rebuild it: "
            f"{rebuild_command(layout.shown)} (or --out a new directory)"
        )


def _check_files(layout: Layout, manifest: dict[str, Any]) -> None:
    listed = layout.storage.listing(layout.chunks)  # one listing, not one stat per file
    for k, chunk in enumerate(manifest["chunks"]):
        for entry in chunk["files"].values():
            path = layout.chunks / entry["name"]
            size = listed.get(entry["name"])
            if size != entry["bytes"]:
                found = "missing" if size is None else f"{size} bytes"
                raise CacheError(
                    f"the cache at {layout.shown} is damaged: {layout.where(path)} is {found}, "
                    f"the manifest says {entry['bytes']} bytes (chunk {k}). Run the chute "
                    f"preprocess command again: it rebuilds damaged chunks"
                )
    top = layout.storage.listing(layout.root)
    for path in (layout.lengths, layout.image_tokens):
        problem = array_problem(top, path.name, manifest)
        if problem:
            raise CacheError(
                f"the cache at {layout.shown} is damaged: {problem}; run "
                f"{resume_command(layout.shown)}: it writes the file again from the chunks"
            )
    for path in layout.stage_files(manifest["fingerprint"]):
        if not layout.exists(path):
            name = path.relative_to(layout.root)
            raise CacheError(
                f"the cache at {layout.shown} is damaged: {name} is missing (the pre-decoded "
                f"images). Run the chute preprocess command again: it rebuilds them"
            )


class Cache:
    """A finished cache: ``len(cache)``, ``cache[i]`` -> sample dict, ``cache.lengths``.

    Samples carry the recipe's keys: ``input_ids`` (a read-only view, ``uint16`` or ``int32``),
    ``labels`` (``int32``, ``-100`` where not trained), ``length``, provenance ``index``,
    ``path``, ``line``, ``images`` / ``videos`` / ``audios`` (each with its token ``span``),
    ``num_image_tokens``, ``truncated``, and the columns of extra stages.

    Use ``open_cache`` to make one (it checks the cache first).
    """

    def __init__(self, root: str | os.PathLike[str], manifest: dict[str, Any]):
        self.root = str(root)
        self._manifest: dict[str, Any] | None = manifest
        counts = [c["samples"] for c in manifest["chunks"]]
        self._starts = [0, *np.cumsum(counts, dtype=np.int64).tolist()]
        fp = manifest["fingerprint"]
        self._paths = [f["path"] for f in fp["sources"]["files"]]
        # each chunk's Arrow file (size, hash): what a remote cache's download is checked against
        self._arrows = [
            (c["files"]["arrow"]["bytes"], c["files"]["arrow"]["blake2b"])
            for c in manifest["chunks"]
        ]
        self._fingerprint = {
            "kind": "chute.cache",
            "format_version": manifest["format_version"],
            "samples": self._starts[-1],
            "data_digest": manifest["data_digest"],
        }
        self._enter()

    def _enter(self) -> None:
        self._pid = os.getpid()
        self._layout: Layout | None = None
        self._config: Any = None  # config.yaml, read on first use (a complete cache's is fixed)
        self._views: dict[int, ChunkRows] = {}
        self._lengths: np.ndarray | None = None
        self._image_tokens: np.ndarray | None = None
        self._longest: np.ndarray | None = None
        self._pixels: Any = None

    # -- identity and metadata ---------------------------------------------------------------

    @property
    def layout(self) -> Layout:
        self._here()
        if self._layout is None:
            self._layout = Layout(self.root)
        return self._layout

    @property
    def remote(self) -> bool:
        """Whether the cache lives in object storage (read through a local mirror)."""
        return is_url(self.root)

    @property
    def manifest(self) -> dict[str, Any]:
        """The manifest: fingerprint, totals, rejects by reason, chunks (read once)."""
        if self._manifest is None:
            self._manifest = self.layout.read_json(self.layout.manifest)
        return self._manifest

    def fingerprint(self) -> dict[str, Any]:
        """The content identity of the cache (for the loader's resume state): no paths, no times."""
        return dict(self._fingerprint)

    @property
    def summary(self) -> dict[str, Any]:
        """Records, samples, rejects by reason, tokens and bytes of the build."""
        keys = ("records", "samples", "rejected", "by_reason", "examples", "tokens")
        more = ("trained_tokens", "image_tokens", "truncated", "longest", "bytes")
        out = {k: self.manifest[k] for k in (*keys, *more)}
        out["untrained_windows"] = self.manifest.get("untrained_windows", 0)
        return out

    @property
    def num_chunks(self) -> int:
        return len(self._starts) - 1

    @property
    def source_paths(self) -> list[str]:
        return list(self._paths)

    def recipe_config(self) -> Any:
        """The ``PreprocessConfig`` the cache was built from (``config.yaml``), read once."""
        if self._config is None:
            from chute.cache.config import load_config

            self._config = load_config(self.layout.fetch(self.layout.config))
        return self._config

    @property
    def max_length(self) -> int | None:
        """The ``max_length`` of the recipe that built the cache (plans default to it)."""
        max_length: int | None = self.recipe_config().recipe.max_length
        return max_length

    @property
    def task(self) -> str:
        """The kind of samples: ``sft``, ``preference`` (pairs) or ``kto`` (see ``Recipe``)."""
        return str(self.manifest["fingerprint"]["recipe"].get("task", "sft"))

    @property
    def pixels(self) -> Any:
        """The pre-decoded images: a ``chute.media.PixelStore``, or ``None`` (no ``--pixels``).

        A Loader over the cache reads images from it.
        """
        self._here()
        if self._pixels is None and "pixels" in self._stages():
            from chute.media.store import PixelStore

            self._pixels = PixelStore(self.layout.fetch_tree(self.layout.root / "pixels"))
        return self._pixels

    def media_stage(self) -> Any:
        """The ``MediaStage`` the cache's pixels were made for, reading them; ``None`` without.

        Its transform is the one named at ``chute preprocess`` (``stages.pixels``), so training
        gives the model the same inputs it would decoding every image itself.
        """
        store = self.pixels
        if store is None:
            return None
        from chute.cache.pixels import media_stage_from_options

        return media_stage_from_options(self._stages()["pixels"]["options"], store)

    def media_paths(self) -> Any:
        """The media roots of the recipe that built the cache (``chute.media.MediaPaths``).

        A Loader over the cache fetches images under remote roots with them.
        """
        from chute.media.paths import MediaPaths

        r = self.recipe_config().recipe
        return MediaPaths(
            r.media_root, allow_urls=r.allow_urls, allowed_roots=r.media_allowed_roots
        )

    def _stages(self) -> dict[str, Any]:
        return self.manifest["fingerprint"].get("stages", {})

    def check_recipe(self, recipe: Any) -> None:
        """Raise ``FingerprintMismatch`` unless ``recipe`` makes the samples this cache holds.

        ``recipe``: a ``Recipe``, a ``RecipeConfig`` or its mapping, or a ``PreprocessConfig``.
        """
        from chute.cache.config import PreprocessConfig, RecipeConfig

        built = self.manifest["fingerprint"]
        overrides: list[str] = []
        sources: list[tuple[str, Any, Any]] = []
        if isinstance(recipe, PreprocessConfig):
            from chute.sources import expand_paths

            cfg = recipe.resolved()
            paths = [absolute(p) for p in expand_paths(cfg.sources)]
            sources = differences(self._paths, paths, "sources")
            recipe = cfg.recipe
        if isinstance(recipe, Mapping):
            recipe = RecipeConfig(**recipe)
        if isinstance(recipe, RecipeConfig):
            overrides = self._overrides(recipe.resolved())
            recipe = recipe.build()
        from chute.recipe.contract import as_recipe

        pixels = self._stages().get("pixels")
        follow = getattr(recipe, "with_image_transform", None)
        if pixels is not None and callable(follow):
            # its samples' boxes were placed as its pixel stage prepares the images
            from chute.cache.pixels import transform_from_options

            recipe = follow(transform_from_options(pixels["options"]))
        contract = as_recipe(recipe) if callable(recipe) else None
        made = contract.fingerprint() if contract is not None else None
        if made is None:  # a function without a fingerprint cannot be compared with the cache
            raise ConfigError(
                f"expected a Recipe, a RecipeConfig or a PreprocessConfig, got "
                f"{type(recipe).__name__}",
                param="recipe",
            )
        diffs = sources + differences(built["recipe"], made)
        if diffs and all(str(name).startswith("coordinates_transform") for name, _, _ in diffs):
            placed = "its stages.pixels transform" if pixels else "the image rule's default stage"
            raise ConfigError(
                f"{self.root}: its samples' boxes were placed for {placed}, "
                f"and the Loader's media stage prepares the images otherwise: the boxes would "
                f"point at other pixels. Leave media= out (the cache's own stage), or build a "
                f"cache with stages.pixels set to this transform",
                param="media",
            )
        if diffs:
            fix = None
            if contract is not None and not overrides and not sources:
                overrides, fix = _overrides_of(diffs, self.layout.where(self.layout.config))
            raise mismatch(
                self.root,
                "was built for a different recipe",
                diffs,
                "recipe",
                overrides=overrides,
                fix=fix,
            )

    def _overrides(self, wanted: Any) -> list[str]:
        """The ``recipe.NAME=VALUE`` overrides that make the stored config ``wanted``."""
        try:
            stored = self.recipe_config().recipe
        except (ConfigError, OSError):
            return []
        return [
            _override(name, value)
            for name, value in vars(wanted).items()
            if getattr(stored, name, None) != value
        ]

    # -- arrays ------------------------------------------------------------------------------

    def _here(self) -> None:
        if self._pid != os.getpid():
            self._enter()

    @property
    def lengths(self) -> np.ndarray:
        """Tokens per sample (``int32``, memory-mapped, read-only): for length-aware plans."""
        self._here()
        if self._lengths is None:
            self._lengths = self._array(self.layout.lengths)
        return self._lengths

    def _array(self, path: Any) -> np.ndarray:
        """A per-sample ``.npy`` of the cache, memory-mapped; a damaged one is a CacheError."""
        try:
            array = np.load(self.layout.fetch(path), mmap_mode="r")
        except (OSError, ValueError) as exc:  # a damaged header, or a file cut short
            problem = f"{path.name} cannot be read ({exc})"
        else:
            if array.ndim == 1 and len(array) == len(self):
                return array
            problem = f"{path.name} holds {array.shape} values for {len(self)} samples"
        raise CacheError(
            f"the cache at {self.layout.shown} is damaged: {problem}; delete "
            f"{self.layout.where(path)} and run {resume_command(self.layout.shown)}: it writes "
            f"the file again from the chunks"
        )

    @property
    def longest(self) -> np.ndarray | None:
        """Each pair's longer side, for a cache of preference pairs (``None`` for other data).

        Length-aware plans pad a pair as two rows of its longer side (``chute.lengths``).
        """
        self._here()
        if self._longest is None and "chosen_length" in self.chunk(0).schema.names:
            chosen = np.concatenate(
                [self.chunk(k).column("chosen_length").to_numpy() for k in range(self.num_chunks)]
            )
            self._longest = np.maximum(chosen, self.lengths - chosen).astype(np.int32)
        return self._longest

    @property
    def image_tokens(self) -> np.ndarray:
        """Image tokens per sample (``int32``, memory-mapped, read-only)."""
        self._here()
        if self._image_tokens is None:
            self._image_tokens = self._array(self.layout.image_tokens)
        return self._image_tokens

    def chunk(self, k: int) -> pa.RecordBatch:
        """Chunk ``k``'s Arrow record batch (memory-mapped, zero copy).

        A remote cache's chunk is downloaded into the local mirror on first use.
        """
        size, blake2b = self._arrows[k]
        return read_chunk(self.layout.fetch(self.layout.chunk(k), size, blake2b))

    def locate(self, index: int) -> tuple[int, int]:
        """``(chunk, row)`` of sample ``index``."""
        n = self._starts[-1]
        if not -n <= index < n:
            raise IndexError(f"sample index {index} out of range for a cache of {n} samples")
        index %= n
        k = bisect.bisect_right(self._starts, index) - 1
        return k, index - self._starts[k]

    # -- the dataset -------------------------------------------------------------------------

    def __len__(self) -> int:
        return self._starts[-1]

    def __getitem__(self, key: int | slice) -> Any:
        if type(key) is not int:
            if isinstance(key, slice):
                return [self[i] for i in range(*key.indices(len(self)))]
            if not isinstance(key, int | np.integer):
                raise TypeError(f"samples are indexed by int or slice, not {type(key).__name__}")
            key = int(key)
        starts = self._starts
        n = starts[-1]
        index = key + n if key < 0 else key
        if not 0 <= index < n:
            raise IndexError(f"sample index {key} out of range for a cache of {n} samples")
        k = bisect.bisect_right(starts, index) - 1
        if self._pid != os.getpid():
            self._enter()
        view = self._views.get(k)
        if view is None:
            view = self._views[k] = ChunkRows(self.chunk(k), self._paths)
        return view.sample(index - starts[k])

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for i in range(len(self)):
            yield self[i]

    def __getstate__(self) -> dict[str, Any]:
        keep = ("root", "_starts", "_paths", "_arrows", "_fingerprint")
        return {k: self.__dict__[k] for k in keep}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._manifest = None
        self._enter()

    def __repr__(self) -> str:
        return f"Cache({self.root!r}, samples={len(self)}, chunks={self.num_chunks})"


def _overrides_of(diffs: Any, config: str) -> tuple[list[str], str | None]:
    """Overrides for a ``Recipe`` object's differences, and a fix where some have none.

    A ``Recipe`` keeps no config to compare field by field; its fingerprint's top-level fields
    that are options (``max_length``, ``template``, ...) with plain values map one to one, so
    the rebuild command builds what the recipe makes instead of the cache again.
    """
    import dataclasses

    from chute.recipe.config import RecipeConfig

    fields = {f.name for f in dataclasses.fields(RecipeConfig)}
    out: list[str] = []
    for name, _, value in diffs:
        plain = value is None or isinstance(value, bool | int | float | str)
        if name not in fields or not plain:
            return [], f"set your recipe's options in {config} first (its recipe: section)"
        out.append(_override(name, value))
    return out, None


def _override(name: str, value: Any) -> str:
    """``recipe.NAME=VALUE`` as a shell word, the value written as YAML reads it back."""
    import yaml

    text = yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("\n...").strip()
    return shlex.quote(f"recipe.{name}={text}")

"""A mixture bound to its data: the sources (or caches), recipes, splits and the epoch plan.

``open_mixture(mixture)`` opens every dataset's files and builds its recipe (one tokenizer object
shared by all); ``open_cached_mixture(caches, mixture)`` reads the caches ``chute preprocess``
built instead, after checking each dataset's recipe options against its cache. Either way the
result knows what a Loader needs::

    OpenedMixture
      .source   MixtureSource: the datasets end to end in one id space
      .recipe   MixtureRecipe (None over caches: their samples are made)
      .pools(split)              train / val ids of each dataset (content-hash split)
      .planner(inner, split=...) MixturePlanner: `inner` over each epoch's selection

One dataset read alone (files, a ``Source``, a cache, any map-style dataset) is a mixture of one:
``OpenedMixture.of_one(source, recipe)`` keeps the source and recipe as they are (so its
fingerprint, samples and cache are unchanged) and plans through ``MixturePlanner(inner)``, which
deals every sample in ``inner``'s own order. The Loader reads both through this one interface::

    OpenedMixture.of_one(source, recipe)
      .source, .recipe          as given
      .names ["data"], .offsets [0]   every id belongs to the one dataset
      .planner(inner)           MixturePlanner(inner): inner's plans and params, unchanged

Example:
    >>> opened = open_mixture(Mixture([MixtureEntry("a", "a.jsonl"),
    ...                                MixtureEntry("b", "b.jsonl", weight=2)]))  # doctest: +SKIP
    >>> loader_planner = opened.planner(RandomPlanner(8), split="train", seed=0)  # doctest: +SKIP
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from chute._internal.progress import ProgressArg
from chute._internal.spelling import Spelling, spelling
from chute.cache.config import CONFIG
from chute.errors import ConfigError, FingerprintMismatch
from chute.formats import FormatSpec
from chute.mixture.config import Mixture
from chute.mixture.entry import PER_DATASET
from chute.mixture.hashes import content_hashes
from chute.mixture.source import MixtureRecipe, MixtureSource
from chute.mixture.split import SPLITS, split_ids
from chute.plan.base import Planner
from chute.plan.mixture_planner import MixturePlanner
from chute.plan.mixture_selection import Selection, Share, valid_pools

__all__ = [
    "MIXTURE_FILE",
    "SOLE_NAME",
    "OpenedMixture",
    "SoleDataset",
    "open_cached_mixture",
    "open_mixture",
]

MIXTURE_FILE = "mixture.yaml"  # beside the caches of a preprocessed mixture
HASHES_DIR = "hashes"
SOLE_NAME = "data"  # the name of one dataset read alone (summary()["datasets"]["data"])


class OpenedMixture:
    """A mixture with its data open (see the module docstring).

    Args:
        mixture: the definition.
        sources: one source per dataset (files, or caches), in the mixture's order.
        recipes: one recipe per dataset, or ``None`` (caches, or pre-tokenized records).
        hashes: ``hashes(d)`` -> dataset ``d``'s content hash per record (for ``val``).
        rows: ``rows(d)`` -> the record index of each of dataset ``d``'s samples (caches,
            whose rejected records have no row), or ``None`` (a sample per record).
        local_rank: this process's rank on its node.
    """

    def __init__(
        self,
        mixture: Mixture,
        sources: Sequence[Any],
        *,
        recipes: Sequence[Any] | None,
        hashes: Callable[[int], np.ndarray],
        rows: Callable[[int], np.ndarray] | None = None,
        local_rank: int = 0,
    ):
        self.mixture = mixture
        self.names = mixture.names
        max_length = None if mixture.recipe is None else mixture.recipe.get("max_length")
        self.source = MixtureSource(
            self.names, sources, recipes=recipes, local_rank=local_rank, max_length=max_length
        )
        self.recipe = (
            None if recipes is None else MixtureRecipe(self.names, self.source.offsets, recipes)
        )
        self.records = [len(s) for s in sources]
        self._hashes = hashes
        self._rows = rows
        self._pools: dict[str, list[np.ndarray | None]] = {}

    @property
    def offsets(self) -> np.ndarray:
        return self.source.offsets

    def pools(self, split: str = "train") -> list[np.ndarray | None]:
        """Each dataset's ids in ``split`` (``None``: all of them), by content hash."""
        if split not in SPLITS:
            raise ConfigError(f"expected one of {', '.join(SPLITS)}, got {split!r}", param="split")
        if split not in self._pools:
            out: list[np.ndarray | None] = []
            for d, ds in enumerate(self.mixture):
                if not ds.val:
                    out.append(None if split == "train" else np.empty(0, dtype=np.int64))
                    continue
                rows = None if self._rows is None else self._rows(d)
                out.append(split_ids(self._hashes(d), ds.val, split, rows))
            if split == "val" and not any(ds.val for ds in self.mixture):
                raise ConfigError(
                    "split='val' needs a validation hold-out: give the datasets val (a "
                    "fraction such as 0.01, or a count)",
                    param="split",
                )
            self._pools[split] = out
        return self._pools[split]

    def shares(self, split: str = "train") -> list[Share]:
        """The amount rule of each dataset for ``split`` (val: every held-out sample once)."""
        if split == "val":
            return [
                Share(ds.name, n, tag={"val": ds.val})
                for ds, n in zip(self.mixture, self.records, strict=True)
            ]
        return [ds.share(n) for ds, n in zip(self.mixture, self.records, strict=True)]

    def selection(
        self, *, split: str = "train", seed: int = 0, shuffle: bool = True, lengths: Any = None
    ) -> Selection:
        """Which samples each epoch of ``split`` takes (valid ones only, given ``lengths``)."""
        pools = self.pools(split)
        if lengths is not None:
            pools = valid_pools(pools, self.records, lengths)
        return Selection(
            self.shares(split),
            seed=seed,
            epoch_samples=self.mixture.epoch_samples if split == "train" else None,
            pools=pools,
            shuffle=shuffle,
        )

    def planner(
        self, inner: Planner, *, split: str = "train", seed: int = 0, shuffle: bool = True
    ) -> MixturePlanner:
        """``inner`` over each epoch's selection of ``split`` (the mixture's batching)."""
        lengths = getattr(inner, "lengths", None)
        selection = self.selection(split=split, seed=seed, shuffle=shuffle, lengths=lengths)
        batching = self.mixture.batching if split == "train" else "mixed"
        return MixturePlanner(inner, selection, batching=batching)

    @classmethod
    def of_one(cls, source: Any, recipe: Any) -> OpenedMixture:
        """One dataset read alone, as a mixture of one (see ``SoleDataset``)."""
        return SoleDataset(source, recipe)

    def __repr__(self) -> str:
        return f"OpenedMixture({self.source!r})"


class SoleDataset(OpenedMixture):
    """One dataset read alone (no ``Mixture``): a mixture of one that changes nothing.

    The source and recipe stay as given (a path, a ``Source``, a cache, a list: the Loader opens
    it as before, so fingerprints and samples are the same); every id is of dataset
    ``SOLE_NAME``; ``planner(inner)`` is ``MixturePlanner(inner)``, which passes every call to
    ``inner``: the same plans and ``params()`` as ``inner`` alone, so resume states saved
    before a one-dataset loader planned through a mixture still load.

    Example:
        >>> from chute.plan import RandomPlanner
        >>> sole = OpenedMixture.of_one([{"input_ids": [1]}] * 5, None)
        >>> sole.names, sole.offsets.tolist(), sole.planner(RandomPlanner(2)).sole
        (['data'], [0], True)
    """

    def __init__(self, source: Any, recipe: Any):  # no super().__init__: nothing to open
        self.source = source
        self.recipe = recipe
        self.names = [SOLE_NAME]

    @property
    def offsets(self) -> np.ndarray:
        # [0] alone: every id >= 0 is of dataset 0, however many samples the source turns
        # out to hold (a document source's windows are counted after the Loader opens it)
        return np.zeros(1, dtype=np.int64)

    def pools(self, split: str = "train") -> list[np.ndarray | None]:
        if split != "train":
            raise ConfigError(
                f"split={split!r} needs a mixture whose datasets hold out val samples",
                param="split",
            )
        return [None]

    def shares(self, split: str = "train") -> list[Share]:
        raise ConfigError(
            "one dataset read alone has no amounts: its planner deals every sample once per "
            "epoch; give a Mixture for weights, repeats or samples",
            param="mixture",
        )

    def selection(
        self, *, split: str = "train", seed: int = 0, shuffle: bool = True, lengths: Any = None
    ) -> Selection:
        return Selection(self.shares(split))  # raises: see shares

    def planner(
        self, inner: Planner, *, split: str = "train", seed: int = 0, shuffle: bool = True
    ) -> MixturePlanner:
        """``inner`` itself behind a ``MixturePlanner`` of one dataset (``split``: train)."""
        self.pools(split)
        return MixturePlanner(inner)

    def __repr__(self) -> str:
        return f"SoleDataset({self.source!r})"


def dataset_spelling(name: str) -> Spelling:
    """Errors while building dataset ``name``'s recipe name its YAML keys."""
    return CONFIG.with_names({k: f"datasets.{name}.{k}" for k in PER_DATASET})


def build_recipes(mixture: Mixture) -> list[Any] | None:
    """One recipe per dataset, all sharing the first one's tokenizer object."""
    if mixture.recipe is None:
        return None
    from chute.recipe import Recipe

    recipes: list[Any] = []
    for ds in mixture:
        config = mixture.recipe_config(ds.name)
        try:
            with spelling(dataset_spelling(ds.name)):
                if not recipes:
                    recipes.append(config.build())
                    continue
                args = config._arguments()
                args["tokenizer"] = recipes[0].tokenizer
                args["special_tokens"] = None
                args["tiktoken_pattern"] = None
                recipes.append(Recipe(**args))
        except ConfigError as exc:
            raise ConfigError(f"dataset {ds.name!r}: {exc}", param=None) from None
    return recipes


def open_mixture(
    mixture: Mixture | str | os.PathLike[str],
    *,
    local_rank: int = 0,
    cache_dir: str | os.PathLike[str] | None = None,
    progress: ProgressArg = None,
    records_only: bool = False,
) -> OpenedMixture:
    """Open every dataset's files and build its recipe (see the module docstring).

    With ``overflow: split`` in the recipe, each dataset's samples are its documents' windows,
    counted by a lengths pass (cached). ``records_only``: open the files and nothing more, no
    recipe built (no tokenizer loaded) and no windows: what the duplicate check reads (it
    hashes records and compares documents).
    """
    from chute.sources import open_source

    mixture = Mixture.load(mixture)
    recipes = None if records_only else build_recipes(mixture)
    records = []
    for ds in mixture:
        try:
            records.append(open_source(ds.sources, cache_dir=cache_dir))
        except ConfigError as exc:
            raise ConfigError(f"dataset {ds.name!r}: {exc}") from None
    specs = [_spec(mixture, ds.name) for ds in mixture]
    sources: list[Any] = list(records)
    rows = None
    if recipes is not None and recipes[0].overflow == "split":
        sources = _windows(mixture, records, recipes, cache_dir, progress, local_rank)
        rows = _records_of_windows(sources)

    def hashes(d: int) -> np.ndarray:
        return content_hashes(
            records[d],
            specs[d],
            cache_dir=cache_dir,
            progress=progress,
            desc=f"hashes {mixture.names[d]}",
            local_rank=local_rank,  # one pass per node: the other ranks wait for it
        )

    return OpenedMixture(
        mixture, sources, recipes=recipes, hashes=hashes, rows=rows, local_rank=local_rank
    )


def _windows(
    mixture: Mixture,
    records: list[Any],
    recipes: list[Any],
    cache_dir: str | os.PathLike[str] | None,
    progress: ProgressArg,
    local_rank: int,
) -> list[Any]:
    """Each dataset as the view of its documents' windows (``overflow="split"``).

    As for one dataset read alone (``chute.loader.planning.split_source``): a dataset's samples
    are its windows, counted from its records' lengths under its own recipe (one cached pass),
    so the amounts (weights, ``samples``), the plans, exact-once and resume count windows.
    """
    from chute.lengths import Pieces, lengths_of

    return [
        Pieces(
            source,
            lengths_of(
                source,
                recipe,
                cache_dir=cache_dir,
                progress=progress,
                local_rank=local_rank,
                desc=f"lengths {name}",
            ),
        )
        for name, source, recipe in zip(mixture.names, records, recipes, strict=True)
    ]


def _records_of_windows(pieces: list[Any]) -> Callable[[int], np.ndarray]:
    """``rows(d)``: the record of each window of dataset ``d``.

    A document's windows share its content hash, so a validation hold-out takes all of a
    document's windows or none.
    """

    def rows(d: int) -> np.ndarray:
        first = pieces[d].table.first
        kind = np.int32 if pieces[d].table.records < 2**31 else np.int64
        return np.repeat(np.arange(len(first) - 1, dtype=kind), np.diff(first))

    return rows


def _spec(mixture: Mixture, name: str) -> FormatSpec:
    """The format options of dataset ``name`` (how its records are read for content hashes)."""
    options = {**(mixture.recipe or {}), **mixture[name].recipe_options}
    return FormatSpec(
        options.get("format", "auto"),
        columns=options.get("columns") or {},
        tags=options.get("tags") or {},
        placeholders=options.get("placeholders") or {},
    )


def open_cached_mixture(
    caches: Any,
    mixture: Mixture | str | os.PathLike[str] | None = None,
    *,
    local_rank: int = 0,
    progress: ProgressArg = None,
) -> OpenedMixture:
    """A mixture read from the caches of ``chute preprocess`` (a ``CacheSet``).

    ``mixture``: the amounts (and a check of each dataset's recipe options against its cache);
    default: the mixture the caches were built from (``DIR/mixture.yaml``). Its datasets must
    all have a cache in the set (the set may hold more).

    Raises:
        FingerprintMismatch: a dataset's recipe options differ from its cache's, naming the
            dataset and each field.
    """
    root = Path(caches.root)
    stored = root / MIXTURE_FILE
    if mixture is None:
        if not stored.is_file():
            raise ConfigError(f"{root} has no {MIXTURE_FILE}; pass mixture=...", param="mixture")
        mixture = Mixture.load(stored)
    else:
        mixture = Mixture.load(mixture)
        _check_recipes(caches, mixture)
    missing = [n for n in mixture.names if n not in caches.names]
    if missing:
        raise ConfigError(
            f"datasets {missing} have no cache in {root} (it holds {caches.names}); run chute "
            f"preprocess on this mixture (existing datasets are reused, only these are built)",
            param="mixture",
        )
    members = [caches[n] for n in mixture.names]

    def hashes(d: int) -> np.ndarray:
        saved = root / HASHES_DIR / f"{mixture.names[d]}.npy"
        if saved.is_file():
            return np.load(saved, mmap_mode="r")
        from chute.sources import open_source

        cache = members[d]
        spec = _spec(mixture, mixture.names[d])
        return content_hashes(
            open_source(cache.source_paths), spec, progress=progress, local_rank=local_rank
        )

    def rows(d: int) -> np.ndarray:
        cache = members[d]
        parts = [np.asarray(cache.chunk(k).column("index")) for k in range(cache.num_chunks)]
        return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)

    return OpenedMixture(
        mixture, members, recipes=None, hashes=hashes, rows=rows, local_rank=local_rank
    )


def _check_recipes(caches: Any, mixture: Mixture) -> None:
    if mixture.recipe is None:
        return
    for name in mixture.names:
        if name not in caches.names:
            continue
        try:
            caches[name].check_recipe(mixture.recipe_config(name))
        except FingerprintMismatch as exc:
            raise FingerprintMismatch(
                f"dataset {name!r}: {exc}\nOr run chute preprocess MIXTURE.yaml --out "
                f"{os.fspath(caches.root)} --overwrite (with these overrides): only the datasets "
                f"whose options changed are rebuilt, the others reused.",
                [(f"datasets.{name}.{f}", a, b) for f, a, b in exc.fields],
            ) from None

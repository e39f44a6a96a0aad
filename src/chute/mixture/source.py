"""The datasets of a mixture as one source, and the recipe that reads each record with its own.

``MixtureSource`` lays the datasets end to end in one global id space (dataset ``d`` owns ids
``offsets[d] .. offsets[d+1]-1``); reading id ``g`` reads record ``g - offsets[d]`` of dataset
``d`` and stamps the global id on it. ``MixtureRecipe`` runs dataset ``d``'s own recipe on
records whose id falls in ``d``'s range::

    global id 1042 ──► dataset 1 ("tools"), local 42 ──► tools.jsonl:43 ──► recipes[1](record)

Both pickle as their parts: the per-dataset sources (an offset index each, memory-mapped) and
recipes that share one tokenizer object (pickled once), so DataLoader workers receive no large
arrays. ``MixtureSource.lengths()`` computes (or reads from the lengths cache) each dataset's
lengths under its own recipe and lays them end to end, so changing a weight or adding a dataset
recomputes nothing that exists.

Example:
    >>> src = MixtureSource(["a", "b"], [[{"input_ids": [1]}] * 3, [{"input_ids": [2, 2]}] * 2])
    >>> len(src), src.offsets.tolist(), src[4]["input_ids"], src.dataset_of([0, 3]).tolist()
    (5, [0, 3, 5], [2, 2], [0, 1])
    >>> src.lengths().length.tolist()
    [1, 1, 1, 2, 2]
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from chute.errors import ConfigError, RejectTally, SampleError
from chute.lengths import STATUS_REJECTED, Lengths, Pieces, lengths_of
from chute.media.positions import first_family
from chute.sources.record import Record

__all__ = ["MixtureRecipe", "MixtureSource", "concat_lengths", "slice_lengths"]


def _offsets(sizes: Iterable[int]) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(np.fromiter(sizes, dtype=np.int64))]).astype(np.int64)


class MixtureSource:
    """Datasets end to end in one id space (see the module docstring).

    Args:
        names: the datasets' names.
        sources: one map-style source per dataset (``JsonlSource``, a ``Cache``, a list...).
        recipes: each dataset's recipe, for ``lengths()`` (``None``: pre-tokenized records).
        local_rank: this process's rank on its node (the lengths pass runs on local rank 0).
        max_length: the run-wide ``max_length`` (the packed plan's default row length).
    """

    def __init__(
        self,
        names: Sequence[str],
        sources: Sequence[Any],
        *,
        recipes: Sequence[Any] | None = None,
        local_rank: int = 0,
        max_length: int | None = None,
    ):
        if len(names) != len(sources):
            raise ConfigError(f"{len(names)} names for {len(sources)} sources")
        self.names = list(names)
        self.sources = list(sources)
        self.recipes = list(recipes) if recipes is not None else [None] * len(self.sources)
        self.local_rank = int(local_rank)
        self.max_length = max_length
        self.offsets = _offsets(len(s) for s in self.sources)
        self._lengths: Lengths | None = None

    def __len__(self) -> int:
        return int(self.offsets[-1])

    @property
    def pixels(self) -> Any:
        """Over caches built with ``--pixels``: their pre-decoded images, read as one store.

        ``None`` when no dataset's cache holds any (a mixture of files, or caches without).
        """
        stores = [getattr(s, "pixels", None) for s in self.sources]
        held = [store for store in stores if store is not None]
        if not held:
            return None
        from chute.media.store import PixelStores

        return PixelStores(held)

    def media_stage(self) -> Any:
        """The ``MediaStage`` the caches' pixels were made for, reading all of them.

        The first such cache's stage, its store replaced by every cache's (``PixelStores``):
        a cache whose pixels were made for another geometry is a ``ConfigError`` naming it.
        """
        caches = [s for s in self.sources if getattr(s, "pixels", None) is not None]
        if not caches:
            return None
        import dataclasses

        return dataclasses.replace(caches[0].media_stage(), store=self.pixels)

    @property
    def windowed(self) -> bool:
        """Whether the samples are documents' windows already (each dataset's ``Pieces``)."""
        return any(isinstance(s, Pieces) for s in self.sources)

    def dataset_of(self, ids: Any) -> np.ndarray:
        """The dataset (position in ``names``) of each global id."""
        return np.searchsorted(self.offsets, np.asarray(ids), side="right") - 1

    def locate(self, index: int) -> tuple[int, int]:
        """``(dataset, local index)`` of a global id."""
        if not 0 <= index < len(self):
            raise IndexError(f"id {index} outside [0, {len(self)})")
        d = int(np.searchsorted(self.offsets, index, side="right") - 1)
        return d, index - int(self.offsets[d])

    def __getitem__(self, index: int) -> Any:
        d, local = self.locate(int(index))
        return _stamped(self.sources[d][local], int(index))

    def records_between(self, lo: int, hi: int) -> Iterator[Any]:
        """Records ``lo .. hi-1`` in order, each dataset read sequentially."""
        for d, source in enumerate(self.sources):
            a, b = max(lo, int(self.offsets[d])), min(hi, int(self.offsets[d + 1]))
            if a >= b:
                continue
            base = int(self.offsets[d])
            between = getattr(source, "records_between", None)
            items = (
                between(a - base, b - base)
                if callable(between)
                else (source[i] for i in range(a - base, b - base))
            )
            for g, item in enumerate(items, start=a):
                yield _stamped(item, g)

    @property
    def files(self) -> list[Any]:
        """Every dataset's files in id order (a dataset without files counts as one)."""
        return [f for s in self.sources for f in (getattr(s, "files", None) or [s])]

    @property
    def manifest(self) -> dict[str, Any] | None:
        """Over caches only: their image-token total and the first image dataset's fingerprint.

        What the Loader reads to decide whether (and with which rule) to load images.
        """
        manifests = [getattr(s, "manifest", None) for s in self.sources]
        if not manifests or not all(isinstance(m, dict) for m in manifests):
            return None
        with_images = [m for m in manifests if m and m.get("image_tokens")]
        first = with_images[0] if with_images else manifests[0]
        return {
            "image_tokens": sum(int(m.get("image_tokens") or 0) for m in manifests if m),
            "fingerprint": first["fingerprint"] if first else {},
        }

    def fingerprint(self) -> dict[str, Any]:
        """Each dataset's name and source fingerprint (the resume state's dataset identity)."""
        out = []
        for name, source in zip(self.names, self.sources, strict=True):
            fp = getattr(source, "fingerprint", None)
            out.append({"name": name, "source": fp() if callable(fp) else {"records": len(source)}})
        return {"kind": "mixture", "datasets": out}

    def with_recipes(self, recipes: Sequence[Any]) -> MixtureSource:
        """The same datasets, their lengths counted under ``recipes`` (one per dataset).

        What the Loader plans over when its augmentation crops or flips: each dataset's recipe
        writing its coordinates at their widest form (``MixtureRecipe.widest_coordinates``), so
        no draw makes a sample longer than its planned row. Records read the same.
        """
        if len(recipes) != len(self.sources):
            raise ConfigError(f"{len(recipes)} recipes for {len(self.sources)} datasets")
        return MixtureSource(
            self.names,
            self.sources,
            recipes=recipes,
            local_rank=self.local_rank,
            max_length=self.max_length,
        )

    def lengths(self) -> Lengths:
        """Every dataset's lengths under its own recipe (cached each), end to end."""
        if self._lengths is None:
            parts = [
                lengths_of(source, recipe, local_rank=self.local_rank, desc=f"lengths {name}")
                for name, source, recipe in zip(self.names, self.sources, self.recipes, strict=True)
            ]
            self._lengths = concat_lengths(parts)
        return self._lengths

    def __getstate__(self) -> dict[str, Any]:
        # workers read records only: no lengths, no recipes (the loader's recipe travels alone)
        state = dict(self.__dict__)
        state["_lengths"] = None
        state["recipes"] = [None] * len(self.sources)
        return state

    def __repr__(self) -> str:
        parts = ", ".join(f"{n}: {len(s)}" for n, s in zip(self.names, self.sources, strict=True))
        return f"MixtureSource({parts})"


def _stamped(item: Any, index: int) -> Any:
    """The item with its global id (the recipe and rejects report ids in the mixture's space)."""
    if isinstance(item, Record):
        item.index = index
    return item


def run_wide_media(names: Sequence[str], plans: Sequence[Any]) -> Any:
    """The media plan a mixture's batches are prepared by: one for every dataset's rows.

    The dataset whose image rule names a Qwen-VL family (``chute.media.positions.
    first_family``: text rows take its 3-D positions too), else the first dataset's.

    Raises:
        ConfigError: two datasets naming different families.
    """
    named = first_family(names, [getattr(plan, "image_rule", None) for plan in plans])
    return plans[0 if named is None else named]


class MixtureRecipe:
    """The recipe of dataset ``d`` for records whose global id falls in ``d``'s range.

    Args:
        names: the datasets' names.
        offsets: ``len(names) + 1`` global id offsets (``MixtureSource.offsets``).
        recipes: one recipe per dataset (sharing one tokenizer object).
    """

    def __init__(self, names: Sequence[str], offsets: np.ndarray, recipes: Sequence[Any]):
        self.names = list(names)
        self.offsets = np.asarray(offsets, dtype=np.int64)
        self.recipes = list(recipes)
        first = self.recipes[0]
        self.tokenizer = first.tokenizer
        # run-wide options, like the tokenizer: the same in every dataset's recipe
        self.max_length = first.max_length
        self.media = run_wide_media(self.names, [getattr(r, "media", None) for r in self.recipes])
        self.task = first.task
        self.overflow = first.overflow
        self.stride = first.stride

    @property
    def geometry(self) -> Any:
        """The coordinates' convention (run-wide: every dataset's recipe has the same)."""
        return getattr(self.recipes[0], "geometry", None)

    def widest_coordinates(self) -> MixtureRecipe:
        """Each dataset's recipe writing every coordinate at its widest form.

        The lengths pass of a Loader that crops or flips (``Recipe.widest_coordinates``): a
        crop rewrites a sample's boxes per draw, and plans are made once.
        """
        recipes = [
            r.widest_coordinates() if callable(getattr(r, "widest_coordinates", None)) else r
            for r in self.recipes
        ]
        return MixtureRecipe(self.names, self.offsets, recipes)

    def with_image_transform(self, transform: Any) -> MixtureRecipe:
        """Each dataset's recipe moving coordinates as ``transform`` prepares the pixels."""
        recipes = [
            r.with_image_transform(transform)
            if callable(getattr(r, "with_image_transform", None))
            else r
            for r in self.recipes
        ]
        return MixtureRecipe(self.names, self.offsets, recipes)

    def _recipe_of(self, record: Any) -> Any:
        index = getattr(record, "index", None)
        if index is None:
            raise SampleError(
                "unexpected_error",
                "a mixture's recipe needs records from its MixtureSource (with a global index)",
            )
        d = int(np.searchsorted(self.offsets, index, side="right") - 1)
        return self.recipes[d]

    def __call__(self, record: Any, *, draw: Any = None) -> dict[str, Any]:
        """The record through its dataset's recipe.

        ``draw``: the sample's augmentation, whose crops and flips the recipe's coordinates
        follow (``Recipe.__call__``).
        """
        recipe = self._recipe_of(record)
        if draw is None or not callable(getattr(recipe, "widest_coordinates", None)):
            return recipe(record)
        return recipe(record, draw=draw)

    def batch(self, records: Iterable[Any]) -> list[Any]:
        """Each record through its dataset's ``recipe.batch``, results in input order."""
        records = list(records)
        groups: dict[int, list[int]] = {}
        for k, record in enumerate(records):
            recipe = self._recipe_of(record)
            groups.setdefault(self.recipes.index(recipe), []).append(k)
        out: list[Any] = [None] * len(records)
        for d, positions in groups.items():
            for k, result in zip(
                positions, self.recipes[d].batch([records[k] for k in positions]), strict=True
            ):
                out[k] = result
        return out

    def fingerprint(self) -> dict[str, Any]:
        return {
            "kind": "mixture",
            "recipes": [
                {"name": n, "recipe": r.fingerprint()}
                for n, r in zip(self.names, self.recipes, strict=True)
            ],
        }

    def __repr__(self) -> str:
        return f"MixtureRecipe({', '.join(self.names)})"


def concat_lengths(parts: Sequence[Lengths]) -> Lengths:
    """Lengths of datasets laid end to end (reject kinds merged into one table)."""
    kinds: list[str] = []
    status = []
    for lens in parts:
        codes = np.asarray(
            lens.status
            if lens.status is not None
            else np.where(lens.length >= 0, 0, STATUS_REJECTED),
            dtype=np.int32,
        )
        if lens.kinds:
            local = np.array([_kind_code(kinds, k) for k in lens.kinds], dtype=np.int32)
            rejected = codes >= STATUS_REJECTED
            codes = codes.copy()
            codes[rejected] = STATUS_REJECTED + local[codes[rejected] - STATUS_REJECTED]
        elif (codes >= STATUS_REJECTED).any():
            codes = codes.copy()
            codes[codes >= STATUS_REJECTED] = STATUS_REJECTED + _kind_code(kinds, "rejected")
        status.append(codes)
    tally = RejectTally()
    for lens in parts:
        tally.merge(lens.tally)

    def joined(name: str, default: str | None = None) -> np.ndarray | None:
        arrays = [getattr(p, name) for p in parts]
        if all(a is None for a in arrays):
            return None
        return np.concatenate(
            [
                np.asarray(a)
                if a is not None
                else np.asarray(p.length)
                if default == "length"
                else np.zeros(len(p), np.int32)
                for p, a in zip(parts, arrays, strict=True)
            ]
        )

    length = np.concatenate([np.asarray(p.length) for p in parts])
    return Lengths(
        length,
        joined("image_tokens"),
        np.concatenate(status) if status else None,
        kinds=tuple(kinds),
        tally=tally,
        first_trained=joined("first_trained"),
        longest=joined("longest", "length"),
        sequences=max((p.sequences for p in parts), default=1),
    )


def slice_lengths(lengths: Lengths, lo: int, hi: int) -> Lengths:
    """The lengths of ids ``lo .. hi-1`` (one dataset of a mixture), kinds kept."""

    def cut(a: np.ndarray | None) -> np.ndarray | None:
        return None if a is None else np.asarray(a)[lo:hi]

    return Lengths(
        np.asarray(lengths.length)[lo:hi],
        cut(lengths.image_tokens),
        cut(lengths.status),
        kinds=lengths.kinds,
        first_trained=cut(lengths.first_trained),
        longest=cut(lengths.longest),
        sequences=lengths.sequences,
    )


def _kind_code(kinds: list[str], kind: str) -> int:
    if kind not in kinds:
        kinds.append(kind)
    return kinds.index(kind)

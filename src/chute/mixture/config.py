"""``Mixture``: several datasets in one run, in Python or YAML (``mixture.yaml``).

::

    recipe:                      # run-wide: tokenizer, template, max_length, ... (and defaults
      tokenizer: models/qwen3    # of the per-dataset options, e.g. a system prompt for all)
      template: qwen3
      max_length: 4096
    datasets:                    # name: entry (chute.mixture.entry)
      alpaca:
        sources: [data/alpaca_en_demo.json]
        weight: 0.6
        val: 0.02
      tools:
        sources: [data/glaive_toolcall_en_demo.json]
        format: sharegpt
        columns: {messages: conversations, tools: tools}
        weight: 0.4
    epoch_samples: null          # samples per epoch (default: what the datasets give)
    batching: mixed              # or per_dataset: every step from one dataset
    cache: {chunk_size: 10000}   # chute preprocess only (docs/cache.md), like stages and out

Every key takes a dotted override (``datasets.alpaca.weight=0.5``). The file is also a
preprocessing config: ``chute preprocess mixture.yaml --out DIR`` builds one cache per dataset.

Example:
    >>> mix = Mixture.from_dict({
    ...     "recipe": {"tokenizer": "qwen3/"},
    ...     "datasets": {"a": {"sources": ["a.jsonl"], "weight": 3},
    ...                  "b": {"sources": ["b.jsonl"], "weight": 1, "system": "Be brief."}}},
    ...     overrides=["datasets.a.weight=2"])
    >>> mix.names, mix["a"].weight, mix.recipe_config("b").system
    (['a', 'b'], 2, 'Be brief.')
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import yaml

from chute._internal.config_checks import read_config_file
from chute._internal.remote import absolute
from chute.cache.config import CacheOptions, PreprocessConfig, RecipeConfig
from chute.cache.config_checks import (
    Problems,
    apply_overrides,
    check_fields,
    raise_problems,
    unknown_keys,
)
from chute.errors import ConfigError
from chute.mixture.entry import MixtureEntry, dataset_problems
from chute.plan.mixture_planner import BATCHING

__all__ = ["TOP_KEYS", "Mixture", "is_mixture_config"]

TOP_KEYS = ("recipe", "datasets", "epoch_samples", "batching", "cache", "stages", "out")
# The smallest mixture, shown to one who passes a data file where the YAML belongs.
MIXTURE_EXAMPLE = (
    "datasets: {{mine: {{sources: [{data}]}}}}\n"
    "recipe: {{tokenizer: path/to/tokenizer, template: chatml, max_length: 4096}}"
)


def is_mixture_config(data: Any) -> bool:
    """Whether a config mapping (or YAML file) describes a mixture (it has ``datasets``)."""
    if isinstance(data, str | os.PathLike):
        path = Path(data)
        if not path.is_file() or path.suffix not in (".yaml", ".yml"):
            return False
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError, UnicodeDecodeError):
            return False
    return isinstance(data, Mapping) and "datasets" in data


class Mixture:
    """Datasets with their own options and amounts, and the run-wide recipe they share.

    Args:
        datasets: ``MixtureEntry`` entries (names unique).
        recipe: the run-wide recipe options (a mapping or ``RecipeConfig``): tokenizer,
            template, max_length, ... and defaults for the per-dataset options. ``None`` for
            pre-tokenized records (``{"input_ids": ...}``).
        epoch_samples: samples per epoch, all datasets together; the weighted datasets share
            what the others leave (default: as many as their pools hold together).
        batching: ``"mixed"`` (batches mix datasets) or ``"per_dataset"`` (each global batch
            from one dataset, chosen in proportion).
        cache: ``chute preprocess`` options (``CacheOptions`` fields).
        stages: ``chute preprocess`` extra stages.
        out: the preprocessing output directory.
    """

    def __init__(
        self,
        datasets: Sequence[MixtureEntry],
        *,
        recipe: Mapping[str, Any] | RecipeConfig | None = None,
        epoch_samples: int | None = None,
        batching: str = "mixed",
        cache: Mapping[str, Any] | None = None,
        stages: Mapping[str, Any] | None = None,
        out: str | None = None,
    ):
        datasets = list(datasets)
        problems: Problems = []
        if not datasets or not all(isinstance(d, MixtureEntry) for d in datasets):
            problems.append(("datasets", "expected a non-empty list of chute.MixtureEntry"))
        names = [getattr(d, "name", None) for d in datasets]
        for name in sorted({n for n in names if names.count(n) > 1}, key=str):
            problems.append((f"datasets.{name}", "the name is used more than once"))
        if isinstance(recipe, RecipeConfig):
            recipe = asdict(recipe)
        if recipe is not None and not isinstance(recipe, Mapping):
            problems.append(
                (
                    "recipe",
                    f"expected a mapping of recipe options (a RecipeConfig's "
                    f"fields), got {type(recipe).__name__}",
                )
            )
            recipe = None
        problems += _option_problems(epoch_samples, batching)
        if recipe is not None:
            problems += _recipe_problems(recipe)
        raise_problems(problems, what="mixture")
        self.datasets = datasets
        self.recipe = None if recipe is None else dict(recipe)
        self.epoch_samples = epoch_samples
        self.batching = batching
        self.cache = dict(cache or {})
        self.stages = {k: dict(v or {}) for k, v in (stages or {}).items()}
        self.out = out

    # -- YAML ----------------------------------------------------------------------------------

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], overrides: Sequence[str] = ()) -> Mixture:
        """A mixture from its YAML shape (see the module docstring), after dotted overrides."""
        if not isinstance(data, Mapping):
            raise ConfigError(f"a mixture is a mapping with datasets, got {type(data).__name__}")
        data = apply_overrides(data, overrides)
        problems = unknown_keys(data, TOP_KEYS, "")
        entries = data.get("datasets")
        if isinstance(entries, list):  # a list of entries with a name each
            named = [e for e in entries if isinstance(e, Mapping) and "name" in e]
            if len(named) == len(entries):
                entries = {e["name"]: {k: v for k, v in e.items() if k != "name"} for e in named}
        if not isinstance(entries, Mapping) or not entries:
            problems.append(
                (
                    "datasets",
                    f"expected a mapping of dataset names to entries (each "
                    f"with sources), got {entries!r}",
                )
            )
            entries = {}
        for name, entry in entries.items():
            if not isinstance(entry, Mapping):
                problems.append(
                    (f"datasets.{name}", f"expected a mapping with sources, got {entry!r}")
                )
                continue
            problems += dataset_problems(name, entry, f"datasets.{name}.")
        problems += _option_problems(data.get("epoch_samples"), data.get("batching", "mixed"))
        recipe = data.get("recipe")
        if recipe is not None and not isinstance(recipe, Mapping):
            problems.append(("recipe", f"expected a mapping, got {recipe!r}"))
        elif recipe is not None:
            problems += _recipe_problems(recipe)
        cache = data.get("cache") or {}
        if isinstance(cache, Mapping):
            problems += unknown_keys(cache, list(CacheOptions.KINDS), "cache.")
            problems += [(f"cache.{k}", m) for k, m in check_fields(CacheOptions.KINDS, cache)]
        else:
            problems.append(("cache", f"expected a mapping, got {cache!r}"))
        raise_problems(problems, what="mixture")
        return cls(
            [MixtureEntry.from_dict(str(n), e) for n, e in entries.items()],
            recipe=recipe,
            epoch_samples=data.get("epoch_samples"),
            batching=data.get("batching", "mixed"),
            cache=cache,
            stages=data.get("stages"),
            out=data.get("out"),
        )

    @classmethod
    def load(
        cls,
        config: str | os.PathLike[str] | Mapping[str, Any] | Mixture,
        overrides: Sequence[str] = (),
    ) -> Mixture:
        """A mixture from a YAML file, a mapping or a mixture, after dotted overrides."""
        if isinstance(config, Mixture):
            return config if not overrides else cls.from_dict(config.to_dict(), overrides)
        if isinstance(config, str | os.PathLike):
            data = read_config_file(config, "a mixture YAML", MIXTURE_EXAMPLE, TOP_KEYS)
            return cls.from_dict(data or {}, overrides)
        return cls.from_dict(config, overrides)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.recipe is not None:
            out["recipe"] = dict(self.recipe)
        out["datasets"] = {d.name: d.to_dict() for d in self.datasets}
        if self.epoch_samples is not None:
            out["epoch_samples"] = self.epoch_samples
        out["batching"] = self.batching
        if self.cache:
            out["cache"] = dict(self.cache)
        if self.stages:
            out["stages"] = dict(self.stages)
        if self.out is not None:
            out["out"] = self.out
        return out

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False, allow_unicode=True)

    # -- the datasets --------------------------------------------------------------------------

    @property
    def names(self) -> list[str]:
        return [d.name for d in self.datasets]

    def __getitem__(self, name: str) -> MixtureEntry:
        for d in self.datasets:
            if d.name == name:
                return d
        raise KeyError(f"no dataset {name!r} in this mixture (it has {self.names})")

    def __iter__(self) -> Iterator[MixtureEntry]:
        return iter(self.datasets)

    def __len__(self) -> int:
        return len(self.datasets)

    def recipe_config(self, name: str) -> RecipeConfig:
        """The recipe of dataset ``name``: the mixture's options, its own over them."""
        if self.recipe is None:
            raise ConfigError(
                "this mixture has no recipe (its records are taken as pre-tokenized); give it "
                "recipe={'tokenizer': ...} to tokenize",
                param="recipe",
            )
        own = self[name].recipe_options
        return RecipeConfig(**{**self.recipe, **own})

    def preprocess_config(self, name: str) -> PreprocessConfig:
        """The preprocessing config of dataset ``name`` alone (its cache folder's config)."""
        return PreprocessConfig(
            sources=list(self[name].sources),
            recipe=self.recipe_config(name),
            cache=CacheOptions(**self.cache),
            stages={k: dict(v) for k, v in self.stages.items()},
        )

    def resolved(self) -> Mixture:
        """A copy with absolute paths (sources, tokenizer, media roots), like a cache stores it."""
        data = self.to_dict()
        for entry in data["datasets"].values():
            entry["sources"] = [absolute(s) for s in entry["sources"]]
            root = entry.get("media_root")
            if isinstance(root, Mapping):
                entry["media_root"] = {absolute(k): absolute(v) for k, v in root.items()}
            elif root:
                entry["media_root"] = absolute(root)
        if self.recipe is not None:
            data["recipe"] = asdict(RecipeConfig(**self.recipe).resolved())
        data.pop("out", None)
        return Mixture.from_dict(data)

    def with_amounts(self, **changes: Mapping[str, Any]) -> Mixture:
        """A copy where ``changes[name]`` sets that dataset's amounts, e.g. ``{"weight": 0.5}``.

        Example:
            >>> mix = Mixture([MixtureEntry("a", "a.jsonl"), MixtureEntry("b", "b.jsonl")])
            >>> mix.with_amounts(a={"weight": 2}, b={"weight": 1})["a"].weight
            2
        """
        unknown = sorted(set(changes) - set(self.names))
        if unknown:
            raise ConfigError(f"no dataset named {unknown} in this mixture ({self.names})")
        datasets = [d.with_amounts(**changes[d.name]) if d.name in changes else d for d in self]
        return Mixture(
            datasets,
            recipe=self.recipe,
            epoch_samples=self.epoch_samples,
            batching=self.batching,
            cache=self.cache,
            stages=self.stages,
            out=self.out,
        )

    def __repr__(self) -> str:
        return f"Mixture({self.datasets!r}, batching={self.batching!r})"


def _recipe_problems(recipe: Mapping[str, Any]) -> Problems:
    out = unknown_keys(recipe, list(RecipeConfig.KINDS), "recipe.")
    out += [(f"recipe.{k}", m) for k, m in check_fields(RecipeConfig.KINDS, recipe)]
    if "tokenizer" not in recipe:
        out.append(("recipe.tokenizer", "required (a tokenizer.json, folder or file)"))
    return out


def _option_problems(epoch_samples: Any, batching: Any) -> Problems:
    out: Problems = []
    if epoch_samples is not None and (
        not isinstance(epoch_samples, int) or isinstance(epoch_samples, bool) or epoch_samples < 1
    ):
        out.append(("epoch_samples", f"expected a positive integer or null, got {epoch_samples!r}"))
    if batching not in BATCHING:
        out.append(("batching", f"expected one of {', '.join(BATCHING)}, got {batching!r}"))
    return out

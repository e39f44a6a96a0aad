"""The preprocessing config: typed sections, YAML as their serialised form, dotted overrides.

A config names the sources, the recipe and the cache options::

    sources: [data/train-*.jsonl]      # paths or globs, in order
    recipe:                            # the Recipe's arguments (see docs/recipe.md)
      tokenizer: models/qwen3
      template: qwen3
      max_length: 4096
    cache:                             # how the cache is built (see docs/cache.md)
      chunk_size: 10000
      workers: 8

Every key can be set from the command line as a dotted override (``recipe.max_length=4096``,
``sources=[a.jsonl,b.jsonl]``; values are read as YAML). Construction checks every field and
reports every problem at once, each naming its dotted key, the value and what is expected.

Example:
    >>> cfg = PreprocessConfig.from_dict(
    ...     {"sources": ["a.jsonl"], "recipe": {"tokenizer": "tok.json"}},
    ...     overrides=["recipe.max_length=4096", "cache.chunk_size=500"])
    >>> cfg.recipe.max_length, cfg.cache.chunk_size
    (4096, 500)
    >>> PreprocessConfig.from_dict({"sources": [], "recipe": {"tokenizer": "t", "max_lenght": 9}})
    Traceback (most recent call last):
    ...
    chute.errors.ConfigError: invalid preprocessing config:
      sources: expected a non-empty list of paths or globs, got []
      recipe.max_lenght: unknown key (did you mean max_length?)
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar

import yaml

from chute._internal.config_checks import (
    Problems,
    apply_overrides,
    check_fields,
    choice,
    raise_problems,
    read_config_file,
    unknown_keys,
)
from chute._internal.remote import absolute
from chute._internal.spelling import Spelling
from chute.errors import ConfigError
from chute.recipe.config import RecipeConfig  # the recipe's own options (re-exported here)

# where chunks run (chute.cache.engines)
ENGINES = ("local", "ray")

__all__ = [
    "CONFIG",
    "ENGINES",
    "CacheOptions",
    "PreprocessConfig",
    "RecipeConfig",
    "apply_overrides",
    "load_config",
]

# -- sections -------------------------------------------------------------------------------


@dataclass
class CacheOptions:
    """How the cache is built. Only ``chunk_size`` and ``full_hash`` shape its files.

    Args:
        chunk_size: records per chunk: the unit of parallel work, of atomic commits and of
            resumption (independent of workers and ranks, so the cache is the same however it
            was run). Default: from the record count alone (``chute.cache.chunking``): 10,000
            from 640,000 records up, else enough chunks for 16 workers to get 4 each, at
            least 2,000 records a chunk.
        workers: processes per rank (default: the cores of this machine divided by the ranks
            on it, ``LOCAL_WORLD_SIZE``).
        full_hash: hash every source file whole into the fingerprint (default: size, mtime and
            a hash of both ends), and check it on open.
        wait_timeout: seconds a rank that finished its chunks waits for the other ranks'.
        max_bad_fraction: stop when more than this share of records is rejected (``null``:
            never), checked once 1,000 records were seen.
        engine: where the chunks run: ``local`` (a pool of processes per rank) or ``ray``
            (Ray tasks; ``pip install 'chute[ray]'``). The cache is the same bytes either way.
        address: with ``engine: ray``, the Ray cluster (``auto``, ``host:6379``,
            ``ray://host:10001``); default ``RAY_ADDRESS``, else a new local Ray.
        runtime_env: with ``engine: ray``, the tasks' Ray runtime environment (e.g.
            ``{pip: [chute]}``), where the cluster's Python lacks chute.
    """

    chunk_size: int | None = None
    workers: int | None = None
    full_hash: bool = False
    wait_timeout: float = 3600.0
    max_bad_fraction: float | None = 0.25
    engine: str = "local"
    address: str | None = None
    runtime_env: dict[str, Any] = field(default_factory=dict)

    KINDS: ClassVar[dict[str, Any]] = {
        "chunk_size": "int+?",
        "workers": "int+?",
        "full_hash": "bool",
        "wait_timeout": "seconds",
        "max_bad_fraction": "fraction?",
        "engine": choice(ENGINES),
        "address": "str?",
        "runtime_env": "map",
    }
    SHAPING: ClassVar[tuple[str, ...]] = ("chunk_size", "full_hash")

    def __post_init__(self) -> None:
        problems = check_fields(self.KINDS, vars(self))
        if self.engine == "local":
            problems += [
                (
                    f"cache.{name}",
                    f"{getattr(self, name)!r} is for the ray engine; add --engine ray "
                    "(cache.engine: ray), or leave it out",
                )
                for name in ("address", "runtime_env")
                if getattr(self, name)
            ]
        raise_problems(problems)


@dataclass
class PreprocessConfig:
    """Everything ``chute preprocess`` needs: sources, recipe, cache options, extra stages.

    Args:
        sources: data files or globs, in order (record ids follow this order).
        recipe: the recipe (a ``RecipeConfig`` or its mapping).
        cache: the cache options (a ``CacheOptions`` or its mapping).
        stages: extra per-chunk stages by name with their options (see
            ``chute.cache.stages``), e.g. a pre-decoded media stage.
        out: the output directory (the ``--out`` option wins).
    """

    sources: list[str]
    recipe: RecipeConfig
    cache: CacheOptions = field(default_factory=CacheOptions)
    stages: dict[str, dict[str, Any]] = field(default_factory=dict)
    out: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.sources, str | os.PathLike):
            self.sources = [os.fspath(self.sources)]
        problems = _top_problems(vars(self))
        raise_problems(problems)
        if isinstance(self.recipe, Mapping):
            self.recipe = RecipeConfig(**self.recipe)
        if isinstance(self.cache, Mapping):
            self.cache = CacheOptions(**self.cache)
        self.sources = [os.fspath(s) for s in self.sources]
        if not isinstance(self.recipe, RecipeConfig) or not isinstance(self.cache, CacheOptions):
            raise ConfigError("recipe and cache must be a RecipeConfig and a CacheOptions")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], overrides: Sequence[str] = ()) -> PreprocessConfig:
        """Build and check a config from a mapping (the YAML's shape), after ``overrides``."""
        if not isinstance(data, Mapping):
            raise ConfigError(
                f"a preprocessing config is a mapping with sources, recipe and cache, got "
                f"{type(data).__name__}"
            )
        data = apply_overrides(data, overrides)
        problems = unknown_keys(data, _TOP_KEYS, "")
        problems += _top_problems(data)
        sections: dict[str, Any] = {"recipe": RecipeConfig, "cache": CacheOptions}
        for name, section in sections.items():
            value = data.get(name, {})
            if not isinstance(value, Mapping):
                continue  # reported by _top_problems
            known = [f.name for f in fields(section)]
            problems += unknown_keys(value, known, f"{name}.")
            problems += [(f"{name}.{k}", m) for k, m in check_fields(section.KINDS, value)]
        recipe = data.get("recipe")
        if isinstance(recipe, Mapping) and "tokenizer" not in recipe:
            problems.append(("recipe.tokenizer", "required (a tokenizer.json, folder or file)"))
        raise_problems(problems)
        return cls(
            sources=data["sources"],
            recipe=RecipeConfig(**data["recipe"]),
            cache=CacheOptions(**data.get("cache", {})),
            stages={k: dict(v or {}) for k, v in (data.get("stages") or {}).items()},
            out=data.get("out"),
        )

    def to_dict(self, *, shaping_only: bool = False) -> dict[str, Any]:
        """Plain data in the YAML's shape.

        ``shaping_only`` keeps what shapes the output: the cache options that do, and the recipe
        without ``tokenizer_backend`` (either engine gives the same ids).
        """
        out: dict[str, Any] = {
            "sources": list(self.sources),
            "recipe": asdict(self.recipe),
            "cache": asdict(self.cache),
        }
        if shaping_only:
            out["cache"] = {k: out["cache"][k] for k in CacheOptions.SHAPING}
            for key in RecipeConfig.NOT_SHAPING:
                out["recipe"].pop(key)
        if self.stages:
            out["stages"] = {k: dict(v) for k, v in sorted(self.stages.items())}
        if self.out is not None and not shaping_only:
            out["out"] = self.out
        return out

    def to_yaml(self, *, shaping_only: bool = False) -> str:
        return yaml.safe_dump(
            self.to_dict(shaping_only=shaping_only), sort_keys=False, allow_unicode=True
        )

    def resolved(self) -> PreprocessConfig:
        """A copy with absolute paths, so it means the same from any working directory."""
        return PreprocessConfig(
            sources=[absolute(s) for s in self.sources],
            recipe=self.recipe.resolved(),
            cache=CacheOptions(**asdict(self.cache)),
            stages={k: dict(v) for k, v in self.stages.items()},
            out=absolute(self.out) if self.out else None,
        )


_TOP_KEYS = ["sources", "recipe", "cache", "stages", "out"]

# Errors raised while a config is in use name its keys (``recipe.media_root``) and the override
# that sets one (``recipe.image_tokens=576``), not the Recipe's Python keywords.
CONFIG = Spelling(
    "config",
    {
        **{f.name: f"recipe.{f.name}" for f in fields(RecipeConfig)},
        **{f.name: f"cache.{f.name}" for f in fields(CacheOptions)},
        **{name: name for name in _TOP_KEYS},
    },
    assign="=",
    quote=False,
)


def _top_problems(data: Mapping[str, Any]) -> Problems:
    out: Problems = []
    sources = data.get("sources")
    if isinstance(sources, str):
        sources = [sources]
    if "sources" not in data:
        out.append(("sources", "required: a list of data files or globs"))
    elif (
        not isinstance(sources, list | tuple)
        or not sources
        or not all(isinstance(s, str | os.PathLike) and os.fspath(s) for s in sources)
    ):
        out.append(("sources", f"expected a non-empty list of paths or globs, got {sources!r}"))
    if "recipe" not in data:
        out.append(("recipe", "required: a mapping with at least a tokenizer"))
    elif not isinstance(data["recipe"], Mapping | RecipeConfig):
        out.append(("recipe", f"expected a mapping, got {data['recipe']!r}"))
    if not isinstance(data.get("cache", {}), Mapping | CacheOptions):
        out.append(("cache", f"expected a mapping, got {data['cache']!r}"))
    stages = data.get("stages") or {}
    if not isinstance(stages, Mapping) or not all(
        isinstance(k, str) and (v is None or isinstance(v, Mapping)) for k, v in stages.items()
    ):
        out.append(("stages", f"expected a mapping of stage names to options, got {stages!r}"))
    if data.get("out") is not None and not isinstance(data["out"], str | os.PathLike):
        out.append(("out", f"expected a directory path, got {data['out']!r}"))
    return out


# -- loading ----------------------------------------------------------------------------------

# The smallest config, shown to one who passes a data file where the config belongs.
PREPROCESS_EXAMPLE = (
    "sources: [{data}]\n"
    "recipe: {{tokenizer: path/to/tokenizer, template: chatml, max_length: 4096}}"
)


def load_config(
    config: PreprocessConfig | Mapping[str, Any] | str | os.PathLike[str],
    overrides: Sequence[str] = (),
) -> PreprocessConfig:
    """A ``PreprocessConfig`` from a config object, a mapping or a YAML file, plus overrides.

    Raises:
        ConfigError: the file is missing or not YAML, or fields are invalid (all named).
    """
    if isinstance(config, PreprocessConfig):
        if not overrides:
            return config
        return PreprocessConfig.from_dict(config.to_dict(), overrides)
    if isinstance(config, str | os.PathLike):
        path = Path(config)
        data = read_config_file(path, "a preprocessing config", PREPROCESS_EXAMPLE, _TOP_KEYS)
        if data is None:
            raise ConfigError(f"{path} is empty; it needs sources and recipe", param="config")
        _check_relative_sources(data, path)
        return PreprocessConfig.from_dict(data, overrides)
    return PreprocessConfig.from_dict(config, overrides)


def _check_relative_sources(data: Any, config: Path) -> None:
    """A relative source missing from the working directory but beside the config: say so.

    Paths in a config are relative to the working directory (as on the command line), so a
    config run from another folder misses its data with only "no such file".
    """
    sources = data.get("sources") if isinstance(data, Mapping) else None
    if isinstance(sources, str):
        sources = [sources]
    if not isinstance(sources, list):
        return
    here = config.resolve().parent
    for i, source in enumerate(sources):
        if not isinstance(source, str) or os.path.isabs(source) or "://" in source:
            continue
        if any(c in source for c in "*?[{") or Path(source).exists():
            continue
        if (here / source).exists():
            raise ConfigError(
                f"{source!r} is not in the working directory ({os.getcwd()}): paths in a config "
                f"are relative to where chute runs, and it is beside the config, in {here}; run "
                f"chute from there, or write the path as {str(here / source)!r}",
                param=f"sources[{i}]",
            )

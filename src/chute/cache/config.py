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

import importlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar

import yaml

from chute._internal.remote import absolute
from chute._internal.spelling import Spelling, spelling
from chute.cache.config_checks import (
    CliFlag,
    Problems,
    apply_overrides,
    check_fields,
    choice,
    kinds_of,
    option,
    raise_problems,
    unknown_keys,
)
from chute.errors import ConfigError
from chute.formats.spec import FORMAT_NAMES
from chute.media.images import DEFAULT_MAX_PIXELS
from chute.recipe import MAX_RECORD_BYTES, MAX_TURNS, OVERFLOW, TASKS, TRUNCATION
from chute.templates.base import TRAIN_ON
from chute.tokenize import BACKENDS

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
class RecipeConfig:
    """The ``Recipe``'s arguments as plain data (see ``chute.Recipe`` for each one).

    Example:
        >>> RecipeConfig(tokenizer="models/qwen3", max_length=0)
        Traceback (most recent call last):
        ...
        chute.errors.ConfigError: invalid preprocessing config:
          max_length: expected a positive integer or null, got 0
    """

    # Each option is declared here once: its type (the check is read from it), default,
    # refinements and command-line flag (chute.cli._options builds the flags from these).
    tokenizer: str = option(
        cli=CliFlag(
            "tokenizer.json, tokenizer folder, or tiktoken BPE file.",
            annotation=str | None,
            default=None,
        )
    )
    format: str = option(
        "auto",
        choices=FORMAT_NAMES,
        cli=CliFlag("auto, alpaca, prompt_completion, sharegpt, llava, qwen_vl, messages or text."),
    )
    template: str | None = option(
        None,
        cli=CliFlag(
            "Built-in (chatml, qwen3, llama3, llama2, mistral, vicuna, llava-v1, alpaca, raw), a "
            "tokenizer_config.json or .jinja file. Default: the tokenizer's chat template."
        ),
    )
    max_length: int | None = option(None, cli=CliFlag("Longest sample in tokens."))
    overflow: str = option(
        "truncate",
        choices=OVERFLOW,
        cli=CliFlag(
            "Over --max-length: truncate, drop, or split (windows of --max-length; every token "
            "kept)."
        ),
    )
    truncation: str = option(
        "right",
        choices=TRUNCATION,
        cli=CliFlag(
            "What --overflow truncate keeps: right (the start), left (the end), turns (drops "
            "whole earliest exchanges, the system prompt kept)."
        ),
    )
    stride: int = option(
        0,
        minimum=0,
        cli=CliFlag(
            "--overflow split: tokens each window repeats from the one before, as context only."
        ),
    )
    task: str = option(
        "sft",
        choices=TASKS,
        cli=CliFlag("sft, preference (chosen/rejected pairs: DPO, ORPO, reward models) or kto."),
    )
    train_on: str = option("assistant", choices=TRAIN_ON, cli=CliFlag("assistant, last or all."))
    columns: dict[str, str] = option(
        factory=dict,
        cli=CliFlag(
            "Record keys by meaning, e.g. 'prompt=question,response=answer'.",
            annotation=str | None,
            default=None,
            parse="pairs",
        ),
    )
    tags: dict[str, str] = option(
        factory=dict,
        cli=CliFlag(
            "Role names, e.g. 'user_tag=Q,assistant_tag=A'.",
            annotation=str | None,
            default=None,
            parse="pairs",
        ),
    )
    placeholders: dict[str, str | None] = option(factory=dict)
    system: str | None = option(None, cli=CliFlag("System prompt for records without one."))
    template_vars: dict[str, Any] = option(
        factory=dict,
        cli=CliFlag(
            "A template variable KEY=VALUE (repeatable; values read as YAML scalars), e.g. "
            "enable_thinking=false or 'date_string=26 Jul 2024'. Templates never read the clock: "
            "strftime_now gives 26 Jul 2024 unless you set the date this way.",
            annotation=list[str] | None,
            default=None,
            decl="--template-var",
            parse="template_vars",
        ),
    )
    special_tokens: dict[str, str | None] = option(factory=dict)
    media_root: str | dict[str, str] | None = option(
        None,
        check="root",
        cli=CliFlag(
            "Folder (or URL: s3://bucket/images) for relative media paths (default: the data "
            "file's).",
            annotation=str | None,
        ),
    )
    image_tokens: Any = option(
        "auto",
        check="image_tokens",
        cli=CliFlag(
            "Tokens per image: a count (576) or llava-1.5, qwen-vl, qwen2-vl, qwen2.5-vl. Default "
            "auto: qwen2-vl when the tokenizer's image token is <|image_pad|>, else 576.",
            annotation=str | None,
            default=None,
            parse="or_default",
        ),
    )
    image_token: str | None = option(None)
    image_token_id: int | None = option(None, minimum=0)
    video_tokens: int | str | dict[str, Any] | None = option(
        None,
        check="video_tokens",
        cli=CliFlag(
            "How videos become tokens; needed for data with videos: fps (frames sampled 2 a "
            "second as the --image-tokens family's processor does, counted from each header), "
            "fps=1,max_frames=64, frames=8 (a fixed frame count), or a count of tokens per video "
            "(64).",
            annotation=str | None,
        ),
    )
    audio_tokens: int | dict[str, Any] | None = option(
        None,
        check="count_or_rule",
        cli=CliFlag(
            "Tokens per audio clip (a fixed count); needed for data with audio.",
            annotation=int | None,
        ),
    )
    video_token: str | None = option(
        None,
        cli=CliFlag(
            "The token that marks a video (default <|video_pad|> if the vocabulary has it, else "
            "<video>)."
        ),
    )
    audio_token: str | None = option(
        None,
        cli=CliFlag(
            "The token that marks an audio clip (default <|AUDIO|> if the vocabulary has it, else "
            "<audio>)."
        ),
    )
    check_images: bool = option(True)
    allow_urls: bool = option(False)
    max_image_pixels: int = option(
        DEFAULT_MAX_PIXELS,
        cli=CliFlag(
            "Images with more pixels are rejected (image_too_large) where the header is read "
            "(dynamic image-token counts)."
        ),
    )
    media_allowed_roots: list[str] = option(
        factory=list,
        cli=CliFlag(
            "A further folder media paths may resolve into through a symlink or an absolute "
            "path, e.g. where an images -> /mnt/coco link points (repeatable). Default: none, "
            "only the media root.",
            annotation=list[str] | None,
            default=None,
            parse="list",
        ),
    )
    tiktoken_pattern: str | None = option(None)
    tokenizer_backend: str = option(
        "auto",
        choices=BACKENDS,
        cli=CliFlag(
            "Engine of a tokenizer.json: auto (tiktoken where it gives the same ids, checked; "
            "else tokenizers), tiktoken (required) or hf (tokenizers). Same ids either way."
        ),
    )
    max_record_bytes: int | None = option(
        MAX_RECORD_BYTES,
        cli=CliFlag(
            "Records larger than this many bytes are rejected (record_too_large) before they "
            "are read.",
            annotation=int,
        ),
    )
    max_turns: int | None = option(
        MAX_TURNS,
        cli=CliFlag(
            "Records with more messages (or a message with more content parts) are rejected "
            "(too_many_turns) before they are templated.",
            annotation=int,
        ),
    )
    geometry: str | dict[str, str] | None = option(
        None,
        check="name_or_fields",
        cli=CliFlag(
            "How the text writes box and point coordinates, rewritten for the image the model "
            "sees (its resize): qwen2-vl (0-1000), qwen2.5-vl (absolute pixels), normalized, "
            "llava, or none. Boxes that cannot follow are counted (box_invalid, box_outside, "
            "box_ambiguous). Default: the text is left as written.",
            annotation=str | None,
        ),
    )
    timestamps: str | dict[str, Any] | None = option(
        None,
        check="name_or_fields",
        cli=CliFlag(
            "Times in the text of video samples (00:12, 12.5s, 3.5 to 7 seconds): check rejects "
            "one past the clip's end (timestamp_outside); seconds (or qwen2.5-vl, qwen3-vl) also "
            "writes each as Qwen reads time (12.0 seconds). Default: not read.",
            annotation=str | None,
        ),
    )

    KINDS: ClassVar[dict[str, Any]]  # each field's check, read from the fields (kinds_of)
    # Options that change how samples are computed, never what they are (not in config.yaml).
    NOT_SHAPING: ClassVar[tuple[str, ...]] = ("tokenizer_backend",)

    def __post_init__(self) -> None:
        raise_problems(check_fields(self.KINDS, vars(self)))

    def build(self) -> Any:
        """The ``Recipe`` (loads the tokenizer); its errors name ``recipe.<field>``."""
        from chute.recipe import Recipe

        with spelling(CONFIG):
            return Recipe(**self._arguments())

    def _arguments(self) -> dict[str, Any]:
        args = asdict(self)
        # video_tokens (a count, fields or a short form) resolves in the recipe, with the image
        # rule's family preset (chute.media.video.video_tokens_rule)
        for name, module, cls in (("audio_tokens", "chute.media.audio", "AudioClips"),):
            if isinstance(args[name], Mapping):  # a rule counted from each file's header
                rule = getattr(importlib.import_module(module), cls)
                try:
                    args[name] = rule(**args[name])
                except TypeError as exc:
                    raise ConfigError(f"{exc} (fields of {cls})", param=name) from None
        return args

    def resolved(self) -> RecipeConfig:
        """A copy whose paths (tokenizer, template file, media_root) are absolute."""
        template = self.template
        if template is not None and "{" not in template and os.path.exists(template):
            template = os.path.abspath(template)
        root: Any = self.media_root
        if isinstance(root, Mapping):  # data file (or glob) -> folder
            root = {absolute(k): absolute(v) for k, v in sorted(root.items())}
        elif root:
            root = absolute(root)
        return RecipeConfig(
            **{
                **asdict(self),
                "tokenizer": os.path.abspath(self.tokenizer),
                "template": template,
                "media_root": root,
                "media_allowed_roots": [absolute(p) for p in self.media_allowed_roots],
            }
        )


RecipeConfig.KINDS = kinds_of(RecipeConfig)


@dataclass
class CacheOptions:
    """How the cache is built. Only ``chunk_size`` and ``full_hash`` shape its files.

    Args:
        chunk_size: records per chunk: the unit of parallel work, of atomic commits and of
            resumption (independent of workers and ranks, so the cache is the same however it
            was run).
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

    chunk_size: int = 10_000
    workers: int | None = None
    full_hash: bool = False
    wait_timeout: float = 3600.0
    max_bad_fraction: float | None = 0.25
    engine: str = "local"
    address: str | None = None
    runtime_env: dict[str, Any] = field(default_factory=dict)

    KINDS: ClassVar[dict[str, Any]] = {
        "chunk_size": "int+",
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
        if not path.is_file():
            raise ConfigError(f"{path}: no such file (a YAML preprocessing config)", param="config")
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (yaml.YAMLError, UnicodeDecodeError) as exc:  # not YAML, not UTF-8
            raise ConfigError(f"{path} is not valid YAML: {exc}", param="config") from None
        if data is None:
            raise ConfigError(f"{path} is empty; it needs sources and recipe", param="config")
        return PreprocessConfig.from_dict(data, overrides)
    return PreprocessConfig.from_dict(config, overrides)

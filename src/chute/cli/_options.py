"""Option groups shared by the subcommands, each declared once.

A command asks for a group by decorating itself, and receives one value instead of a dozen
parameters::

    @guarded
    @recipe_options()
    @output_options
    def inspect(path: str = typer.Argument(...), *, recipe: RecipeArgs, output: OutputArgs):
        ...

``recipe_options`` adds every recipe flag (``--tokenizer``, ``--template``, ``--format``,
``--max-length``, ...) to the command's signature, so typer parses them, and hands the command a
``RecipeArgs``; ``output_options`` adds ``--json`` and ``--quiet`` as an ``OutputArgs``. A new
recipe flag is one entry in ``RECIPE_OPTIONS`` and reaches every command that takes a recipe.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import typer
import yaml

from chute._internal.progress import silenced
from chute._internal.spelling import Spelling
from chute.errors import ConfigError

__all__ = [
    "CACHE_DIR",
    "FLAGS",
    "RECIPE_FLAG_HELP",
    "RECIPE_OPTIONS",
    "OutputArgs",
    "RecipeArgs",
    "output_options",
    "parse_pairs",
    "parse_template_vars",
    "recipe_options",
]

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class _Flag:
    """One command-line flag: the parameter name, its type, its default and its help."""

    name: str
    annotation: Any
    default: Any
    decls: tuple[str, ...]
    help: str

    def option(self, help: str | None, default: Any, panel: str) -> Any:
        return typer.Option(
            self.default if default is ... else default,
            *self.decls,
            help=help or self.help,
            rich_help_panel=panel,
        )


RECIPE_OPTIONS: tuple[_Flag, ...] = (
    _Flag(
        "tokenizer",
        str | None,
        None,
        ("--tokenizer",),
        "tokenizer.json, tokenizer folder, or tiktoken BPE file.",
    ),
    _Flag(
        "template",
        str | None,
        None,
        ("--template",),
        "Built-in (chatml, qwen3, llama3, llama2, mistral, vicuna, llava-v1, alpaca, raw), a "
        "tokenizer_config.json or .jinja file. Default: the tokenizer's chat template.",
    ),
    _Flag(
        "format",
        str,
        "auto",
        ("--format",),
        "auto, alpaca, prompt_completion, sharegpt, llava, qwen_vl, messages or text.",
    ),
    _Flag("max_length", int | None, None, ("--max-length",), "Longest sample in tokens."),
    _Flag(
        "overflow",
        str,
        "truncate",
        ("--overflow",),
        "Over --max-length: truncate, drop, or split (windows of --max-length; every token kept).",
    ),
    _Flag(
        "truncation",
        str,
        "right",
        ("--truncation",),
        "What --overflow truncate keeps: right (the start), left (the end), turns (drops whole "
        "earliest exchanges, the system prompt kept).",
    ),
    _Flag(
        "stride",
        int,
        0,
        ("--stride",),
        "--overflow split: tokens each window repeats from the one before, as context only.",
    ),
    _Flag(
        "task",
        str,
        "sft",
        ("--task",),
        "sft, preference (chosen/rejected pairs: DPO, ORPO, reward models) or kto.",
    ),
    _Flag("train_on", str, "assistant", ("--train-on",), "assistant, last or all."),
    _Flag(
        "media_root",
        str | None,
        None,
        ("--media-root",),
        "Folder (or URL: s3://bucket/images) for relative media paths (default: the data file's).",
    ),
    _Flag(
        "media_allowed_roots",
        list[str] | None,
        None,
        ("--media-allowed-roots",),
        "A further folder media paths may resolve into through a symlink or an absolute path, "
        "e.g. where an images -> /mnt/coco link points (repeatable). Default: none, only the "
        "media root.",
    ),
    _Flag(
        "image_tokens",
        str | None,
        None,
        ("--image-tokens",),
        "Tokens per image: a count (576) or llava-1.5, qwen-vl, qwen2-vl, qwen2.5-vl. Default "
        "auto: qwen2-vl when the tokenizer's image token is <|image_pad|>, else 576.",
    ),
    _Flag(
        "geometry",
        str | None,
        None,
        ("--geometry",),
        "How the text writes box and point coordinates, rewritten for the image the model "
        "sees (its resize): qwen2-vl (0-1000), qwen2.5-vl (absolute pixels), normalized, "
        "llava, or none. Boxes that cannot follow are counted (box_invalid, box_outside, "
        "box_ambiguous). Default: the text is left as written.",
    ),
    _Flag(
        "timestamps",
        str | None,
        None,
        ("--timestamps",),
        "Times in the text of video samples (00:12, 12.5s, 3.5 to 7 seconds): check rejects "
        "one past the clip's end (timestamp_outside); seconds (or qwen2.5-vl, qwen3-vl) also "
        "writes each as Qwen reads time (12.0 seconds). Default: not read.",
    ),
    _Flag(
        "video_tokens",
        str | None,
        None,
        ("--video-tokens",),
        "How videos become tokens; needed for data with videos: fps (frames sampled 2 a second "
        "as the --image-tokens family's processor does, counted from each header), fps=1,"
        "max_frames=64, frames=8 (a fixed frame count), or a count of tokens per video (64).",
    ),
    _Flag(
        "audio_tokens",
        int | None,
        None,
        ("--audio-tokens",),
        "Tokens per audio clip (a fixed count); needed for data with audio.",
    ),
    _Flag(
        "video_token",
        str | None,
        None,
        ("--video-token",),
        "The token that marks a video (default <|video_pad|> if the vocabulary has it, else "
        "<video>).",
    ),
    _Flag(
        "audio_token",
        str | None,
        None,
        ("--audio-token",),
        "The token that marks an audio clip (default <|AUDIO|> if the vocabulary has it, else "
        "<audio>).",
    ),
    _Flag(
        "max_record_bytes",
        int,
        64 << 20,
        ("--max-record-bytes",),
        "Records larger than this many bytes are rejected (record_too_large) before they are read.",
    ),
    _Flag(
        "max_turns",
        int,
        10_000,
        ("--max-turns",),
        "Records with more messages (or a message with more content parts) are rejected "
        "(too_many_turns) before they are templated.",
    ),
    _Flag(
        "columns",
        str | None,
        None,
        ("--columns",),
        "Record keys by meaning, e.g. 'prompt=question,response=answer'.",
    ),
    _Flag("tags", str | None, None, ("--tags",), "Role names, e.g. 'user_tag=Q,assistant_tag=A'."),
    _Flag("system", str | None, None, ("--system",), "System prompt for records without one."),
    _Flag(
        "tokenizer_backend",
        str,
        "auto",
        ("--tokenizer-backend",),
        "Engine of a tokenizer.json: auto (tiktoken where it gives the same ids, checked; else "
        "tokenizers), tiktoken (required) or hf (tokenizers). Same ids either way.",
    ),
    _Flag(
        "template_vars",
        list[str] | None,
        None,
        ("--template-var",),
        "A template variable KEY=VALUE (repeatable; values read as YAML scalars), e.g. "
        "enable_thinking=false or 'date_string=26 Jul 2024'. Templates never read the clock: "
        "strftime_now gives 26 Jul 2024 unless you set the date this way.",
    ),
)
_RECIPE_BY_NAME = {flag.name: flag for flag in RECIPE_OPTIONS}
RECIPE_FLAG_HELP = {flag.name: flag.help for flag in RECIPE_OPTIONS}

# How errors name parameters on the command line: the recipe's options by their flags (a
# Recipe keyword without a flag keeps its Python name), and the other flags commands share.
FLAGS = Spelling(
    "cli",
    {
        **{flag.name: flag.decls[0] for flag in RECIPE_OPTIONS},
        "template_vars": "--template-var",
        "workers": "--workers",
        "max_bad_fraction": "--max-bad-fraction",
        "balance": "--balance",
        "cost": "--cost",
    },
    assign=" ",
    quote=False,
)

CACHE_DIR = typer.Option(
    None, "--cache-dir", help="Index cache (default $CHUTE_CACHE_DIR or ~/.cache/chute)."
)


def parse_pairs(text: str | None, option: str) -> dict[str, str]:
    """``"a=b,c=d"`` -> ``{"a": "b", "c": "d"}``.

    Example:
        >>> parse_pairs("prompt=q,response=a", "--columns")
        {'prompt': 'q', 'response': 'a'}
    """
    if not text:
        return {}
    out = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise ConfigError(
                f"{option}: expected key=value pairs separated by commas, got {item!r}"
            )
        out[key.strip()] = value.strip()
    return out


def parse_template_vars(items: Iterable[str]) -> dict[str, Any]:
    """``--template-var`` values (``KEY=VALUE``) as template variables.

    A value reads as a YAML scalar (``true``, ``3``, ``null``); anything else, a date included,
    stays the text given.

    Example:
        >>> parse_template_vars(["enable_thinking=false", "date_string=2024-07-26"])
        {'enable_thinking': False, 'date_string': '2024-07-26'}
    """
    out: dict[str, Any] = {}
    for item in items:
        name, sep, text = item.partition("=")
        name = name.strip()
        if not sep or not name.isidentifier():
            raise ConfigError(
                f"--template-var: expected KEY=VALUE with KEY a variable name, got {item!r}"
            )
        try:
            parsed = yaml.safe_load(text) if text.strip() else text
        except yaml.YAMLError:
            parsed = text
        scalar = parsed is None or isinstance(parsed, bool | int | float | str)
        out[name] = parsed if scalar else text
    return out


@dataclass(frozen=True)
class RecipeArgs:
    """The recipe flags of one command line, and the ``Recipe`` they describe.

    Example:
        >>> args = RecipeArgs(template="chatml", system="Be brief.")
        >>> args.given()
        {'--template': 'chatml', '--system': 'Be brief.'}
        >>> args.refuse_without_tokenizer("leave them out")
        Traceback (most recent call last):
        ...
        chute.errors.ConfigError: --template, --system need --tokenizer (they configure the recipe); pass --tokenizer, or leave them out
    """

    tokenizer: str | None = None
    template: str | None = None
    format: str | None = "auto"
    max_length: int | None = None
    overflow: str = "truncate"
    truncation: str = "right"
    stride: int = 0
    task: str = "sft"
    train_on: str = "assistant"
    media_root: str | None = None
    media_allowed_roots: Sequence[str] | None = None
    image_tokens: str | None = None
    geometry: str | None = None
    timestamps: str | None = None
    video_tokens: str | None = None
    audio_tokens: int | None = None
    video_token: str | None = None
    audio_token: str | None = None
    max_record_bytes: int = 64 << 20
    max_turns: int = 10_000
    columns: str | None = None
    tags: str | None = None
    system: str | None = None
    tokenizer_backend: str = "auto"
    template_vars: Sequence[str] | None = None

    def given(self, *, ignore: Iterable[str] = ()) -> dict[str, Any]:
        """``{flag: value}`` of every flag but ``--tokenizer`` set (not left out, not default)."""
        skip = {"tokenizer", *ignore}
        return {
            flag.decls[0]: getattr(self, flag.name)
            for flag in RECIPE_OPTIONS
            if flag.name not in skip
            and getattr(self, flag.name) not in (None, [], ())
            and getattr(self, flag.name) != flag.default
        }

    def refuse_without_tokenizer(self, instead: str, *, ignore: Iterable[str] = ()) -> None:
        """Raise ``ConfigError`` when recipe flags are set but ``--tokenizer`` is not.

        They configure a recipe, which needs a tokenizer; ``instead`` says what the command
        does without one.
        """
        if self.tokenizer is not None:
            return
        named = self.given(ignore=ignore)
        if named:
            raise ConfigError(
                f"{', '.join(named)} need --tokenizer (they configure the recipe); pass "
                f"--tokenizer, or {instead}"
            )

    def keywords(self) -> dict[str, Any]:
        """The ``Recipe`` keywords these flags set (``--tokenizer`` included, when given).

        Example:
            >>> RecipeArgs(image_tokens="576", template_vars=["enable_thinking=false"]).keywords()[
            ...     "template_vars"]
            {'enable_thinking': False}
        """
        return {
            "tokenizer": self.tokenizer,
            "template": self.template,
            "format": self.format or "auto",
            "max_length": self.max_length,
            "overflow": self.overflow,
            "truncation": self.truncation,
            "stride": self.stride,
            "task": self.task,
            "train_on": self.train_on,
            "media_root": self.media_root,
            "media_allowed_roots": list(self.media_allowed_roots or ()),
            "image_tokens": self.image_tokens or "auto",
            "geometry": self.geometry,
            "timestamps": self.timestamps,
            "video_tokens": self.video_tokens,
            "audio_tokens": self.audio_tokens,
            "video_token": self.video_token,
            "audio_token": self.audio_token,
            "max_record_bytes": self.max_record_bytes,
            "max_turns": self.max_turns,
            "columns": parse_pairs(self.columns, "--columns"),
            "tags": parse_pairs(self.tags, "--tags"),
            "system": self.system,
            "tokenizer_backend": self.tokenizer_backend,
            "template_vars": parse_template_vars(self.template_vars or ()),
        }

    def build(self, **overrides: Any) -> Any:
        """The ``Recipe`` these flags describe (``overrides`` replace recipe keywords)."""
        from chute.recipe import Recipe

        if self.tokenizer is None:
            raise ConfigError("--tokenizer is required to build a recipe")
        return Recipe(**{**self.keywords(), **overrides})


@dataclass(frozen=True)
class OutputArgs:
    """``--json`` and ``--quiet``: what a command prints and whether it shows progress."""

    as_json: bool = False
    quiet: bool = False

    @property
    def progress(self) -> bool:
        """Progress bars only for people: not with ``--json`` or ``--quiet``."""
        return not (self.as_json or self.quiet)


_OUTPUT_FLAGS = (
    _Flag("as_json", bool, False, ("--json",), "Print one JSON object."),
    _Flag("quiet", bool, False, ("--quiet", "-q"), "No progress bar."),
)


def _with_group(
    flags: Iterable[_Flag],
    build: Callable[[dict[str, Any]], Any],
    into: str,
    helps: Mapping[str, str],
    defaults: Mapping[str, Any],
    panel: str,
) -> Callable[[F], F]:
    """Replace the command's ``into`` parameter by ``flags``; call it with ``build(values)``."""
    flags = tuple(flags)

    def decorate(command: F) -> F:
        signature = inspect.signature(command)
        if into not in signature.parameters:
            raise TypeError(f"{command.__name__} needs a keyword parameter {into!r}")
        kept = [p for name, p in signature.parameters.items() if name != into]
        added = [
            inspect.Parameter(
                flag.name,
                inspect.Parameter.KEYWORD_ONLY,
                default=flag.option(helps.get(flag.name), defaults.get(flag.name, ...), panel),
                annotation=flag.annotation,
            )
            for flag in flags
        ]

        @functools.wraps(command)
        def run(*args: Any, **kwargs: Any) -> Any:
            values = {
                flag.name: kwargs.pop(flag.name, defaults.get(flag.name, flag.default))
                for flag in flags
            }
            return command(*args, **kwargs, **{into: build(values)})

        run.__signature__ = signature.replace(parameters=[*kept, *added])  # type: ignore[attr-defined]
        return run  # type: ignore[return-value]

    return decorate


def recipe_options(
    *,
    exclude: Iterable[str] = (),
    help: Mapping[str, str] | None = None,
    defaults: Mapping[str, Any] | None = None,
) -> Callable[[F], F]:
    """Add the recipe flags to a command, passed to it as ``recipe: RecipeArgs``.

    Args:
        exclude: flags the command declares itself or does not take (by parameter name, e.g.
            ``"max_length"``); they keep ``RecipeArgs``' defaults.
        help: per-command help texts, by parameter name.
        defaults: per-command defaults, by parameter name (e.g. ``format=None`` where leaving
            ``--format`` out means something of its own).
    """
    excluded = set(exclude)
    unknown = (excluded | set(help or {}) | set(defaults or {})) - set(_RECIPE_BY_NAME)
    if unknown:
        raise TypeError(f"unknown recipe options: {sorted(unknown)}")
    flags = [flag for flag in RECIPE_OPTIONS if flag.name not in excluded]
    return _with_group(
        flags, lambda values: RecipeArgs(**values), "recipe", help or {}, defaults or {}, "Recipe"
    )


def output_options(command: F) -> F:
    """Add ``--json`` and ``--quiet`` to a command, passed to it as ``output: OutputArgs``.

    With either, every step the command runs reports no progress (``silenced``).
    """

    @functools.wraps(command)
    def run(*args: Any, output: OutputArgs, **kwargs: Any) -> Any:
        with silenced(not output.progress):
            return command(*args, output=output, **kwargs)

    run.__signature__ = inspect.signature(command)  # type: ignore[attr-defined]
    group = _with_group(
        _OUTPUT_FLAGS, lambda values: OutputArgs(**values), "output", {}, {}, "Output"
    )
    return group(run)  # type: ignore[return-value]

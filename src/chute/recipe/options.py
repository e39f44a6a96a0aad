"""``RecipeOptions``: every option of a ``Recipe``, each declared once.

A field here is one option, everywhere: the ``Recipe`` keyword (``Recipe(max_length=4096)``;
its documentation is the field's ``doc``), the key of a config's ``recipe:`` section
(``chute.recipe.config.RecipeConfig`` is this dataclass with ``build``), and, with
``cli=CliFlag(help)``, the flag of every command that takes a recipe
(``chute.cli._options`` builds the flags from these fields). The field's type gives its check
(``kinds_of``), refined by ``choices``, ``minimum`` or a named ``check``; a ``Recipe`` value
given as plain data meets the same check; an option no entry of ``Recipe.fingerprint`` holds is
in it under its name when not at its default. So adding an option is one field here, its use in
the recipe (``recipe.options["min_length"]``) and its test: ``min_length`` was added so.

Example:
    >>> RecipeOptions(tokenizer="models/qwen3", max_length=4096).max_length
    4096
    >>> keyword_problems({"max_lenght": 9})
    ["Recipe() got an unexpected keyword argument 'max_lenght' (did you mean max_length?)"]
"""

from __future__ import annotations

import difflib
import inspect
import textwrap
from collections.abc import Mapping
from dataclasses import MISSING, Field, dataclass, fields
from typing import Any, ClassVar

from chute._internal.config_checks import (
    CliFlag,
    Problems,
    check_fields,
    kinds_of,
    option,
    raise_problems,
)
from chute.formats.spec import FORMAT_NAMES, MAX_TURNS
from chute.media.images import DEFAULT_MAX_PIXELS
from chute.recipe.choices import OVERFLOW, TASKS
from chute.recipe.truncate import TRUNCATION
from chute.sources.record import MAX_RECORD_BYTES
from chute.templates.base import TRAIN_ON
from chute.tokenize import BACKENDS

__all__ = [
    "OPTION_NAMES",
    "RecipeOptions",
    "check_plain",
    "keyword_parameters",
    "keyword_problems",
    "none_as_empty",
    "option_defaults",
    "options_doc",
]


@dataclass
class RecipeOptions:
    """Every option of a ``Recipe`` as plain data; each field is its one declaration.

    Example:
        >>> RecipeOptions(tokenizer="models/qwen3", max_length=0)
        Traceback (most recent call last):
        ...
        chute.errors.ConfigError: invalid preprocessing config:
          max_length: expected a positive integer or null, got 0
    """

    tokenizer: str = option(
        cli=CliFlag(
            "tokenizer.json, tokenizer folder, or tiktoken BPE file.",
            annotation=str | None,
            default=None,
        ),
        doc=(
            "a ``tokenizer.json`` path, a tokenizer folder, a tiktoken BPE file, or a "
            "``tokenizers`` / ``transformers`` tokenizer object (see ``chute.tokenize``)."
        ),
    )
    format: str = option(
        "auto",
        choices=FORMAT_NAMES,
        cli=CliFlag("auto, alpaca, prompt_completion, sharegpt, llava, qwen_vl, messages or text."),
        doc=(
            "``auto`` (each record detected from its keys), a format name (``alpaca``, "
            "``prompt_completion``, ``sharegpt``, ``llava``, ``qwen_vl``, ``messages``, ``text``) "
            "or a ``FormatSpec``."
        ),
    )
    template: str | None = option(
        None,
        cli=CliFlag(
            "Built-in (chatml, qwen3, llama3, llama2, mistral, vicuna, llava-v1, alpaca, raw), a "
            "tokenizer_config.json or .jinja file. Default: the tokenizer's chat template."
        ),
        doc=(
            "a built-in name (``chatml``, ``qwen3``, ``llama3``, ``llama2``, ``mistral``, "
            "``vicuna``, ``llava-v1``, ``alpaca``, ``raw``), a ``tokenizer_config.json`` or "
            "``.jinja`` path, a Jinja string, or ``None``: the tokenizer's own chat template "
            '(``raw`` for ``format="text"``).'
        ),
    )
    max_length: int | None = option(
        None, cli=CliFlag("Longest sample in tokens."), doc="longest sample in tokens, or ``None``."
    )
    min_length: int | None = option(
        None,
        cli=CliFlag(
            "Shortest sample in tokens: a shorter one is rejected (too_short), e.g. to leave out "
            "empty or one-word answers."
        ),
        doc=(
            "shortest sample in tokens: a sample with fewer (after ``max_length`` cut it; a "
            'preference pair: both sequences; with ``overflow="split"``: the whole document) '
            "is rejected as ``too_short``, counted like every reject; ``None`` (default): no limit."
        ),
    )
    overflow: str = option(
        "truncate",
        choices=OVERFLOW,
        cli=CliFlag(
            "Over --max-length: truncate, drop, or split (windows of --max-length; every token "
            "kept)."
        ),
        doc=(
            "what ``max_length`` does to a longer sample: ``truncate`` (cut it as ``truncation`` "
            "says, never cutting an image), ``drop`` (reject it as ``too_long``) or ``split`` (a "
            "long document becomes several samples, windows of at most ``max_length`` tokens: "
            "every token kept; see ``chute.recipe.windows``)."
        ),
    )
    truncation: str = option(
        "right",
        choices=TRUNCATION,
        cli=CliFlag(
            "What --overflow truncate keeps: right (the start), left (the end), turns (drops "
            "whole earliest exchanges, the system prompt kept)."
        ),
        doc=(
            'with ``overflow="truncate"``: ``right`` (keep the start), ``left`` (keep the end: '
            "completion-style data) or ``turns`` (drop whole earliest exchanges, the system "
            "prompt kept, until the conversation fits; see ``chute.recipe.truncate``)."
        ),
    )
    stride: int = option(
        0,
        minimum=0,
        cli=CliFlag(
            "--overflow split: tokens each window repeats from the one before, as context only."
        ),
        doc=(
            'with ``overflow="split"``: tokens each later window repeats from the one before, as '
            "context only (labels -100); ``1`` makes every token a target once."
        ),
    )
    task: str = option(
        "sft",
        choices=TASKS,
        cli=CliFlag("sft, preference (chosen/rejected pairs: DPO, ORPO, reward models) or kto."),
        doc=(
            "``sft`` (one sequence per record: instruction data, pretraining text), "
            "``preference`` (a chosen and a rejected sequence sharing the prompt: DPO, ORPO, "
            "reward models) or ``kto`` (one completion and a desirability ``label``: TRL's "
            "unpaired preference). See ``chute.recipe.preference``."
        ),
    )
    train_on: str = option(
        "assistant",
        choices=TRAIN_ON,
        cli=CliFlag("assistant, last or all."),
        doc="``assistant`` (every assistant turn), ``last`` (the last one) or ``all``.",
    )
    columns: dict[str, str] = option(
        factory=dict,
        cli=CliFlag(
            "Record keys by meaning, e.g. 'prompt=question,response=answer' (repeatable).",
            annotation=list[str] | None,
            default=None,
            parse="pairs",
        ),
        doc='record keys by meaning, e.g. ``{"prompt": "question"}`` (needs ``format``).',
    )
    tags: dict[str, str] = option(
        factory=dict,
        cli=CliFlag(
            "Role names, e.g. 'user_tag=Q,assistant_tag=A' (repeatable).",
            annotation=list[str] | None,
            default=None,
            parse="pairs",
        ),
        doc='role and key names in message lists, e.g. ``{"user_tag": "Q"}`` (needs ``format``).',
    )
    placeholders: dict[str, str | None] = option(
        factory=dict, doc='media placeholder text per kind, e.g. ``{"image": "<IMG_CONTEXT>"}``.'
    )
    system: str | None = option(
        None,
        cli=CliFlag("System prompt for records without one."),
        doc="system prompt for conversations without one.",
    )
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
        doc=(
            'extra variables for Jinja templates, e.g. ``{"enable_thinking": False, '
            '"date_string": "26 Jul 2024"}`` (in the fingerprint). Templates never read the '
            "clock: ``strftime_now`` formats 26 Jul 2024 (see docs/templates.md)."
        ),
    )
    special_tokens: dict[str, str | None] = option(
        factory=dict, doc="overrides of ``bos``/``eos``/``pad``/``unk``/``image`` tokens."
    )
    media_root: str | dict[str, str] | None = option(
        None,
        check="root",
        cli=CliFlag(
            "Folder (or URL: s3://bucket/images) for relative media paths (default: the data "
            "file's).",
            annotation=str | None,
        ),
        doc=(
            "folder that relative media paths are resolved against (default: the folder of the "
            "record's data file), or a mapping from data file path (or glob) to folder. A "
            "reference that escapes its root (``..``, an absolute path elsewhere, a symlink "
            "pointing outside) is rejected as ``unsafe_path``."
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
        doc=(
            "tokens per image: ``auto`` (the default: ``qwen2-vl`` when the image token is "
            "``<|image_pad|>``, else 576), a count (``576``), a preset (``llava-1.5``, "
            "``qwen-vl``, ``qwen2-vl``, ``qwen2.5-vl``, ``qwen3-vl``, ``llava-next``, "
            "``llava-onevision``), a ``DynamicImageTokens`` or ``AnyresImageTokens``, or ``None`` "
            "(images are a ``ConfigError``). The same default everywhere: see docs/media.md, "
            '"Image tokens".'
        ),
    )
    image_token: str | None = option(
        None,
        doc=(
            "the token that marks an image (default: the tokenizer's image token, e.g. "
            "``<|image_pad|>``, else ``<image>``)."
        ),
    )
    image_token_id: int | None = option(
        None,
        minimum=None,  # any integer: LLaVA's own code writes -200
        doc=(
            "the id written for image tokens (default: ``image_token``'s id; LLaVA's original "
            "code uses ``-200``)."
        ),
    )
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
        doc=(
            "tokens per video: a fixed count, a ``chute.media.video.VideoFrames`` (counted from "
            "the container's header), its fields, or the short form ``fps``, "
            "``fps=1,max_frames=64``, ``frames=8`` (the ``image_tokens`` family's preset: Qwen's "
            "frame sampling); required for videos."
        ),
    )
    audio_tokens: int | dict[str, Any] | None = option(
        None,
        check="count_or_rule",
        cli=CliFlag(
            "Tokens per audio clip (a fixed count); needed for data with audio.",
            annotation=int | None,
        ),
        doc=(
            "tokens per audio clip: a fixed count, or a ``chute.media.audio.AudioClips`` (counted "
            "from the header); required for audio."
        ),
    )
    video_token: str | None = option(
        None,
        cli=CliFlag(
            "The token that marks a video (default <|video_pad|> if the vocabulary has it, else "
            "<video>)."
        ),
        doc=(
            "the token that marks a video (default: the tokenizer's ``<|video_pad|>`` when it has "
            "it, else ``<video>``)."
        ),
    )
    audio_token: str | None = option(
        None,
        cli=CliFlag(
            "The token that marks an audio clip (default <|AUDIO|> if the vocabulary has it, else "
            "<audio>)."
        ),
        doc=(
            "the token that marks an audio clip (default: the tokenizer's ``<|AUDIO|>`` when it "
            "has it, else ``<audio>``)."
        ),
    )
    check_images: bool = option(
        True,
        doc=(
            "with a fixed count, reject samples whose image file is missing. Dynamic counts "
            "always read the header."
        ),
    )
    allow_urls: bool = option(
        False,
        doc=(
            "keep URL media references (fixed counts only) instead of rejecting them as "
            "``url_not_allowed``; chute fetches nothing (the media stage needs ``fetch=``)."
        ),
    )
    max_image_pixels: int = option(
        DEFAULT_MAX_PIXELS,
        cli=CliFlag(
            "Images with more pixels are rejected (image_too_large) where the header is read "
            "(dynamic image-token counts)."
        ),
        doc=(
            "reject images with more pixels where the header is read (dynamic counts) as "
            "``image_too_large``."
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
        doc=(
            "further folders media references may resolve into through a symlink or an absolute "
            "path (e.g. where an ``images -> /mnt/coco`` link points)."
        ),
    )
    tiktoken_pattern: str | None = option(
        None, doc="for tiktoken files whose rank count matches no preset."
    )
    tokenizer_backend: str = option(
        "auto",
        choices=BACKENDS,
        cli=CliFlag(
            "Engine of a tokenizer.json: auto (tiktoken where it gives the same ids, checked; "
            "else tokenizers), tiktoken (required) or hf (tokenizers). Same ids either way."
        ),
        doc=(
            "the engine of a ``tokenizer.json``: ``auto`` (the default: tiktoken where the "
            "tokenizer compiles to it exactly and passes the checks, else ``tokenizers``), "
            "``tiktoken`` (required; a ``ConfigError`` says why it cannot be had) or ``hf`` "
            "(``tokenizers``). The ids, labels and cache fingerprint are the same either way (see "
            'docs/recipe.md, "Tokenizer").'
        ),
    )
    max_record_bytes: int | None = option(
        MAX_RECORD_BYTES,
        cli=CliFlag(
            "Records larger than this many bytes are rejected (record_too_large) before they "
            "are read.",
            annotation=int,
        ),
        doc=(
            "a record larger than this (its raw JSON) is rejected as ``record_too_large`` before "
            "it is read or parsed: its size comes from the source's index (default 64 MiB; "
            "``None``: no limit)."
        ),
    )
    max_turns: int | None = option(
        MAX_TURNS,
        cli=CliFlag(
            "Records with more messages (or a message with more content parts) are rejected "
            "(too_many_turns) before they are templated.",
            annotation=int,
        ),
        doc=(
            "the most messages one record may hold (and content parts one message may hold); a "
            "record with more is rejected as ``too_many_turns`` before its messages are built, "
            "templated or tokenized (default 10,000; ``None``: no limit)."
        ),
    )
    geometry: str | dict[str, str] | None = option(
        None,
        check="name_or_fields",
        cli=CliFlag(
            "How the text writes box and point coordinates, rewritten for the image the model "
            "sees (its resize): qwen2-vl (0-1000), qwen2.5-vl (absolute pixels), qwen3-vl "
            "(bbox_2d on a 0-1000 grid), normalized, llava, or none. Boxes that cannot follow are counted (box_invalid, box_outside, "
            "box_ambiguous). Default: the text is left as written.",
            annotation=str | None,
        ),
        doc=(
            "how the text writes box and point coordinates (``qwen2-vl``, ``qwen2.5-vl``, "
            "``qwen3-vl``, ``normalized``, ``llava``, ``none``, or a ``chute.media.geometry.Geometry``): they "
            "are rewritten for the image the model sees (resize, and the Loader's augmentation "
            "crops and flips); ``None`` (default): the text is left as written. See "
            'docs/media.md, "Augmentation and geometry".'
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
        doc=(
            "times in the text of a video sample (``00:12``, ``12.5s``, ``3.5 to 7 seconds``): "
            "``check`` rejects a time past the clip's end (``timestamp_outside``), ``seconds`` "
            "(or ``qwen2.5-vl``, ``qwen3-vl``) also writes each as Qwen reads time (``12.0 "
            "seconds``), or a ``chute.media.timestamps.Timestamps`` (``snap=True``: to the "
            "nearest sampled frame group's time); ``None`` (default): not read. See "
            'docs/media.md, "Times in the text".'
        ),
    )

    KINDS: ClassVar[dict[str, Any]]  # each field's check, read from the fields (kinds_of)
    # Options that change how samples are computed, never what they are (not in config.yaml,
    # not in the fingerprint).
    NOT_SHAPING: ClassVar[tuple[str, ...]] = ("tokenizer_backend",)
    # Options the Recipe's fingerprint holds inside a group's entry, as caches built before
    # issue 29 hold them (the format's spec, the tokenizer's, the media plan's). Every other
    # option is in the fingerprint under its own name when it differs from its default, so a new
    # option cannot leave a stale cache unnoticed (``Recipe.fingerprint``).
    FINGERPRINTED_WITHIN: ClassVar[dict[str, tuple[str, ...]]] = {
        "format": ("columns", "tags", "placeholders"),
        "tokenizer": ("special_tokens", "tiktoken_pattern"),
        "media": (
            "media_root",
            "image_tokens",
            "image_token",
            "image_token_id",
            "video_tokens",
            "audio_tokens",
            "video_token",
            "audio_token",
            "check_images",
            "allow_urls",
            "max_image_pixels",
            "media_allowed_roots",
        ),
    }

    def __post_init__(self) -> None:
        raise_problems(check_fields(self.KINDS, vars(self)))


RecipeOptions.KINDS = kinds_of(RecipeOptions)

OPTION_NAMES: tuple[str, ...] = tuple(f.name for f in fields(RecipeOptions))
_FIELDS: dict[str, Field[Any]] = {f.name: f for f in fields(RecipeOptions)}


def option_defaults() -> dict[str, Any]:
    """Each option's default (a fresh ``{}`` or ``[]`` where the default is empty).

    Example:
        >>> option_defaults()["overflow"], option_defaults()["columns"]
        ('truncate', {})
    """
    out: dict[str, Any] = {}
    for f in _FIELDS.values():
        if f.default is not MISSING:
            out[f.name] = f.default
        elif f.default_factory is not MISSING:
            out[f.name] = f.default_factory()
    return out


def none_as_empty(given: Mapping[str, object]) -> dict[str, object]:
    """``given`` with ``None`` read as empty where an option's default is an empty ``{}``/``[]``.

    The ``Recipe`` always took ``columns=None`` (and so on) for "none"; a config writes ``{}``.

    Example:
        >>> none_as_empty({"columns": None, "system": None})
        {'columns': {}, 'system': None}
    """
    empty = option_defaults()
    return {
        k: (empty[k] if v is None and empty.get(k) in ({}, []) else v) for k, v in given.items()
    }


def keyword_problems(given: Mapping[str, object]) -> list[str]:
    """A line for each keyword that is no option, with the nearest option's name."""
    out = []
    for name in given:
        if name not in _FIELDS:
            close = difflib.get_close_matches(name, OPTION_NAMES, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            out.append(f"Recipe() got an unexpected keyword argument {name!r}{hint}")
    return out


def _plain(value: object) -> bool:
    """JSON-like data, as a config holds it; an object (a ``FormatSpec``) checks itself."""
    if value is None or type(value) in (str, bool, int, float):  # a numpy int is an object
        return True
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return all(_plain(v) for v in value)
    return False


def check_plain(values: Mapping[str, object]) -> Problems:
    """The declared check of each value given as plain data (as a config would hold it).

    A richer value (a ``FormatSpec``, a ``DynamicImageTokens``, a tokenizer object) is checked
    by what takes it.

    Example:
        >>> check_plain({"max_length": 0, "format": "alpaca"})
        [('max_length', 'expected a positive integer or null, got 0')]
    """
    kinds = RecipeOptions.KINDS
    plain = {k: v for k, v in values.items() if k in kinds and _plain(v)}
    return check_fields({k: kinds[k] for k in plain}, plain)


def options_doc(names: tuple[str, ...] = OPTION_NAMES, indent: str = "        ") -> str:
    """The ``Args:`` lines of the options ``names`` (the ``Recipe`` docstring is built from them)."""
    lines = []
    for name in names:
        lines += textwrap.wrap(
            f"{name}: {_FIELDS[name].metadata['doc']}",
            width=96,
            initial_indent=indent,
            subsequent_indent=indent + "    ",
            break_on_hyphens=False,
        )
    return "\n".join(lines)


def keyword_parameters(names: tuple[str, ...] = OPTION_NAMES) -> list[inspect.Parameter]:
    """The options ``names`` as keyword parameters (the ``Recipe`` signature shows them).

    Example:
        >>> keyword_parameters(("max_length",))
        [<Parameter "max_length: 'int | None' = None">]
    """
    defaults = option_defaults()
    return [
        inspect.Parameter(
            name,
            inspect.Parameter.KEYWORD_ONLY,
            default=defaults[name],
            annotation=_FIELDS[name].type,
        )
        for name in names
    ]

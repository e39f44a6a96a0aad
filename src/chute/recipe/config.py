"""``RecipeConfig``: the ``Recipe``'s options as plain data, each declared once.

Each field is one option: its type (the config check is read from it), its default, its
refinements (``choices``, ``minimum``, a named ``check``) and, with ``cli=CliFlag(...)``, its flag
on every command that takes a recipe (``chute.cli._options`` builds the flags from these
fields). A preprocessing config's ``recipe:`` section is this dataclass serialised
(``chute.cache.config``, which re-exports it).

Example:
    >>> RecipeConfig(tokenizer="models/qwen3", max_length=4096, overflow="drop").max_length
    4096
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar

from chute._internal.config_checks import CliFlag, check_fields, kinds_of, option, raise_problems
from chute._internal.remote import absolute
from chute._spelling import Spelling, spelling
from chute.errors import ConfigError
from chute.formats.spec import FORMAT_NAMES
from chute.media.images import DEFAULT_MAX_PIXELS
from chute.recipe.preference import TASKS
from chute.recipe.recipe import MAX_RECORD_BYTES, MAX_TURNS, OVERFLOW
from chute.recipe.truncate import TRUNCATION
from chute.templates.base import TRAIN_ON
from chute.tokenize import BACKENDS

__all__ = ["RECIPE_KEYS", "RecipeConfig"]


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

        with spelling(RECIPE_KEYS):
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

# Errors raised while a config's recipe is built name its keys (``recipe.media_root``), not the
# Recipe's Python keywords (chute.cache.config.CONFIG adds the cache's and the top keys).
RECIPE_KEYS = Spelling(
    "config", {f.name: f"recipe.{f.name}" for f in fields(RecipeConfig)}, assign="=", quote=False
)

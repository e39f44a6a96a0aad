"""Recipe options shared by ``chute inspect`` and ``chute validate``.

The option objects below are used as defaults in both commands' signatures, so the flags, help
texts and parsing are written once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from chute.errors import ConfigError

__all__ = ["build_recipe", "parse_pairs", "refuse_without_tokenizer"]

TOKENIZER = typer.Option(
    None, "--tokenizer", help="tokenizer.json, tokenizer folder, or tiktoken BPE file."
)
TEMPLATE = typer.Option(
    None,
    "--template",
    help="Built-in (chatml, qwen3, llama3, llama2, mistral, vicuna, llava-v1, alpaca, raw), a "
    "tokenizer_config.json or .jinja file. Default: the tokenizer's chat template.",
)
FORMAT = typer.Option(
    "auto",
    "--format",
    help="auto, alpaca, prompt_completion, sharegpt, llava, qwen_vl, messages or text.",
)
MAX_LENGTH = typer.Option(None, "--max-length", help="Longest sample in tokens.")
OVERFLOW = typer.Option("truncate", "--overflow", help="Over max-length: truncate or drop.")
TRAIN_ON = typer.Option("assistant", "--train-on", help="assistant, last or all.")
MEDIA_ROOT = typer.Option(
    None, "--media-root", help="Folder for relative media paths (default: the data file's)."
)
IMAGE_TOKENS = typer.Option(
    None,
    "--image-tokens",
    help="Tokens per image: a count (576) or llava-1.5, qwen-vl, qwen2-vl, qwen2.5-vl. Default "
    "auto: qwen2-vl when the tokenizer's image token is <|image_pad|>, else 576.",
)
COLUMNS = typer.Option(
    None, "--columns", help="Record keys by meaning, e.g. 'prompt=question,response=answer'."
)
TAGS = typer.Option(None, "--tags", help="Role names, e.g. 'user_tag=Q,assistant_tag=A'.")
SYSTEM = typer.Option(None, "--system", help="System prompt for records without one.")


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


def refuse_without_tokenizer(given: dict[str, Any], instead: str) -> None:
    """Raise ``ConfigError`` naming the recipe options in ``given`` that were set.

    They configure a recipe, which needs ``--tokenizer``; ``instead`` says what the command
    does without one.

    Example:
        >>> refuse_without_tokenizer({"--template": None, "--system": None}, "")  # nothing set
    """
    named = [name for name, value in given.items() if value is not None]
    if named:
        raise ConfigError(
            f"{', '.join(named)} need --tokenizer (they configure the recipe); pass "
            f"--tokenizer, or {instead}"
        )


def build_recipe(
    *,
    tokenizer: str,
    template: str | None,
    format: str,
    max_length: int | None,
    overflow: str,
    train_on: str,
    media_root: Path | None,
    image_tokens: str | None,
    columns: str | None,
    tags: str | None,
    system: str | None,
) -> Any:
    """A ``Recipe`` from command-line values."""
    from chute.recipe import Recipe

    return Recipe(
        tokenizer=tokenizer,
        template=template,
        format=format,
        max_length=max_length,
        overflow=overflow,
        train_on=train_on,
        media_root=media_root,
        image_tokens=image_tokens or "auto",
        columns=parse_pairs(columns, "--columns"),
        tags=parse_pairs(tags, "--tags"),
        system=system,
    )

"""Chat templates: built-in ones by name, and Jinja ones from files or strings.

``get_template(value, tokenizer)`` accepts:

* a built-in name: ``chatml``, ``qwen3``, ``llama3``, ``llama2``, ``mistral``, ``vicuna``,
  ``llava-v1``, ``alpaca``, ``raw``;
* a path to a ``tokenizer_config.json`` (its ``chat_template``), a tokenizer folder, or a
  ``.jinja`` / ``.j2`` file;
* a Jinja template string (anything containing ``{%`` or ``{{``);
* ``None``: the tokenizer's own chat template, if it has one;
* a ``Template`` object.

Example:
    >>> get_template("chatml").name
    'chatml'
    >>> get_template("{{ messages[0].content }}").spec()["kind"]
    'jinja'
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chute._internal.lazy import lazy_exports
from chute._internal.spelling import spell
from chute.errors import ConfigError
from chute.templates.base import TRAIN_ON, RenderContext, Rendered, Template, train_flags
from chute.templates.builtin import BUILTIN
from chute.tokenize.base import read_tokenizer_config

if TYPE_CHECKING:
    from chute.templates.jinja import JinjaTemplate

__all__ = [
    "BUILTIN",
    "TRAIN_ON",
    "JinjaTemplate",
    "RenderContext",
    "Rendered",
    "Template",
    "get_template",
    "train_flags",
]


# jinja2 is imported where a Jinja template is made: a recipe on a built-in template
# (``chatml``) never pays its import (about 16 ms of every ``chute preprocess``'s start)
__getattr__, __dir__ = lazy_exports(__name__, {"JinjaTemplate": "chute.templates.jinja"}, globals())


def _jinja(source: str, name: str = "jinja", origin: str | None = None) -> JinjaTemplate:
    from chute.templates.jinja import JinjaTemplate

    return JinjaTemplate(source, name=name, origin=origin)


def get_template(value: Any, tokenizer: Any = None) -> Template:
    """The ``Template`` for ``value`` (see the module docstring).

    Raises:
        ConfigError: unknown name, missing file, a config without ``chat_template``, invalid
            Jinja, or ``None`` with a tokenizer that has no chat template.
    """
    if isinstance(value, Template):
        return value
    if value is None:
        source = getattr(tokenizer, "chat_template", None)
        if not source:
            raise ConfigError(
                f"none given and the tokenizer has no chat_template; pass {spell('template')} "
                f"one of {', '.join(BUILTIN)}, a tokenizer_config.json, or a .jinja file",
                param="template",
            )
        return _jinja(source, name="tokenizer")
    if not isinstance(value, str | os.PathLike):
        raise ConfigError(
            f"expected a name, a path or a Jinja string, got {type(value).__name__}",
            param="template",
        )
    text = os.fspath(value)
    if text in BUILTIN:
        return BUILTIN[text]
    if "{%" in text or "{{" in text:
        return _jinja(text, name="jinja")
    path = Path(text)
    if path.is_dir():
        _, source, _ = read_tokenizer_config(path)
        if not source:
            raise ConfigError(
                f"{path} has no chat_template (tokenizer_config.json)", param="template"
            )
        return _jinja(source, name=path.name, origin=text)
    if path.is_file():
        if path.suffix == ".json":
            _, source, _ = _config_template(path)
            if not source:
                raise ConfigError(
                    f"{path} has no 'chat_template'; pass a built-in name "
                    f"({', '.join(BUILTIN)}) or a .jinja file",
                    param="template",
                )
            return _jinja(source, name=path.parent.name or path.name, origin=text)
        return _jinja(path.read_text(encoding="utf-8"), name=path.stem, origin=text)
    raise ConfigError(
        f"{text!r} is not a built-in template ({', '.join(BUILTIN)}), an existing "
        f"file, or a Jinja string",
        param="template",
    )


def _config_template(path: Path) -> tuple[dict[str, Any], str | None, list[Path]]:
    import orjson

    from chute.tokenize.base import _pick_template

    try:
        config = orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError as exc:
        raise ConfigError(f"{path} is not valid JSON ({exc})", param="template") from None
    return {}, _pick_template(config.get("chat_template"), path), [path]

"""``RecipeConfig``: the ``Recipe``'s options as plain data, a config's ``recipe:`` section.

Its fields are ``chute.recipe.options.RecipeOptions``', where each option is declared once (its
type, check, default, flag and doc); a preprocessing config's ``recipe:`` section is this
dataclass serialised (``chute.cache.config``, which re-exports it).

Example:
    >>> RecipeConfig(tokenizer="models/qwen3", max_length=4096, overflow="drop").max_length
    4096
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, Any

from chute._internal.remote import absolute
from chute._spelling import Spelling, spelling
from chute.errors import ConfigError
from chute.recipe.options import RecipeOptions

if TYPE_CHECKING:
    from chute.recipe.recipe import Recipe

__all__ = ["RECIPE_KEYS", "RecipeConfig"]


@dataclass
class RecipeConfig(RecipeOptions):
    """The ``Recipe``'s options as a config's ``recipe:`` section (see ``chute.Recipe``).

    Its fields are ``RecipeOptions``' (each option declared there once); this adds what a config
    does with them: build the ``Recipe``, make its paths absolute.

    Example:
        >>> RecipeConfig(tokenizer="models/qwen3", max_length=0)
        Traceback (most recent call last):
        ...
        chute.errors.ConfigError: invalid preprocessing config:
          max_length: expected a positive integer or null, got 0
    """

    def build(self) -> Recipe:
        """The ``Recipe`` (loads the tokenizer); its errors name ``recipe.<field>``."""
        from chute.recipe.recipe import Recipe  # loaded when a recipe is built (a light import)

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


# Errors raised while a config's recipe is built name its keys (``recipe.media_root``), not the
# Recipe's Python keywords (chute.cache.config.CONFIG adds the cache's and the top keys).
RECIPE_KEYS = Spelling(
    "config", {f.name: f"recipe.{f.name}" for f in fields(RecipeConfig)}, assign="=", quote=False
)

"""``TokenizerSpec`` and ``TemplateSpec``: the tokenizer's and the template's options as one value.

Like ``LengthPolicy``, each is a frozen group of the ``Recipe``'s options, checked when it is
made (each field by its option's declaration in ``chute.recipe.options``), and given in place
of the loose keywords (never both)::

    Recipe(tokenizer=TokenizerSpec("models/qwen3", backend="hf"),
           template=TemplateSpec("qwen3", system="Be brief.", train_on="last"))
    Recipe(tokenizer="models/qwen3", tokenizer_backend="hf",
           template="qwen3", system="Be brief.", train_on="last")           # the same

In a config they are the flat keys they always were (``recipe.tokenizer_backend``,
``recipe.system``): ``keywords()`` gives them, so YAML spellings and cache fingerprints stay.

Example:
    >>> TemplateSpec("chatml", system="Be brief.").keywords()["system"]
    'Be brief.'
    >>> TokenizerSpec("tok.json", backend="fast")
    Traceback (most recent call last):
    ...
    chute.errors.ConfigError: tokenizer_backend: expected one of auto, hf, tiktoken, got 'fast'
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from chute._spelling import spell
from chute.errors import ConfigError
from chute.recipe.options import check_plain

__all__ = ["TemplateSpec", "TokenizerSpec", "group_of"]

_Spec = TypeVar("_Spec", "TokenizerSpec", "TemplateSpec")


_MAPPINGS = ("special_tokens", "variables")


class _FlatKeywords:
    """A spec that stands for some of the ``Recipe``'s keywords (``KEYWORDS``: keyword -> field)."""

    KEYWORDS: ClassVar[dict[str, str]] = {}

    def keywords(self) -> dict[str, Any]:
        """The ``Recipe`` keywords (the config's keys) this spec stands for."""
        return {key: getattr(self, name) for key, name in self.KEYWORDS.items()}


def _check(spec: TokenizerSpec | TemplateSpec) -> None:
    """Each field by its option's declared check; a mapping copied, so the spec stays as made."""
    for name, value in vars(spec).items():
        if isinstance(value, Mapping) or (value is None and name in _MAPPINGS):
            object.__setattr__(spec, name, dict(value or {}))  # None: none, as Recipe took it
    problems = check_plain(spec.keywords())
    if problems:
        name, message = problems[0]
        raise ConfigError(message, param=name)


@dataclass(frozen=True)
class TokenizerSpec(_FlatKeywords):
    """Which tokenizer a recipe loads, and how.

    Args:
        source: a ``tokenizer.json`` path, a tokenizer folder, a tiktoken BPE file, or a
            ``tokenizers`` / ``transformers`` tokenizer object (``Recipe(tokenizer=...)``).
        special_tokens: overrides of ``bos``/``eos``/``pad``/``unk``/``image`` tokens.
        tiktoken_pattern: for tiktoken files whose rank count matches no preset.
        backend: the engine of a ``tokenizer.json``: ``auto``, ``hf`` or ``tiktoken``
            (``tokenizer_backend``; the same ids either way).

    Example:
        >>> TokenizerSpec("tok.json", special_tokens={"pad": "<|endoftext|>"}).keywords()
        {'tokenizer': 'tok.json', 'special_tokens': {'pad': '<|endoftext|>'}, 'tiktoken_pattern': None, 'tokenizer_backend': 'auto'}
    """

    source: Any
    special_tokens: Mapping[str, str | None] = field(default_factory=dict)
    tiktoken_pattern: str | None = None
    backend: str = "auto"

    # the Recipe keyword (and config key) of each field
    KEYWORDS: ClassVar[dict[str, str]] = {
        "tokenizer": "source",
        "special_tokens": "special_tokens",
        "tiktoken_pattern": "tiktoken_pattern",
        "tokenizer_backend": "backend",
    }

    def __post_init__(self) -> None:
        if self.source is None or self.source == "":
            raise ConfigError("required: a tokenizer.json, folder or file", param="tokenizer")
        _check(self)


@dataclass(frozen=True)
class TemplateSpec(_FlatKeywords):
    """How a conversation is rendered: the chat template, its system prompt, what is trained.

    Args:
        source: a built-in name (``chatml``, ``qwen3``, ``llama3``, ...), a
            ``tokenizer_config.json`` or ``.jinja`` path, a Jinja string, or ``None``: the
            tokenizer's own chat template (``Recipe(template=...)``).
        system: system prompt for conversations without one.
        variables: extra variables for Jinja templates (``template_vars``), e.g.
            ``{"enable_thinking": False}``.
        train_on: ``assistant`` (every assistant turn), ``last`` (the last one) or ``all``.

    Example:
        >>> TemplateSpec("qwen3", variables={"enable_thinking": False}).keywords()["template_vars"]
        {'enable_thinking': False}
    """

    source: Any = None
    system: str | None = None
    variables: Mapping[str, Any] = field(default_factory=dict)
    train_on: str = "assistant"

    KEYWORDS: ClassVar[dict[str, str]] = {
        "template": "source",
        "system": "system",
        "template_vars": "variables",
        "train_on": "train_on",
    }

    def __post_init__(self) -> None:
        _check(self)


def group_of(cls: type[_Spec], value: object, given: Mapping[str, object]) -> _Spec:
    """The group a ``Recipe`` was given: ``value`` if it is one, else the one its keywords make.

    ``value`` is the group's own keyword (``tokenizer``, ``template``): a spec, or the first
    field's value; ``given`` holds the Recipe's other keywords that were passed.

    Raises:
        ConfigError: a spec and a keyword of its group, both given.

    Example:
        >>> group_of(TemplateSpec, "chatml", {"system": "Hi."}).system
        'Hi.'
        >>> group_of(TemplateSpec, TemplateSpec("chatml"), {"system": "Hi."})
        Traceback (most recent call last):
        ...
        chute.errors.ConfigError: template: template options given twice: template=TemplateSpec(...) and system; set them in the TemplateSpec
    """
    keyword, *others = cls.KEYWORDS
    if isinstance(value, cls):
        clash = [k for k in others if k in given]
        if clash:
            raise ConfigError(
                f"{keyword} options given twice: {spell(keyword)}={cls.__name__}(...) and "
                f"{', '.join(spell(k) for k in clash)}; set them in the {cls.__name__}",
                param=keyword,
            )
        return value
    names = cls.KEYWORDS
    # the Recipe's keywords are checked by the spec's own check, field by field, when it is made
    values: dict[str, Any] = {names[k]: given[k] for k in others if k in given}
    values[names[keyword]] = value
    return cls(**values)

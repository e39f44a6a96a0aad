"""``TokenizerSpec``, ``TemplateSpec``, ``MediaSpec``: the options of a recipe's parts as one value.

Like ``LengthPolicy``, each is a frozen group of the ``Recipe``'s options, checked when it is
made (each field by its option's declaration in ``chute.recipe.options``), and given in place
of the loose keywords (never both)::

    Recipe(tokenizer=TokenizerSpec("models/qwen3", backend="hf"),
           template=TemplateSpec("qwen3", system="Be brief.", train_on="last"),
           media=MediaSpec(image_tokens="qwen2-vl", root="data/images"))
    Recipe(tokenizer="models/qwen3", tokenizer_backend="hf",
           template="qwen3", system="Be brief.", train_on="last",
           image_tokens="qwen2-vl", media_root="data/images")                 # the same

In a config they are the flat keys they always were (``recipe.tokenizer_backend``,
``recipe.system``, ``recipe.media_root``): ``keywords()`` gives them, so YAML spellings and
cache fingerprints stay.

Example:
    >>> TemplateSpec("chatml", system="Be brief.").keywords()["system"]
    'Be brief.'
    >>> TokenizerSpec("tok.json", backend="fast")
    Traceback (most recent call last):
    ...
    chute.errors.ConfigError: tokenizer_backend: expected one of auto, hf, tiktoken, got 'fast'
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, ClassVar, TypeVar

from chute._spelling import spell, spell_value
from chute.errors import ConfigError
from chute.media.images import DEFAULT_MAX_PIXELS
from chute.media.refs import MediaPlan
from chute.recipe.options import check_plain
from chute.tokenize import Tokenizer

__all__ = ["MediaSpec", "TemplateSpec", "TokenizerSpec", "group_of"]

_Spec = TypeVar("_Spec", "TokenizerSpec", "TemplateSpec", "MediaSpec")


class _FlatKeywords:
    """A spec that stands for some of the ``Recipe``'s keywords (``KEYWORDS``: keyword -> field).

    ``GROUP`` is the ``Recipe`` keyword that takes the spec: the keyword of its first field
    (``tokenizer``, ``template``), or one of its own (``media``) that takes a spec or nothing.
    """

    GROUP: ClassVar[str] = ""
    # a field whose Recipe keyword has another name (e.g. ``source`` -> ``tokenizer``)
    RENAMED: ClassVar[dict[str, str]] = {}
    # keyword -> field, worked out from the fields when the class is made (declared once)
    KEYWORDS: ClassVar[dict[str, str]] = {}
    # said when the group's keyword gets something else (what the user may have meant)
    OTHER_VALUE_HINT: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        fields_ = [
            name
            for name, annotation in inspect.get_annotations(cls).items()
            if not str(annotation).startswith("ClassVar")
        ]
        cls.KEYWORDS = {cls.RENAMED.get(name, name): name for name in fields_}

    def keywords(self) -> dict[str, Any]:
        """The ``Recipe`` keywords (the config's keys) this spec stands for."""
        return {key: getattr(self, name) for key, name in self.KEYWORDS.items()}


def _check(spec: TokenizerSpec | TemplateSpec | MediaSpec) -> None:
    """Each field by its option's declared check; a container copied, so the spec stays as made.

    ``None`` for a field whose default is empty (``{}``, ``[]``) is read as empty, as the
    ``Recipe`` takes it.
    """
    for f in fields(spec):
        value = getattr(spec, f.name)
        empty = f.default_factory
        if value is None and empty is not MISSING:
            value = empty()
        if isinstance(value, Mapping):
            value = dict(value)
        elif empty is list and isinstance(value, list | tuple):
            value = list(value)
        object.__setattr__(spec, f.name, value)
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

    GROUP: ClassVar[str] = "tokenizer"
    RENAMED: ClassVar[dict[str, str]] = {"source": "tokenizer", "backend": "tokenizer_backend"}

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

    GROUP: ClassVar[str] = "template"
    RENAMED: ClassVar[dict[str, str]] = {"source": "template", "variables": "template_vars"}

    def __post_init__(self) -> None:
        _check(self)


@dataclass(frozen=True, kw_only=True)
class MediaSpec(_FlatKeywords):
    """How a recipe counts, marks and finds media: the options its ``MediaPlan`` is built from.

    ``Recipe(media=MediaSpec(...))`` builds ``recipe.media`` (the ``MediaPlan`` the layers above
    read) from it, as ``tokenizer=TokenizerSpec(...)`` builds ``recipe.tokenizer``. Its fields
    are exactly what the fingerprint's ``media`` entry holds. ``geometry`` and ``timestamps``
    are not in it: they rewrite the text (coordinates, times), are checked against the ``task``
    and have fingerprint entries of their own.

    Args:
        image_tokens: tokens per image: ``auto`` (``qwen2-vl`` when the image token is
            ``<|image_pad|>``, else 576), a count, a preset (``llava-1.5``, ``qwen2-vl``,
            ``qwen2.5-vl``, ``qwen3-vl``, ...), a ``DynamicImageTokens`` or
            ``AnyresImageTokens``, or ``None`` (images are a ``ConfigError``).
        image_token: the token that marks an image (default: the tokenizer's, else ``<image>``).
        image_token_id: the id written for image tokens (default: ``image_token``'s id).
        video_tokens: tokens per video: a count, a ``VideoFrames``, its fields, or the short
            form (``fps``, ``fps=1,max_frames=64``, ``frames=8``); required for videos.
        audio_tokens: tokens per audio clip: a count or an ``AudioClips``; required for audio.
        video_token: the token that marks a video (default ``<|video_pad|>`` or ``<video>``).
        audio_token: the token that marks an audio clip (default ``<|AUDIO|>`` or ``<audio>``).
        root: the folder relative media paths resolve against (``media_root``; default: the
            record's data file's folder), or a mapping from data file (or glob) to folder.
        check_images: with a fixed count, reject a sample whose image file is missing.
        allow_urls: keep URL references (fixed counts only; chute fetches nothing).
        max_image_pixels: reject larger images where the header is read (dynamic counts).
        allowed_roots: further folders references may resolve into through a symlink or an
            absolute path (``media_allowed_roots``).

    Example:
        >>> spec = MediaSpec(image_tokens="qwen2-vl", root="data/images")
        >>> {k: v for k, v in spec.keywords().items() if k in ("image_tokens", "media_root")}
        {'image_tokens': 'qwen2-vl', 'media_root': 'data/images'}
        >>> MediaSpec(max_image_pixels=0)
        Traceback (most recent call last):
        ...
        chute.errors.ConfigError: max_image_pixels: expected a positive integer, got 0
    """

    image_tokens: Any = "auto"
    image_token: str | None = None
    image_token_id: int | None = None
    video_tokens: Any = None
    audio_tokens: Any = None
    video_token: str | None = None
    audio_token: str | None = None
    root: Any = None
    check_images: bool = True
    allow_urls: bool = False
    max_image_pixels: int = DEFAULT_MAX_PIXELS
    allowed_roots: list[str] = field(default_factory=list)

    GROUP: ClassVar[str] = "media"
    RENAMED: ClassVar[dict[str, str]] = {
        "root": "media_root",
        "allowed_roots": "media_allowed_roots",
    }
    OTHER_VALUE_HINT: ClassVar[str] = (
        " (the stage that decodes media in the workers is the Loader's: Loader(media=...))"
    )

    def __post_init__(self) -> None:
        _check(self)

    def plan(self, tokenizer: Tokenizer) -> MediaPlan:
        """The ``MediaPlan`` of these options over ``tokenizer`` (a recipe's ``media``).

        Example:
            >>> MediaSpec(image_tokens=64).plan(tokenizer).tokens["image"]  # doctest: +SKIP
            '<image>'
        """
        # MediaPlan's parameters are the fields' names, but for the root
        options = {
            ("media_root" if f == "root" else f): getattr(self, f) for f in self.KEYWORDS.values()
        }
        return MediaPlan(tokenizer, **options)


def group_of(cls: type[_Spec], value: object, given: Mapping[str, object]) -> _Spec:
    """The group a ``Recipe`` was given: ``value`` if it is one, else the one its keywords make.

    ``value`` is the group's own keyword (``tokenizer``, ``template``, ``media``): a spec, or
    else the first field's value (``tokenizer``, ``template``) or ``None`` (``media``, which is
    no option of its own); ``given`` holds the Recipe's other keywords that were passed.

    Raises:
        ConfigError: a spec and a keyword of its group, both given; a ``media`` that is no
            ``MediaSpec``.

    Example:
        >>> group_of(TemplateSpec, "chatml", {"system": "Hi."}).system
        'Hi.'
        >>> group_of(MediaSpec, None, {"media_root": "imgs"}).root
        'imgs'
        >>> group_of(TemplateSpec, TemplateSpec("chatml"), {"system": "Hi."})
        Traceback (most recent call last):
        ...
        chute.errors.ConfigError: template: template options given twice: template=TemplateSpec(...) and system; set them in the TemplateSpec
    """
    keyword, names = cls.GROUP, cls.KEYWORDS
    others = [k for k in names if k != keyword]
    if isinstance(value, cls):
        clash = [k for k in others if k in given]
        if clash:
            raise ConfigError(
                f"{keyword} options given twice: {spell(keyword)}={cls.__name__}(...) and "
                f"{', '.join(spell(k) for k in clash)}; set them in the {cls.__name__}",
                param=keyword,
            )
        return value
    # the Recipe's keywords are checked by the spec's own check, field by field, when it is made
    values: dict[str, Any] = {names[k]: given[k] for k in others if k in given}
    if keyword in names:
        values[names[keyword]] = value
    elif value is not None:
        raise ConfigError(
            f"expected a chute.recipe.{cls.__name__} or {spell_value(None)}, got "
            f"{type(value).__name__}{cls.OTHER_VALUE_HINT}",
            param=keyword,
        )
    return cls(**values)

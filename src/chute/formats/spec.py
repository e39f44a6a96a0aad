"""Which format a dataset has, and how its keys and role names map onto chute's words.

``FormatSpec`` names a format and optionally remaps columns and role tags the way LLaMA-Factory's
``dataset_info.json`` does: ``columns`` maps a semantic name (``prompt``, ``response``,
``messages``, ``images``, ...) to the record's key; ``tags`` maps role and key names inside a
message list (``role_tag``, ``content_tag``, ``user_tag``, ...).

Example:
    >>> spec = FormatSpec("alpaca", columns={"prompt": "question", "response": "answer"})
    >>> spec.resolve().columns["prompt"]
    ('question',)
    >>> FormatSpec("alpaca", columns={"answer": "a"})
    Traceback (most recent call last):
    ...
    chute.errors.ConfigError: columns: unknown key 'answer'; known keys: audios, chosen, history, images, kto_tag, messages, prompt, query, rejected, response, system, text, tools, videos
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from chute._internal.spelling import spell, spell_set
from chute.errors import ConfigError, SampleError

__all__ = [
    "COLUMN_KEYS",
    "FORMAT_NAMES",
    "MAX_TURNS",
    "TAG_KEYS",
    "FormatSpec",
    "ResolvedSpec",
    "check_turns",
    "lookup",
]

# The most messages one record may hold (and content parts one message may hold) before it is
# rejected as too_many_turns: far beyond any real conversation (long agent traces hold
# hundreds), while a record of a million tiny turns costs its parse, not a template's work.
MAX_TURNS = 10_000

FORMAT_NAMES = (
    "auto",
    "alpaca",
    "prompt_completion",
    "sharegpt",
    "llava",
    "qwen_vl",
    "messages",
    "text",
)

COLUMN_KEYS = (
    "audios",
    "chosen",
    "history",
    "images",
    "kto_tag",
    "messages",
    "prompt",
    "query",
    "rejected",
    "response",
    "system",
    "text",
    "tools",
    "videos",
)

TAG_KEYS = (
    "role_tag",
    "content_tag",
    "user_tag",
    "assistant_tag",
    "observation_tag",
    "function_tag",
    "system_tag",
)

# Default record keys per format; a tuple lists keys tried in order (the first present wins).
_MEDIA = {
    "images": ("images", "image"),
    "videos": ("videos", "video"),
    "audios": ("audios", "audio"),
}
_DEFAULT_COLUMNS: dict[str, dict[str, tuple[str, ...]]] = {
    "alpaca": {
        "prompt": ("instruction",),
        "query": ("input",),
        "response": ("output",),
        "system": ("system",),
        "history": ("history",),
        "tools": ("tools",),
        **_MEDIA,
    },
    "prompt_completion": {
        "prompt": ("prompt",),
        "query": (),
        "response": ("completion",),
        "system": ("system",),
        "history": (),
        "tools": (),
        **_MEDIA,
    },
    "sharegpt": {
        "messages": ("conversations",),
        "system": ("system",),
        "tools": ("tools",),
        **_MEDIA,
    },
    "messages": {"messages": ("messages",), "system": ("system",), "tools": ("tools",), **_MEDIA},
    "text": {"text": ("text",), **_MEDIA},
}
_DEFAULT_COLUMNS["llava"] = _DEFAULT_COLUMNS["sharegpt"]
_DEFAULT_COLUMNS["qwen_vl"] = _DEFAULT_COLUMNS["sharegpt"]

# Role names every chat format understands, whatever the tags say.
_ROLE_ALIASES = {
    "system": "system",
    "user": "user",
    "human": "user",
    "assistant": "assistant",
    "gpt": "assistant",
    "chatgpt": "assistant",
    "bard": "assistant",
    "bing": "assistant",
    "model": "assistant",
    "tool": "tool",
    "observation": "tool",
    "function": "tool",
    "ipython": "tool",
    "function_call": "function_call",
}

_DEFAULT_PLACEHOLDERS = {"image": "<image>", "video": "<video>", "audio": "<audio>"}


@dataclass(frozen=True)
class FormatSpec:
    """A format name plus optional column, tag and placeholder overrides.

    Args:
        name: one of ``FORMAT_NAMES``; ``auto`` detects the format of each record from its keys.
        columns: semantic name -> record key, e.g. ``{"prompt": "question"}``. A key may be a
            dotted path into nested objects and lists: ``"instances.0.output"``.
        tags: names inside message lists, e.g. ``{"role_tag": "speaker", "user_tag": "Q"}``.
        placeholders: the text that marks a media position, per kind (defaults ``<image>``,
            ``<video>``, ``<audio>``); ``None`` turns a kind's placeholder off.

    Example:
        >>> FormatSpec("sharegpt", tags={"user_tag": "Q", "assistant_tag": "A"}).resolve().roles["Q"]
        'user'
    """

    name: str = "auto"
    columns: Mapping[str, str] = field(default_factory=dict)
    tags: Mapping[str, str] = field(default_factory=dict)
    placeholders: Mapping[str, str | None] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.name not in FORMAT_NAMES:
            raise ConfigError(
                f"unknown format {self.name!r}; choose one of {', '.join(FORMAT_NAMES)}",
                param="format",
            )
        for what, given, known in (
            ("columns", self.columns, COLUMN_KEYS),
            ("tags", self.tags, TAG_KEYS),
            ("placeholders", self.placeholders, tuple(_DEFAULT_PLACEHOLDERS)),
        ):
            if not isinstance(given, Mapping):
                raise ConfigError(
                    f"expected a mapping, got {type(given).__name__} {given!r}", param=what
                )
            for name, value in given.items():
                if name not in known:
                    raise ConfigError(
                        f"unknown key {name!r}; known keys: {', '.join(sorted(known))}",
                        param=what,
                    )
                if not (isinstance(value, str) and value) and not (
                    what == "placeholders" and value is None
                ):
                    raise ConfigError(
                        f"{spell(what)}[{name!r}]: expected a non-empty string, got {value!r}"
                    )
        if self.name == "auto" and (self.columns or self.tags):
            raise ConfigError(
                f"{spell('columns')}/{spell('tags')} need an explicit format: pass "
                f"{spell_set('format', 'alpaca')}, sharegpt, messages or text together with them"
            )
        # Freeze into plain dicts so the spec pickles and compares by value.
        object.__setattr__(self, "columns", dict(self.columns))
        object.__setattr__(self, "tags", dict(self.tags))
        object.__setattr__(self, "placeholders", dict(self.placeholders))

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "columns": dict(sorted(self.columns.items())),
            "tags": dict(sorted(self.tags.items())),
            "placeholders": dict(sorted(self.placeholders.items())),
        }

    def resolve(self, name: str | None = None) -> ResolvedSpec:
        """The lookup tables adapters use (for ``auto``, pass the detected format ``name``)."""
        name = name or self.name
        columns = {k: tuple(v) for k, v in _DEFAULT_COLUMNS.get(name, {}).items()}
        for key, value in self.columns.items():
            columns[key] = (value,)
        roles = dict(_ROLE_ALIASES)
        for tag, canonical in (
            ("user_tag", "user"),
            ("assistant_tag", "assistant"),
            ("observation_tag", "tool"),
            ("function_tag", "function_call"),
            ("system_tag", "system"),
        ):
            if tag in self.tags:
                roles[self.tags[tag]] = canonical
        if name == "messages":
            role_keys: tuple[str, ...] = ("role", "from")
            content_keys: tuple[str, ...] = ("content", "value")
        else:
            role_keys, content_keys = ("from", "role"), ("value", "content")
        if "role_tag" in self.tags:
            role_keys = (self.tags["role_tag"],)
        if "content_tag" in self.tags:
            content_keys = (self.tags["content_tag"],)
        placeholders = {**_DEFAULT_PLACEHOLDERS, **self.placeholders}
        return ResolvedSpec(
            name=name,
            columns=columns,
            roles=roles,
            role_keys=role_keys,
            content_keys=content_keys,
            placeholders={k: v for k, v in placeholders.items() if v},
            inline_tags=name == "qwen_vl",
        )

    @classmethod
    def from_dataset_info(cls, path: str | os.PathLike[str], dataset: str) -> FormatSpec:
        """The spec of one entry of a LLaMA-Factory ``dataset_info.json``.

        Example:
            >>> import json, tempfile, pathlib
            >>> p = pathlib.Path(tempfile.mkdtemp()) / "dataset_info.json"
            >>> _ = p.write_text(json.dumps({"d": {"file_name": "d.json",
            ...     "formatting": "sharegpt", "columns": {"messages": "conversations"}}}))
            >>> FormatSpec.from_dataset_info(p, "d").name
            'sharegpt'
        """
        try:
            with open(path, "rb") as f:
                info = orjson.loads(f.read())
        except (OSError, orjson.JSONDecodeError) as exc:
            raise ConfigError(f"dataset_info {path}: cannot read it as JSON ({exc})") from None
        if not isinstance(info, dict):
            raise ConfigError(
                f"dataset_info {path}: expected an object of entries by name, got "
                f"{type(info).__name__}"
            )
        if dataset not in info:
            raise ConfigError(
                f"dataset_info {path}: no entry {dataset!r}; entries: {', '.join(sorted(info))}"
            )
        entry = info[dataset]
        parts = [("", entry)]
        if isinstance(entry, dict):
            parts += [(key, entry[key]) for key in ("columns", "tags") if key in entry]
        for key, value in parts:  # the entry, its columns and its tags are objects
            if not isinstance(value, dict):
                what = f"entry {dataset!r}" + (f" {key}" if key else "")
                raise ConfigError(
                    f"dataset_info {path}: {what} must be an object, got "
                    f"{type(value).__name__} {value!r:.60}"
                )
        formatting = entry.get("formatting", "alpaca")
        columns = dict(entry.get("columns", {}))
        if formatting == "sharegpt":
            # LLaMA-Factory's "sharegpt" with role/content tags is the OpenAI messages shape.
            name = "sharegpt"
        elif formatting == "alpaca":
            name = "alpaca"
            # A pretraining entry maps only `prompt` to the text column (e.g. c4_demo).
            if set(columns) == {"prompt"}:
                name, columns = "text", {"text": columns["prompt"]}
        else:
            raise ConfigError(
                f"dataset_info {path}: entry {dataset!r} has formatting {formatting!r}; chute "
                f"reads 'alpaca' and 'sharegpt'"
            )
        # ranking / KTO columns (chosen, rejected, kto_tag) are kept: Recipe(task="preference")
        # and task="kto" read them, SFT recipes ignore them
        for key in set(columns) - set(COLUMN_KEYS):
            del columns[key]
        return cls(name, columns=columns, tags=dict(entry.get("tags", {})))


@dataclass(frozen=True)
class ResolvedSpec:
    """Lookup tables for one concrete format (what adapters read per record)."""

    name: str
    columns: dict[str, tuple[str, ...]]
    roles: dict[str, str]
    role_keys: tuple[str, ...]
    content_keys: tuple[str, ...]
    placeholders: dict[str, str]
    inline_tags: bool
    max_turns: int | None = MAX_TURNS


def check_turns(count: int, limit: int | None, what: str, field: str | None) -> None:
    """Reject a record with more than ``limit`` turns (or parts) as ``too_many_turns``.

    Called by the adapters before they build a message, so such a record costs its parse only.

    Example:
        >>> check_turns(12_000, 10_000, "messages", "conversations")
        Traceback (most recent call last):
        ...
        chute.errors.SampleError: too_many_turns: 12,000 messages, more than max_turns=10000; raise max_turns for such records (each turn costs memory and time before max_length can bound it) (field 'conversations')
    """
    if limit is not None and count > limit:
        raise SampleError(
            "too_many_turns",
            f"{count:,} {what}, more than {spell_set('max_turns', limit)}; raise "
            f"{spell('max_turns')} for such records (each turn costs memory and time before "
            f"{spell('max_length')} can bound it)",
            field=field,
        )


_MISSING = object()


def lookup(data: dict[str, Any], keys: tuple[str, ...]) -> tuple[Any, str | None]:
    """``(value, key)`` of the first of ``keys`` present in ``data``; ``(None, None)`` if none.

    A key with dots that is not itself present walks nested objects and lists:
    ``"instances.0.output"``.

    Example:
        >>> lookup({"a": {"b": [1, 2]}}, ("x", "a.b.1"))
        (2, 'a.b.1')
    """
    for key in keys:
        value = data.get(key, _MISSING)
        if value is not _MISSING:
            return value, key
        if "." in key:
            value = _walk(data, key)
            if value is not _MISSING:
                return value, key
    return None, None


def _walk(data: Any, dotted: str) -> Any:
    node = data
    for step in dotted.split("."):
        if isinstance(node, dict):
            node = node.get(step, _MISSING)
        elif isinstance(node, list) and step.lstrip("-").isdigit():
            i = int(step)
            node = node[i] if -len(node) <= i < len(node) else _MISSING
        else:
            return _MISSING
        if node is _MISSING:
            return _MISSING
    return node

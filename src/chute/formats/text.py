"""Plain text for pretraining: ``{"text": ...}`` (the key remappable with ``columns``).

The result is a ``text`` conversation of one message; every template renders it as
``bos + text + eos`` and every token is trained. Images (``images`` / ``image``) go where
``<image>`` placeholders are, or at the start of the text (LLaVA-pretraining captions).

Example:
    >>> from chute.formats.spec import FormatSpec
    >>> conv = convert_text({"text": "Once upon a time"}, FormatSpec("text").resolve())
    >>> conv.kind, conv.messages[0].content
    ('text', 'Once upon a time')
"""

from __future__ import annotations

from typing import Any

from chute._internal.spelling import spell
from chute.errors import SampleError
from chute.formats.chat import _json_type
from chute.formats.media import bind_media, media_list
from chute.formats.spec import ResolvedSpec, lookup
from chute.sample.conversation import Conversation, Message

__all__ = ["convert_text"]


def convert_text(data: Any, spec: ResolvedSpec) -> Conversation:
    """A pretraining document as a one-message ``text`` conversation."""
    if not isinstance(data, dict):
        raise SampleError("wrong_type", f"expected a JSON object, got {_json_type(data)}")
    # a prompt column is LLaMA-Factory's name for a pretraining text: given, it is the text,
    # unless a text column is given too (the default text column is always there)
    text_keys, prompt_keys = spec.columns.get("text"), spec.columns.get("prompt")
    keys = prompt_keys if prompt_keys and text_keys in (None, ("text",)) else text_keys
    keys = keys or ("text",)
    text, key = lookup(data, keys)
    if key is not None and text is None:
        raise SampleError(
            "missing_field",
            f"a text record needs {key!r}, which is null here; give it a string or drop the record",
            field=key,
        )
    if key is None or text is None:
        raise SampleError(
            "missing_field",
            f"a text record needs {' or '.join(repr(k) for k in keys)} (keys present: "
            f"{', '.join(sorted(data)) or 'none'}); remap it with {spell('columns')} (text=...)",
            field=keys[0],
        )
    if type(text) is not str:
        raise SampleError("wrong_type", f"expected a string, got {_json_type(text)}", field=key)
    message = Message("assistant", text)
    lists: dict[str, list[str]] = {}
    fields: dict[str, str] = {}
    for kind, column in (("image", "images"), ("video", "videos"), ("audio", "audios")):
        value, mkey = lookup(data, spec.columns.get(column, ()))
        if mkey is not None:
            lists[kind] = media_list(value, mkey)
            fields[kind] = mkey
    if lists or any(p in text for p in spec.placeholders.values()):
        bind_media([message], lists, spec.placeholders, fields)
    if not text and not lists:
        raise SampleError("empty_conversation", "the text is empty", field=key)
    return Conversation([message], kind="text")

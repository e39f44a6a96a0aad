r"""Alpaca-style records: one instruction, an optional input, one output.

``{"instruction", "input"?, "output", "system"?, "history"?}``; ``history`` is a list of
``[user, assistant]`` pairs that come before the instruction. The user turn is
``instruction + "\n" + input`` when the input is non-empty (the input alone when the
instruction is empty: LLaMA-Factory's rule). The same
adapter reads ``prompt_completion`` records (``{"prompt", "completion"}``) and any keys remapped
with ``columns``. Images (``images`` or ``image``) go where ``<image>`` placeholders are, or at
the start of the instruction.

Example:
    >>> from chute.formats.spec import FormatSpec
    >>> conv = convert_alpaca({"instruction": "Add", "input": "1+1", "output": "2"},
    ...                       FormatSpec("alpaca").resolve())
    >>> [(m.role, m.content) for m in conv]
    [('user', 'Add\n1+1'), ('assistant', '2')]
"""

from __future__ import annotations

from typing import Any, NamedTuple

from chute._internal.spelling import spell
from chute.errors import SampleError
from chute.formats.chat import _json_type, parse_tools
from chute.formats.media import bind_media, media_list
from chute.formats.spec import ResolvedSpec, check_turns, lookup
from chute.sample.conversation import Conversation, Message, check_role_order

__all__ = ["convert_alpaca"]


def convert_alpaca(data: Any, spec: ResolvedSpec) -> Conversation:
    """An alpaca (or prompt/completion) record as a ``Conversation``."""
    if data.__class__ is dict:
        plain = _plain_record(data, spec)
        if plain is not None:
            return plain
    return _read_all(data, spec)


def _read_all(data: Any, spec: ResolvedSpec) -> Conversation:
    """The full reading: every column, every check (``_plain_record`` is its short way)."""
    if not isinstance(data, dict):
        raise SampleError("wrong_type", f"expected a JSON object, got {_json_type(data)}")
    columns = spec.columns
    prompt = _text(data, columns["prompt"], spec.name, required=True)
    query = _text(data, columns.get("query", ()), spec.name, required=False)
    response = _text(data, columns["response"], spec.name, required=True)
    system = _text(data, columns.get("system", ()), spec.name, required=False)

    messages: list[Message] = []
    if system:
        messages.append(Message("system", system))
    history, history_key = lookup(data, columns.get("history", ()))
    if history_key is not None and history is not None:
        if not isinstance(history, list):
            raise SampleError(
                "wrong_type",
                f"expected a list of [user, assistant] pairs, got {_json_type(history)}",
                field=history_key,
            )
        check_turns(
            2 * len(history) + 2, spec.max_turns, "messages (with the history)", history_key
        )
        for i, pair in enumerate(history):
            if not (
                isinstance(pair, list | tuple)
                and len(pair) == 2
                and all(isinstance(t, str) for t in pair)
            ):
                raise SampleError(
                    "wrong_type",
                    f"history entry {i} must be a [user, assistant] pair of strings",
                    field=f"{history_key}[{i}]",
                )
            messages.append(Message("user", pair[0]))
            messages.append(Message("assistant", pair[1]))
    messages.append(Message("user", _joined(prompt, query)))
    messages.append(Message("assistant", response))

    tools_value, tools_key = lookup(data, columns.get("tools", ()))
    tools = parse_tools(tools_value, tools_key) if tools_key is not None else None

    lists: dict[str, list[str]] = {}
    fields: dict[str, str] = {}
    for kind, column in (("image", "images"), ("video", "videos"), ("audio", "audios")):
        value, key = lookup(data, columns.get(column, ()))
        if key is not None:
            lists[kind] = media_list(value, key)
            fields[kind] = key
    bind_media(messages, lists, spec.placeholders, fields)
    check_role_order(messages, lambda i: columns["prompt"][0])
    return Conversation(messages, tools)


class _Keys(NamedTuple):
    """Where a spec's plain record keeps its texts, and the keys that make a record not plain."""

    prompt: str
    query: str | None
    response: str
    system: str | None
    others: frozenset[str]  # history, tools, media: present, the full reading is needed
    marks: tuple[str, ...]  # media placeholders: in a text, likewise


# id(spec) -> (spec, its keys or None): the spec is held so that its id is not reused
_PLAIN_KEYS: dict[int, tuple[ResolvedSpec, _Keys | None]] = {}


def _plain_record(data: dict[str, Any], spec: ResolvedSpec) -> Conversation | None:
    """The conversation of a record that holds only texts, read the short way; else ``None``.

    Most records are ``{"instruction", "input", "output"}`` strings: this reads them with a
    few ``dict.get`` calls and builds what the full reading would (every role order it makes
    is valid, there is nothing to bind), in a fifth of its time. Anything else (a missing or
    non-string text, history, tools, media, a placeholder in a text) returns ``None`` and takes
    the full reading, which also says what is wrong.
    """
    held = _PLAIN_KEYS.get(id(spec))
    if held is None or held[0] is not spec:
        if len(_PLAIN_KEYS) > 64:
            _PLAIN_KEYS.clear()
        held = _PLAIN_KEYS[id(spec)] = (spec, _keys(spec))
    keys = held[1]
    if keys is None:
        return None
    others = keys.others
    for key in data:
        if key in others:
            return None
    prompt, response = data.get(keys.prompt), data.get(keys.response)
    if prompt.__class__ is not str or response.__class__ is not str:
        return None
    query = data.get(keys.query) if keys.query is not None else None
    system = data.get(keys.system) if keys.system is not None else None
    if (query is not None and query.__class__ is not str) or (
        system is not None and system.__class__ is not str
    ):
        return None
    user = _joined(prompt, query)
    for mark in keys.marks:
        if mark in user or mark in response or (system and mark in system):
            return None
    messages = [Message("system", system)] if system else []
    messages.append(Message("user", user))
    messages.append(Message("assistant", response))
    return Conversation(messages)


def _keys(spec: ResolvedSpec) -> _Keys | None:
    """The spec's plain keys, or ``None`` when a text column is dotted or has several keys."""
    columns = spec.columns

    def single(column: str, *, required: bool) -> str | None:
        keys = columns.get(column, ())
        if len(keys) > 1 or any("." in k for k in keys) or (required and not keys):
            raise LookupError(column)
        return keys[0] if keys else None

    try:
        prompt = single("prompt", required=True)
        response = single("response", required=True)
        query, system = single("query", required=False), single("system", required=False)
    except LookupError:
        return None
    assert prompt is not None and response is not None
    texts = {"prompt", "query", "response", "system"}
    # a dotted key is looked up as itself, then from its first step: either present, read it all
    others = frozenset(
        step
        for column, ks in columns.items()
        if column not in texts
        for k in ks
        for step in {k, k.split(".", 1)[0]}
    )
    return _Keys(prompt, query, response, system, others, tuple(spec.placeholders.values()))


def _text(data: dict[str, Any], keys: tuple[str, ...], fmt: str, *, required: bool) -> str:
    value, key = lookup(data, keys)
    if key is not None and value is None and required:
        raise SampleError(
            "missing_field",
            f"an {fmt} record needs {key!r}, which is null here; give it a string (an empty "
            f"one if it has no text) or drop the record",
            field=key,
        )
    if key is None or value is None:
        if required:
            raise SampleError(
                "missing_field",
                f"an {fmt} record needs {' or '.join(repr(k) for k in keys)} (keys present: "
                f"{', '.join(sorted(data)) or 'none'}); remap keys with {spell('columns')}",
                field=keys[0] if keys else None,
            )
        return ""
    if type(value) is not str:
        raise SampleError("wrong_type", f"expected a string, got {_json_type(value)}", field=key)
    return value


def _joined(prompt: str, query: str | None) -> str:
    r"""The user turn: instruction and input, each only when non-empty (LLaMA-Factory's rule).

    >>> _joined("Add", "1+1"), _joined("", "What is 2+2?"), _joined("Hi", "")
    ('Add\n1+1', 'What is 2+2?', 'Hi')
    """
    if not query:
        return prompt
    return f"{prompt}\n{query}" if prompt else query

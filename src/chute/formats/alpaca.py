r"""Alpaca-style records: one instruction, an optional input, one output.

``{"instruction", "input"?, "output", "system"?, "history"?}``; ``history`` is a list of
``[user, assistant]`` pairs that come before the instruction. The user turn is
``instruction + "\n" + input`` when the input is non-empty (LLaMA-Factory's rule). The same
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

from typing import Any

from chute._internal.spelling import spell
from chute.errors import SampleError
from chute.formats.chat import _json_type, parse_tools
from chute.formats.media import bind_media, media_list
from chute.formats.spec import ResolvedSpec, lookup
from chute.sample.conversation import Conversation, Message, check_role_order

__all__ = ["convert_alpaca"]


def convert_alpaca(data: Any, spec: ResolvedSpec) -> Conversation:
    """An alpaca (or prompt/completion) record as a ``Conversation``."""
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
    messages.append(Message("user", f"{prompt}\n{query}" if query else prompt))
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

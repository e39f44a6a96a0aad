"""Message-list formats: ShareGPT, LLaVA, Qwen-VL and OpenAI-style messages.

All four are a list of turns with a role and a content; they differ in key names (``from`` /
``value`` vs ``role`` / ``content``), in role names (``human`` / ``gpt`` vs ``user`` /
``assistant``), in how media are referenced, and in extras:

* sharegpt: ``{"conversations": [{"from": "human", "value": ...}, ...], "system"?, "tools"?}``
  with roles human/gpt/system/function_call/observation (``function_call`` is an assistant tool
  call whose value is JSON ``{"name", "arguments"}``; ``observation`` is a tool result);
* llava: sharegpt plus ``image`` (a path or a list) and ``<image>`` placeholders anywhere;
* qwen_vl: sharegpt whose texts carry ``Picture 1: <img>path</img>`` tags;
* messages: ``{"messages": [{"role", "content"}]}`` or a bare list per line; content is a string
  or a list of typed parts (``text``, ``image``, ``image_url``, ``video``, ``audio``; OpenAI's
  ``{"text": ...}`` or LLaMA-Factory v1's ``{"value": ...}``), with optional ``tool_calls``,
  ``reasoning_content`` and per-message ``loss`` / ``loss_weight`` / ``weight``.

Example:
    >>> from chute.formats.spec import FormatSpec
    >>> conv = convert_chat({"conversations": [{"from": "human", "value": "hi"},
    ...     {"from": "gpt", "value": "hello"}]}, FormatSpec("sharegpt").resolve())
    >>> [(m.role, m.content) for m in conv]
    [('user', 'hi'), ('assistant', 'hello')]
"""

from __future__ import annotations

from typing import Any

import orjson

from chute._internal.spelling import spell
from chute.errors import SampleError
from chute.formats.media import bind_media, media_list, split_inline_tags
from chute.formats.spec import ResolvedSpec, check_turns, lookup
from chute.sample.conversation import Conversation, Message, Part, check_role_order

__all__ = ["convert_chat", "parse_tools"]

_KIND_OF_TYPE = {
    "text": "text",
    "input_text": "text",
    "output_text": "text",
    "image": "image",
    "image_url": "image",
    "input_image": "image",
    "video": "video",
    "video_url": "video",
    "audio": "audio",
    "audio_url": "audio",
    "input_audio": "audio",
}


def convert_chat(data: Any, spec: ResolvedSpec) -> Conversation:
    """A message-list record as a ``Conversation`` (see the module docstring for shapes)."""
    if isinstance(data, list):
        items, list_field = data, ""
        data = {}
    elif isinstance(data, dict):
        items, key = lookup(data, spec.columns["messages"])
        if key is None:
            wanted = " or ".join(repr(k) for k in spec.columns["messages"])
            raise SampleError(
                "missing_field",
                f"no {wanted} key: a {spec.name} record holds its turns in a list there "
                f"(keys present: {', '.join(sorted(data)) or 'none'})",
                field=spec.columns["messages"][0],
            )
        list_field = key
        if not isinstance(items, list):
            raise SampleError(
                "wrong_type",
                f"expected a list of messages, got {_json_type(items)}",
                field=key,
            )
    else:
        raise SampleError(
            "wrong_type", f"expected a JSON object or a list of messages, got {_json_type(data)}"
        )

    check_turns(len(items), spec.max_turns, "messages", list_field or None)
    messages = [_message(item, i, list_field, spec) for i, item in enumerate(items)]

    system, system_key = lookup(data, spec.columns.get("system", ()))
    if system_key is not None and system is not None:
        if not isinstance(system, str):
            raise SampleError(
                "wrong_type", f"expected a string, got {_json_type(system)}", field=system_key
            )
        if system and not (messages and messages[0].role == "system"):
            messages.insert(0, Message("system", system))
            offset = 1
        else:
            offset = 0
    else:
        offset = 0

    tools_value, tools_key = lookup(data, spec.columns.get("tools", ()))
    tools = parse_tools(tools_value, tools_key) if tools_key is not None else None

    lists: dict[str, list[str]] = {}
    fields: dict[str, str] = {}
    for kind, column in (("image", "images"), ("video", "videos"), ("audio", "audios")):
        value, key = lookup(data, spec.columns.get(column, ()))
        if key is not None:
            lists[kind] = media_list(value, key)
            fields[kind] = key
    if spec.inline_tags:
        for m in messages:
            if isinstance(m.content, str):
                m.content = split_inline_tags(m.content)
    bind_media(messages, lists, spec.placeholders, fields)

    def field(i: int) -> str:
        j = i - offset
        if j < 0:
            return system_key or "system"
        return f"{list_field}[{j}]" if list_field else f"[{j}]"

    check_role_order(messages, field)
    return Conversation(messages, tools)


def _message(item: Any, i: int, list_field: str, spec: ResolvedSpec) -> Message:
    # a hot path: the field names for messages are only spelled out when a message is bad
    if not isinstance(item, dict):
        raise SampleError(
            "wrong_type",
            f"expected a message object, got {_json_type(item)}",
            field=_where(list_field, i),
        )
    raw_role, role_key = lookup(item, spec.role_keys)
    if role_key is None:
        raise SampleError(
            "missing_field",
            f"message {i} has no {' or '.join(repr(k) for k in spec.role_keys)} key",
            field=f"{_where(list_field, i)}.{spec.role_keys[0]}",
        )
    role = spec.roles.get(raw_role) if isinstance(raw_role, str) else None
    if role is None:
        known = sorted(k for k in spec.roles if k not in ("function", "ipython", "bard", "bing"))
        raise SampleError(
            "unknown_role",
            f"role {raw_role!r} is not one of {', '.join(known)}; map it with "
            f"{spell('tags')} (user_tag, assistant_tag, ...)",
            field=f"{_where(list_field, i)}.{role_key}",
        )
    content, content_key = lookup(item, spec.content_keys)
    tool_calls = None
    if role == "function_call":
        role = "assistant"
        tool_calls = _calls_from_text(content, _content_field(list_field, i, content_key, spec))
        content = ""
    elif content_key is None or content is None:
        if role == "assistant" and item.get("tool_calls"):
            content = ""
        else:
            raise SampleError(
                "missing_field",
                f"message {i} has no {' or '.join(repr(k) for k in spec.content_keys)} text",
                field=_content_field(list_field, i, content_key, spec),
            )
    if type(content) is not str:
        where = _content_field(list_field, i, content_key, spec)
        if isinstance(content, list):
            check_turns(len(content), spec.max_turns, f"content parts in message {i}", where)
            content = _parts(content, where)
        else:
            raise SampleError(
                "wrong_type",
                f"expected text or a list of content parts, got {_json_type(content)}",
                field=where,
            )
    if (
        tool_calls is None
        and len(item) == 2
        and role_key != content_key
        and role_key in item
        and content_key in item
    ):
        return Message(role, content)  # a role and a text, nothing else (most messages)
    if role == "assistant" and tool_calls is None and item.get("tool_calls"):
        tool_calls = _normalise_calls(item["tool_calls"], f"{_where(list_field, i)}.tool_calls")
    loss = _loss(item, list_field, i)
    reasoning = item.get("reasoning_content") if role == "assistant" else None
    if reasoning is not None and not isinstance(reasoning, str):
        raise SampleError(
            "wrong_type",
            f"expected a string, got {_json_type(reasoning)}",
            field=f"{_where(list_field, i)}.reasoning_content",
        )
    return Message(role, content, loss=loss, tool_calls=tool_calls, reasoning=reasoning)


def _where(list_field: str, i: int) -> str:
    """The field of message ``i`` for error messages: ``conversations[3]``."""
    return f"{list_field}[{i}]" if list_field else f"[{i}]"


def _content_field(list_field: str, i: int, key: str | None, spec: ResolvedSpec) -> str:
    return f"{_where(list_field, i)}.{key or spec.content_keys[0]}"


def _loss(item: dict[str, Any], list_field: str, i: int) -> bool | None:
    for key in ("loss", "loss_weight", "weight"):
        if key in item:
            value = item[key]
            if value is None:
                return None
            if isinstance(value, bool):
                return value
            if isinstance(value, int | float):
                return value > 0
            raise SampleError(
                "wrong_type",
                f"expected a boolean or a number, got {_json_type(value)}",
                field=f"{_where(list_field, i)}.{key}",
            )
    return None


def _parts(items: list[Any], field: str) -> list[Part]:
    parts: list[Part] = []
    for k, item in enumerate(items):
        where = f"{field}[{k}]"
        if isinstance(item, str):
            parts.append(Part("text", item))
            continue
        if not isinstance(item, dict):
            raise SampleError(
                "wrong_type", f"expected a content part object, got {_json_type(item)}", field=where
            )
        kind = _KIND_OF_TYPE.get(item.get("type"))  # type: ignore[arg-type]
        if kind is None:
            raise SampleError(
                "wrong_type",
                f"unknown content part type {item.get('type')!r}; known types: "
                f"{', '.join(sorted(_KIND_OF_TYPE))}",
                field=f"{where}.type",
            )
        if kind == "text":
            text = item.get("text", item.get("value"))
            if not isinstance(text, str):
                raise SampleError(
                    "wrong_type",
                    f"a text part needs a 'text' (or 'value') string, got {_json_type(text)}",
                    field=where,
                )
            parts.append(Part("text", text))
        else:
            parts.append(Part(kind, _part_source(item, kind, where)))  # type: ignore[arg-type]
    return parts


def _part_source(item: dict[str, Any], kind: str, where: str) -> str | None:
    """The source of a media part, or None for a bare ``{"type": "image"}`` placeholder."""
    for key in (f"{kind}_url", kind, "url", "path", "value", "image_url", "input_audio"):
        if item.get(key) is None:  # absent, or null: Parquet and HF datasets store parts as
            continue  # a union of every part's keys, the others' null
        value = item[key]
        if key == "input_audio" and isinstance(value, dict) and isinstance(value.get("data"), str):
            # OpenAI's inline audio: base64 bytes and their format, not a path
            return f"data:audio/{value.get('format') or 'wav'};base64,{value['data']}"
        if isinstance(value, dict):
            value = value.get("url") or value.get("path") or value.get("data")
        if isinstance(value, str) and value:
            return value
        raise SampleError(
            "wrong_type",
            f"a {kind} part's {key!r} must be a path/URL string (or an object with 'url')",
            field=f"{where}.{key}",
        )
    return None


def _calls_from_text(value: Any, field: str) -> list[dict[str, Any]]:
    """A ShareGPT ``function_call`` value (JSON text of one call or a list) as tool calls."""
    if isinstance(value, str):
        try:
            value = orjson.loads(value)
        except orjson.JSONDecodeError as exc:
            raise SampleError(
                "wrong_type",
                f"a function_call turn must hold JSON {{'name': ..., 'arguments': ...}}: {exc}",
                field=field,
            ) from None
    return _normalise_calls(value if isinstance(value, list) else [value], field)


def _normalise_calls(calls: Any, field: str) -> list[dict[str, Any]]:
    if not isinstance(calls, list):
        raise SampleError(
            "wrong_type", f"expected a list of tool calls, got {_json_type(calls)}", field=field
        )
    out = []
    for k, call in enumerate(calls):
        fn = call.get("function", call) if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise SampleError(
                "wrong_type",
                f"tool call {k} needs a 'name' string (and 'arguments')",
                field=f"{field}[{k}]",
            )
        args = fn.get("arguments", fn.get("parameters", {}))
        out.append({"type": "function", "function": {"name": fn["name"], "arguments": args}})
    return out


def parse_tools(value: Any, field: str | None) -> list[dict[str, Any]] | None:
    """Tool definitions (a list, or JSON text of one) in OpenAI form; empty means ``None``.

    The OpenAI form is ``{"type": "function", "function": {...}}``; bare function objects are
    wrapped into it.

    Example:
        >>> parse_tools('[{"name": "f", "parameters": {}}]', "tools")
        [{'type': 'function', 'function': {'name': 'f', 'parameters': {}}}]
    """
    if value is None or value == "" or value == []:
        return None
    if isinstance(value, str):
        try:
            value = orjson.loads(value)
        except orjson.JSONDecodeError as exc:
            raise SampleError(
                "wrong_type", f"tools must be a list or JSON text of one: {exc}", field=field
            ) from None
    if isinstance(value, dict):
        value = [value]
    if not isinstance(value, list):
        raise SampleError(
            "wrong_type",
            f"expected a list of tool definitions, got {_json_type(value)}",
            field=field,
        )
    tools = []
    for k, tool in enumerate(value):
        if not isinstance(tool, dict):
            raise SampleError(
                "wrong_type", "a tool definition must be an object", field=f"{field}[{k}]"
            )
        if "function" not in tool or tool.get("type") not in (None, "function"):
            tool = {"type": "function", "function": tool}
        tools.append(tool)
    return tools or None


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    return {
        str: "a string",
        int: "a number",
        float: "a number",
        bool: "a boolean",
        list: "a list",
        dict: "an object",
    }.get(type(value), type(value).__name__)

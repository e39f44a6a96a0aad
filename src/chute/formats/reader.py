"""Reading records as conversations: ``FormatReader``, ``detect_format``, ``sniff_format``.

Re-exported by ``chute.formats``; see its docstring for the whole picture.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterable
from typing import Any

from chute._internal.spelling import spell
from chute.errors import ConfigError, SampleError
from chute.formats.alpaca import convert_alpaca
from chute.formats.chat import convert_chat
from chute.formats.spec import FORMAT_NAMES, MAX_TURNS, FormatSpec, ResolvedSpec
from chute.formats.text import convert_text
from chute.sample.conversation import Conversation

__all__ = [
    "FORMAT_NAMES",
    "FormatReader",
    "FormatSpec",
    "detect_format",
    "sniff_format",
    "to_conversation",
]

_CONVERTERS: dict[str, Callable[[Any, ResolvedSpec], Conversation]] = {
    "alpaca": convert_alpaca,
    "prompt_completion": convert_alpaca,
    "sharegpt": convert_chat,
    "llava": convert_chat,
    "qwen_vl": convert_chat,
    "messages": convert_chat,
    "text": convert_text,
}


def detect_format(data: Any) -> str | None:
    """The format of one parsed record, or ``None`` when no rule matches (see module table)."""
    if isinstance(data, list):
        if data and all(isinstance(m, dict) and ("role" in m or "from" in m) for m in data):
            return "messages"
        return None
    if not isinstance(data, dict):
        return None
    if "messages" in data:
        return "messages"
    if "conversations" in data:
        turns = data["conversations"]
        listed = "image" in data or "images" in data
        # Qwen-VL writes its images inline, in the user's turns ("Picture 1: <img>a.jpg</img>");
        # a tag in an answer, or a record that lists its images, is text about markup
        if (
            not listed
            and isinstance(turns, list)
            and any(
                isinstance(t, dict)
                and t.get("from", t.get("role")) in ("user", "human")
                and "</img>" in str(t.get("value", t.get("content", "")))
                for t in turns
            )
        ):
            return "qwen_vl"
        return "llava" if "image" in data else "sharegpt"
    if "instruction" in data:
        return "alpaca"
    if "prompt" in data and "completion" in data:
        return "prompt_completion"
    if "text" in data:
        return "text"
    return None


class FormatReader:
    """Converts records of one ``FormatSpec``; picklable, with per-format tables built once.

    Args:
        spec: the format and its key mappings.
        max_turns: the most messages of one record, and content parts of one message; a record
            with more is rejected as ``too_many_turns`` before its messages are built
            (``None``: no limit).

    Example:
        >>> reader = FormatReader(FormatSpec("auto"))
        >>> reader({"conversations": [{"from": "human", "value": "hi"},
        ...                           {"from": "gpt", "value": "yo"}]}).messages[1].content
        'yo'
    """

    def __init__(self, spec: FormatSpec, *, max_turns: int | None = MAX_TURNS):
        self.spec = spec
        self.max_turns = max_turns
        self._resolved: dict[str, ResolvedSpec] = {}
        self._fixed = (
            (_CONVERTERS[spec.name], self.resolved(spec.name)) if spec.name != "auto" else None
        )

    def resolved(self, name: str) -> ResolvedSpec:
        r = self._resolved.get(name)
        if r is None:
            r = self.spec.resolve(name)
            if r.max_turns != self.max_turns:
                r = dataclasses.replace(r, max_turns=self.max_turns)
            self._resolved[name] = r
        return r

    def detect(self, data: Any) -> str:
        """The format ``data`` is read as (the spec's, or the detected one for ``auto``)."""
        if self.spec.name != "auto":
            return self.spec.name
        name = detect_format(data)
        if name is None:
            raise SampleError("unknown_format", _unknown_message(data))
        return name

    def __call__(self, data: Any) -> Conversation:
        if self._fixed is not None:
            convert, resolved = self._fixed
            return convert(data, resolved)
        name = detect_format(data)
        if name is None:
            raise SampleError("unknown_format", _unknown_message(data))
        resolved = self._resolved.get(name) or self.resolved(name)
        return _CONVERTERS[name](data, resolved)


def to_conversation(data: Any, spec: FormatSpec | str = "auto") -> Conversation:
    """Convert one parsed record (see ``FormatReader`` for repeated use).

    Raises:
        SampleError: ``unknown_format``, ``missing_field``, ``wrong_type``, ``unknown_role``,
            ``bad_role_order``, ``empty_conversation`` or ``image_placeholder_mismatch``.
    """
    if isinstance(spec, str):
        spec = FormatSpec(spec)
    return FormatReader(spec)(data)


def sniff_format(records: Iterable[Any], limit: int = 16) -> str:
    """The format of a dataset, from its first ``limit`` parseable records.

    Records are ``Record`` objects or parsed values. Raises ``ConfigError`` when none is
    recognised or when they disagree, naming what was seen.

    Example:
        >>> sniff_format([{"instruction": "a", "output": "b"}, {"instruction": "c", "output": "d"}])
        'alpaca'
    """
    seen: dict[str, int] = {}
    n = 0
    for record in itertools.islice(records, limit):
        n += 1
        try:
            data = record.data if hasattr(record, "data") else record
        except SampleError:
            continue
        name = detect_format(data)
        if name is not None:
            seen[name] = seen.get(name, 0) + 1
    # LLaVA records without an image, and Qwen-VL records without a tag, are ShareGPT too.
    if "sharegpt" in seen and len(seen) == 2 and ({"llava", "qwen_vl"} & set(seen)):
        return next(n for n in seen if n != "sharegpt")
    if len(seen) == 1:
        return next(iter(seen))
    if not seen:
        names = ", ".join(f for f in FORMAT_NAMES if f != "auto")
        raise ConfigError(
            f"none of the first {n} records matches a known format; pass {spell('format')} one "
            f"of {names} (with {spell('columns')} for custom keys)",
            param="format",
        )
    counts = ", ".join(f"{n} ({c})" for n, c in sorted(seen.items()))
    raise ConfigError(
        f"the first records look like different formats: {counts}; pass {spell('format')}",
        param="format",
    )


def _unknown_message(data: Any) -> str:
    if isinstance(data, dict):
        keys = ", ".join(sorted(data)[:12]) or "none"
        return (
            f"no format recognises a record with keys {keys}; expected messages, conversations, "
            f"instruction, prompt+completion or text: pass {spell('format')} and "
            f"{spell('columns')} to map your keys"
        )
    return (
        f"no format recognises a JSON {type(data).__name__} record; a record is an object (or a "
        f"list of {{role, content}} messages)"
    )

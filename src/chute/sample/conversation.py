"""The canonical conversation every format adapter produces and every template consumes.

A ``Conversation`` is a list of ``Message`` values (role ``system``, ``user``, ``assistant`` or
``tool``), optional tool definitions, and a kind: ``chat`` for instruction data, ``text`` for a
pretraining document (one message whose text is trained as a whole).

A message's content is either a plain string (the common, fast case) or a list of ``Part``
values when it holds media: ``Part("text", "What is this?")``, ``Part("image", "a/b.jpg")``.
Media parts keep their source exactly as the record wrote it; the recipe resolves it later.

Example:
    >>> conv = Conversation([
    ...     Message("user", [Part("image", "cat.jpg"), Part("text", "What is this?")]),
    ...     Message("assistant", "A cat."),
    ... ])
    >>> conv.messages[0].text(lambda part: "<image>")
    '<image>What is this?'
    >>> [p.value for p in conv.media()]
    ['cat.jpg']
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from chute.errors import SampleError

__all__ = [
    "MEDIA_KINDS",
    "ROLES",
    "Conversation",
    "Message",
    "Part",
    "check_role_order",
]

ROLES = ("system", "user", "assistant", "tool")
MEDIA_KINDS = ("image", "video", "audio")


class Part:
    """One piece of a message's content: text, or a media reference.

    ``kind`` is ``text`` (``value`` is the text) or ``image``, ``video``, ``audio`` (``value`` is
    the source path or URL as the record wrote it).

    Example:
        >>> Part("image", "imgs/1.jpg")
        Part('image', 'imgs/1.jpg')
    """

    __slots__ = ("kind", "value")

    def __init__(self, kind: str, value: str):
        self.kind = kind
        self.value = value

    def __repr__(self) -> str:
        return f"Part({self.kind!r}, {self.value!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Part) and (self.kind, self.value) == (other.kind, other.value)

    def __hash__(self) -> int:
        return hash((self.kind, self.value))


class Message:
    """One turn.

    Attributes:
        role: ``system``, ``user``, ``assistant`` or ``tool``.
        content: a string, or a list of ``Part`` when the turn holds media.
        loss: ``True``/``False`` forces this turn's tokens trained/masked; ``None`` leaves it to
            the recipe's ``train_on`` policy.
        tool_calls: for assistant turns, OpenAI-style calls
            ``[{"type": "function", "function": {"name": ..., "arguments": ...}}]``.
        reasoning: an assistant's reasoning (``reasoning_content``), for templates that render it.
    """

    __slots__ = ("content", "loss", "reasoning", "role", "tool_calls")

    def __init__(
        self,
        role: str,
        content: str | list[Part],
        *,
        loss: bool | None = None,
        tool_calls: list[dict[str, Any]] | None = None,
        reasoning: str | None = None,
    ):
        self.role = role
        self.content = content
        self.loss = loss
        self.tool_calls = tool_calls
        self.reasoning = reasoning

    def text(self, media_text: Callable[[Part], str] | None = None) -> str:
        """The content as one string; each media part becomes ``media_text(part)`` (or nothing)."""
        content = self.content
        if isinstance(content, str):
            return content
        out = []
        for part in content:
            if part.kind == "text":
                out.append(part.value)
            elif media_text is not None:
                out.append(media_text(part))
        return "".join(out)

    def media(self) -> list[Part]:
        content = self.content
        if isinstance(content, str):
            return []
        return [p for p in content if p.kind != "text"]

    def __repr__(self) -> str:
        extra = ""
        if self.loss is not None:
            extra += f", loss={self.loss}"
        if self.tool_calls:
            extra += f", tool_calls={self.tool_calls!r}"
        if self.reasoning:
            extra += f", reasoning={self.reasoning!r}"
        return f"Message({self.role!r}, {self.content!r}{extra})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Message) and all(
            getattr(self, k) == getattr(other, k) for k in self.__slots__
        )

    __hash__ = None  # type: ignore[assignment]


class Conversation:
    """Messages, tool definitions and kind (``chat`` or ``text``) of one record.

    Args:
        messages: the turns, in order.
        tools: tool (function) definitions, OpenAI style ``{"type": "function", "function":
            {...}}``, or ``None``.
        kind: ``chat`` (instruction data) or ``text`` (a pretraining document: one message,
            rendered as ``bos + text + eos`` by every template and trained whole).
    """

    __slots__ = ("kind", "messages", "tools")

    def __init__(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]] | None = None,
        kind: str = "chat",
    ):
        self.messages = messages
        self.tools = tools
        self.kind = kind

    def media(self) -> list[Part]:
        """Every media part, in message order."""
        return [p for m in self.messages for p in m.media()]

    def has_media(self) -> bool:
        return any(not isinstance(m.content, str) for m in self.messages)

    def __iter__(self) -> Iterator[Message]:
        return iter(self.messages)

    def __len__(self) -> int:
        return len(self.messages)

    def __repr__(self) -> str:
        tools = f", tools={len(self.tools)}" if self.tools else ""
        kind = f", kind={self.kind!r}" if self.kind != "chat" else ""
        return f"Conversation({self.messages!r}{tools}{kind})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Conversation) and (self.messages, self.tools, self.kind) == (
            other.messages,
            other.tools,
            other.kind,
        )

    __hash__ = None  # type: ignore[assignment]


# After each role, the roles that may follow it. A conversation starts with an optional system
# message, then a user turn; tool results follow an assistant turn (its calls) or each other.
_NEXT = {
    "system": ("user",),
    "user": ("assistant",),
    "assistant": ("user", "tool"),
    "tool": ("tool", "assistant"),
}


def check_role_order(messages: list[Message], field: Callable[[int], str]) -> None:
    """Raise ``SampleError`` unless the roles form a trainable conversation.

    The rules: at least one non-system message; a system message only first; then a user
    turn; user and assistant alternate; tool results follow an assistant turn or another tool
    result and are followed by an assistant turn or another tool result.

    Args:
        messages: the conversation's messages.
        field: maps a message's position to the record field it came from, for the error.

    Example:
        >>> check_role_order([Message("user", "a"), Message("user", "b")], lambda i: f"m[{i}]")
        Traceback (most recent call last):
        ...
        chute.errors.SampleError: bad_role_order: message 1 has role 'user' after 'user': after 'user' comes 'assistant' (field 'm[1]')
    """
    if not messages or (len(messages) == 1 and messages[0].role == "system"):
        raise SampleError(
            "empty_conversation",
            "the conversation has no message"
            + (" besides the system prompt" if messages else "")
            + "; every record needs at least one user turn",
            field=field(0) if messages else None,
        )
    prev = None
    for i, m in enumerate(messages):
        role = m.role
        if prev is None:
            if role not in ("system", "user"):
                raise SampleError(
                    "bad_role_order",
                    f"the first message has role {role!r}; a conversation starts with a user "
                    f"turn (after an optional system message): drop the leading {role} turn "
                    f"or fix the roles",
                    field=field(i),
                )
        elif role not in _NEXT[prev]:
            if role == "system":
                why = "a system message may only come first"
            else:
                allowed = " or ".join(repr(r) for r in _NEXT[prev])
                why = f"after {prev!r} comes {allowed}"
            raise SampleError(
                "bad_role_order",
                f"message {i} has role {role!r} after {prev!r}: {why}",
                field=field(i),
            )
        prev = role

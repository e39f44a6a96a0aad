"""The canonical conversation and its role-order rules."""

from __future__ import annotations

import pickle

import pytest

from chute.errors import SampleError
from chute.sample.conversation import Conversation, Message, Part, check_role_order


def field(i: int) -> str:
    return f"messages[{i}]"


def roles(*names: str) -> list[Message]:
    return [Message(r, f"text {k}") for k, r in enumerate(names)]


@pytest.mark.parametrize(
    "order",
    [
        ("user", "assistant"),
        ("system", "user", "assistant"),
        ("user", "assistant", "user", "assistant"),
        ("user", "assistant", "tool", "assistant"),
        ("user", "assistant", "tool", "tool", "assistant", "user", "assistant"),
        ("user",),  # prompt only: structurally fine, rejected later as no_trainable_tokens
    ],
)
def test_trainable_orders_pass(order: tuple[str, ...]) -> None:
    check_role_order(roles(*order), field)


@pytest.mark.parametrize(
    ("order", "match"),
    [
        (("assistant", "user"), r"first message has role 'assistant'.*\(field 'messages\[0\]'\)"),
        (
            ("user", "user"),
            r"message 1 has role 'user' after 'user': after 'user' comes 'assistant'",
        ),
        (("user", "assistant", "assistant"), r"message 2 has role 'assistant' after 'assistant'"),
        (("user", "system", "assistant"), r"a system message may only come first"),
        (("user", "tool"), r"message 1 has role 'tool' after 'user'"),
        (("system", "assistant"), r"message 1 has role 'assistant' after 'system'"),
    ],
)
def test_bad_role_order(order: tuple[str, ...], match: str) -> None:
    with pytest.raises(SampleError, match=match) as info:
        check_role_order(roles(*order), field)
    assert info.value.kind == "bad_role_order"


def test_empty_conversation() -> None:
    with pytest.raises(SampleError, match="empty_conversation: the conversation has no message;"):
        check_role_order([], field)
    with pytest.raises(SampleError, match="no message besides the system prompt"):
        check_role_order(roles("system"), field)


def test_message_text_and_media() -> None:
    m = Message("user", [Part("image", "a.jpg"), Part("text", "What?"), Part("video", "v.mp4")])
    assert m.text() == "What?"
    assert m.text(lambda p: f"<{p.kind}>") == "<image>What?<video>"
    assert m.media() == [Part("image", "a.jpg"), Part("video", "v.mp4")]
    conv = Conversation([m, Message("assistant", "A cat.")])
    assert conv.has_media() and [p.value for p in conv.media()] == ["a.jpg", "v.mp4"]
    assert not Conversation([Message("user", "hi")]).has_media()


def test_values_compare_and_pickle() -> None:
    conv = Conversation(
        [Message("user", "hi"), Message("assistant", "", tool_calls=[{"type": "function"}])],
        tools=[{"type": "function", "function": {"name": "f"}}],
    )
    assert pickle.loads(pickle.dumps(conv)) == conv
    assert conv != Conversation(conv.messages, tools=None)
    assert "tool_calls" in repr(conv.messages[1])

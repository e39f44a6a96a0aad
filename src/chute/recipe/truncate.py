r"""``truncation="turns"``: drop whole earliest exchanges of a conversation until it fits.

An exchange is a user turn and everything up to the next user turn (the assistant's answer,
tool calls and results). The system prompt and tool definitions are always kept; the last
exchange too (it is what the sample trains on last). The fewest exchanges that make the sample
fit are found by bisection over the number dropped (each try renders and encodes once), so a
conversation of ``k`` exchanges costs ``O(log k)`` encodings, and only when it is too long::

    system | u1 a1 | u2 a2 | u3 a3 | u4 a4        max_length exceeded
    system |       |       | u3 a3 | u4 a4        2 exchanges dropped: fits

If the last exchange alone is still too long, it is cut like ``truncation="right"``.

Example:
    >>> from chute.sample.conversation import Message
    >>> conv = Conversation([Message("system", "s"), Message("user", "1"),
    ...     Message("assistant", "a"), Message("user", "2"), Message("assistant", "b")])
    >>> [m.content for m in without_exchanges(conv, exchange_starts(conv), 1).messages]
    ['s', '2', 'b']
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from chute._internal.spelling import spell, spell_set, spell_value
from chute.errors import ConfigError
from chute.recipe.encode import Encoded
from chute.recipe.preference import TASKS
from chute.sample.conversation import Conversation

__all__ = [
    "TRUNCATION",
    "check_policies",
    "drop_exchanges",
    "exchange_starts",
    "fewest_dropped",
    "without_exchanges",
]

TRUNCATION = ("right", "left", "turns")
T = TypeVar("T")


def exchange_starts(conv: Conversation, keep_last: int = 0) -> list[int]:
    """Positions of the user turns that begin the second, third, ... exchange.

    Dropping ``k`` exchanges keeps the messages from ``starts[k - 1]`` on. ``keep_last``: the
    last messages that must stay whole (a preference pair's response), never a cut point.
    """
    msgs = conv.messages
    stop = len(msgs) - keep_last
    first = next((i for i, m in enumerate(msgs) if m.role == "user"), None)
    if first is None:
        return []
    return [i for i in range(first + 1, stop) if msgs[i].role == "user"]


def without_exchanges(conv: Conversation, starts: list[int], k: int) -> Conversation:
    """``conv`` without its first ``k`` exchanges (system messages kept)."""
    if k <= 0:
        return conv
    head = [m for m in conv.messages[: starts[0]] if m.role == "system"]
    return Conversation(head + conv.messages[starts[k - 1] :], conv.tools, conv.kind)


def fewest_dropped(count: int, attempt: Callable[[int], tuple[bool, T]]) -> T:
    """The result of ``attempt(k)`` for the smallest ``k`` in ``1..count`` that fits.

    ``attempt(k) -> (fits, result)``; when none fits, the result for ``count`` (the most
    that may be dropped). Length shrinks as ``k`` grows, so bisection finds it.
    """
    lo, hi = 1, count
    best: tuple[bool, T] | None = None
    while lo <= hi:
        mid = (lo + hi) // 2
        fits, result = attempt(mid)
        if fits:
            best, hi = (True, result), mid - 1
        else:
            lo = mid + 1
    if best is not None:
        return best[1]
    return attempt(count)[1]


def drop_exchanges(
    convs: Sequence[Conversation],
    keep: int,
    limit: int,
    encode: Callable[[list[Conversation]], tuple[Encoded, ...]],
) -> tuple[Encoded, ...] | None:
    """The encodings of ``convs`` with the fewest earliest exchanges dropped so all fit.

    ``convs`` share their prompt (one conversation, or a preference pair's two sides): the same
    exchanges are dropped from each. ``keep``: the last messages (a response) never cut.
    ``encode(convs) -> encodings``. ``None`` when there is no exchange to drop; the results are
    marked ``truncated``.
    """
    starts = exchange_starts(convs[0], keep)
    if not starts:
        return None

    def attempt(k: int) -> tuple[bool, tuple[Encoded, ...]]:
        encoded = encode([without_exchanges(c, starts, k) for c in convs])
        return max(len(e.ids) for e in encoded) <= limit, encoded

    out = fewest_dropped(len(starts), attempt)
    for enc in out:
        enc.truncated = True
    return out


def check_policies(max_length: int | None, overflow: str, truncation: Any, task: Any) -> None:
    """Refuse ``truncation`` / ``task`` values and combinations that cannot work together."""
    if truncation not in TRUNCATION:
        raise ConfigError(
            f"expected one of {', '.join(TRUNCATION)}, got {spell_value(truncation)}",
            param="truncation",
        )
    if truncation != "right" and overflow != "truncate":
        raise ConfigError(
            f"{spell_set('truncation', truncation)} says which part a cut keeps; it needs "
            f"{spell_set('overflow', 'truncate')} (got {spell_set('overflow', overflow)})"
        )
    if task not in TASKS:
        raise ConfigError(
            f"expected one of {', '.join(TASKS)}, got {spell_value(task)}", param="task"
        )
    if overflow == "split":
        if max_length is None:
            raise ConfigError(
                f"{spell_set('overflow', 'split')} cuts documents into windows of "
                f"{spell('max_length')} tokens; set {spell('max_length')} (e.g. "
                f"{spell_set('max_length', 4096)})"
            )
        if task != "sft":
            raise ConfigError(
                f"{spell_set('overflow', 'split')} cuts one sequence into windows; "
                f"{spell_set('task', task)} keeps a response with its prompt: use "
                f"{spell_set('overflow', 'truncate')} or {spell_set('overflow', 'drop')}"
            )

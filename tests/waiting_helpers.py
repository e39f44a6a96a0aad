"""What tests of waits share: an event set when a waiter first sees a builder at work.

A test that stops a builder must do so after the waiter has seen it held (before, a free lock
means "not started yet", and the waiter waits on): it waits on this event, not on a sleep.
"""

from __future__ import annotations

import threading

import pytest


def seen_at_work(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """An event set whenever ``builder_state`` answers ``held`` (a waiter saw a builder)."""
    from chute._internal import waiting

    seen = threading.Event()
    look = waiting.builder_state

    def looking(target: object) -> str:
        state = look(target)  # type: ignore[arg-type]
        if state == "held":
            seen.set()
        return state

    monkeypatch.setattr(waiting, "builder_state", looking)
    return seen

"""Ranks meeting at a build lock, for tests that count builds without timing.

``Meeting(monkeypatch, module, ranks)`` wraps ``module.one_builder`` so that each rank that
reaches it is counted; a build (slowed by the test) calls ``meeting.wait()`` first, so every
rank has found the result missing and asked for the lock before the first build ends. Without
the lock they would all build: the count of builds then tells, whatever the machine's load.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import pytest


class Meeting:
    def __init__(self, monkeypatch: pytest.MonkeyPatch, module: Any, ranks: int):
        self.ranks = ranks
        self.arrived = 0
        self._changed = threading.Condition()
        real = module.one_builder

        @contextlib.contextmanager
        def counted(target: Any) -> Iterator[None]:
            with self._changed:
                self.arrived += 1
                self._changed.notify_all()
            with real(target):
                yield

        monkeypatch.setattr(module, "one_builder", counted)

    def wait(self) -> None:
        """Until every rank has reached the lock (60 s at most: a rank that never does fails)."""
        with self._changed:
            assert self._changed.wait_for(lambda: self.arrived >= self.ranks, timeout=60)

"""chute's process pools: an interrupt of the parent ends the workers at once.

A SIGINT sent to the parent alone (``timeout -s INT``) never reaches the workers; a normal
shutdown would then wait for their tasks, however long. Here the tasks sleep a minute.
"""

from __future__ import annotations

import multiprocessing
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from chute._internal.pools import process_map, process_pool, stop_pool

pytestmark = pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs setitimer")


@contextmanager
def interrupted_after(seconds: float) -> Iterator[None]:
    """A ``KeyboardInterrupt`` in this (the main) thread after ``seconds``, as SIGINT raises it."""

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def test_an_interrupt_while_process_map_waits_ends_its_workers_at_once() -> None:
    before = set(multiprocessing.active_children())
    started = time.monotonic()
    with interrupted_after(1.0), pytest.raises(KeyboardInterrupt):
        list(process_map(time.sleep, [60.0, 60.0, 60.0], workers=2))
    assert time.monotonic() - started < 15
    assert set(multiprocessing.active_children()) <= before


def test_stop_pool_ends_busy_workers_and_cancels_the_queue() -> None:
    pool = process_pool(2)
    running = [pool.submit(time.sleep, 60.0) for _ in range(3)]
    workers = list(pool._processes.values())
    time.sleep(0.5)
    started = time.monotonic()
    stop_pool(pool)
    assert time.monotonic() - started < 10
    assert not any(p.is_alive() for p in workers)
    assert all(f.done() for f in running)  # failed (their worker ended) or cancelled

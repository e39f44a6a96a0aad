"""A per-sample watchdog: a sample whose processing hangs becomes a counted skip, not a freeze.

A daemon thread watches the sample being processed; when one runs longer than ``seconds`` it
sends the main thread a signal whose handler raises ``SampleTimeout`` inside the recipe, and
the loader records the sample as ``sample_timeout`` and moves on::

    main thread:   [sample 7]  [sample 8 ......................X]  [sample 9]
    watch thread:      .    .     .    .    .    .  late? ─► pthread_kill ─┘
                                                              (handler raises SampleTimeout)

Costs per sample: three attribute writes; the thread polls a few times per ``seconds``. It uses
its own real-time signal (not ``SIGALRM``), so it coexists with ``alarm()``-based timeouts such
as pytest-timeout's. It works wherever the loader runs in the main thread of a process (every
DataLoader worker; a ``num_workers=0`` loader in the main thread). It cannot interrupt C code
that holds the GIL and never returns; the per-batch ``timeout`` of DataLoader workers is the
backstop for that.

Example:
    >>> import time
    >>> dog = Watchdog(0.1)
    >>> with dog.guarding():
    ...     try:
    ...         with dog:
    ...             time.sleep(5)
    ...     except SampleTimeout:
    ...         print("skipped")
    skipped
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

__all__ = ["WATCHDOG_SIGNAL", "SampleTimeout", "Watchdog"]

log = logging.getLogger("chute.loader")

WATCHDOG_SIGNAL = signal.SIGRTMIN + 5 if hasattr(signal, "SIGRTMIN") else signal.SIGUSR2


class SampleTimeout(BaseException):
    """Raised inside a sample's processing when it ran out of time.

    A ``BaseException`` so that a recipe's own ``except Exception`` cannot swallow it.
    """


_CURRENT: Watchdog | None = None


def _on_signal(signum: int, frame: Any) -> None:
    dog = _CURRENT
    # Runs in the main thread, between bytecodes. The sample that was late may have finished
    # since the signal was sent: raise only while that very sample is still running.
    if dog is not None and dog._in_sample and dog._fired == dog._generation:
        raise SampleTimeout


class Watchdog:
    """Times each sample (``with dog: ...``) inside a ``with dog.guarding():`` stretch.

    ``guarding()`` installs the signal handler and starts the watching thread (once per
    process); outside the main thread, or when the process already handles the signal, the
    watchdog stays off and says so once.

    Args:
        seconds: the time one sample may take; ``None`` or 0 disables the watchdog.
        keep_handler: leave the handler installed after ``guarding()`` (in processes chute owns,
            like DataLoader workers, which saves two system calls per batch).
    """

    _warned = False

    def __init__(self, seconds: float | None, keep_handler: bool = False):
        self.seconds = float(seconds) if seconds else 0.0
        self.keep_handler = keep_handler
        self.active = False
        self._generation = 0
        self._in_sample = False
        self._installed_in = -1
        self._fired = -1

    def __getstate__(self) -> dict[str, Any]:
        return {"seconds": self.seconds, "keep_handler": self.keep_handler}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["seconds"], state["keep_handler"])  # type: ignore[misc]

    @contextlib.contextmanager
    def guarding(self) -> Iterator[None]:
        global _CURRENT
        if not self.seconds:
            yield
            return
        if self.keep_handler and self._installed_in == os.getpid():
            _CURRENT, self.active = self, True  # a worker after its first batch: all set
            try:
                yield
            finally:
                self.active, self._in_sample, _CURRENT = False, False, None
            return
        if threading.current_thread() is not threading.main_thread():
            self._warn("the loader runs outside the main thread")
            yield
            return
        previous = signal.getsignal(WATCHDOG_SIGNAL)
        if previous not in (signal.SIG_DFL, signal.SIG_IGN, None, _on_signal):
            self._warn(f"this process already handles signal {WATCHDOG_SIGNAL}")
            yield
            return
        if previous is not _on_signal:
            signal.signal(WATCHDOG_SIGNAL, _on_signal)
        _ensure_thread()
        self._installed_in = os.getpid()
        _CURRENT, self.active = self, True
        try:
            yield
        finally:
            self.active, self._in_sample, _CURRENT = False, False, None
            if not self.keep_handler and previous is not _on_signal:
                signal.signal(WATCHDOG_SIGNAL, previous if previous is not None else signal.SIG_DFL)

    def _warn(self, why: str) -> None:
        if not Watchdog._warned:
            Watchdog._warned = True
            log.warning(
                "sample_timeout=%s is not enforced because %s; a hanging sample is then caught "
                "only by the per-batch timeout of DataLoader workers (num_workers > 0)",
                self.seconds,
                why,
            )

    def __enter__(self) -> None:
        # No clock read here: the watching thread notes when it first sees a generation.
        if self.active:
            self._generation += 1
            self._in_sample = True

    def __exit__(self, *exc: object) -> None:
        self._in_sample = False


_THREAD_PID = -1


def _ensure_thread() -> None:
    """One watching thread per process (after fork, the parent's thread is not in the child)."""
    global _THREAD_PID
    if os.getpid() != _THREAD_PID:
        _THREAD_PID = os.getpid()
        main = threading.main_thread().ident
        threading.Thread(target=_watch, args=(main,), name="chute-watchdog", daemon=True).start()


def _watch(main_ident: int | None) -> None:
    pid = os.getpid()
    # the sample last seen (its watchdog and generation: each loader's watchdog counts from 0,
    # so a generation alone could be an earlier loader's, first seen minutes ago), and when
    seen_dog: Watchdog | None = None
    seen, since = -1, 0.0
    while pid == _THREAD_PID and main_ident is not None:
        dog = _CURRENT
        time.sleep(min(0.25, max(0.01, dog.seconds / 8)) if dog is not None else 0.25)
        if dog is None or dog is not _CURRENT or not dog.active:
            continue
        generation, now = dog._generation, time.monotonic()
        if dog is not seen_dog or generation != seen:
            seen_dog, seen, since = dog, generation, now
        elif dog._in_sample and dog._fired != generation and now - since > dog.seconds:
            dog._fired = generation
            signal.pthread_kill(main_ident, WATCHDOG_SIGNAL)

"""Waiting for another process's result: poll with a growing pause, give up after a timeout.

Local ranks other than 0 wait this way for what local rank 0 writes once per node (the lengths
cache, the content hashes), instead of computing it again beside it.

Example:
    >>> tries = iter([None, None, 42])
    >>> poll(lambda: next(tries), timeout=5.0, first=0.001)
    42
    >>> poll(lambda: None, timeout=0.01, first=0.001) is None
    True
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

try:
    import fcntl
except ImportError:  # pragma: no cover - not on POSIX: builders are not watched
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "BuilderGone",
    "builder_state",
    "building",
    "poll",
    "wait_for",
    "wait_for_local_rank_zero",
]

T = TypeVar("T")


def poll(
    read: Callable[[], T | None], timeout: float, *, first: float = 0.05, most: float = 2.0
) -> T | None:
    """``read()`` until it returns something; ``None`` once ``timeout`` seconds have passed.

    The pause between tries doubles from ``first`` to ``most`` seconds: a result written in a
    second is seen at once, one written in an hour costs a read every two seconds.
    """
    deadline = time.monotonic() + timeout
    delay = first
    while True:
        found = read()
        if found is not None:
            return found
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        time.sleep(min(delay, left))
        delay = min(most, delay * 2)


class BuilderGone(Exception):
    """The process building a result let go of it without writing it (failed or killed)."""


@contextlib.contextmanager
def building(target: str | os.PathLike[str]) -> Iterator[None]:
    """Hold ``.<name>.building`` beside ``target`` while the block builds it (best effort).

    The kernel lets go of the lock when its holder exits, killed or not, so a waiting process
    can tell a builder at work from one that is gone (``wait_for``). Where the lock cannot be
    had (a read-only folder, a filesystem without ``flock``), nothing is held.

    A block that completes with ``target`` in place removes the lock file (a waiter that finds
    no lock reads the result), so a folder of results holds no lock per result; one that
    fails, is killed or wrote nothing leaves it, free, which is how its waiters learn it stopped.
    """
    fd = _lock_fd(target)
    if fd is None:
        yield
        return
    try:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    except BaseException:
        os.close(fd)
        raise
    if Path(target).exists():
        with contextlib.suppress(OSError):
            os.unlink(_lock_path(target))  # still held: no waiter takes it for a stopped builder
    os.close(fd)


def wait_for(
    read: Callable[[], T | None], target: str | os.PathLike[str], timeout: float
) -> T | None:
    """``poll(read)``, but stop with ``BuilderGone`` once the builder of ``target`` is gone.

    Gone: its ``building`` lock was seen held, and is now free with nothing to ``read`` (the
    result is renamed into place before the lock is let go). A builder not seen at work yet
    (not started, or done before the first look) is waited for as ``poll`` does.
    """
    seen_at_work = False

    def look() -> T | None:
        nonlocal seen_at_work
        found = read()
        if found is not None:
            return found
        state = builder_state(target)
        if state == "held":
            seen_at_work = True
        elif state == "free" and seen_at_work:
            found = read()
            if found is None:
                raise BuilderGone(str(target))
        return found

    return poll(look, timeout)


def _lock_path(target: str | os.PathLike[str]) -> Path:
    path = Path(target)
    return path.with_name(f".{path.name}.building")


def _lock_fd(target: str | os.PathLike[str], create: bool = True) -> int | None:
    if fcntl is None:  # pragma: no cover
        return None
    path = Path(target)
    lock = _lock_path(target)
    try:
        if not create:
            return os.open(lock, os.O_RDWR)
        path.parent.mkdir(parents=True, exist_ok=True)
        return os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        return None


def builder_state(target: str | os.PathLike[str]) -> str:
    """``held`` (a builder at work), ``free``, or ``unknown`` (no lock to look at).

    Only looks: a lock file no builder made yet (or one removed since) is ``unknown``, and
    none is created here.
    """
    fd = _lock_fd(target, create=False)
    if fd is None:
        return "unknown"
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return "held"
    except OSError:
        return "unknown"
    finally:
        os.close(fd)  # a shared lock taken to look is let go with it
    return "free"


def wait_for_local_rank_zero(
    read: Callable[[], T | None], path: Path, timeout: float, what: str, beforehand: str
) -> T:
    """``wait_for`` what local rank 0 writes at ``path``; a ``ConfigError`` that says why not.

    ``what``: the result in words (``the lengths cache``); ``beforehand``: how to compute it
    once before the run (``the lengths once (`chute stats ...` caches them)``).
    """
    from chute.errors import ConfigError  # here: the errors module is small, but keep it lazy

    try:
        found = wait_for(read, path, timeout)
    except BuilderGone:
        raise ConfigError(
            f"local rank 0 stopped computing {what} {path} without writing it (it failed or was "
            f"killed: its own output says why); fix that and run again"
        ) from None
    if found is None:
        raise ConfigError(
            f"waited wait_timeout={timeout} s for local rank 0 to write {what} {path}; did it "
            f"fail? Compute {beforehand} or raise the timeout"
        )
    return found

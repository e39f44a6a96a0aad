"""Progress of a long step: a bar on a terminal, a log line now and then elsewhere, a summary.

Every pass that can take more than a few seconds (indexing, the lengths pass, validation,
preprocessing and its full hash of the sources, pre-decoding images, overlap checks, the build
of a length-aware plan) reports through ``progress(...)``, so the
library behaves the same from the CLI, a notebook or a training script under torchrun:

* on a terminal (stderr is a TTY): a tqdm bar on stderr, shown once the step has run for a
  second (quick steps stay quiet, here and below);
* otherwise (a log file, a batch job): one ``INFO`` line on the ``chute.progress`` logger every
  ``every`` seconds, ``lengths: 1,200,000 / 5,000,000 rec (24%), 41,000 rec/s, ETA 93 s``;
* at the end, one ``INFO`` summary line: ``lengths: 5,000,000 rec in 122 s (41,000 rec/s)``
  (the Loader logs it once its lengths pass is done);
* under torchrun, rank 0 only (every rank does the same work; one report is enough).

Functions that run a long step take ``progress=``: ``None`` (the default: as above), ``False``
(silent), ``True`` (shown on every rank), or a callable that receives each increment (for a
caller with its own display).

Example:
    >>> with progress(3, "demo", enabled=False) as bar:
    ...     bar.update(2)
    ...     bar.update(1)
    >>> bar.done
    3
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any, TextIO

from chute._internal.tables import rate
from chute.world import World

__all__ = ["Progress", "ProgressArg", "progress", "silenced"]

log = logging.getLogger("chute.progress")

ProgressArg = bool | Callable[[int], Any] | None
# ``silenced()`` turns the default (``progress=None``) off for a block: ``chute ... --quiet``.
_SILENT: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "chute_progress_silent", default=False
)


@contextlib.contextmanager
def silenced(silent: bool = True) -> Iterator[None]:
    """Inside the block, steps whose ``progress`` was left at ``None`` report nothing."""
    token = _SILENT.set(silent)
    try:
        yield
    finally:
        _SILENT.reset(token)


class Progress:
    """One step's progress (see the module docstring); ``update(n)`` as work completes.

    Args:
        total: units of work in the step (``None``: unknown).
        desc: what the step is, e.g. ``lengths`` (starts every line).
        unit: what is counted (``rec``, ``B``, ``img``).
        enabled: ``None``: on rank 0 only (and not inside ``silenced()``); ``True``: on;
            ``False``: silent.
        every: seconds between log lines when there is no terminal.
        stream: where the bar goes (default stderr); a bar only where it is a TTY.
        callback: also called with each increment.
        quiet_below: a step shorter than this (seconds) shows no bar and logs no summary.
    """

    def __init__(
        self,
        total: int | None,
        desc: str,
        *,
        unit: str = "rec",
        enabled: bool | None = None,
        every: float = 10.0,
        stream: TextIO | None = None,
        callback: Callable[[int], Any] | None = None,
        quiet_below: float = 1.0,
    ):
        self.total, self.desc, self.unit, self.every = total, desc, unit, every
        self.quiet_below = quiet_below
        self.callback = callback
        self.done = 0
        self.t0 = self._last = time.monotonic()
        if enabled is None:
            self.shown = not _SILENT.get() and World.detect().is_main
        else:
            self.shown = bool(enabled)
        out = stream if stream is not None else sys.stderr
        self._bar: Any = None
        if self.shown and _is_tty(out):
            from tqdm import tqdm

            self._bar = tqdm(
                total=total,
                desc=desc,
                unit=unit,
                unit_scale=True,
                unit_divisor=1024 if unit == "B" else 1000,
                file=out,
                leave=False,
                delay=quiet_below,
                dynamic_ncols=True,
            )

    def update(self, n: int = 1) -> None:
        """``n`` more units done."""
        self.done += n
        if self.callback is not None:
            self.callback(n)
        if not self.shown:
            return
        if self._bar is not None:
            self._bar.update(n)
            return
        now = time.monotonic()
        if now - self._last >= self.every:
            self._last = now
            log.info("%s", self.line(now))

    def line(self, now: float | None = None) -> str:
        """Where the step stands, in words (what the periodic log line says)."""
        elapsed = max(1e-9, (now or time.monotonic()) - self.t0)
        speed = self.done / elapsed
        done = f"{self.done:,}"
        if self.total:
            share = f" / {self.total:,} {self.unit} ({self.done / self.total:.0%})"
            left = (self.total - self.done) / speed if speed else float("inf")
            eta = f", ETA {rate(left)} s" if speed else ""
        else:
            share, eta = f" {self.unit}", ""
        return f"{self.desc}: {done}{share}, {rate(speed)} {self.unit}/s{eta}"

    def close(self) -> None:
        """End the step: the bar goes, one summary line is logged."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        seconds = time.monotonic() - self.t0
        if self.shown and seconds >= self.quiet_below:
            speed = f" ({rate(self.done / seconds)} {self.unit}/s)" if seconds > 0 else ""
            log.info(
                "%s: %s %s in %s s%s", self.desc, f"{self.done:,}", self.unit, rate(seconds), speed
            )
        self.shown = False

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def progress(
    total: int | None,
    desc: str,
    *,
    unit: str = "rec",
    enabled: ProgressArg = None,
    every: float = 10.0,
) -> Progress:
    """A ``Progress`` for a function's ``progress=`` argument (see the module docstring)."""
    if callable(enabled):
        return Progress(total, desc, unit=unit, enabled=False, callback=enabled)
    return Progress(total, desc, unit=unit, enabled=enabled, every=every)


def _is_tty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False

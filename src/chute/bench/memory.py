"""Peak memory of a process and its children (DataLoader workers), sampled in a thread.

Workers forked from the main process share its pages, so adding up their RSS counts the shared
pages once per process. Where the platform reports it (Linux), the total is the sum of PSS
(proportional set size: each shared page divided among the processes that map it), which adds
up to what the group really occupies. Elsewhere the total is the sum of RSS (an overestimate),
and ``metric`` says which one was used.

psutil is optional (it is in chute's ``dev`` and ``bench`` extras); without it the sampler
records nothing and ``available`` is ``False``.

Example:
    >>> with MemorySampler(interval=0.05) as mem:
    ...     block = b"x" * 2**20
    >>> sorted(mem.to_json())
    ['memory_metric', 'peak_children', 'peak_rss_main_mb', 'peak_total_mb']
"""

from __future__ import annotations

import contextlib
import os
import threading
from types import TracebackType
from typing import Any

__all__ = ["PSUTIL_HINT", "MemorySampler", "psutil_or_none"]

PSUTIL_HINT = (
    "peak memory needs psutil, which is not installed: `pip install psutil` (it is in chute's "
    "dev and bench extras); every other figure is measured without it"
)


def psutil_or_none() -> Any:
    """The psutil module, or ``None`` when it is not installed."""
    try:
        import psutil
    except ImportError:
        return None
    return psutil


class MemorySampler:
    """Samples the memory of this process and its live children every ``interval`` seconds.

    Use as a context manager around the code to measure; read the peaks afterwards (MB, 2**20
    bytes; ``None`` without psutil).

    Args:
        interval: seconds between samples (a child living shorter than this may be missed).
        pid: the process to watch (default: this one).

    Attributes:
        peak_main_mb: peak RSS of the watched process.
        peak_total_mb: peak of the process plus its children together (PSS or RSS, see
            ``metric``).
        peak_children: the most children seen at once.
        metric: ``"pss"`` or ``"rss"``, what ``peak_total_mb`` adds up.
    """

    def __init__(self, interval: float = 0.1, pid: int | None = None):
        if not interval > 0:
            raise ValueError(f"interval must be > 0 seconds, got {interval!r}")
        self.interval = float(interval)
        self.pid = os.getpid() if pid is None else pid
        self._psutil = psutil_or_none()
        self.peak_main_mb: float | None = None
        self.peak_total_mb: float | None = None
        self.peak_children = 0
        self.metric: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def available(self) -> bool:
        return self._psutil is not None

    def sample(self) -> None:
        """Take one sample now (the thread calls this; callable directly too)."""
        if self._psutil is None:
            return
        psutil = self._psutil
        try:
            main = psutil.Process(self.pid)
            rss = main.memory_info().rss
            children = main.children(recursive=True)
        except psutil.Error:
            return
        total, metric = self._group_size(main, children)
        mb = 2.0**20
        self.peak_main_mb = max(self.peak_main_mb or 0.0, rss / mb)
        self.peak_total_mb = max(self.peak_total_mb or 0.0, total / mb)
        self.peak_children = max(self.peak_children, len(children))
        self.metric = self.metric or metric

    def _group_size(self, main: Any, children: list[Any]) -> tuple[int, str]:
        psutil = self._psutil
        try:  # PSS splits shared pages among the processes that map them (Linux)
            total = 0
            for proc in (main, *children):
                with contextlib.suppress(psutil.NoSuchProcess):
                    total += proc.memory_full_info().pss
            return total, "pss"
        except (AttributeError, psutil.AccessDenied):
            total = 0
            for proc in (main, *children):
                with contextlib.suppress(psutil.NoSuchProcess):
                    total += proc.memory_info().rss
            return total, "rss"

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def __enter__(self) -> MemorySampler:
        self.sample()
        if self._psutil is not None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._loop, name="chute-mem", daemon=True)
            self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self.sample()

    def to_json(self) -> dict[str, Any]:
        return {
            "peak_rss_main_mb": _round(self.peak_main_mb),
            "peak_total_mb": _round(self.peak_total_mb),
            "memory_metric": self.metric,
            "peak_children": self.peak_children,
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)

"""``WorkerOptions``: how the Loader's DataLoader workers run, as one checked value.

The worker settings travel together (grain's ``MultiprocessingOptions``): how many processes,
how far ahead they prepare, how batches reach the GPU, and how long the Loader waits::

    Loader(source, recipe, workers=WorkerOptions(num_workers=8, prefetch_factor=4))

The Loader's own keywords (``num_workers=8``, ...) keep working and build the same value.

Example:
    >>> WorkerOptions(num_workers=2, persistent_workers=True).num_workers
    2
    >>> WorkerOptions(persistent_workers=True)
    Traceback (most recent call last):
    ...
    chute.errors.ConfigError: persistent_workers=True needs num_workers > 0 (there are no workers to keep)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from chute.errors import ConfigError
from chute.loader.options import check_seconds, check_workers

__all__ = ["WorkerOptions"]


@dataclass(frozen=True)
class WorkerOptions:
    """The Loader's worker processes: checked on construction, each error naming its field.

    Args:
        num_workers: DataLoader worker processes (0: build batches in this process).
        pin_memory: pin batches in page-locked memory for fast ``.to(device, non_blocking=True)``.
        persistent_workers: keep workers alive between epochs.
        prefetch_factor: batches each worker prepares ahead (default 2).
        multiprocessing_context: start method for workers (default: torch's).
        timeout: seconds to wait for one batch from the workers before ``LoaderTimeout``
            (``0``: wait forever; only with ``num_workers > 0``).
        sample_timeout: seconds one sample may take before it is skipped as
            ``sample_timeout`` (``None`` or 0: no limit).
    """

    num_workers: int = 0
    pin_memory: bool = False
    persistent_workers: bool = False
    prefetch_factor: int | None = None
    multiprocessing_context: Any = None
    timeout: float = 300.0
    sample_timeout: float | None = 60.0

    def __post_init__(self) -> None:
        check_workers(self.num_workers, self.persistent_workers, self.prefetch_factor)
        timeout = check_seconds("timeout", self.timeout, allow_zero=True) or 0.0
        sample_timeout = check_seconds("sample_timeout", self.sample_timeout, allow_zero=False)
        object.__setattr__(self, "pin_memory", bool(self.pin_memory))
        object.__setattr__(self, "persistent_workers", bool(self.persistent_workers))
        object.__setattr__(self, "timeout", timeout)
        object.__setattr__(self, "sample_timeout", sample_timeout)

    @classmethod
    def of(cls, workers: WorkerOptions | None, keywords: Mapping[str, Any]) -> WorkerOptions:
        """``workers``, or the options the Loader's loose keywords give (never both).

        Raises:
            ConfigError: ``workers`` and a worker keyword set to other than its default.
        """
        defaults = {f.name: f.default for f in dataclasses.fields(cls)}
        given = sorted(k for k, v in keywords.items() if v != defaults[k])
        if workers is None:
            return cls(**keywords)
        if not isinstance(workers, WorkerOptions):
            raise ConfigError(
                f"workers must be a chute.WorkerOptions, got {type(workers).__name__}",
                param="workers",
            )
        if given:
            raise ConfigError(
                f"worker options given twice: workers=WorkerOptions(...) and {', '.join(given)}; "
                f"set them in the WorkerOptions",
                param="workers",
            )
        return workers

"""Where am I: rank, world size, DataLoader worker. A value, passed in, never looked up deep inside.

Everything in chute that depends on the process layout takes a ``World``. Only
``World.detect()`` reads the environment (``torch.distributed``, ``RANK``/``WORLD_SIZE``/
``LOCAL_RANK``, ``torch.utils.data.get_worker_info()``), so a 3-rank × 2-worker test is two
nested loops in one process:

    >>> shares = [World(rank=r, world_size=3).with_worker(w, 2) for r in range(3) for w in range(2)]
    >>> [s.global_worker for s in shares]
    [0, 1, 2, 3, 4, 5]
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, replace
from typing import Any

from chute.errors import ConfigError

__all__ = ["World"]


@dataclass(frozen=True)
class World:
    """The position of this process: ``rank`` of ``world_size``, DataLoader worker of ``num_workers``.

    ``num_workers`` counts the reading processes per rank: 1 when the main process reads
    (``DataLoader(num_workers=0)``), otherwise the DataLoader's worker count.

    Args:
        rank: this rank, ``0 <= rank < world_size``.
        world_size: number of ranks (data-parallel replicas).
        worker_id: this DataLoader worker, ``0 <= worker_id < num_workers``.
        num_workers: reading processes per rank (at least 1).
        local_rank: rank within the node (informational; plans never use it).
    """

    rank: int = 0
    world_size: int = 1
    worker_id: int = 0
    num_workers: int = 1
    local_rank: int = 0

    def __post_init__(self) -> None:
        for name in ("rank", "world_size", "worker_id", "num_workers", "local_rank"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ConfigError(f"World.{name} must be an int, got {value!r}")
        if self.world_size < 1:
            raise ConfigError(f"World.world_size must be >= 1, got {self.world_size}")
        if not 0 <= self.rank < self.world_size:
            raise ConfigError(
                f"World.rank must be in [0, world_size={self.world_size}), got {self.rank}"
            )
        if self.num_workers < 1:
            raise ConfigError(
                f"World.num_workers must be >= 1 (1 means the main process reads), "
                f"got {self.num_workers}"
            )
        if not 0 <= self.worker_id < self.num_workers:
            raise ConfigError(
                f"World.worker_id must be in [0, num_workers={self.num_workers}), "
                f"got {self.worker_id}"
            )
        if self.local_rank < 0:
            raise ConfigError(f"World.local_rank must be >= 0, got {self.local_rank}")

    @property
    def global_worker(self) -> int:
        """This reader's index among all ``world_size * num_workers`` readers."""
        return self.rank * self.num_workers + self.worker_id

    @property
    def total_workers(self) -> int:
        return self.world_size * self.num_workers

    @property
    def is_main(self) -> bool:
        """Rank 0, worker 0: the one reader that should log once for everyone."""
        return self.rank == 0 and self.worker_id == 0

    def with_worker(self, worker_id: int, num_workers: int) -> World:
        """The same rank, seen from DataLoader worker ``worker_id`` of ``num_workers``."""
        return replace(self, worker_id=worker_id, num_workers=num_workers)

    def with_rank(self, rank: int, world_size: int) -> World:
        return replace(self, rank=rank, world_size=world_size)

    @classmethod
    def detect(cls) -> World:
        """Read the layout from ``torch.distributed``, the launcher's environment and the worker.

        Order of trust: an initialised ``torch.distributed`` process group, then ``RANK`` /
        ``WORLD_SIZE`` (set by torchrun, SLURM wrappers, DeepSpeed and accelerate), then a single
        process. Inside a DataLoader worker, ``worker_id`` / ``num_workers`` come from
        ``get_worker_info()``.
        """
        rank, world_size = 0, 1
        local_rank = _env_int("LOCAL_RANK", 0)
        dist = _torch_distributed()
        if dist is not None and dist.is_available() and dist.is_initialized():
            rank, world_size = dist.get_rank(), dist.get_world_size()
        elif "WORLD_SIZE" in os.environ or "RANK" in os.environ:
            rank, world_size = _env_int("RANK", 0), _env_int("WORLD_SIZE", 1)
        worker_id, num_workers = 0, 1
        info = _worker_info()
        if info is not None:
            worker_id, num_workers = info.id, info.num_workers
        return cls(
            rank=rank,
            world_size=world_size,
            worker_id=worker_id,
            num_workers=num_workers,
            local_rank=local_rank,
        )


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(
            f"environment variable {name}={raw!r} is not an integer; it is set by the launcher "
            f"(torchrun, SLURM): unset it or fix the launch command"
        ) from None


def _torch_distributed() -> Any:
    # Only look at torch if it is already imported: detecting the world must not pay torch's
    # import time (or require torch) in preprocessing jobs that never use it.
    if "torch" not in sys.modules:
        return None
    import torch.distributed as dist

    return dist


def _worker_info() -> Any:
    if "torch" not in sys.modules:
        return None
    from torch.utils.data import get_worker_info

    return get_worker_info()

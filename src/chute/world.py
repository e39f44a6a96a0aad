"""Where am I: rank, world size, parallel groups, DataLoader worker. A value, passed in.

Everything in chute that depends on the process layout takes a ``World``. Only
``World.detect()`` reads the environment (``torch.distributed``, ``RANK``/``WORLD_SIZE``/
``LOCAL_RANK``, the parallel sizes, ``torch.utils.data.get_worker_info()``), so a 3-rank ×
2-worker test is two nested loops in one process:

    >>> shares = [World(rank=r, world_size=3).with_worker(w, 2) for r in range(3) for w in range(2)]
    >>> [s.global_worker for s in shares]
    [0, 1, 2, 3, 4, 5]

With context parallelism (``cp``), sequence parallelism (``sp``, DeepSpeed Ulysses), tensor
(``tp``) or pipeline (``pp``) parallelism, several ranks share one data-parallel rank: they must
get the same samples, and plans deal over the ``dp_size`` data-parallel ranks only. Ranks are
numbered as Megatron-LM numbers them, the first dimension of ``order`` innermost::

    World(rank, world_size=8, cp=2)             order "tp-sp-cp-dp-pp" (the default)
    rank      0  1  2  3  4  5  6  7
    cp_rank   0  1  0  1  0  1  0  1            rank = dp_rank * cp + cp_rank
    dp_rank   0  0  1  1  2  2  3  3            ranks 0 and 1 read the same samples

    >>> [World(rank=r, world_size=8, cp=2).dp_rank for r in range(8)]
    [0, 0, 1, 1, 2, 2, 3, 3]
    >>> World(rank=5, world_size=8, cp=2).group("cp")
    (4, 5)
"""

from __future__ import annotations

import os
import sys
from dataclasses import KW_ONLY, dataclass, replace
from typing import Any

from chute.errors import ConfigError

__all__ = ["DEFAULT_ORDER", "DIMENSIONS", "World"]

# The parallel dimensions a World knows, and Megatron-LM's default rank order ("tp-cp-ep-dp-pp":
# tensor parallel innermost) with DeepSpeed-Ulysses sequence parallelism placed next to tp, where
# DeepSpeed and XTuner put it (consecutive ranks). Expert parallelism splits data-parallel ranks
# in Megatron (each reads its own samples), so it is no dimension here.
DIMENSIONS = ("tp", "sp", "cp", "dp", "pp")
DEFAULT_ORDER = "tp-sp-cp-dp-pp"

# Where World.detect() finds each size when it is not passed: chute's own variable, then the one
# `accelerate launch` sets from a config's parallelism_config (its ParallelismConfig reads it).
_SIZE_ENV = {
    "cp": ("CHUTE_CP", "PARALLELISM_CONFIG_CP_SIZE"),
    "sp": ("CHUTE_SP", "PARALLELISM_CONFIG_SP_SIZE"),
    "tp": ("CHUTE_TP", "PARALLELISM_CONFIG_TP_SIZE"),
    "pp": ("CHUTE_PP",),
}
_ORDER_ENV = "CHUTE_RANK_ORDER"


@dataclass(frozen=True)
class World:
    """The position of this process: ``rank`` of ``world_size``, its parallel groups, its worker.

    ``num_workers`` counts the reading processes per rank: 1 when the main process reads
    (``DataLoader(num_workers=0)``), otherwise the DataLoader's worker count.

    Args:
        rank: this rank, ``0 <= rank < world_size`` (the global rank).
        world_size: number of ranks (processes), all parallel dimensions together.
        worker_id: this DataLoader worker, ``0 <= worker_id < num_workers``.
        num_workers: reading processes per rank (at least 1).
        local_rank: rank within the node (informational; plans never use it).
        local_world_size: ranks on this node (torchrun's ``LOCAL_WORLD_SIZE``): with more
            than one, a length-aware plan is built once per node and memory-mapped by the
            others, and ``chute preprocess`` divides the cores among them. Never in a plan.
        cp: context-parallel size (ring attention, TransformerEngine THD): ranks holding
            slices of the same samples.
        sp: sequence-parallel size (DeepSpeed Ulysses): ranks holding slices of the same rows.
        tp: tensor-parallel size: ranks holding the same batch.
        pp: pipeline-parallel size: ranks holding the same batch (stages of one replica).
        order: the rank layout, innermost dimension first, as Megatron-LM's ``order``
            (``"tp-sp-cp-dp-pp"``: ``rank = dp_rank * cp + cp_rank`` when only ``cp`` is set).
            Every dimension of size above 1 must appear; ``dp`` is ``world_size`` divided by
            the others.

    Example:
        >>> w = World(rank=6, world_size=8, cp=2, tp=2)
        >>> (w.tp_rank, w.cp_rank, w.dp_rank, w.dp_size)
        (0, 1, 1, 2)
        >>> w.dp_peers          # the ranks that get the same samples as rank 6
        (4, 5, 6, 7)
    """

    rank: int = 0
    world_size: int = 1
    worker_id: int = 0
    num_workers: int = 1
    local_rank: int = 0
    _: KW_ONLY
    local_world_size: int = 1
    cp: int = 1
    sp: int = 1
    tp: int = 1
    pp: int = 1
    order: str = DEFAULT_ORDER

    def __post_init__(self) -> None:
        ints = ("rank", "world_size", "worker_id", "num_workers", "local_rank", "local_world_size")
        for name in (*ints, *_SIZE_ENV):
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
        if self.local_world_size < 1:
            raise ConfigError(
                f"World.local_world_size must be >= 1 (ranks on this node), got "
                f"{self.local_world_size}"
            )
        for name in _SIZE_ENV:
            if getattr(self, name) < 1:
                raise ConfigError(
                    f"World.{name} must be >= 1 (1: no {name} parallelism), got "
                    f"{getattr(self, name)}"
                )
        shared = self.tp * self.sp * self.cp * self.pp
        if self.world_size % shared:
            set_ = ", ".join(f"{n}={getattr(self, n)}" for n in _SIZE_ENV if getattr(self, n) > 1)
            raise ConfigError(
                f"World.world_size={self.world_size} is not a multiple of tp x sp x cp x pp = "
                f"{shared} ({set_}): each data-parallel rank is a whole group of {shared} ranks. "
                f"Launch a multiple of {shared} processes, or change the parallel sizes"
            )
        _parse_order(self.order, self._sizes())

    # -- the parallel layout -----------------------------------------------------------------

    def _sizes(self) -> dict[str, int]:
        shared = self.tp * self.sp * self.cp * self.pp
        return {
            "tp": self.tp,
            "sp": self.sp,
            "cp": self.cp,
            "dp": self.world_size // shared,
            "pp": self.pp,
        }

    def _strides(self) -> dict[str, int]:
        """Each dimension's step in global ranks: the product of the sizes inside it."""
        sizes = self._sizes()
        strides, step = {}, 1
        for name in _parse_order(self.order, sizes):
            strides[name] = step
            step *= sizes[name]
        return strides

    def coords(self) -> dict[str, int]:
        """This rank's index in every dimension (``{"tp": 0, "sp": 0, "cp": 1, ...}``)."""
        sizes, strides = self._sizes(), self._strides()
        return {n: (self.rank // strides[n]) % sizes[n] for n in DIMENSIONS}

    @property
    def dp_size(self) -> int:
        """Data-parallel ranks: ``world_size / (tp * sp * cp * pp)``; plans deal over these."""
        return self._sizes()["dp"]

    @property
    def dp_rank(self) -> int:
        """This rank's data-parallel index: which share of every step it gets."""
        return self.coords()["dp"]

    @property
    def cp_size(self) -> int:
        return self.cp

    @property
    def cp_rank(self) -> int:
        """This rank's place in its context-parallel group (which zig-zag slice it holds)."""
        return self.coords()["cp"]

    @property
    def sp_size(self) -> int:
        return self.sp

    @property
    def sp_rank(self) -> int:
        """This rank's place in its sequence-parallel group (which contiguous slice it holds)."""
        return self.coords()["sp"]

    @property
    def tp_rank(self) -> int:
        return self.coords()["tp"]

    @property
    def pp_rank(self) -> int:
        return self.coords()["pp"]

    def group(self, dim: str) -> tuple[int, ...]:
        """The global ranks of this rank's group along ``dim`` (``"cp"``, ``"dp"``, ...), in order.

        ``dist.new_group`` must be called for every group on every rank: build them all from
        ``groups(dim)``, and use the one that ``group(dim)`` names.
        """
        stride = self._strides()[_check_dim(dim)]
        base = self.rank - self.coords()[dim] * stride
        return tuple(base + i * stride for i in range(self._sizes()[dim]))

    def groups(self, dim: str) -> list[tuple[int, ...]]:
        """Every group along ``dim``, each as its global ranks (for ``dist.new_group``).

        Example:
            >>> World(world_size=4, cp=2).groups("cp"), World(world_size=4, cp=2).groups("dp")
            ([(0, 1), (2, 3)], [(0, 2), (1, 3)])
        """
        stride, size = self._strides()[_check_dim(dim)], self._sizes()[dim]
        firsts = [r for r in range(self.world_size) if (r // stride) % size == 0]
        return [tuple(r + i * stride for i in range(size)) for r in firsts]

    @property
    def dp_peers(self) -> tuple[int, ...]:
        """The global ranks with this rank's ``dp_rank``: every one gets the same samples."""
        stride, size = self._strides()["dp"], self._sizes()["dp"]
        return tuple(r for r in range(self.world_size) if (r // stride) % size == self.dp_rank)

    @property
    def is_dp_leader(self) -> bool:
        """The first rank (index 0 in every other dimension) of its data-parallel rank.

        Counts summed over ranks take only these, so samples shared by a group count once.
        """
        return self.rank == self.dp_peers[0]

    def dp_leaders(self) -> list[int]:
        """The global rank of each data-parallel rank's leader, by ``dp_rank``."""
        return [self._strides()["dp"] * d for d in range(self.dp_size)]

    def at(self, rank: int) -> World:
        """The same layout, seen from global ``rank``."""
        return replace(self, rank=rank)

    # -- workers and ranks -------------------------------------------------------------------

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
    def detect(
        cls,
        *,
        cp: int | None = None,
        sp: int | None = None,
        tp: int | None = None,
        pp: int | None = None,
        order: str | None = None,
    ) -> World:
        """Read the layout from ``torch.distributed``, the launcher's environment and the worker.

        Rank and world size, in order of trust: an initialised ``torch.distributed`` process
        group, then ``RANK`` / ``WORLD_SIZE`` (set by torchrun, SLURM wrappers, DeepSpeed and
        accelerate), then a single process. Inside a DataLoader worker, ``worker_id`` /
        ``num_workers`` come from ``get_worker_info()``.

        The parallel sizes: an argument given here, else ``CHUTE_CP`` / ``CHUTE_SP`` /
        ``CHUTE_TP`` / ``CHUTE_PP``, else the variables ``accelerate launch`` sets from a
        config's ``parallelism_config`` (``PARALLELISM_CONFIG_CP_SIZE``, ``..._SP_SIZE``,
        ``..._TP_SIZE``), else 1. torchrun, Megatron-LM and DeepSpeed take these sizes as
        arguments and set no variable, so pass what you pass them (``--context-parallel-size``,
        ``sequence_parallel_size``). ``order``: the argument, else ``CHUTE_RANK_ORDER``, else
        ``"tp-sp-cp-dp-pp"``.

        Example:
            >>> World.detect(cp=1) == World()  # doctest: +SKIP
            True
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
        given = {"cp": cp, "sp": sp, "tp": tp, "pp": pp}
        sizes = {name: _size(name, value) for name, value in given.items()}
        return cls(
            rank=rank,
            world_size=world_size,
            worker_id=worker_id,
            num_workers=num_workers,
            local_rank=local_rank,
            local_world_size=_env_int("LOCAL_WORLD_SIZE", 1),
            order=order or os.environ.get(_ORDER_ENV) or DEFAULT_ORDER,
            **sizes,
        )


def _check_dim(dim: str) -> str:
    if dim not in DIMENSIONS:
        raise ConfigError(f"dim must be one of {DIMENSIONS}, got {dim!r}")
    return dim


def _parse_order(order: Any, sizes: dict[str, int]) -> list[str]:
    """``order`` as the list of all dimensions, innermost first (missing size-1 ones appended)."""
    if not isinstance(order, str):
        raise ConfigError(f"World.order must be a string like {DEFAULT_ORDER!r}, got {order!r}")
    names = [n.strip() for n in order.lower().split("-") if n.strip()]
    unknown = [n for n in names if n not in DIMENSIONS]
    if unknown or len(set(names)) != len(names):
        raise ConfigError(
            f"World.order={order!r} must name each of {', '.join(DIMENSIONS)} at most once, "
            f"innermost first, joined by '-' (e.g. {DEFAULT_ORDER!r})"
        )
    missing = [n for n in DIMENSIONS if n not in names and sizes[n] > 1]
    if missing:
        raise ConfigError(
            f"World.order={order!r} leaves out {', '.join(missing)}, whose size is above 1 "
            f"({', '.join(f'{n}={sizes[n]}' for n in missing)}); name every dimension in use, "
            f"e.g. {DEFAULT_ORDER!r}"
        )
    return names + [n for n in DIMENSIONS if n not in names]


def _size(name: str, given: int | None) -> int:
    if given is not None:
        return given
    for var in _SIZE_ENV[name]:
        if os.environ.get(var, "").strip():
            return _env_int(var, 1)
    return 1


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(
            f"environment variable {name}={raw!r} is not an integer; it is set by the launcher "
            f"(torchrun, SLURM, accelerate) or by you: unset it or fix the launch command"
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

"""``ChunkStage``: the base class of the cache's extra per-chunk stages (see ``stages.py``).

It lives apart from the registry so a stage implementation (``pixels.py``) imports its base
without importing the registry that names it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

__all__ = ["ChunkStage", "TaskRunner"]

R = TypeVar("R")


class TaskRunner(Protocol):
    """Runs independent tasks on the build's engine (``chute.cache.engines``)."""

    def map(
        self, fn: Callable[[Any], R], items: Sequence[Any], *, limit: int | None = None
    ) -> Iterable[R]:
        """``fn(item)`` for every item as parallel tasks (``limit`` at once), in order."""
        ...


class ChunkStage:
    """Base of extra per-chunk stages. Subclasses set ``name`` and override what they add.

    A stage must be picklable (it travels to the writer's worker processes) and deterministic
    (the same samples give the same bytes), or resumed and multi-node builds would differ.

    Attributes:
        name: the stage's name; its columns and file suffixes should start with it.
        version: bump when the same options would write different output.
        options: the options it was made with (part of its fingerprint).
    """

    name = "stage"
    version = 1

    def __init__(self, **options: Any):
        self.options = dict(options)

    def fingerprint(self) -> dict[str, Any]:
        """What shapes this stage's output (JSON-able)."""
        return {"name": self.name, "version": self.version, "options": dict(self.options)}

    def columns(self, samples: list[dict[str, Any]]) -> Mapping[str, Any]:
        """Extra columns for the chunk: name -> ``pyarrow.Array`` with one value per sample."""
        return {}

    def files(self, chunk: int, samples: list[dict[str, Any]]) -> Mapping[str, bytes]:
        """Extra files for the chunk: suffix -> bytes (written as ``chunks/<k>.<suffix>``)."""
        return {}

    def with_tasks(self, tasks: TaskRunner) -> ChunkStage:
        """This stage, with ``tasks`` to spread the work of ``finish`` over the build's engine.

        ``tasks.map(fn, items, limit=None)`` runs ``fn(item)`` for every item as independent
        tasks (processes of this machine, or Ray tasks across a cluster) and yields the results
        in order. ``fn`` and the items must be picklable, and a task may run again after a
        failure (write each task's files atomically). The default returns the stage unchanged:
        its ``finish`` runs in the finalizing process alone.
        """
        return self

    def finish(self, folder: Path, chunks: Callable[[], Iterator[Any]]) -> Mapping[str, Any] | None:
        """Once every chunk is committed, before the manifest: write what spans all chunks.

        Args:
            folder: ``DIR/<name>``, this stage's own folder (created; ``--overwrite`` deletes
                it). Write atomically and deterministically: a crash here means the next run
                calls ``finish`` again, and several ranks may call it at once.
            chunks: yields every chunk's Arrow record batch, in order (e.g. to collect all
                image paths for a pre-decoded pixel store).

        Returns:
            JSON-able facts the manifest records under ``stage_outputs.<name>``, or ``None``.
        """
        return None

"""Extra per-chunk stages: more columns or files written with each chunk of a cache.

The cache writer runs the recipe over a chunk's records, then hands the chunk's samples to each
stage. A stage may add columns to the chunk's Arrow table (one value per sample) and files
beside it (``chunks/000007.<suffix>``); both are committed with the chunk, before its commit
record, and the stage's ``fingerprint()`` joins the cache's fingerprint (so a cache built with
other stage options is a mismatch, named field by field). Once every chunk is committed,
``finish`` may write what spans the whole cache into ``DIR/<name>/`` (e.g. a pixel store keyed
by image path), before the manifest.

The pre-decoded media cache (resized pixels, so training decodes no JPEG) is such a stage,
built in: ``pixels`` (``chute.cache.pixels``, ``chute preprocess --pixels``). Stages are named in
the config's ``stages:`` section and looked up in ``STAGES``::

    stages:
      pixels: {size: 336}

Example:
    >>> import pyarrow as pa
    >>> class Trained(ChunkStage):
    ...     name = "trained"
    ...     def columns(self, samples):
    ...         return {"trained": pa.array([int((s["labels"] != -100).sum()) for s in samples],
    ...                                     pa.int32())}
    >>> register_stage("trained", lambda options, recipe: Trained())
    >>> make_stages({"trained": {}}, recipe=None)[0].fingerprint()
    {'name': 'trained', 'version': 1, 'options': {}}
    >>> del STAGES["trained"]
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from chute.errors import ConfigError

__all__ = ["STAGES", "ChunkStage", "make_stages", "register_stage"]


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


StageFactory = Callable[[Mapping[str, Any], Any], ChunkStage]


def _pixels(options: Mapping[str, Any], recipe: Any) -> ChunkStage:
    from chute.cache.pixels import PixelsStage  # imports the media package only when used

    return PixelsStage.from_options(options, recipe)


STAGES: dict[str, StageFactory] = {"pixels": _pixels}


def register_stage(name: str, factory: StageFactory) -> None:
    """Make ``stages: {name: {...}}`` in a config build ``factory(options, recipe)``."""
    if not isinstance(name, str) or not name.isidentifier():
        raise ConfigError(f"stage name must be an identifier, got {name!r}")
    STAGES[name] = factory


def make_stages(spec: Mapping[str, Mapping[str, Any]], recipe: Any) -> list[ChunkStage]:
    """The stages a config names, in name order (so every rank builds the same list)."""
    out = []
    for name in sorted(spec):
        if name not in STAGES:
            known = ", ".join(sorted(STAGES)) or "none are installed"
            raise ConfigError(f"stages.{name}: unknown stage ({known})")
        try:
            stage = STAGES[name](dict(spec[name] or {}), recipe)
        except ConfigError as exc:
            raise ConfigError(f"stages.{name}.{exc}") from None
        if not isinstance(stage, ChunkStage):
            raise ConfigError(f"stages.{name}: the factory returned {stage!r}, not a ChunkStage")
        out.append(stage)
    return out

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

from collections.abc import Callable, Mapping
from typing import Any

from chute.cache.chunk_stage import ChunkStage
from chute.errors import ConfigError

__all__ = ["STAGES", "ChunkStage", "make_stages", "register_stage"]


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

"""Where a build's chunks run: ``local`` (a process pool per rank) or ``ray`` (Ray tasks).

See ``base.py`` for what an engine does, ``local.py`` and ``ray_engine.py`` for the two engines.

Example:
    >>> from chute.cache.config import CacheOptions
    >>> make_engine(CacheOptions(workers=2)).describe()
    'local, 2 processes'
    >>> make_engine(CacheOptions(engine="ray", address="auto")).describe()
    'ray (not started: nothing to run)'
"""

from __future__ import annotations

from chute.cache.config import CacheOptions
from chute.cache.engines.base import Engine, chunk_failure, run_chunk
from chute.cache.engines.local import LocalEngine, default_workers
from chute.cache.engines.ray_engine import RayEngine

__all__ = [
    "Engine",
    "LocalEngine",
    "RayEngine",
    "chunk_failure",
    "default_workers",
    "make_engine",
    "run_chunk",
]


def make_engine(options: CacheOptions) -> Engine:
    """The engine ``cache.engine`` names, set up from the cache options."""
    if options.engine == "ray":
        return RayEngine(options.address, workers=options.workers, runtime_env=options.runtime_env)
    return LocalEngine(options.workers)

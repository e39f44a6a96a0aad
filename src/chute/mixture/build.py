"""``chute preprocess`` of a mixture: one cache per dataset, each tokenized once.

::

    DIR/alpaca/     the cache of dataset "alpaca" (its own sources and recipe options)
    DIR/tools/      ...
    DIR/hashes/     each dataset's content hash per record (for val splits on any machine)
    DIR/mixture.yaml   the mixture as built (absolute paths); amounts are read from here
    DIR/caches.json    written last: the set is complete

A dataset's cache depends on its files and its recipe (the run-wide options and its own), never
on ``weight``, ``repeat``, ``samples``, ``max_samples`` or ``val``: changing the mix re-tokenizes
nothing, and running the command again after adding a dataset builds only that one. A dataset
whose recipe options changed is refused (``FingerprintMismatch`` naming the dataset and each
field) unless ``overwrite``, which rebuilds exactly the datasets that changed.

Example:
    >>> report = preprocess_mixture("mixture.yaml", out="cache/")  # doctest: +SKIP
    >>> {n: r.samples for n, r in report.datasets.items()}  # doctest: +SKIP
    {'alpaca': 999, 'tools': 300}
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from chute._internal.files import atomic_file
from chute._internal.remote import absolute, is_url
from chute.cache.build import PreprocessReport, parse_shard, preprocess
from chute.cache.cacheset import SET_FILE, write_cache_set
from chute.errors import CacheError, ChuteError, ConfigError, FingerprintMismatch, SourceError
from chute.mixture.config import Mixture, is_mixture_config
from chute.mixture.hashes import content_hashes
from chute.mixture.opened import HASHES_DIR, MIXTURE_FILE, _spec
from chute.world import World

__all__ = ["MixtureReport", "preprocess_any", "preprocess_mixture"]

log = logging.getLogger("chute.cache")


@dataclass
class MixtureReport:
    """What ``preprocess_mixture`` did: one ``PreprocessReport`` per dataset."""

    path: str
    datasets: dict[str, PreprocessReport] = field(default_factory=dict)
    finalized: bool = False
    seconds: float = 0.0

    @property
    def samples(self) -> int:
        return sum(r.samples for r in self.datasets.values())

    @property
    def rejected(self) -> int:
        return sum(r.rejected for r in self.datasets.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "finalized": self.finalized,
            "samples": self.samples,
            "rejected": self.rejected,
            "seconds": round(self.seconds, 3),
            "datasets": {n: r.to_json() for n, r in self.datasets.items()},
        }


def preprocess_mixture(
    config: Mixture | Mapping[str, Any] | str | os.PathLike[str],
    *,
    out: str | os.PathLike[str] | None = None,
    overrides: Sequence[str] = (),
    overwrite: bool = False,
    shard: str | tuple[int, int] | None = None,
    progress: bool | None = None,
    **options: Any,
) -> MixtureReport:
    """Build (or finish) the cache of every dataset of a mixture (see the module docstring).

    Args:
        config: a ``Mixture``, its mapping, or its YAML file.
        out: the directory (default: the config's ``out``); local only.
        overrides: dotted ``key=value`` settings (``datasets.alpaca.system=...``).
        overwrite: rebuild the datasets whose cache was built with other options.
        shard: ``"i/N"`` (default: ``RANK``/``WORLD_SIZE``): this rank's share of every cache.
        progress: as for ``chute.preprocess``.
        **options: passed to ``chute.preprocess`` for every dataset (``workers``,
            ``full_hash``, ``wait_timeout``, ``pixels``).
    """
    t0 = time.perf_counter()
    mixture = Mixture.load(config, overrides)
    target = out if out is not None else mixture.out
    if target is None:
        raise ConfigError(
            "no output directory; pass --out DIR (or out: in the config)", param="out"
        )
    if is_url(os.fspath(target)):
        raise ConfigError(
            "a mixture's caches are written to a local directory for now; "
            "preprocess each dataset to its URL alone",
            param="out",
        )
    if mixture.recipe is None:
        raise ConfigError("a mixture to preprocess needs a recipe with a tokenizer", param="recipe")
    mixture = mixture.resolved()
    root = Path(absolute(target))
    report = MixtureReport(str(root))
    for ds in mixture:
        report.datasets[ds.name] = _one(mixture, ds.name, root, overwrite, shard, progress, options)
    world = parse_shard(shard) or World.detect()
    if world.rank == 0 and all(r.manifest for r in report.datasets.values()):
        _finish(mixture, root, progress)
        report.finalized = True
    report.seconds = time.perf_counter() - t0
    return report


def _one(
    mixture: Mixture,
    name: str,
    root: Path,
    overwrite: bool,
    shard: Any,
    progress: bool | None,
    options: Mapping[str, Any],
) -> PreprocessReport:
    config = mixture.preprocess_config(name)
    where = root / name
    try:
        try:
            return preprocess(config, out=where, shard=shard, progress=progress, **options)
        except FingerprintMismatch:
            if not overwrite:
                raise
            return preprocess(
                config, out=where, shard=shard, progress=progress, overwrite=True, **options
            )
    except FingerprintMismatch as exc:
        raise FingerprintMismatch(
            f"dataset {name!r}: {exc}\n(--overwrite rebuilds only the datasets whose options "
            f"changed)",
            [(f"datasets.{name}.{f.removeprefix('fingerprint.')}", a, b) for f, a, b in exc.fields],
        ) from None
    except (ConfigError, CacheError, SourceError) as exc:
        raise type(exc)(f"dataset {name!r}: {exc}") from None
    except ChuteError:  # a budget exceeded, ...: raised as it is, the dataset logged
        log.error("preprocessing dataset %r failed", name)
        raise


def _finish(mixture: Mixture, root: Path, progress: bool | None) -> None:
    """Hashes, the mixture file, then the set's marker (the commit point)."""
    from chute.sources import open_source

    (root / HASHES_DIR).mkdir(parents=True, exist_ok=True)
    for ds in mixture:
        hashes = content_hashes(
            open_source(ds.sources),
            _spec(mixture, ds.name),
            progress=progress,
            desc=f"hashes {ds.name}",
        )
        with atomic_file(root / HASHES_DIR / f"{ds.name}.npy") as f:
            np.save(f, np.asarray(hashes))
    with atomic_file(root / MIXTURE_FILE) as f:
        f.write(mixture.to_yaml().encode())
    known = []
    marker = root / SET_FILE
    if marker.is_file():
        import orjson

        known = [
            n for n in orjson.loads(marker.read_bytes()).get("names", []) if (root / n).is_dir()
        ]
    write_cache_set(root, [*mixture.names, *(n for n in known if n not in mixture.names)])


def preprocess_any(config: Any = None, **kwargs: Any) -> Any:
    """Build a token cache (docs/cache.md); a mixture's config builds one cache per dataset.

    ``chute.preprocess``: takes ``chute.cache.preprocess``'s arguments. A ``Mixture`` or a
    config with ``datasets`` goes to ``preprocess_mixture`` (docs/mixtures.md), anything else
    to ``chute.cache.preprocess`` unchanged.

    Example:
        >>> preprocess_any("train.yaml", out="cache/")  # doctest: +SKIP
    """
    if isinstance(config, Mixture) or (config is not None and is_mixture_config(config)):
        return preprocess_mixture(config, **kwargs)
    return preprocess(config, **kwargs)

"""A directory of named caches: what ``chute preprocess`` writes for a mixture, one per dataset.

::

    DIR/caches.json        {"format": "chute.cache_set", "names": ["alpaca", "tools"]} (last)
    DIR/alpaca/            a complete cache (manifest.json, chunks/, lengths.npy, ...)
    DIR/tools/
    DIR/...                whatever the writer keeps beside them (a mixture: mixture.yaml, hashes/)

``open_cache(DIR)`` opens such a directory as a ``CacheSet`` (each member checked as
``open_cache`` checks a cache); it knows names and caches, nothing about weights. Each member is
an ordinary cache: ``open_cache(DIR / name)`` opens it alone.

Example:
    >>> caches = open_cache_set("cache/")  # doctest: +SKIP
    >>> caches.names, len(caches["alpaca"])  # doctest: +SKIP
    (['alpaca', 'tools'], 999)
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from chute._internal.files import atomic_file
from chute.errors import CacheError

__all__ = ["SET_FILE", "CacheSet", "is_cache_set", "open_cache_set", "write_cache_set"]

SET_FILE = "caches.json"
SET_FORMAT = "chute.cache_set"


def is_cache_set(path: Any) -> bool:
    """Whether ``path`` is a local directory holding a set of named caches."""
    return isinstance(path, str | os.PathLike) and (Path(path) / SET_FILE).is_file()


def write_cache_set(root: str | os.PathLike[str], names: list[str]) -> None:
    """Publish ``root`` as the set of the caches in ``root/<name>`` (after they are complete)."""
    with atomic_file(Path(root) / SET_FILE) as f:
        f.write(
            orjson.dumps(
                {"format": SET_FORMAT, "version": 1, "names": list(names)},
                option=orjson.OPT_INDENT_2,
            )
        )


class CacheSet:
    """Named caches of one directory (see the module docstring)."""

    def __init__(self, root: str | os.PathLike[str], names: list[str], caches: list[Any]):
        self.root = str(root)
        self.names = list(names)
        self.caches = list(caches)

    def __getitem__(self, name: str) -> Any:
        try:
            return self.caches[self.names.index(name)]
        except ValueError:
            raise KeyError(
                f"no cache named {name!r} in {self.root} (it has {self.names})"
            ) from None

    def __len__(self) -> int:
        return len(self.caches)

    def fingerprint(self) -> dict[str, Any]:
        return {
            "kind": SET_FORMAT,
            "caches": [
                {"name": n, **c.fingerprint()} for n, c in zip(self.names, self.caches, strict=True)
            ],
        }

    def __repr__(self) -> str:
        parts = ", ".join(f"{n}: {len(c)}" for n, c in zip(self.names, self.caches, strict=True))
        return f"CacheSet({self.root!r}, {parts})"


def open_cache_set(
    root: str | os.PathLike[str], open_one: Callable[..., Any], *, verify_sources: bool = True
) -> CacheSet:
    """Open every cache of a set with ``open_one`` (``open_cache``, which checks each)."""
    path = Path(root) / SET_FILE
    try:
        meta = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        raise CacheError(f"{root} is not a complete set of caches ({path}: {exc})") from None
    if not isinstance(meta, dict) or meta.get("format") != SET_FORMAT:
        raise CacheError(f"{path} is not a chute cache set (format {meta.get('format')!r})")
    names = [str(n) for n in meta.get("names", [])]
    caches = [open_one(Path(root) / n, verify_sources=verify_sources) for n in names]
    return CacheSet(root, names, caches)

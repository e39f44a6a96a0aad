"""``RemoteOptions``: how chute talks to object storage, and the ``CHUTE_REMOTE_*`` defaults.

A public value (``chute.RemoteOptions``) that sources, media and the cache take as an argument,
so it sits at the bottom of the package with ``errors`` and ``world``: the fsspec plumbing that
reads it (``chute._internal.remote``, which re-exports these names) and every layer above may
import it. ``options_from_env`` reads the environment variables the command line and every
process it starts share; ``parse_size`` reads sizes such as ``20GB``.

Example:
    >>> RemoteOptions(cache_limit="512MiB").cache_limit
    536870912
    >>> options_from_env({"CHUTE_REMOTE_RETRIES": "8"}) == RemoteOptions(retries=8)
    True
"""

from __future__ import annotations

import difflib
import os
import re
from dataclasses import dataclass
from typing import Any

from chute.errors import ConfigError

__all__ = ["ENV_OPTIONS", "RemoteOptions", "options_from_env", "parse_size"]


@dataclass(frozen=True)
class RemoteOptions:
    """How chute talks to object storage: timeouts, retries, block cache and read-ahead.

    Args:
        timeout: seconds to connect, and to wait for the next bytes of an answer.
        retries: further attempts after a transient failure (a dropped connection, a timeout,
            a 5xx or 429 answer); a missing object or a refused credential is not retried.
        backoff: seconds before the first retry; doubled each time (at most 8 s), with jitter.
        block_size: bytes fetched per ranged request when records are read at random.
        cache_bytes: bytes of blocks one source keeps per process (least recently used go).
        readahead: the largest request a sequential reader grows to (bytes).
        cache_limit: bytes of whole remote files kept on local disk, shared by every process
            of the machine (``<cache>/remote-files``; least recently used out, never a file
            in use); ``None`` (the default): no local copies, ranged reads only. An int, or a
            size such as ``"20GB"`` / ``"512MiB"``.

    Example:
        >>> RemoteOptions(retries=2).retries
        2
        >>> RemoteOptions(timeout=0)
        Traceback (most recent call last):
        ...
        chute.errors.ConfigError: remote.timeout: expected a positive number of seconds, got 0
    """

    timeout: float = 30.0
    retries: int = 5
    backoff: float = 0.5
    block_size: int = 64 * 1024
    cache_bytes: int = 64 << 20
    readahead: int = 8 << 20
    cache_limit: int | None = None

    def __post_init__(self) -> None:
        limit: object = self.cache_limit
        if isinstance(limit, str):  # a size with units, from the environment, a flag or YAML
            try:
                limit = parse_size(limit)
            except ValueError as exc:
                raise ConfigError(f"remote.cache_limit: {exc}") from None
            object.__setattr__(self, "cache_limit", limit)
        if limit is not None and (
            isinstance(limit, bool) or not isinstance(limit, int) or limit < 1
        ):
            raise ConfigError(
                f"remote.cache_limit: expected a number of bytes >= 1 or a size such as "
                f"'20GB', got {limit!r}"
            )
        for name in ("timeout", "backoff"):
            value = getattr(self, name)
            positive = name == "timeout"
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or value < 0
                or (positive and value == 0)
            ):
                want = "a positive number of seconds" if positive else "seconds >= 0"
                raise ConfigError(f"remote.{name}: expected {want}, got {value!r}")
        for name in ("retries", "block_size", "cache_bytes", "readahead"):
            value = getattr(self, name)
            low = 0 if name == "retries" else 1
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ConfigError(f"remote.{name}: expected an integer >= {low}, got {value!r}")
        if self.cache_bytes < self.block_size:
            raise ConfigError(
                f"remote.cache_bytes: {self.cache_bytes} is smaller than one block "
                f"(remote.block_size={self.block_size}); raise cache_bytes"
            )


# Environment variables that set the defaults, for the command line and every process it
# starts (DataLoader workers, pool processes, Ray workers given the same environment).
ENV_OPTIONS = {
    "CHUTE_REMOTE_TIMEOUT": ("timeout", float),
    "CHUTE_REMOTE_RETRIES": ("retries", int),
    "CHUTE_REMOTE_BACKOFF": ("backoff", float),
    "CHUTE_REMOTE_BLOCK_SIZE": ("block_size", int),
    "CHUTE_REMOTE_CACHE_BYTES": ("cache_bytes", int),
    "CHUTE_REMOTE_READAHEAD": ("readahead", int),
    "CHUTE_REMOTE_CACHE_LIMIT": ("cache_limit", str),
}

_UNITS = {
    "": 1,
    "b": 1,
    "k": 10**3,
    "kb": 10**3,
    "m": 10**6,
    "mb": 10**6,
    "g": 10**9,
    "gb": 10**9,
    "t": 10**12,
    "tb": 10**12,
    "kib": 1 << 10,
    "mib": 1 << 20,
    "gib": 1 << 30,
    "tib": 1 << 40,
}
_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*$")


def parse_size(text: str) -> int:
    """Bytes of a size written ``20GB``, ``512MiB``, ``1.5T`` or ``4096``.

    ``K``, ``M``, ``G``, ``T`` (with or without ``B``) are decimal; ``KiB`` ... ``TiB`` powers of two.

    Example:
        >>> parse_size("20GB"), parse_size("512MiB"), parse_size("4096")
        (20000000000, 536870912, 4096)
        >>> parse_size("lots")
        Traceback (most recent call last):
        ...
        ValueError: expected a size such as 20GB, 512MiB or 4096 (bytes), got 'lots'
    """
    m = _SIZE.match(str(text))
    unit = m.group(2).lower() if m else None
    if m is None or unit not in _UNITS:
        raise ValueError(f"expected a size such as 20GB, 512MiB or 4096 (bytes), got {text!r}")
    return int(float(m.group(1)) * _UNITS[unit])


def options_from_env(env: dict[str, str] | None = None) -> RemoteOptions:
    """``RemoteOptions`` with the defaults the ``CHUTE_REMOTE_*`` variables set.

    Example:
        >>> options_from_env({"CHUTE_REMOTE_RETRIES": "8"}).retries
        8
        >>> options_from_env({"CHUTE_REMOTE_TIMEOUT": "soon"})
        Traceback (most recent call last):
        ...
        chute.errors.ConfigError: CHUTE_REMOTE_TIMEOUT: expected a number, got 'soon'
        >>> options_from_env({"CHUTE_REMOTE_CACHE_LIMT": "1GB"})
        Traceback (most recent call last):
        ...
        chute.errors.ConfigError: CHUTE_REMOTE_CACHE_LIMT (did you mean CHUTE_REMOTE_CACHE_LIMIT?): chute reads no such variable; the CHUTE_REMOTE_ variables are CHUTE_REMOTE_TIMEOUT, CHUTE_REMOTE_RETRIES, CHUTE_REMOTE_BACKOFF, CHUTE_REMOTE_BLOCK_SIZE, CHUTE_REMOTE_CACHE_BYTES, CHUTE_REMOTE_READAHEAD, CHUTE_REMOTE_CACHE_LIMIT
    """
    env = dict(os.environ) if env is None else env
    unknown = sorted(v for v in env if v.startswith("CHUTE_REMOTE_") and v not in ENV_OPTIONS)
    if unknown:  # a misspelled variable was silently the default
        close = difflib.get_close_matches(unknown[0], list(ENV_OPTIONS), n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise ConfigError(
            f"{unknown[0]}{hint}: chute reads no such variable; the CHUTE_REMOTE_ variables "
            f"are {', '.join(ENV_OPTIONS)}"
        )
    values: dict[str, Any] = {}
    for variable, (field, kind) in ENV_OPTIONS.items():
        text = env.get(variable, "").strip()
        if not text:
            continue
        try:
            values[field] = kind(text)
        except ValueError:
            want = "an integer" if kind is int else "a number"
            raise ConfigError(f"{variable}: expected {want}, got {text!r}") from None
    try:
        return RemoteOptions(**values)
    except ConfigError as exc:
        names = {field: variable for variable, (field, _) in ENV_OPTIONS.items()}
        message = str(exc)
        for field, variable in names.items():
            message = message.replace(f"remote.{field}:", f"{variable}:")
        raise ConfigError(message) from None

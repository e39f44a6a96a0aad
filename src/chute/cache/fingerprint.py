"""The fingerprint of a cache: everything that shaped its files, compared field by field.

A fingerprint is plain JSON data::

    format, format_version     the on-disk layout ("chute.cache", 1)
    sources                    per file: path, records, size, mtime_ns, edge_hash (+ full_hash)
    recipe                     Recipe.fingerprint(): tokenizer files and special tokens, template,
                               max_length, overflow, train_on, format and column mapping, media
    stages                     each extra stage's own fingerprint (e.g. pre-decoded media)
    layout                     chunk_size and the token dtype

``differences`` lists what differs as ``(dotted.name, a, b)``; ``mismatch`` turns them into a
``FingerprintMismatch`` whose message names each field with both values and the command that
rebuilds the cache.

Example:
    >>> err = mismatch("/c", "was built for a different recipe", [("max_length", 2048, 4096)],
    ...                "recipe")
    >>> print(err)  # doctest: +ELLIPSIS
    the cache at /c was built for a different recipe:
      max_length differs: cache 2048, recipe 4096
    Rebuild it: chute preprocess /c/config.yaml --out /c --overwrite ...
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from chute._internal.fields import diff_fields
from chute._internal.objects import ETAG_NOTE, object_full_hash, object_identity
from chute._internal.remote import absolute
from chute.cache.layout import CACHE_FORMAT, FORMAT_VERSION
from chute.errors import FingerprintMismatch, SourceError

__all__ = [
    "build_fingerprint",
    "differences",
    "digest",
    "mismatch",
    "source_changes",
    "sources_fingerprint",
]

Diff = tuple[str, Any, Any]
_SHOWN = 12


def digest(value: Any) -> str:
    """A short stable hash of JSON-able data (keys sorted)."""
    blob = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    return hashlib.blake2b(blob, digest_size=16).hexdigest()


def sources_fingerprint(
    source: Any, *, whole: bool, progress: Callable[[int], None] | None = None
) -> dict[str, Any]:
    """Identity of every file of a source, as the user named it (not an index copy).

    Files in object storage are named by their URL, their identity being size and ETag
    (``chute._internal.objects.RemoteIdentity.to_json``); never a credential.

    Args:
        source: the ``JsonlSource`` or ``ParquetSource``.
        whole: also hash each file whole (``full_hash``).
        progress: called with the bytes of each file hashed whole.
    """
    files = []
    for f in source.files:
        ident = object_identity(f.path)
        entry: dict[str, Any] = {
            "path": absolute(f.path),
            "records": len(f),
            **ident.to_json(),
        }
        if whole:
            entry["full_hash"] = object_full_hash(f.path)
            if progress is not None:
                progress(ident.size)
        files.append(entry)
    return {"records": len(source), "full_hash": bool(whole), "files": files}


def build_fingerprint(
    sources: dict[str, Any],
    recipe: dict[str, Any],
    stages: dict[str, Any],
    layout: dict[str, Any],
) -> dict[str, Any]:
    return {
        "format": CACHE_FORMAT,
        "format_version": FORMAT_VERSION,
        "sources": sources,
        "recipe": recipe,
        "stages": stages,
        "layout": layout,
    }


def differences(a: Any, b: Any, prefix: str = "") -> list[Diff]:
    """Every leaf where ``a`` and ``b`` differ (JSON round-tripped first, so tuples == lists)."""
    a = orjson.loads(orjson.dumps(a))
    b = orjson.loads(orjson.dumps(b))
    return diff_fields(a, b, prefix)


def source_changes(sources: dict[str, Any]) -> list[Diff]:
    """How the source files differ now from what a fingerprint recorded.

    Without ``full_hash``: size, mtime and the hash of both ends of each file (a remote
    object: size and ETag, see ``RemoteIdentity.to_json``). With it: size and the whole-file
    hash (a copy with a new mtime, or an object uploaded again under another ETag, but the
    same bytes is the same source).
    """
    out: list[Diff] = []
    for entry in sources.get("files", []):
        path = entry["path"]
        name = f"source {path}"
        try:
            now = object_identity(path).to_json()
        except SourceError:
            out.append((name, "present", "missing"))
            continue
        keys = ("size",) if sources.get("full_hash") else tuple(now)
        diffs = [(f"{name}: {k}", entry.get(k), now[k]) for k in keys if entry.get(k) != now[k]]
        if not diffs and sources.get("full_hash"):
            whole = object_full_hash(path)
            if whole != entry.get("full_hash"):
                diffs.append((f"{name}: full_hash", entry.get("full_hash"), whole))
        out += diffs
    return out


def _short(value: Any, limit: int = 160) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def rebuild_command(root: str | os.PathLike[str], overrides: Sequence[str] = ()) -> str:
    """The command that rebuilds the cache at ``root`` from its stored config."""
    root = os.fspath(root)
    extra = "".join(f" {o}" for o in overrides)
    return f"chute preprocess {os.path.join(root, 'config.yaml')} --out {root} --overwrite{extra}"


def resume_command(root: str | os.PathLike[str]) -> str:
    """The command that completes the cache at ``root`` again from its stored config.

    Without ``--overwrite``: what is committed and intact is kept; what is missing (a deleted
    chunk record, a deleted ``lengths.npy``) is built again.
    """
    root = os.fspath(root)
    return f"chute preprocess {os.path.join(root, 'config.yaml')} --out {root}"


# The fields that say most about a mismatch first: another tokenizer explains every other line
# (its media tokens, its template's control tokens), so it must not sink below the cut
_TELLING = ("tokenizer", "template", "max_length", "format", "task")


def _telling(name: str) -> int:
    head = name.split(".", 1)[0]
    return _TELLING.index(head) if head in _TELLING else len(_TELLING)


def mismatch(
    root: str | os.PathLike[str],
    headline: str,
    diffs: Sequence[Diff],
    other: str,
    *,
    overrides: Sequence[str] = (),
    fix: str | None = None,
) -> FingerprintMismatch:
    """A ``FingerprintMismatch`` naming each difference and how to rebuild.

    Args:
        root: the cache directory.
        headline: what happened, after "the cache at DIR", e.g. ``"was built for a different
            recipe"``.
        diffs: ``(field, cache_value, other_value)`` each.
        other: the name of the other side in the message (``recipe``, ``now``, ``this chute``).
        overrides: dotted overrides that make the stored config match (shown in the command).
        fix: another way out, added to the message.
    """
    shown = sorted(diffs, key=lambda d: _telling(str(d[0])))
    lines = [f"  {name} differs: cache {_short(a)}, {other} {_short(b)}" for name, a, b in shown]
    if len(lines) > _SHOWN:
        lines = [*lines[:_SHOWN], f"  ... and {len(lines) - _SHOWN} more"]
    message = (
        f"the cache at {os.fspath(root)} {headline}:\n"
        + "\n".join(lines)
        + f"\nRebuild it: {rebuild_command(root, overrides)} (or --out a new directory)"
    )
    if fix:
        message += f"; {fix}"
    if any(str(name).endswith("etag") for name, _, _ in diffs):
        message += f"\n{ETAG_NOTE}"
    return FingerprintMismatch(message, [tuple(d) for d in diffs])

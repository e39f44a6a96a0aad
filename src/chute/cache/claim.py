"""Who builds into an output directory: its ``plan.json``, claimed once, checked at every commit.

A build's plan (the fingerprint of everything that shapes the cache, and its chunking) is the
claim on the directory. Every rank of a job computes the same plan bytes; builds of other
configs compute other bytes. So:

* ``claim`` creates ``plan.json`` atomically (a hard link, or a conditional PUT in object
  storage): of builds starting at the same moment exactly one creates it; the others read it
  and join when it is the same plan, or are refused, naming each field that differs;
* ``hold`` runs before a chunk's first file and again before its commit record: the plan there
  must still be this build's (one that took the directory over in between, with
  ``--overwrite``, stops this build before it writes a chunk of the wrong build), and a plan
  released by a failed rank of the same job is claimed again;
* every commit record carries its build's digest (``build_digest``, with the digest of each
  fingerprint field in ``build_parts`` so that a mismatch names the fields), so a chunk of
  another build is never taken for one of this build: resume rebuilds it, finalizing refuses
  it, and ``open_cache`` and ``chute validate`` catch a cache that mixes builds;
* ``released_on_failure`` deletes the plan of a run that fails before any chunk is committed
  (a bad config met past the preflight, Ctrl-C), so the corrected command is not blocked. A
  run killed at once (SIGKILL) cannot: its plan refuses other configs until ``--overwrite``.

::

    build A (max_length 1024)        DIR/plan.json               build B (max_length 512)
    create plan.json ──── wins ───►  A's plan  ◄─── exists ───── create plan.json
    chunk k: hold ── A's? yes ──►                                read it: A's, not B's
             files, record(A)                                    refused: recipe.max_length
                                                                 differs: in DIR 1024, this run 512

Example:
    >>> blob = plan_blob({"chunks": 2, "fingerprint": {"recipe": {"max_length": 512}}})
    >>> sorted(fingerprint_parts(orjson.loads(blob)["fingerprint"]))
    ['recipe.max_length']
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator, Mapping
from typing import Any

import orjson

from chute.cache.fingerprint import differences, digest
from chute.cache.layout import Layout
from chute.errors import ConfigError, FingerprintMismatch

__all__ = [
    "build_digest",
    "claim",
    "differing_parts",
    "fingerprint_parts",
    "hold",
    "plan_blob",
    "released_on_failure",
]

log = logging.getLogger("chute.cache")

_SHOWN = 12
# A plan.json being created without hard links (O_EXCL) may be read short for a moment.
_UNREADABLE_TRIES, _UNREADABLE_WAIT = 20, 0.1


def plan_blob(plan: Mapping[str, Any]) -> bytes:
    """The bytes of ``plan.json``: the same from every rank of a job (keys sorted)."""
    return orjson.dumps(plan, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2) + b"\n"


def build_digest(plan: Mapping[str, Any]) -> str:
    """The digest of a plan's fingerprint (the manifest's ``build_digest``)."""
    return digest(plan["fingerprint"])


def fingerprint_parts(fingerprint: Mapping[str, Any]) -> dict[str, str]:
    """A short digest of each field of a fingerprint, by name (``recipe.max_length``).

    Fields are the fingerprint's sections (``recipe``, ``sources``, ...) and, for a mapping,
    each of its keys: small enough for every commit record, and enough to name what differs.
    """
    parts = {}
    for name, value in fingerprint.items():
        if isinstance(value, Mapping) and value:
            for key, inner in value.items():
                parts[f"{name}.{key}"] = digest(inner)[:12]
        else:
            parts[str(name)] = digest(value)[:12]
    return dict(sorted(parts.items()))


def differing_parts(record: Mapping[str, Any], fingerprint: Mapping[str, Any]) -> list[str]:
    """The fingerprint fields a commit record's build differs in (empty when unknown)."""
    theirs = record.get("build_parts")
    if not isinstance(theirs, Mapping):
        return []
    ours = fingerprint_parts(fingerprint)
    return sorted(name for name in {*ours, *theirs} if ours.get(name) != theirs.get(name))


def claim(layout: Layout, blob: bytes) -> None:
    """Create ``plan.json`` with ``blob`` unless it exists; then it must be the same plan.

    Raises:
        FingerprintMismatch: the directory is claimed by another job, naming each field.
    """
    plan = orjson.loads(blob)
    for _ in range(5):
        if layout.storage.create(layout.plan, blob):
            return
        existing = _read_plan(layout)
        if existing is None:
            continue  # released between the create and the read: try again
        diffs = differences(existing, plan)
        if diffs:
            raise FingerprintMismatch(_claimed_message(layout, diffs), diffs)
        return
    raise ConfigError(  # pragma: no cover - five releases in a row
        f"{layout.where(layout.plan)} keeps appearing and disappearing: another process is "
        f"creating and deleting it; use another --out",
        param="out",
    )


def hold(layout: Layout, blob: bytes, chunk: int | None = None) -> None:
    """Check that ``plan.json`` is still this build's (claiming it again if it was released).

    Args:
        layout: the cache.
        blob: this build's plan bytes.
        chunk: the chunk about to be written, for the message.

    Raises:
        FingerprintMismatch: another build took the directory over while this one ran.
    """
    if layout.storage.read(layout.plan) == blob:
        return
    try:
        claim(layout, blob)
    except FingerprintMismatch as exc:
        what = f"chunk {chunk} was not written" if chunk is not None else "no manifest written"
        raise FingerprintMismatch(
            f"{what}: {layout.shown} was taken over by another build while this one ran "
            f"(another config, with --overwrite):\n{_lines(layout, exc.fields)}\nThis build "
            f"stops. Use another --out, or run it again once the other build is finished",
            exc.fields,
        ) from None


@contextlib.contextmanager
def released_on_failure(layout: Layout, blob: bytes) -> Iterator[None]:
    """Delete this build's plan when the block fails before any chunk is committed.

    A failed run's plan protects nothing, so the corrected command takes the directory
    without ``--overwrite``. Never masks the block's error.
    """
    try:
        yield
    except BaseException:
        with contextlib.suppress(Exception):
            unused = not layout.recorded() and not layout.exists(layout.manifest)
            if unused and layout.storage.read(layout.plan) == blob:
                layout.storage.delete(layout.plan)
                log.info("%s: released the plan of this failed run", layout.shown)
        raise


def _read_plan(layout: Layout) -> Any:
    for _ in range(_UNREADABLE_TRIES):
        data = layout.storage.read(layout.plan)
        if data is None:
            return None
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            time.sleep(_UNREADABLE_WAIT)
    raise ConfigError(
        f"{layout.where(layout.plan)} is not valid JSON: the cache cannot be trusted; "
        f"pass --overwrite to delete it and build again",
        param="out",
    )


def _lines(layout: Layout, diffs: Any) -> str:
    lines = [
        f"  {name.removeprefix('fingerprint.')} differs: in {layout.shown} {a!r}, this run {b!r}"
        for name, a, b in diffs[:_SHOWN]
    ]
    if len(diffs) > _SHOWN:
        lines.append(f"  ... and {len(diffs) - _SHOWN} more")
    return "\n".join(lines)


def _claimed_message(layout: Layout, diffs: Any) -> str:
    started = not layout.recorded() and not layout.exists(layout.manifest)
    note = (
        "\nNo chunk of it is committed yet: another build may be running there now (or was "
        "killed before committing one); --overwrite deletes it, so only once none runs."
        if started
        else ""
    )
    names = [str(name).removeprefix("fingerprint.") for name, _, _ in diffs]
    data = [name for name in names if name.startswith(("sources", "records"))]
    # more records make more chunks: still the same config over files that changed
    if data and all(name.startswith(("sources", "records", "chunks")) for name in names):
        # the same config over files that changed: its stored config names the same files
        return (
            f"out: {layout.shown} holds a cache (complete or partial) of these data files as "
            f"they were before they changed:\n{_lines(layout, diffs)}{note}\nRestore the files "
            f"to resume or reuse it, or pass --overwrite to delete it and build it again from "
            f"the files as they are now (or use another --out)"
        )
    return (
        f"out: {layout.shown} holds a cache (complete or partial) built for another job:\n"
        f"{_lines(layout, diffs)}{note}\nUse another --out, or pass --overwrite to delete it "
        f"and build this one (or run with the config in {layout.where(layout.config)} to "
        f"resume or reuse it)"
    )

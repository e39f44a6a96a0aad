"""A deep check of a cache: every file's hash, the lengths, the sources, optionally a recipe.

``open_cache`` checks what is cheap (manifest, version, file sizes, source identity) every time
a cache is opened; ``verify_cache`` (``chute validate DIR``) also reads every byte: each chunk
file against the blake2b its commit record holds, and ``lengths.npy`` / ``image_tokens.npy``
against the chunks' columns. It reports problems instead of raising, all of them.

Example:
    >>> check = verify_cache("cache/")  # doctest: +SKIP
    >>> check.ok, check.chunks, check.problems  # doctest: +SKIP
    (True, 20, [])
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from chute._internal.remote import absolute
from chute.cache.claim import build_digest, differing_parts
from chute.cache.fingerprint import differences, rebuild_command, resume_command
from chute.cache.layout import Layout
from chute.cache.reader import Cache, open_cache
from chute.errors import CacheError

__all__ = ["CacheCheck", "verify_cache"]


@dataclass
class CacheCheck:
    """What ``verify_cache`` found: the manifest, what was read, and every problem."""

    path: str
    manifest: dict[str, Any] = field(default_factory=dict)
    chunks: int = 0
    bytes_read: int = 0
    images_checked: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "chunks": self.chunks,
            "bytes_read": self.bytes_read,
            "images_checked": self.images_checked,
            "ok": self.ok,
            "problems": self.problems,
        }


def verify_cache(
    path: str | os.PathLike[str],
    recipe: Any = None,
    *,
    verify_sources: bool = True,
    progress: Callable[[int], None] | None = None,
) -> CacheCheck:
    """Check a cache completely; ``progress`` gets the bytes of each file hashed.

    Args:
        path: the cache directory.
        recipe: also check the cache was built by this recipe (as ``open_cache`` does).
        verify_sources: check the source files are unchanged.
        progress: called with the size of each file once it is hashed.
    """
    layout = Layout(absolute(path))
    check = CacheCheck(layout.shown)
    cache: Cache | None
    try:
        cache = open_cache(layout.shown, verify_sources=verify_sources)
    except CacheError as exc:
        check.problems.append(str(exc))
        manifest = layout.read_json(layout.manifest)
        if not isinstance(manifest, dict) or "chunks" not in manifest:
            return check
        check.manifest = manifest
        cache = None
    else:
        check.manifest = cache.manifest
    chunks = check.manifest["chunks"]
    for k, entry in ((k, f) for k, c in enumerate(chunks) for f in c["files"].values()):
        file = layout.chunks / entry["name"]
        try:
            digest, size = _hash(layout.fetch(file, entry["bytes"]))
        except (OSError, CacheError) as exc:
            check.problems.append(f"{layout.where(file)}: cannot be read ({exc})")
            continue
        check.bytes_read += size
        if digest != entry["blake2b"]:
            # Its size is right, so a run of preprocess takes it as committed: the record goes
            record = layout.where(layout.record(k))
            check.problems.append(
                f"{layout.where(file)}: its content changed since it was written (blake2b "
                f"{digest}, the commit record says {entry['blake2b']}); delete its commit record "
                f"{record} and run {resume_command(layout.shown)}: it rebuilds that chunk"
            )
        if progress is not None:
            progress(size)
    check.chunks = len(check.manifest["chunks"])
    _check_records(layout, check)
    _check_rejects(layout, check)
    if cache is not None:
        _check_arrays(cache, check)
        if verify_sources:
            _check_images(cache, check)
        if recipe is not None:
            try:
                cache.check_recipe(recipe)
            except CacheError as exc:
                check.problems.append(str(exc))
    return check


def _check_images(cache: Cache, check: CacheCheck) -> None:
    """Each image the samples reference still has the size it had when it was counted.

    The fingerprint covers the data files, not the media they name: an image replaced by one
    of another size was silently the cache's (its tokens counted for the old size), and a
    Loader skipped those samples as ``image_token_mismatch``. One header read per image.
    """
    from chute.errors import SampleError
    from chute.media.sizes import image_size

    recorded: dict[str, tuple[int, ...]] = {}
    for k in range(cache.num_chunks):
        try:
            batch = cache.chunk(k)
        except CacheError:
            continue  # a damaged chunk: named by the hashes above
        if "images" not in batch.schema.names:
            continue
        items = batch.column("images").flatten()
        for path, size in zip(
            items.field("path").to_pylist(), items.field("size").to_pylist(), strict=True
        ):
            if path and size:
                recorded.setdefault(path, tuple(size))
    changed = []
    for path, size in recorded.items():
        try:
            now = image_size(path)
        except SampleError as exc:
            if exc.kind != "url_not_allowed":  # a remote image: not read here
                changed.append(f"{path}: {exc.kind}")
            continue
        if tuple(now) != size:
            changed.append(f"{path}: {size[0]}x{size[1]} when counted, {now[0]}x{now[1]} now")
    check.images_checked = len(recorded)
    if changed:
        shown = "; ".join(changed[:3]) + ("; ..." if len(changed) > 3 else "")
        check.problems.append(
            f"{len(changed)} of {len(recorded)} images the samples reference changed since the "
            f"cache was built ({shown}): their token counts no longer hold, and a Loader skips "
            f"their samples (image_token_mismatch). Rebuild: {rebuild_command(cache.root)}"
        )


def _check_rejects(layout: Layout, check: CacheCheck) -> None:
    """``rejects.jsonl`` holds as many lines as the manifest counts rejects.

    It is merged from the chunks' own rejects at finalize; a cut or edited copy kept its size
    out of every other check (its chunks' parts are hashed, it is not).
    """
    expected = check.manifest.get("rejected")
    if not isinstance(expected, int):
        return
    held = _lines(layout.fetch(layout.rejects)) if layout.exists(layout.rejects) else None
    if held == expected:
        return
    where, again = layout.where(layout.rejects), resume_command(layout.shown)
    if held is None:
        check.problems.append(
            f"{where} is missing; run {again}: it is merged again from the chunks' rejects"
        )
        return
    check.problems.append(
        f"{where} holds {held} of the {expected} rejects counted; delete {where} and run "
        f"{again}: it is merged again from the chunks' rejects"
    )


def _lines(path: Path) -> int:
    """Lines of a file, read in blocks (a rejects file of 100M records need not fit memory)."""
    count = 0
    with open(path, "rb") as f:
        while block := f.read(1 << 22):
            count += block.count(b"\n")
    return count


def _check_records(layout: Layout, check: CacheCheck) -> None:
    """Every chunk's commit record and the plan are the manifest's build, and agree with it.

    A cache mixing two builds (chunks, records or plan of one, the manifest of the other) is
    named chunk by chunk, with the fingerprint fields that differ. A cache written before
    records named their build is checked for what it has (the files each record lists).
    """
    manifest = check.manifest
    rebuild = f"rebuild it: {rebuild_command(layout.shown)}"
    build, fingerprint = manifest.get("build_digest"), manifest.get("fingerprint", {})
    plan = layout.read_json(layout.plan)
    if isinstance(plan, dict) and "fingerprint" in plan and build_digest(plan) != build:
        parts = [p for p, _, _ in differences(plan["fingerprint"], fingerprint)]
        check.problems.append(
            f"{layout.where(layout.plan)} is another build's than the manifest's "
            f"({', '.join(parts[:6]) or 'its fingerprint'} differs); {rebuild}"
        )
    foreign: dict[int, list[str]] = {}
    for k, entry in enumerate(manifest["chunks"]):
        record = layout.read_json(layout.record(k))
        if not isinstance(record, dict):
            check.problems.append(f"{layout.where(layout.record(k))}: missing or unreadable")
            continue
        named, listed = record.get("build_digest"), entry.get("build_digest")
        if (named is not None and named != build) or (listed is not None and named != listed):
            foreign[k] = differing_parts(record, fingerprint)
        if record.get("files") != entry.get("files"):
            check.problems.append(
                f"{layout.where(layout.record(k))}: lists other files than the manifest "
                f"(chunk {k} was written again after the manifest); {rebuild}"
            )
    if foreign:
        ks = sorted(foreign)
        shown = ", ".join(map(str, ks[:10])) + (", ..." if len(ks) > 10 else "")
        parts = sorted({p for names in foreign.values() for p in names})
        why = f" ({', '.join(parts[:6])} differs)" if parts else ""
        check.problems.append(
            f"the cache mixes two builds: the commit records of chunk(s) {shown} name another "
            f"build than the manifest's{why}; {rebuild}"
        )


def _hash(path: os.PathLike[str]) -> tuple[str, int]:
    h = hashlib.blake2b(digest_size=16)
    size = 0
    with open(path, "rb") as f:
        while block := f.read(1 << 22):
            h.update(block)
            size += len(block)
    return h.hexdigest(), size


def _check_arrays(cache: Cache, check: CacheCheck) -> None:
    try:
        lengths, image_tokens = cache.lengths, cache.image_tokens
    except CacheError as exc:  # a header that numpy cannot read
        check.problems.append(str(exc))
        return
    if len(lengths) != len(cache) or len(image_tokens) != len(cache):
        check.problems.append(
            f"lengths.npy has {len(lengths)} and image_tokens.npy {len(image_tokens)} values for "
            f"{len(cache)} samples"
        )
        return
    start = 0
    for k in range(cache.num_chunks):
        try:
            batch = cache.chunk(k)
        except CacheError as exc:
            check.problems.append(str(exc))
            return
        stop = start + batch.num_rows
        for name, array in (("length", lengths), ("num_image_tokens", image_tokens)):
            if not np.array_equal(batch.column(name).to_numpy(), array[start:stop]):
                npy = cache.layout.lengths if name == "length" else cache.layout.image_tokens
                check.problems.append(
                    f"chunk {k}: its {name} column differs from {npy.name}; delete "
                    f"{cache.layout.where(npy)} and run {resume_command(cache.layout.shown)}: it "
                    f"writes the file again from the chunks"
                )
        start = stop

"""The output directory of a build: prepared, its plan established, chunks checked, completed.

* ``prepare_dir`` refuses a directory that holds something other than a cache, and deletes only
  chute's own files on ``--overwrite``;
* ``establish`` publishes ``plan.json`` (every rank publishes the same bytes) or checks that the
  one there is the same job, naming each differing field (a plan under which no chunk was
  committed is replaced: a run that failed on its configuration never blocks its fix);
* ``committed_record`` says whether a chunk's commit record and every file it lists are in place;
* ``finish`` waits for the other ranks' chunks through the filesystem and writes the manifest
  when every chunk is committed (or returns the one another rank wrote).

Example:
    >>> layout = Layout(tempfile.mkdtemp())  # doctest: +SKIP
    >>> prepare_dir(layout, overwrite=False, world=World())  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson

from chute._internal.owner import Owner
from chute.cache.config import PreprocessConfig
from chute.cache.finalize import finalize
from chute.cache.fingerprint import differences, digest
from chute.cache.layout import Layout
from chute.cache.stages import ChunkStage
from chute.cache.storage import Storage
from chute.errors import CacheError, ConfigError, FingerprintMismatch
from chute.world import World

__all__ = ["committed_record", "committed_records", "establish", "finish", "prepare_dir"]

log = logging.getLogger("chute.cache")

_POLL_SECONDS = 0.5
# A waiting rank that sees every chunk committed gives the last rank this long to write the
# manifest before it writes it itself (the last rank may have died right after its last chunk).
_FINALIZE_GRACE = 30.0
_HEARTBEAT_SECONDS = 5.0


def prepare_dir(layout: Layout, overwrite: bool, world: World) -> None:
    root = layout.shown
    if not layout.storage.is_dir_or_absent():
        raise ConfigError(f"{root} exists and is not a directory", param="out")
    foreign = not layout.is_empty_or_absent() and not layout.looks_like_cache()
    if foreign:
        raise ConfigError(
            f"{root} is not empty and holds no chute cache; choose a new or empty "
            f"directory (chute never deletes files it did not write)",
            param="out",
        )
    if overwrite and layout.looks_like_cache():
        if world.world_size > 1:
            raise ConfigError(
                "not with several ranks (each would delete what the others write); "
                f"delete {root} once before launching them, or run one rank with --overwrite",
                param="overwrite",
            )
        _delete(layout)
    if not layout.exists(layout.plan) and _has_chunks(layout):
        raise ConfigError(
            f"{root} holds chunk files but no plan.json (an interrupted --overwrite?); "
            f"they cannot be trusted: run again with --overwrite",
            param="out",
        )
    layout.storage.prepare()


def _has_chunks(layout: Layout) -> bool:
    return bool(layout.storage.listing(layout.chunks))


def _delete(layout: Layout) -> None:
    plan = layout.read_json(layout.plan)
    stages = plan.get("fingerprint", {}).get("stages", {}) if isinstance(plan, dict) else {}
    for name in ("plan.json", "manifest.json", *Layout.FILES):  # the plan first: see above
        layout.storage.delete(Path(layout.root, name))
    for name in [*stages, "chunks"]:
        if str(name).isidentifier() or name == "chunks":
            layout.storage.delete_tree(layout.root / name)


def establish(layout: Layout, plan: dict[str, Any], cfg: PreprocessConfig) -> None:
    """Publish the plan, or check that the one there is this job's."""
    config_yaml = cfg.to_yaml(shaping_only=True).encode()
    blob = orjson.dumps(plan, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2) + b"\n"
    existing = layout.read_json(layout.plan)
    if existing is None:
        layout.publish(layout.plan, blob)
        existing = layout.read_json(layout.plan)  # another rank may have published at the same time
    diffs = differences(existing, plan)
    if diffs and not layout.recorded() and not layout.exists(layout.manifest):
        # An earlier run of another config committed nothing (it failed on its configuration,
        # or was stopped at once): nothing to protect, so it must not block this run. Its
        # uncommitted files are harmless: chunks are rewritten, and only files a commit
        # record lists are ever read.
        log.warning(
            "%s: replacing the plan of an earlier run that committed no chunk (%s)",
            layout.shown,
            "; ".join(f"{name.removeprefix('fingerprint.')} differs" for name, _, _ in diffs[:3]),
        )
        layout.publish(layout.plan, blob)
        existing = layout.read_json(layout.plan)
        diffs = differences(existing, plan)
    if diffs:
        lines = "\n".join(
            f"  {name.removeprefix('fingerprint.')} differs: in {layout.shown} {a!r}, this run {b!r}"
            for name, a, b in diffs[:12]
        )
        more = f"\n  ... and {len(diffs) - 12} more" if len(diffs) > 12 else ""
        raise FingerprintMismatch(
            f"out: {layout.shown} holds a cache (complete or partial) built for another job:\n"
            f"{lines}{more}\nUse another --out, or pass --overwrite to delete it and build this "
            f"one (or run with the config in {layout.where(layout.config)} to resume or reuse it)",
            diffs,
        )
    if layout.storage.read(layout.config) != config_yaml:
        layout.publish(layout.config, config_yaml)


def committed_record(layout: Layout, k: int) -> dict[str, Any] | None:
    """Chunk ``k``'s commit record when it and every file it lists are in place."""
    return committed_records(layout, [k]).get(k)


def committed_records(layout: Layout, chunks: Sequence[int]) -> dict[int, dict[str, Any]]:
    """``committed_record`` of many chunks, with one listing of the chunk files."""
    listed = layout.storage.listing(layout.chunks)
    out: dict[int, dict[str, Any]] = {}
    for k in chunks:
        if layout.storage.remote and f"{k:06d}.json" not in listed:
            continue  # no record: nothing to read (a request saved per chunk)
        record = layout.read_json(layout.record(k))
        if not isinstance(record, dict) or not isinstance(record.get("files"), dict):
            continue
        try:
            whole = all(listed.get(e["name"]) == e["bytes"] for e in record["files"].values())
        except (KeyError, TypeError):
            whole = False
        if not whole:
            log.warning("%s: chunk %d is damaged; building it again", layout.shown, k)
            layout.storage.delete(layout.record(k))
            continue
        out[k] = record
    return out


def finish(
    layout: Layout,
    plan: dict[str, Any],
    world: World,
    wait_timeout: float,
    stages: Sequence[ChunkStage],
) -> tuple[dict[str, Any], bool]:
    """The manifest, written here or by another rank; ``(manifest, written_here)``."""
    build = digest(plan["fingerprint"])
    deadline = time.monotonic() + wait_timeout
    first, all_seen_at = True, None
    while True:
        recorded = layout.recorded()
        missing = [k for k in range(plan["chunks"]) if k not in recorded]
        if not missing:
            manifest = layout.read_json(layout.manifest)
            if _complete(layout, manifest, build):
                return manifest, False
            now = time.monotonic()
            # Every chunk committed when this rank finished its own: it is the last finisher.
            # A rank that waited gives the last finisher time to write the manifest first.
            finalizer = _finalizer(layout)
            if finalizer == "live":
                all_seen_at = now  # a live rank is finalizing (a long stage): wait for it
            elif (
                first
                or finalizer == "gone"  # it died while finalizing: nothing to wait for
                or (all_seen_at is not None and now - all_seen_at >= _FINALIZE_GRACE)
            ):
                with _heartbeat(layout.finalizing, storage=layout.storage):
                    return finalize(layout, plan, stages), True
            all_seen_at = all_seen_at or now
        elif time.monotonic() > deadline:
            raise CacheError(_waited_message(layout, missing, world, wait_timeout))
        first = False
        time.sleep(_POLL_SECONDS)


def _complete(layout: Layout, manifest: Any, build: str) -> bool:
    if not isinstance(manifest, dict) or manifest.get("build_digest") != build:
        return False
    files = [layout.lengths, layout.image_tokens, layout.rejects, layout.hf_state]
    return all(layout.exists(p) for p in [*files, *layout.stage_files(manifest["fingerprint"])])


def _finalizer(layout: Layout) -> str | None:
    """Who holds the finalizing marker: ``"live"``, ``"gone"``, or ``None`` when none does.

    ``"gone"``: its owner is provably dead (a process of this machine that runs no more, see
    ``Owner.gone``) or its heartbeat is older than the grace, the only evidence about a process
    on another machine (or a marker of an older chute, which names no owner). Otherwise
    ``"live"``: a rank finalizing now, maybe in a long stage.
    """
    age = layout.storage.age(layout.finalizing)
    if age is None:
        return None
    if age >= _FINALIZE_GRACE:
        return "gone"
    owner = Owner.parse(layout.storage.read(layout.finalizing))
    return "gone" if owner is not None and owner.gone() else "live"


@contextlib.contextmanager
def _heartbeat(
    path: Path, every: float = _HEARTBEAT_SECONDS, storage: Storage | None = None
) -> Iterator[None]:
    """Write ``path`` every ``every`` seconds while the block runs; remove it after.

    It names this process (``Owner``). Waiting ranks read it (``_finalizer``): a fresh one
    means "finalizing, wait"; a stale one, or one whose owner is provably dead (a process of
    their machine that runs no more), lets them take over.
    """
    store = storage if storage is not None else Storage(path.parent)
    stop = threading.Event()
    owner = Owner.here().to_bytes()
    store.touch(path, owner)  # before the block: waiting ranks see it from the start

    def beat() -> None:
        while not stop.wait(every):
            store.touch(path, owner)

    thread = threading.Thread(target=beat, name="chute-finalize-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        store.delete(path)


def _waited_message(layout: Layout, missing: list[int], world: World, timeout: float) -> str:
    owners = sorted({k % world.world_size for k in missing})
    shown = ", ".join(str(k) for k in missing[:10]) + (", ..." if len(missing) > 10 else "")
    shards = ", ".join(f"{r}/{world.world_size}" for r in owners[:10])
    return (
        f"waited {timeout:g} s (cache.wait_timeout) for {len(missing)} chunk(s) of other ranks "
        f"to be committed in {layout.shown}: chunk(s) {shown}, of shard(s) {shards}. Those ranks "
        f"may have failed: run the same command with --shard i/{world.world_size} for each, "
        f"or raise --wait-timeout. This rank's chunks are committed."
    )

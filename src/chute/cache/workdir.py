"""The output directory of a build: prepared, its plan established, chunks checked, completed.

* ``prepare_dir`` refuses a directory that holds something other than a cache, and deletes only
  chute's own files on ``--overwrite``;
* ``establish`` claims the directory: it creates ``plan.json`` atomically (every rank of a job
  creates the same bytes, one succeeds) or checks that the one there is the same job, naming
  each differing field (``chute.cache.claim``; a run that fails before committing a chunk
  releases its plan, so it never blocks its fix);
* ``committed_record`` says whether a chunk's commit record, of this build, and every file it
  lists are in place;
* ``finish`` waits for the other ranks' chunks through the filesystem and writes the manifest
  when every chunk is committed by this build (or returns the one another rank wrote).

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

from chute._internal.owner import Owner
from chute._internal.waiting import builder_state
from chute.cache.claim import build_digest, claim, differing_parts, hold, plan_blob
from chute.cache.config import PreprocessConfig
from chute.cache.finalize import array_problem, finalize
from chute.cache.layout import Layout
from chute.cache.stages import ChunkStage
from chute.cache.storage import Storage
from chute.errors import CacheError, ConfigError
from chute.world import World

__all__ = [
    "committed_record",
    "committed_records",
    "establish",
    "finish",
    "keep_config",
    "prepare_dir",
]

log = logging.getLogger("chute.cache")

_POLL_SECONDS = 0.5
# A rank that has waited long looks less often (each look lists `chunks/`, a request to a
# shared filesystem's server from every waiting rank): at most a tenth of the wait so far late.
_POLL_MAX_SECONDS = 5.0
# How often a rank looks at the other ranks' shard locks: each look is a lock request per rank
# to a shared filesystem's server, and a stopped rank named within seconds (not the hour of
# cache.wait_timeout) is soon enough.
_LOCK_LOOK_SECONDS = 2.0
# A waiting rank that sees every chunk committed gives the last rank this long to write the
# manifest before it writes it itself (the last rank may have died right after its last chunk).
_FINALIZE_GRACE = 30.0
# Seconds a rank waits for another that has shown no sign of building (no lock held, no chunk
# committed) before it says what that usually means: preprocess() called on one rank only
_NOT_STARTED_NOTICE = 60.0
_HEARTBEAT_SECONDS = 5.0


def prepare_dir(layout: Layout, overwrite: bool, world: World, blob: bytes | None = None) -> None:
    """Refuse a folder that is not a cache; with ``overwrite``, take it for plan ``blob``.

    ``--overwrite`` writes this build's plan over the old one first, then deletes the rest:
    a build still running there sees another plan at its next chunk and stops. (Deleting the
    plan first let that build claim the folder again in between, so this one was refused.)
    """
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
        _delete(layout, blob)
    if not layout.exists(layout.plan) and layout.recorded():
        raise ConfigError(
            f"{root} holds committed chunks but no plan.json (an interrupted --overwrite?); "
            f"they cannot be trusted: run again with --overwrite",
            param="out",
        )
    layout.storage.prepare()


def _delete(layout: Layout, blob: bytes | None = None) -> None:
    plan = layout.read_json(layout.plan)
    stages = plan.get("fingerprint", {}).get("stages", {}) if isinstance(plan, dict) else {}
    if blob is not None:  # this build's plan in place first (see prepare_dir)
        layout.publish(layout.plan, blob)
    # without a plan of its own to write, the old plan goes first: see prepare_dir
    for name in ("plan.json", *Layout.FILES):
        if name != "plan.json" or blob is None:
            layout.storage.delete(Path(layout.root, name))
    for name in [*stages, "chunks"]:
        if str(name).isidentifier() or name == "chunks":
            layout.storage.delete_tree(layout.root / name)


def establish(layout: Layout, plan: dict[str, Any], cfg: PreprocessConfig) -> None:
    """Claim the directory for this plan, or join the same plan there (``chute.cache.claim``).

    Raises:
        FingerprintMismatch: another job's plan is there (building now, failed or finished),
            naming each field that differs.
    """
    claim(layout, plan_blob(plan))
    keep_config(layout, cfg)


def keep_config(layout: Layout, cfg: PreprocessConfig) -> None:
    """Write ``config.yaml`` unless it already holds this config.

    Called after the claim and again before finishing: where a store's create is not atomic,
    a build refused at its first chunk may have written its config after this one's.
    """
    config_yaml = cfg.to_yaml(shaping_only=True).encode()
    if layout.storage.read(layout.config) != config_yaml:
        layout.publish(layout.config, config_yaml)


def committed_record(layout: Layout, k: int, build: str | None = None) -> dict[str, Any] | None:
    """Chunk ``k``'s commit record when it and every file it lists are in place.

    With ``build`` (a plan's ``build_digest``), only a record of that build counts: a chunk
    another build committed (or an older chute, which recorded no build) is built again.
    """
    return committed_records(layout, [k], build).get(k)


def committed_records(
    layout: Layout, chunks: Sequence[int], build: str | None = None
) -> dict[int, dict[str, Any]]:
    """``committed_record`` of many chunks, with one listing of the chunk files."""
    listed = layout.storage.listing(layout.chunks)
    out: dict[int, dict[str, Any]] = {}
    for k in chunks:
        if layout.storage.remote and f"{k:06d}.json" not in listed:
            continue  # no record: nothing to read (a request saved per chunk)
        record = layout.read_json(layout.record(k))
        if not isinstance(record, dict) or not isinstance(record.get("files"), dict):
            continue
        if build is not None and record.get("build_digest") != build:
            log.warning(
                "%s: chunk %d was committed by %s; building it again",
                layout.shown,
                k,
                _other_build(record, layout),
            )
            layout.storage.delete(layout.record(k))
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
    at_work: set[int] | None = None,
) -> tuple[dict[str, Any], bool]:
    """The manifest, written here or by another rank; ``(manifest, written_here)``.

    ``at_work``: the ranks seen building while this one built (``ShardWatch``): one of them
    that lets go of its lock with chunks missing has stopped, and this rank says so at once.

    Only chunks committed by this build count: a chunk of another build (committed while that
    build still thought it owned the directory) is refused when it is this rank's to build, and
    waited for as a missing chunk when it is another rank's (which rebuilds it when it starts).
    """
    build = build_digest(plan)
    started = time.monotonic()
    deadline = started + wait_timeout
    first, all_seen_at, noticed = True, None, False
    foreign: list[int] = []  # chunks of another build: missing until their rank rebuilds them
    at_work = set() if at_work is None else at_work  # ranks seen building (lock held)
    looked = -_LOCK_LOOK_SECONDS  # when the locks were last looked at: at once the first time
    while True:
        recorded = layout.recorded()
        foreign = [k for k in foreign if _build_of(layout.read_json(layout.record(k))) != build]
        missing = [k for k in range(plan["chunks"]) if k not in recorded or k in foreign]
        if missing and world.world_size == 1 and not first:
            # every chunk is this rank's and it built them: gone at a second look, deleted
            raise CacheError(_vanished_message(layout, missing))
        stopped = []
        if missing and time.monotonic() - looked >= _LOCK_LOOK_SECONDS:
            stopped, looked = _stopped_ranks(layout, missing, world, at_work), time.monotonic()
        if stopped:
            raise CacheError(_stopped_message(layout, missing, world, stopped))
        if not missing:
            manifest = layout.read_json(layout.manifest)
            if _complete(layout, manifest, build):
                # what a finalizer killed between its manifest and its clean-up left
                if _finalizer(layout) == "gone":
                    layout.storage.delete(layout.finalizing)
                _drop_shard_locks(layout)
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
                records = [layout.read_json(layout.record(k)) for k in range(plan["chunks"])]
                foreign = [k for k, r in enumerate(records) if _build_of(r) != build]
                if not foreign:
                    hold(layout, plan_blob(plan))
                    with _heartbeat(layout.finalizing, storage=layout.storage):
                        manifest = finalize(layout, plan, stages, records)
                    _drop_shard_locks(layout)
                    return manifest, True
                if any(k % world.world_size == world.rank for k in foreign):
                    raise CacheError(_foreign_message(layout, plan, records, foreign))
            all_seen_at = all_seen_at or now
        elif not noticed and time.monotonic() - started >= _NOT_STARTED_NOTICE:
            noticed = True
            idle = _not_started(layout, missing, world, at_work)
            if idle:
                log.warning(_not_started_message(layout, world, idle))
        if missing and time.monotonic() > deadline:
            if foreign:
                records = [layout.read_json(layout.record(k)) for k in range(plan["chunks"])]
                raise CacheError(_foreign_message(layout, plan, records, foreign))
            idle = _not_started(layout, missing, world, at_work)
            message = _waited_message(layout, missing, world, wait_timeout)
            if idle:
                message = _not_started_message(layout, world, idle) + " " + message
            raise CacheError(message)
        first = False
        time.sleep(poll_interval(time.monotonic() - started))


def poll_interval(waited: float) -> float:
    """Seconds until a waiting rank looks again, after ``waited`` seconds of waiting.

    >>> poll_interval(1.0), poll_interval(20.0), poll_interval(600.0)
    (0.5, 2.0, 5.0)
    """
    return min(_POLL_MAX_SECONDS, max(_POLL_SECONDS, waited / 10))


def shard_lock(layout: Layout, rank: int, world_size: int) -> Path | None:
    """What rank ``rank`` holds a ``building`` lock beside while it builds its chunks.

    ``None`` for a cache in object storage: its ranks share no folder to lock in.
    """
    if layout.storage.remote or world_size <= 1:
        return None
    return layout.chunks / f"shard-{rank}-of-{world_size}"


def _drop_shard_locks(layout: Layout) -> None:
    """Remove the ranks' ``building`` locks from a finished cache (no rank waits any more)."""
    if layout.storage.remote:
        return
    for lock in layout.chunks.glob(".shard-*-of-*.building"):
        with contextlib.suppress(OSError):
            lock.unlink()


class ShardWatch:
    """Which other ranks this one has seen building (their ``shard_lock`` held).

    ``look()`` as this rank's own chunks complete: the ranks run side by side, so one that
    fails or is killed while this one still builds is seen at work first, and ``finish`` then
    knows its free lock means it stopped (not that it has not started yet). Once seen, a rank
    is not looked at again: with hundreds of ranks on a shared filesystem, each look is a
    lock request to its server.
    """

    def __init__(self, layout: Layout, world: World):
        self.layout, self.world = layout, world
        self.at_work: set[int] = set()
        self._last = -_LOCK_LOOK_SECONDS  # the first look at once

    def look(self) -> None:
        now = time.monotonic()
        if now - self._last < _LOCK_LOOK_SECONDS:  # a chunk a millisecond: not each time
            return
        self._last = now
        for rank in range(self.world.world_size):
            if rank == self.world.rank or rank in self.at_work:
                continue
            lock = shard_lock(self.layout, rank, self.world.world_size)
            if lock is not None and builder_state(lock) == "held":
                self.at_work.add(rank)


def _stopped_ranks(
    layout: Layout, missing: list[int], world: World, at_work: set[int]
) -> list[int]:
    """The ranks with chunks missing that were seen building and have let go of their lock.

    A rank that fails (its error budget, a bad config) or is killed lets go of the lock with
    its process; the chunks it had not committed will not come, so waiting out
    ``wait_timeout`` (an hour) helps no one. A rank never seen at work (not started yet, or a
    cache in object storage) is waited for as before.
    """
    stopped = []
    for rank in sorted({k % world.world_size for k in missing} - {world.rank}):
        lock = shard_lock(layout, rank, world.world_size)
        state = builder_state(lock) if lock is not None else "unknown"
        if state == "held":
            at_work.add(rank)
        elif state == "free" and rank in at_work:
            still = set(layout.recorded())
            if any(k % world.world_size == rank and k not in still for k in missing):
                stopped.append(rank)
    return stopped


def _stopped_message(layout: Layout, missing: list[int], world: World, stopped: list[int]) -> str:
    shards = ", ".join(f"{r}/{world.world_size}" for r in stopped)
    theirs = [k for k in missing if k % world.world_size in stopped]
    shown = ", ".join(str(k) for k in theirs[:10]) + (", ..." if len(theirs) > 10 else "")
    return (
        f"shard(s) {shards} stopped building in {layout.shown} (failed or killed: their own "
        f"output says why) with chunk(s) {shown} not committed; fix that and run the same "
        f"command with --shard i/{world.world_size} for each (it resumes at their first "
        f"uncommitted chunk). This rank's chunks are committed."
    )


def _build_of(record: Any) -> Any:
    return record.get("build_digest") if isinstance(record, dict) else None


def _other_build(record: dict[str, Any], layout: Layout) -> str:
    """``another build (recipe.max_length differs)``, or an older chute's (no build recorded)."""
    if "build_digest" not in record:
        return "an older chute (its commit record names no build)"
    plan = layout.read_json(layout.plan)
    parts = differing_parts(record, plan["fingerprint"]) if isinstance(plan, dict) else []
    return f"another build ({', '.join(parts) or 'its build digest'} differs)"


def _foreign_message(
    layout: Layout, plan: dict[str, Any], records: list[Any], foreign: list[int]
) -> str:
    shown = ", ".join(str(k) for k in foreign[:10]) + (", ..." if len(foreign) > 10 else "")
    parts = sorted(
        {
            p
            for k in foreign
            if isinstance(records[k], dict)
            for p in differing_parts(records[k], plan["fingerprint"])
        }
    )
    why = f" ({', '.join(parts)} differs)" if parts else ""
    return (
        f"cannot finish {layout.shown}: chunk(s) {shown} were committed by another build{why}, "
        f"not this one: another chute preprocess with another config wrote into this "
        f"directory (or an older chute, whose chunks name no build). No manifest was written. "
        f"Make sure no other build runs there, then run this command again (on every rank): "
        f"it builds those chunks again"
    )


def _complete(layout: Layout, manifest: Any, build: str) -> bool:
    if not isinstance(manifest, dict) or manifest.get("build_digest") != build:
        return False
    top = layout.storage.listing(layout.root)
    if any(array_problem(top, p.name, manifest) for p in (layout.lengths, layout.image_tokens)):
        return False  # cut short or gone: finalized again from the chunks
    files = [layout.rejects, layout.hf_state]
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


def _vanished_message(layout: Layout, missing: list[int]) -> str:
    shown = ", ".join(str(k) for k in missing[:10]) + (", ..." if len(missing) > 10 else "")
    return (
        f"{len(missing)} chunk(s) this run committed in {layout.shown} are gone (chunk(s) "
        f"{shown}): another run deleted them while this one ran (--overwrite into the same "
        f"folder?). Run the command again once no other build writes there"
    )


def _not_started(layout: Layout, missing: list[int], world: World, at_work: set[int]) -> list[int]:
    """The ranks owning missing chunks that show no sign of building.

    Never seen holding their lock, and none of their chunks committed (``[]`` where locks are
    unknown: a cache in object storage).
    """
    if shard_lock(layout, world.rank, world.world_size) is None:
        return []
    recorded = set(layout.recorded())
    idle = []
    for rank in sorted({k % world.world_size for k in missing} - {world.rank} - at_work):
        lock = shard_lock(layout, rank, world.world_size)
        if lock is not None and builder_state(lock) == "held":
            at_work.add(rank)
            continue
        if not any(k % world.world_size == rank for k in recorded):
            idle.append(rank)
    return idle


def _not_started_message(layout: Layout, world: World, idle: list[int]) -> str:
    shards = ", ".join(f"{r}/{world.world_size}" for r in idle[:10])
    more = f" and {len(idle) - 10} more" if len(idle) > 10 else ""
    return (
        f"{layout.shown}: shard(s) {shards}{more} have not started building (no lock taken, no "
        f"chunk committed). This rank is shard {world.rank}/{world.world_size} (from RANK / "
        f"WORLD_SIZE or the process group): every rank must call preprocess(), each building "
        f"its share; to build on this rank alone while the others wait, pass shard='0/1' "
        f"(--shard 0/1)."
    )


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

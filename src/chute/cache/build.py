"""``preprocess``: the recipe over every record, into a cache, in parallel, resumable, many nodes.

The job is cut into chunks of ``chunk_size`` records (default: from the record count,
``chute.cache.chunking``). Rank ``i`` of ``N`` (``--shard i/N``, or
``RANK``/``WORLD_SIZE`` from torchrun and other launchers) builds chunks ``k`` with
``k % N == i`` on its engine (``cache.engine``: a pool of processes, or Ray tasks; see
``chute.cache.engines``), skipping chunks already committed (a resumed run starts at the first
uncommitted chunk). Ranks share nothing but the output directory:

1. every rank computes the plan (fingerprint and chunking) and claims the directory with it:
   ``plan.json`` is created atomically, by one rank, and the others find the same bytes there;
   a build of another config is refused, naming the fields (``chute.cache.claim``);
2. each rank commits its chunks, each atomically, its commit record last and naming the build;
3. a rank that finds every chunk committed writes the global files and the manifest; the others
   poll the directory until the manifest appears (``wait_timeout``), finalizing themselves if
   every chunk is committed but nobody wrote it (the last rank died first).

No collective, no broadcast: ranks can start at different times, on nodes that cannot talk to
each other, and a failed rank is re-run alone with the same command.

Example:
    >>> report = preprocess({"sources": ["train.jsonl"],
    ...                      "recipe": {"tokenizer": "qwen3/", "template": "qwen3"}},
    ...                     out="cache/")  # doctest: +SKIP
    >>> report.samples, report.finalized  # doctest: +SKIP
    (99_870, True)
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import orjson

from chute._internal.progress import progress as progress_of
from chute._internal.remote import absolute
from chute._internal.spelling import spelled_as
from chute._internal.waiting import building
from chute.cache.chunking import chunk_size_for
from chute.cache.claim import build_digest, plan_blob, released_on_failure
from chute.cache.config import CONFIG, PreprocessConfig, load_config
from chute.cache.engines import Engine, LocalEngine, make_engine
from chute.cache.fingerprint import build_fingerprint, sources_fingerprint
from chute.cache.layout import CACHE_FORMAT, FORMAT_VERSION, Layout, sweep_temps
from chute.cache.schema import token_dtype
from chute.cache.stages import ChunkStage, make_stages
from chute.cache.workdir import (
    ShardWatch,
    committed_records,
    establish,
    finish,
    keep_config,
    prepare_dir,
    shard_lock,
)
from chute.cache.writer import ChunkJob
from chute.errors import (
    ConfigError,
    ErrorBudgetExceeded,
    RejectTally,
)
from chute.recipe.outcome import preflight
from chute.sources import open_source
from chute.world import World

__all__ = ["PreprocessReport", "parse_shard", "preprocess"]

log = logging.getLogger("chute.cache")

_MIN_BUDGET_RECORDS = 1000


@dataclass
class PreprocessReport:
    """What ``preprocess`` did on this rank, and the cache's totals once it is complete.

    Attributes:
        path: the cache directory.
        shard: ``(i, n)``: this rank's share of the chunks.
        chunks: chunks in the whole cache.
        built: chunks this call built; ``reused``: this rank's chunks already committed.
        records_built: records this call ran the recipe over (for records/s).
        finalized: whether this call wrote the manifest.
        engine: where the chunks ran (``local, 8 processes``, ``ray at host:6379, 64 CPUs``).
        engine_startup_seconds: time to start or connect to the engine (Ray), else ``None``.
        manifest: the cache's manifest (totals, rejects by reason), once complete.
        seconds: wall time of this call.
    """

    path: str
    shard: tuple[int, int]
    chunks: int
    built: int = 0
    reused: int = 0
    records_built: int = 0
    finalized: bool = False
    manifest: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    engine: str = ""
    engine_startup_seconds: float | None = None

    @property
    def samples(self) -> int:
        return int(self.manifest.get("samples", 0))

    @property
    def rejected(self) -> int:
        return int(self.manifest.get("rejected", 0))

    @property
    def untrained_windows(self) -> int:
        """Windows of split records with no trained token, left out of the cache."""
        return int(self.manifest.get("untrained_windows", 0))

    def to_json(self) -> dict[str, Any]:
        m = self.manifest
        tokens = m.get("tokens", 0)
        return {
            "path": self.path,
            "shard": list(self.shard),
            "chunks": self.chunks,
            "chunks_built": self.built,
            "chunks_reused": self.reused,
            "finalized": self.finalized,
            "engine": self.engine,
            "engine_startup_seconds": self.engine_startup_seconds,
            "records": m.get("records"),
            "samples": m.get("samples"),
            "rejected": m.get("rejected"),
            "by_reason": m.get("by_reason", {}),
            "examples": m.get("examples", {}),
            "tokens": tokens,
            "trained_tokens": m.get("trained_tokens"),
            "image_tokens": m.get("image_tokens"),
            "truncated": m.get("truncated"),
            "untrained_windows": m.get("untrained_windows", 0),
            "bytes": m.get("bytes"),
            "bytes_per_token": round(m["bytes"] / tokens, 3) if tokens else None,
            "seconds": round(self.seconds, 3),
            "records_per_s": round(self.records_built / self.seconds) if self.seconds else None,
            "stage_outputs": m.get("stage_outputs", {}),
        }


def parse_shard(value: str | tuple[int, int] | None) -> World | None:
    """``"i/N"`` (or ``(i, N)``) as a ``World``; ``None`` stays ``None`` (detect it).

    Example:
        >>> parse_shard("1/4").rank, parse_shard("1/4").world_size
        (1, 4)
    """
    if value is None:
        return None
    if isinstance(value, str):
        left, sep, right = value.partition("/")
        try:
            i, n = int(left), int(right)
        except ValueError:
            i = n = -1
        if not sep or n < 1 or not 0 <= i < n:
            raise ConfigError(f"--shard: expected i/N with 0 <= i < N (e.g. 0/4), got {value!r}")
        return World(rank=i, world_size=n)
    i, n = value
    return World(rank=int(i), world_size=int(n))


@spelled_as(CONFIG)
def preprocess(
    config: PreprocessConfig | Mapping[str, Any] | str | os.PathLike[str] | None = None,
    *,
    out: str | os.PathLike[str] | None = None,
    overrides: Sequence[str] = (),
    workers: int | None = None,
    shard: str | tuple[int, int] | None = None,
    full_hash: bool | None = None,
    wait_timeout: float | None = None,
    overwrite: bool = False,
    stages: Sequence[ChunkStage] = (),
    pixels: bool | Mapping[str, Any] | None = None,
    progress: bool | Callable[[int, int], None] | None = None,
    engine: str | Engine | None = None,
    address: str | None = None,
    **sections: Any,
) -> PreprocessReport:
    """Run the recipe over every record of the sources and write (or finish) a cache.

    Args:
        config: a ``PreprocessConfig``, its mapping, or a YAML file; or leave it out and pass
            the sections as keywords (``sources=[...], recipe={...}, cache={...}``).
        out: the cache directory, or a URL (``s3://bucket/caches/run1``; docs/cache.md),
            default: the config's ``out``.
        overrides: dotted ``key=value`` settings applied to the config.
        workers: set ``cache.workers`` (processes on this rank).
        full_hash: set ``cache.full_hash``.
        wait_timeout: set ``cache.wait_timeout``.
        shard: ``"i/N"``: build the i-th of N shares (default: ``RANK``/``WORLD_SIZE``, else
            everything).
        overwrite: delete a cache already in ``out`` (one built from another config) first.
        stages: extra stage objects (besides those named in the config's ``stages:``).
        pixels: also store every image pre-decoded (the ``pixels`` stage,
            ``chute.cache.pixels``): ``True``, or its options (``{"size": 336}``), merged
            over the config's ``stages.pixels``.
        progress: ``None``: a bar on a terminal, else a log line now and then, on rank 0
            (``chute._internal.progress``); ``False``: silent; ``True``: on every rank; or
            called as ``progress(records_done, records_total)`` for this rank's chunks.
        engine: set ``cache.engine`` (``"local"`` or ``"ray"``), or an ``Engine`` to run the
            chunks on (e.g. ``chute.cache.engines.RayEngine(address, max_retries=5)``).
        address: set ``cache.address`` (the Ray cluster, for ``engine="ray"``).
        **sections: ``sources=``, ``recipe=``, ``cache=``, ``stages=`` when ``config`` is not
            given.

    Returns:
        What this rank did and, once the cache is complete, its totals.

    Raises:
        ConfigError: invalid config (every problem named), or ``out`` is not usable.
        FingerprintMismatch: ``out`` holds a cache of another config (use ``overwrite``).
        ErrorBudgetExceeded: more than ``cache.max_bad_fraction`` of the records are bad.
        CacheError: other ranks did not finish within ``wait_timeout``.
    """
    t0 = time.perf_counter()
    if config is None:
        config = sections
    elif sections:
        raise ConfigError(f"pass a config or keyword sections, not both ({', '.join(sections)})")
    cfg = load_config(config, overrides)
    settings: dict[str, Any] = {"workers": workers, "full_hash": full_hash, "address": address}
    if isinstance(engine, str):
        settings["engine"] = engine
    keys = [f"cache.{k}={orjson.dumps(v).decode()}" for k, v in settings.items() if v is not None]
    if keys:
        cfg = load_config(cfg, keys)  # at once: engine and address are checked together
    if wait_timeout is not None:
        cfg = load_config(cfg, [f"cache.wait_timeout={float(wait_timeout)!r}"])
    if pixels:
        given = dict(pixels) if isinstance(pixels, Mapping) else {}
        merged = {**(cfg.stages.get("pixels") or {}), **given}
        cfg = load_config(cfg, [f"stages.pixels={orjson.dumps(merged).decode()}"])
    target = out if out is not None else cfg.out
    if target is None:
        raise ConfigError(
            "no output directory; pass --out DIR (or out: in the config)", param="out"
        )
    cfg = cfg.resolved()
    world = parse_shard(shard) or World.detect()
    layout = Layout(absolute(target))
    recipe = cfg.recipe.build()
    all_stages = [*make_stages(cfg.stages, recipe), *stages]
    for stage in all_stages:  # boxes in the text placed as the pixels stage prepares images
        if stage.name == "pixels" and hasattr(recipe, "with_image_transform"):
            recipe = recipe.with_image_transform(getattr(stage, "transform", None))
    names = [s.name for s in all_stages]
    for name in names:
        if not isinstance(name, str) or not name.isidentifier() or name == "chunks":
            raise ConfigError(
                f"a stage's name must be an identifier other than 'chunks', got {name!r}",
                param="stages",
            )
    if len(set(names)) != len(names):
        raise ConfigError(f"names must be unique, got {names}", param="stages")
    source = open_source(cfg.sources)
    preflight(recipe, source)  # a recipe that cannot work fails before anything is written
    if len(source) == 0:
        raise ConfigError(
            f"{', '.join(cfg.sources)} hold no records; nothing to cache", param="sources"
        )
    dtype = token_dtype(recipe.tokenizer.vocab_size, [recipe.media.image_token_id])
    existing = None if overwrite else layout.read_json(layout.plan)
    chunk_size = chunk_size_for(
        len(source), cfg.cache.chunk_size, existing if isinstance(existing, dict) else None
    )
    # config.yaml says the size used, so the kept config rebuilds the same chunks
    cfg = replace(cfg, cache=replace(cfg.cache, chunk_size=chunk_size))
    plan = {
        "format": CACHE_FORMAT,
        "format_version": FORMAT_VERSION,
        "records": len(source),
        "chunk_size": chunk_size,
        "chunks": -(-len(source) // chunk_size),
        "fingerprint": build_fingerprint(
            _hashed_sources(source, cfg.cache.full_hash, progress),
            recipe.fingerprint(),
            {s.name: s.fingerprint() for s in all_stages},
            {"chunk_size": chunk_size, "token_dtype": dtype.name},
        ),
    }
    plan = orjson.loads(orjson.dumps(plan))  # as it reads back from plan.json
    # only now: --overwrite never loses a cache to a typo
    prepare_dir(layout, overwrite, world, plan_blob(plan))
    establish(layout, plan, cfg)  # claims the directory, or joins the same job, or refuses
    with released_on_failure(layout, plan_blob(plan)):  # no chunk committed: not blocking
        sweep_temps(layout.root)
        sweep_temps(layout.chunks)
        report = PreprocessReport(layout.shown, (world.rank, world.world_size), plan["chunks"])
        mine = list(range(world.rank, plan["chunks"], world.world_size))
        committed = committed_records(layout, mine, build_digest(plan))
        todo = [k for k in mine if k not in committed]
        report.reused = len(committed)
        if committed:
            log.info(
                "%s: %d of this rank's %d chunks already committed",
                layout.shown,
                len(committed),
                len(mine),
            )
        job = ChunkJob(
            source=source,
            recipe=recipe,
            root=layout.shown,  # a URL for a remote cache: workers write through its storage
            chunk_size=chunk_size,
            dtype=dtype.name,
            file_starts=np.cumsum([0] + [len(f) for f in source.files[:-1]]).tolist(),
            stages=all_stages,
            plan=plan_blob(plan),
        )
        budget = _Budget(cfg.cache.max_bad_fraction, committed.values())
        total = sum(job.bounds(k)[1] - job.bounds(k)[0] for k in todo)
        bar = progress_of(total, "preprocess", enabled=None if callable(progress) else progress)

        def moved(n: int) -> None:
            bar.update(n)
            if callable(progress):
                progress(bar.done, total)

        watch = ShardWatch(layout, world)

        def on_done(k: int, record: dict[str, Any]) -> None:
            watch.look()
            report.built += 1
            report.records_built += record["records"][1] - record["records"][0]
            budget.add(record, where=f" on shard {world.rank}/{world.world_size}")

        watched = bar.shown or callable(progress)  # else no record counts travel (Ray: no actor)
        lock = shard_lock(layout, world.rank, world.world_size)
        with engine if isinstance(engine, Engine) else make_engine(cfg.cache) as runner:
            # held while this rank builds: a waiting rank tells it at work from one that stopped
            with bar, building(lock) if lock is not None else contextlib.nullcontext():
                runner.run_chunks(job, todo, on_done=on_done, progress=moved if watched else None)
            sweep_temps(layout.chunks)  # what workers killed mid-write (then retried) left
            budget.check(f" on shard {world.rank}/{world.world_size}")  # small data: all seen
            # a remote cache's stage folders live in this machine's mirror: its own processes
            tasks = LocalEngine(cfg.cache.workers) if layout.storage.remote else runner
            finishing = [stage.with_tasks(tasks) for stage in all_stages]
            keep_config(layout, cfg)
            watch.look()
            report.manifest, report.finalized = finish(
                layout, plan, world, cfg.cache.wait_timeout, finishing, watch.at_work
            )
            report.engine, report.engine_startup_seconds = runner.describe(), runner.startup_seconds
        report.seconds = time.perf_counter() - t0
        return report


def _hashed_sources(
    source: Any, whole: bool, progress: bool | Callable[[int, int], None] | None
) -> dict[str, Any]:
    """The sources' fingerprint; with ``full_hash`` every byte is read: a bar in bytes."""
    if not whole:
        return sources_fingerprint(source, whole=False)
    sizes = [getattr(getattr(f, "identity", None), "size", None) for f in source.files]
    known = [n for n in sizes if isinstance(n, int)]
    total = sum(known) if len(known) == len(sizes) else None
    shown = None if callable(progress) else progress  # the callable counts records only
    with progress_of(total, "full hash", unit="B", enabled=shown) as bar:
        return sources_fingerprint(source, whole=True, progress=bar.update)


class _Budget:
    """``max_bad_fraction`` over this rank's chunks (committed before, and built now).

    Checked as chunks complete once 1,000 records were seen, and over all of them at the end.
    """

    def __init__(self, fraction: float | None, committed: Any):
        self.fraction = fraction
        self.records = 0
        self.tally = RejectTally()
        for record in committed:
            self.add(record, where="", check=False)

    def add(self, record: dict[str, Any], *, where: str, check: bool = True) -> None:
        lo, hi = record["records"]
        self.records += hi - lo
        for kind, n in record["by_reason"].items():
            self.tally.counts[kind] += n
            shown = self.tally.examples.setdefault(kind, [])
            shown.extend(record["examples"].get(kind, [])[: max(0, 5 - len(shown))])
        if check and self.records >= _MIN_BUDGET_RECORDS:
            self.check(where)

    def check(self, where: str) -> None:
        bad, f = self.tally.total, self.fraction
        if f is not None and self.records and bad > f * self.records:
            raise ErrorBudgetExceeded(
                f"error budget exceeded{where}: {bad:,} of {self.records:,} records were "
                f"rejected ({bad / self.records:.1%}), above cache.max_bad_fraction={f}.\n"
                f"By reason:\n{self.tally.summary()}\nFix the data or the recipe (`chute "
                f"validate` lists every bad record), or raise cache.max_bad_fraction; the "
                f"chunks built so far are kept and the next run resumes.",
                self.tally,
            )

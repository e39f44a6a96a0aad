"""``bench_loader``: measure one loader configuration on real data, for each worker count.

For each worker count, a fresh ``Loader`` (so worker start-up is in the time to first batch)
runs ``steps`` batches of this rank's plan; then the first batches of the plan are run stage
by stage in this process to see where a sample's time goes; then the advice rules read it all.

Example:
    >>> data = [{"input_ids": [7] * (1 + i % 5)} for i in range(96)]
    >>> config = BenchConfig(batch_size=8, workers=(0,), steps=4)
    >>> report = bench_loader(data, config=config, loader_options={"shuffle": False})
    >>> run = report.runs[0]
    >>> run.workers, run.batches, run.samples, round(run.padding_efficiency, 3)
    (0, 4, 32, 0.581)
    >>> [a.rule for a in report.advice]
    ['step_time', 'packing']
"""

from __future__ import annotations

import importlib.util
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from chute._internal.lazy_torch import require_torch
from chute.bench.advice import Advice, Facts, advise
from chute.bench.measure import WorkerRun, measure_run
from chute.bench.memory import PSUTIL_HINT, psutil_or_none
from chute.bench.profile import StageProfile, profile_stages
from chute.errors import ConfigError
from chute.world import World

__all__ = ["BenchConfig", "BenchReport", "available_plans", "bench_loader", "usable_cpus"]


def usable_cpus() -> int:
    """Cores this process may run on (its affinity mask where the platform has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def available_plans() -> tuple[str, ...]:
    """The plan names this chute offers (``chute.plan.PLANNERS``)."""
    from chute.plan import PLANNERS

    return tuple(sorted(PLANNERS))


@dataclass
class BenchConfig:
    """What to measure.

    Args:
        batch_size: samples per batch on the measured rank.
        workers: the DataLoader worker counts to try, in order.
        steps: batches to take per worker count (the first included; fewer when the epoch of
            this rank is shorter).
        plan: the batching plan (``chute.plan.PLANNERS`` lists what this chute has).
        step_ms: a simulated training step per batch, in milliseconds (``None``: none; the
            loader runs flat out and starvation is not measured).
        world_size: measure rank ``rank`` of this many ranks (it reads its share only).
        rank: the rank measured.
        seed: the shuffle seed.
        profile_samples: samples run stage by stage to find where the time goes (0: skip).
        plan_options: options of the plan (``{"max_length": 4096}`` for ``packed``, ...).
    """

    batch_size: int
    workers: tuple[int, ...] = (0, 1, 2)
    steps: int = 50
    plan: str = "random"
    step_ms: float | None = None
    world_size: int = 1
    rank: int = 0
    seed: int = 0
    profile_samples: int = 256
    plan_options: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        def positive(name: str, value: Any, low: int) -> None:
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ConfigError(f"{name} must be an int >= {low}, got {value!r}")

        positive("batch_size", self.batch_size, 1)
        positive("steps", self.steps, 2)
        positive("world_size", self.world_size, 1)
        positive("profile_samples", self.profile_samples, 0)
        self.workers = tuple(self.workers)
        if not self.workers:
            raise ConfigError("workers must list at least one worker count, e.g. (0, 1, 2)")
        for w in self.workers:
            positive("each worker count in workers", w, 0)
        if len(set(self.workers)) != len(self.workers):
            raise ConfigError(f"workers lists a count twice: {self.workers}; list each once")
        if not 0 <= self.rank < self.world_size:
            raise ConfigError(
                f"rank must be in [0, world_size={self.world_size}), got {self.rank}; "
                f"raise world_size or lower rank"
            )
        if self.step_ms is not None and not self.step_ms >= 0:
            raise ConfigError(f"step_ms must be >= 0 milliseconds or None, got {self.step_ms!r}")
        plans = available_plans()
        if self.plan not in plans:
            raise ConfigError(
                f"plan must be one of {list(plans)} (the plans this chute offers), got "
                f"{self.plan!r}"
            )


@dataclass
class BenchReport:
    """Everything ``bench_loader`` measured; ``to_json()`` is what ``chute bench --json`` prints.

    Attributes:
        config: what was measured.
        source: the data, as text.
        samples: samples in the source.
        batches_per_epoch: batches of the measured rank in one epoch.
        cpus: cores available.
        runs: one per worker count, in the order tried.
        profile: where a sample's time goes (``None`` when skipped).
        advice: what to change, from ``chute.bench.advice``.
        setup_s: building the first loader: opening the source and, for plans that need
            them, every sample's length (a recipe pass, cached for the next run).
        excluded: samples the lengths pass rejected, by reason (never planned).
        notes: caveats (e.g. memory not measured without psutil).
        media: the loader's media stage, as text (``None``: no media stage).
    """

    config: BenchConfig
    source: str
    samples: int
    batches_per_epoch: int
    cpus: int
    runs: list[WorkerRun]
    profile: StageProfile | None
    advice: list[Advice]
    notes: list[str] = field(default_factory=list)
    media: str | None = None
    setup_s: float = 0.0
    excluded: dict[str, int] = field(default_factory=dict)

    @property
    def best(self) -> WorkerRun:
        return max(self.runs, key=lambda r: r.samples_per_s or 0.0)

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "samples": self.samples,
            "batches_per_epoch": self.batches_per_epoch,
            "cpus": self.cpus,
            "config": asdict(self.config),
            "runs": [r.to_json() for r in self.runs],
            "best_workers": self.best.workers,
            "padding_efficiency": self.best.padding_efficiency,
            "profile": self.profile.to_json() if self.profile is not None else None,
            "advice": [a.to_json() for a in self.advice],
            "notes": self.notes,
            "media": self.media,
            "setup_s": self.setup_s,
            "excluded": self.excluded,
        }


def bench_loader(
    source: Any,
    recipe: Callable[[Any], Any] | None = None,
    *,
    config: BenchConfig,
    loader_options: dict[str, Any] | None = None,
    progress: Callable[[str], None] | None = None,
) -> BenchReport:
    """Measure ``Loader(source, recipe, ...)`` for each worker count of ``config``.

    Args:
        source: what ``Loader`` reads (a ``JsonlSource``, paths, a cache, a dataset). Open it
            once and pass the object: each run then reuses its index.
        recipe: the recipe (``None``: the source yields tokenized samples).
        config: batch size, worker counts, steps, plan, simulated step time, rank.
        loader_options: more ``Loader`` keyword arguments (``pad_to_multiple_of``, ...).
        progress: called with a line of text before each measurement.
    """
    from chute.loader import Loader

    say = progress or (lambda _line: None)
    options = dict(loader_options or {})
    world = World(rank=config.rank, world_size=config.world_size)
    step_s = (config.step_ms or 0.0) / 1000.0

    if config.plan_options:
        options["plan_options"] = dict(config.plan_options)

    def make(workers: int) -> Loader:
        return Loader(
            source,
            recipe,
            batch_size=config.batch_size,
            num_workers=workers,
            plan=config.plan,
            seed=config.seed,
            world=world,
            **options,
        )

    require_torch()  # imported here, so the setup time is the loader's own
    say("setting up the plan (a length pass of the recipe, once, for length-aware plans)")
    t0 = time.perf_counter()
    probe = make(0)
    setup_s = time.perf_counter() - t0
    pad_id = int(getattr(probe.collate, "pad_id", 0))
    runs: list[WorkerRun] = []
    for workers in config.workers:
        say(f"measuring num_workers={workers}: {config.steps} batches of {config.batch_size}")
        runs.append(
            measure_run(make, workers=workers, steps=config.steps, step_s=step_s, pad_id=pad_id)
        )
    profile = None
    if config.profile_samples:
        say(f"profiling the stages of {config.profile_samples} samples in this process")
        profile = _profile(probe, config)
    facts = Facts(
        runs=runs,
        cpus=usable_cpus(),
        profile=profile,
        plan=config.plan,
        plans=available_plans(),
        pretokenized=_reads_samples(probe),
        has_preprocess=importlib.util.find_spec("chute.cache") is not None,
        media_store=bool(getattr(getattr(probe, "media", None), "has_store", False)),
    )
    notes = []
    if psutil_or_none() is None:
        notes.append(PSUTIL_HINT)
    if not config.step_ms:
        notes.append(
            "starvation needs a training step to wait through: pass step_ms (--step-ms) with "
            "your step time; without it the loader runs flat out"
        )
    return BenchReport(
        config=config,
        source=repr(probe.source),
        samples=probe.num_samples,
        batches_per_epoch=probe.batches_per_epoch,
        cpus=facts.cpus,
        runs=runs,
        profile=profile,
        advice=advise(facts),
        notes=notes,
        media=repr(probe.media) if getattr(probe, "media", None) is not None else None,
        setup_s=setup_s,
        excluded=dict(getattr(probe, "excluded", None) or {}),
    )


def _profile(loader: Any, config: BenchConfig) -> StageProfile:
    plan, rank = loader.plan, config.rank
    ids: list[int] = []
    k = 0
    while len(ids) < config.profile_samples and k < plan.num_batches:
        ids.extend(int(i) for i in plan.batch(rank, k))
        k += 1
    return profile_stages(
        loader.source,
        None if _reads_samples(loader) else loader.recipe,
        loader.collate,
        ids=ids[: config.profile_samples],
        batch_size=config.batch_size,
        media=_media_stage(loader),
    )


def _reads_samples(loader: Any) -> bool:
    """Whether the loader's workers read samples as they are (no recipe runs: a token cache)."""
    return loader.recipe is None or callable(getattr(loader.source, "check_recipe", None))


def _media_stage(loader: Any) -> Callable[[dict[str, Any]], dict[str, Any]] | None:
    """The loader's per-sample media stage, where this chute's Loader has one."""
    media = getattr(loader, "media", None)
    return media if callable(media) else None

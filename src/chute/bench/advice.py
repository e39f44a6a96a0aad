"""What to change when the loader holds training back: explicit rules over a bench report.

Each rule is a function ``rule(report) -> Advice | None`` reading only the measured figures,
so each can be tested on made-up numbers. The thresholds are module constants:

================  =====================================================================
rule              fires when
================  =====================================================================
more_workers      throughput still rose >= 20% at the most workers tried, and a core is
                  free beyond those workers and the main process
fewer_workers     fewer workers than the most tried were >= 10% faster (contention)
cores_exhausted   the model waits (starvation >= 5%) and the workers already use every core
preprocess        the recipe (template + tokenizer) is >= 50% of a sample's time, and the
                  data is raw records (not a token cache)
predecode_media   decoding and transforming images is >= 40% of a sample's time, and
                  images are not read from a pre-decoded pixel store yet
packing           padding efficiency < 85% and the plan is not ``packed``
step_time         always: how long a training step must be for this loader to keep up,
                  or (with a simulated step) how long the model waited
================  =====================================================================

Rules about speed stay silent when a simulated step was given and the model did not wait
(starvation below 5%): the loader is then not the bottleneck.

Example:
    >>> from chute.bench.measure import WorkerRun
    >>> def run(w, sps):  # 900 samples after the first batch, at sps samples/s
    ...     return WorkerRun(workers=w, first_batch_s=1.0, batches=10, samples=1000,
    ...                      real_tokens=0, padded_tokens=0, seconds=900 / sps,
    ...                      steady_batches=9, steady_samples=900, steady_tokens=0,
    ...                      steady_padded=0, wait_s=0.0, step_s=0.0)
    >>> facts = Facts(runs=[run(0, 100.0), run(1, 180.0), run(2, 300.0)], cpus=8)
    >>> more_workers(facts).message.split(":")[0]
    'Throughput still grows with workers (180 -> 300 samples/s from 1 to 2)'
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from chute.bench.measure import WorkerRun
from chute.bench.profile import StageProfile

__all__ = [
    "CORE_RESERVE",
    "MEDIA_DOMINATES",
    "PADDING_LOW",
    "RECIPE_DOMINATES",
    "RULES",
    "SCALING_GAIN",
    "SLOWDOWN",
    "STARVATION_HIGH",
    "Advice",
    "Facts",
    "advise",
]

STARVATION_HIGH = 0.05  # the model waits more than 5% of the time: the loader is the bottleneck
SCALING_GAIN = 1.2  # the last worker step still gave >= 20% more samples/s
SLOWDOWN = 0.9  # the most workers ran at <= 90% of the best: contention
RECIPE_DOMINATES = 0.5
MEDIA_DOMINATES = 0.4
PADDING_LOW = 0.85
CORE_RESERVE = 1  # the training process keeps one core busy (kernel launches, the optimizer)


@dataclass(frozen=True)
class Advice:
    """One recommendation: the rule that fired, what to do, and the figures behind it."""

    rule: str
    message: str
    evidence: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"rule": self.rule, "message": self.message, "evidence": self.evidence}


@dataclass
class Facts:
    """What the rules read: the runs, the stage profile and the setting they ran in.

    Attributes:
        runs: one measured run per worker count, in the order tried.
        cpus: cores this process may use.
        profile: where a sample's time goes (``None``: not profiled).
        plan: the plan measured.
        plans: the plans this chute offers (advice names only these).
        pretokenized: samples arrive tokenized (a token cache; no recipe at training time).
        has_preprocess: this chute has ``chute preprocess`` (the token cache).
        media_store: images were read from a pre-decoded ``PixelStore`` already.
    """

    runs: list[WorkerRun]
    cpus: int
    profile: StageProfile | None = None
    plan: str = "random"
    plans: tuple[str, ...] = ("random",)
    pretokenized: bool = False
    has_preprocess: bool = False
    media_store: bool = False

    @property
    def best(self) -> WorkerRun:
        """The run with the most samples/s."""
        return max(self.runs, key=lambda r: r.samples_per_s or 0.0)

    @property
    def stepped(self) -> bool:
        return any(r.step_s > 0 for r in self.runs)

    @property
    def loader_bound(self) -> bool | None:
        """Whether the model would wait for data at the best worker count.

        ``None`` when unknown: without a simulated step nothing waits.
        """
        if not self.stepped:
            return None
        return (self.best.starvation or 0.0) >= STARVATION_HIGH


def _rate(run: WorkerRun) -> float:
    return run.samples_per_s or 0.0


def more_workers(f: Facts) -> Advice | None:
    if f.loader_bound is False or len(f.runs) < 2:
        return None
    by_workers = sorted(f.runs, key=lambda r: r.workers)
    top, prev = by_workers[-1], by_workers[-2]
    if f.best is not top or _rate(top) < SCALING_GAIN * _rate(prev):
        return None
    free = f.cpus - CORE_RESERVE - top.workers
    if free < 1:
        return None
    suggest = top.workers + min(free, max(1, top.workers))
    return Advice(
        "more_workers",
        f"Throughput still grows with workers ({_rate(prev):,.0f} -> {_rate(top):,.0f} "
        f"samples/s from {prev.workers} to {top.workers}): {free} more core(s) are free on this "
        f"machine; try num_workers={suggest} (--workers {top.workers},{suggest}).",
        {
            "from_workers": prev.workers,
            "to_workers": top.workers,
            "gain": _rate(top) / _rate(prev) if _rate(prev) else None,
            "free_cores": free,
            "suggest_workers": suggest,
        },
    )


def fewer_workers(f: Facts) -> Advice | None:
    most = max(f.runs, key=lambda r: r.workers)
    best = f.best
    if best.workers >= most.workers or _rate(most) > SLOWDOWN * _rate(best):
        return None
    return Advice(
        "fewer_workers",
        f"num_workers={best.workers} was the fastest ({_rate(best):,.0f} samples/s); "
        f"{most.workers} workers ran at {_rate(most):,.0f} (processes compete for {f.cpus} "
        f"core(s), or each batch is too cheap to be worth sending between processes). "
        f"Use num_workers={best.workers}.",
        {"best_workers": best.workers, "most_workers": most.workers, "cpus": f.cpus},
    )


def cores_exhausted(f: Facts) -> Advice | None:
    if not f.loader_bound:
        return None
    top = max(f.runs, key=lambda r: r.workers)
    if top.workers + CORE_RESERVE < f.cpus:
        return None
    return Advice(
        "cores_exhausted",
        f"The model waits {100 * (f.best.starvation or 0):.0f}% of the time and the workers "
        f"already use all {f.cpus} core(s): more workers cannot help. Make each sample cheaper "
        f"(see the other advice) or give each GPU more CPU cores.",
        {"starvation": f.best.starvation, "cpus": f.cpus, "workers": top.workers},
    )


def preprocess(f: Facts) -> Advice | None:
    if f.profile is None or f.pretokenized or f.loader_bound is False:
        return None
    share = f.profile.shares().get("recipe", 0.0)
    if share < RECIPE_DOMINATES:
        return None
    us = f.profile.per_sample_us()["recipe"]
    how = (
        "pre-tokenize once with `chute preprocess` and train from the cache "
        "(Loader(open_cache(DIR))): no template or tokenizer runs during training"
        if f.has_preprocess
        else "tokenize once, offline, and train from pre-tokenized samples"
    )
    return Advice(
        "preprocess",
        f"The recipe (template + tokenizer) takes {100 * share:.0f}% of each sample's time "
        f"({us:,.0f} us per sample): {how}.",
        {"recipe_share": share, "recipe_us_per_sample": us},
    )


def predecode_media(f: Facts) -> Advice | None:
    if f.profile is None or f.loader_bound is False or f.media_store:
        return None
    share = f.profile.shares().get("media", 0.0)
    if share < MEDIA_DOMINATES:
        return None
    us = f.profile.per_sample_us()["media"]
    return Advice(
        "predecode_media",
        f"Decoding and transforming images takes {100 * share:.0f}% of each sample's time "
        f"({us:,.0f} us per sample): decode them once into pre-decoded pixels, with chute "
        f"preprocess CONFIG --out DIR --pixels (then Loader(open_cache(DIR)) reads no JPEG), "
        f"or a standalone store "
        f"(chute.media.build_pixel_store(image_paths, transform, DIR) and "
        f"MediaStage(transform, store=PixelStore(DIR))); measure it with chute bench "
        f"--pixel-store DIR.",
        {"media_share": share, "media_us_per_sample": us},
    )


def packing(f: Facts) -> Advice | None:
    eff = f.best.padding_efficiency
    if eff is None or eff >= PADDING_LOW or f.plan == "packed":
        return None
    better = [p for p in ("packed", "budget", "grouped") if p in f.plans and p != f.plan]
    how = (
        f"try --plan {better[0]}"
        + (" (rows of --max-length tokens)" if better[0] == "packed" else "")
        + (f", or {', '.join(better[1:])}," if len(better) > 1 else "")
        + " and compare"
        if better
        else "length-grouped or packed batches would remove most of it"
    )
    return Advice(
        "packing",
        f"{100 * (1 - eff):.0f}% of the tokens in each batch are padding (efficiency "
        f"{100 * eff:.1f}% with plan={f.plan!r}): the model computes on them for nothing; {how}.",
        {"padding_efficiency": eff, "plan": f.plan, "alternatives": better},
    )


def step_time(f: Facts) -> Advice | None:
    best = f.best
    if best.fetch_ms is None:
        return None
    if not f.stepped:
        return Advice(
            "step_time",
            f"With num_workers={best.workers} the loader delivers a batch every "
            f"{best.fetch_ms:,.1f} ms: a training step shorter than that waits for data. Pass "
            f"--step-ms with your step time to measure how long the model would wait.",
            {"workers": best.workers, "fetch_ms": best.fetch_ms},
        )
    starving = f.loader_bound
    verdict = (
        "the loader is the bottleneck" if starving else "the loader keeps up; nothing to change"
    )
    return Advice(
        "step_time",
        f"With a {1000 * best.step_s:,.0f} ms step and num_workers={best.workers}, the model "
        f"waits {100 * (best.starvation or 0):.1f}% of the time: {verdict}.",
        {"workers": best.workers, "starvation": best.starvation, "step_ms": 1000 * best.step_s},
    )


RULES: tuple[Callable[[Facts], Advice | None], ...] = (
    step_time,
    more_workers,
    fewer_workers,
    cores_exhausted,
    preprocess,
    predecode_media,
    packing,
)


def advise(facts: Facts) -> list[Advice]:
    """Every rule that fires, in the order of ``RULES``."""
    if not facts.runs:
        return []
    return [a for a in (rule(facts) for rule in RULES) if a is not None]

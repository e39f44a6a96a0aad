"""The advice rules of chute bench, one by one, on made-up figures: each fires when it should."""

from __future__ import annotations

from chute.bench.advice import (
    STARVATION_HIGH,
    Facts,
    advise,
    cores_exhausted,
    fewer_workers,
    more_workers,
    packing,
    predecode_media,
    preprocess,
    step_time,
)
from chute.bench.measure import WorkerRun
from chute.bench.profile import StageProfile


def run(
    workers: int,
    samples_per_s: float,
    *,
    efficiency: float = 0.95,
    step_s: float = 0.0,
    starvation: float = 0.0,
) -> WorkerRun:
    """A run of 9 steady batches of 100 samples at ``samples_per_s``."""
    seconds = 900 / samples_per_s
    return WorkerRun(
        workers=workers,
        first_batch_s=0.5,
        batches=10,
        samples=1000,
        real_tokens=int(100_000 * efficiency),
        padded_tokens=100_000,
        seconds=seconds,
        steady_batches=9,
        steady_samples=900,
        steady_tokens=int(90_000 * efficiency),
        steady_padded=90_000,
        wait_s=starvation * seconds,
        step_s=step_s,
    )


def profile(**shares: float) -> StageProfile:
    seconds = {"read": 0.0, "recipe": 0.0, "media": 0.0, "collate": 0.0, **shares}
    return StageProfile(samples=100, rejected=0, seconds=seconds)


def test_more_workers_when_throughput_still_scales_and_cores_are_free() -> None:
    scaling = [run(0, 100), run(1, 190), run(2, 350)]
    advice = more_workers(Facts(runs=scaling, cpus=8))
    assert advice is not None and advice.evidence["suggest_workers"] == 4
    assert advice.evidence["free_cores"] == 5
    assert more_workers(Facts(runs=scaling, cpus=3)) is None  # 2 workers + the trainer: no core
    flat = [run(0, 100), run(1, 190), run(2, 200)]
    assert more_workers(Facts(runs=flat, cpus=8)) is None  # the last worker added < 20%
    # a simulated step that the loader keeps up with: nothing to fix
    fed = [run(1, 190, step_s=0.1, starvation=0.0), run(2, 350, step_s=0.1, starvation=0.01)]
    assert more_workers(Facts(runs=fed, cpus=8)) is None


def test_fewer_workers_when_more_were_slower() -> None:
    advice = fewer_workers(Facts(runs=[run(0, 100), run(1, 300), run(4, 200)], cpus=2))
    assert advice is not None and advice.evidence["best_workers"] == 1
    assert "num_workers=1" in advice.message
    assert fewer_workers(Facts(runs=[run(0, 100), run(1, 300), run(4, 290)], cpus=2)) is None


def test_cores_exhausted_only_when_starving_with_every_core_in_use() -> None:
    starving = [run(0, 100, step_s=0.01, starvation=0.5), run(1, 150, step_s=0.01, starvation=0.3)]
    advice = cores_exhausted(Facts(runs=starving, cpus=2))
    assert advice is not None and "all 2 core(s)" in advice.message
    assert cores_exhausted(Facts(runs=starving, cpus=16)) is None
    unknown = [run(0, 100), run(1, 150)]  # no simulated step: cannot say the model waits
    assert cores_exhausted(Facts(runs=unknown, cpus=2)) is None


def test_preprocess_when_the_recipe_dominates_raw_records() -> None:
    runs = [run(0, 100)]
    advice = preprocess(Facts(runs=runs, cpus=2, profile=profile(read=0.1, recipe=0.8)))
    assert advice is not None and advice.evidence["recipe_share"] > 0.85
    with_cache = Facts(runs=runs, cpus=2, profile=profile(recipe=0.8), has_preprocess=True)
    assert "chute preprocess" in preprocess(with_cache).message  # type: ignore[union-attr]
    cheap = Facts(runs=runs, cpus=2, profile=profile(read=0.6, recipe=0.4))
    assert preprocess(cheap) is None
    cached = Facts(runs=runs, cpus=2, profile=profile(recipe=0.8), pretokenized=True)
    assert preprocess(cached) is None
    fed = Facts(runs=[run(1, 100, step_s=1.0)], cpus=2, profile=profile(recipe=0.8))
    assert fed.loader_bound is False and preprocess(fed) is None


def test_predecode_media_when_images_dominate() -> None:
    runs = [run(1, 50)]
    advice = predecode_media(Facts(runs=runs, cpus=4, profile=profile(recipe=0.3, media=0.6)))
    assert advice is not None and "pre-decoded" in advice.message
    assert predecode_media(Facts(runs=runs, cpus=4, profile=profile(recipe=0.7, media=0.2))) is None
    stored = Facts(runs=runs, cpus=4, profile=profile(recipe=0.3, media=0.6), media_store=True)
    assert predecode_media(stored) is None  # the pixel store is in use already


def test_packing_when_padding_is_high_naming_only_plans_that_exist() -> None:
    padded = [run(0, 100, efficiency=0.6)]
    only_random = packing(Facts(runs=padded, cpus=2, plans=("random",)))
    assert only_random is not None and only_random.evidence["alternatives"] == []
    assert "--plan" not in only_random.message
    rich = packing(Facts(runs=padded, cpus=2, plans=("budget", "grouped", "packed", "random")))
    assert rich is not None and rich.evidence["alternatives"] == ["packed", "budget", "grouped"]
    assert "--plan packed" in rich.message
    assert packing(Facts(runs=[run(0, 100, efficiency=0.9)], cpus=2)) is None
    already = Facts(runs=padded, cpus=2, plan="packed", plans=("packed", "random"))
    assert packing(already) is None


def test_step_time_says_whether_the_model_waits() -> None:
    plain = step_time(Facts(runs=[run(0, 1000)], cpus=2))  # 100 samples per batch: 100 ms
    assert plain is not None and "--step-ms" in plain.message
    assert abs(plain.evidence["fetch_ms"] - 100.0) < 1e-6
    starving = step_time(Facts(runs=[run(0, 500, step_s=0.1, starvation=0.5)], cpus=2))
    assert starving is not None and "the loader is the bottleneck" in starving.message
    fed = step_time(Facts(runs=[run(0, 500, step_s=0.1, starvation=STARVATION_HIGH / 2)], cpus=2))
    assert fed is not None and "keeps up" in fed.message


def test_advise_runs_every_rule_in_order() -> None:
    facts = Facts(
        runs=[run(0, 100, efficiency=0.5), run(1, 190, efficiency=0.5)],
        cpus=8,
        profile=profile(recipe=0.9, read=0.1),
        plans=("packed", "random"),
    )
    assert [a.rule for a in advise(facts)] == ["step_time", "more_workers", "preprocess", "packing"]
    assert advise(Facts(runs=[], cpus=2)) == []

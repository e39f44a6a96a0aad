"""Measure a loader configuration on your data, and what to change when it holds training back.

``bench_loader(source, recipe, config=BenchConfig(...))`` runs the ``Loader`` for each worker
count and returns a ``BenchReport``: time to first batch, samples/s, tokens/s (real and padded),
starvation under a simulated training step, padding efficiency, peak memory, where a sample's
time goes, and ``Advice``. ``chute bench`` is its command line.

Example:
    >>> data = [{"input_ids": [1, 2, 3]}] * 64
    >>> report = bench_loader(data, config=BenchConfig(batch_size=8, workers=(0,), steps=3))
    >>> report.runs[0].padding_efficiency
    1.0
"""

from chute.bench.advice import RULES, Advice, Facts, advise
from chute.bench.measure import WorkerRun, batch_counts, measure_run
from chute.bench.memory import MemorySampler
from chute.bench.profile import StageProfile, profile_stages
from chute.bench.run import BenchConfig, BenchReport, available_plans, bench_loader, usable_cpus

__all__ = [
    "RULES",
    "Advice",
    "BenchConfig",
    "BenchReport",
    "Facts",
    "MemorySampler",
    "StageProfile",
    "WorkerRun",
    "advise",
    "available_plans",
    "batch_counts",
    "bench_loader",
    "measure_run",
    "profile_stages",
    "usable_cpus",
]

"""chute.bench: what a run counts, how waiting is measured, memory, the stage profile."""

from __future__ import annotations

import doctest
import importlib
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from chute import ConfigError, JsonlSource, Loader, World
from chute.bench import BenchConfig, batch_counts, bench_loader, measure_run, profile_stages
from chute.bench import memory as memory_mod
from chute.bench import run as run_mod
from chute.collate import Collate
from chute.testing import write_id_jsonl


@pytest.mark.parametrize(
    "name",
    [
        "chute.bench",
        "chute.bench.advice",
        "chute.bench.measure",
        "chute.bench.media",
        "chute.bench.memory",
        "chute.bench.profile",
        "chute.bench.run",
        "chute.cli.bench_cmd",
    ],
)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0, f"{name} has no examples"
    assert result.failed == 0


def test_batch_counts_reads_the_mask_cu_seqlens_or_pad_id() -> None:
    ids = torch.tensor([[5, 6, 7], [8, 0, 0]])
    sample_ids = torch.tensor([4, 9])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    assert batch_counts({"input_ids": ids, "attention_mask": mask, "sample_ids": sample_ids}) == (
        2,
        4,
        6,
    )
    # packed rows as PackedCollate makes them: cu_seqlens over the flattened batch, padding
    # segments included; row 0 holds samples of 3 and 2 tokens then 3 of padding, row 1 is full
    packed = {
        "input_ids": torch.tensor([[1, 2, 3, 4, 5, 0, 0, 0], list(range(10, 18))]),
        "cu_seqlens": torch.tensor([0, 3, 5, 8, 16], dtype=torch.int32),
        "row_sample_ids": torch.tensor([[7, 2], [5, -1]]),
        "sample_ids": torch.tensor([7, 2, 5]),
    }
    assert batch_counts(packed) == (3, 13, 16)
    assert batch_counts({"input_ids": ids}, pad_id=0) == (2, 4, 6)
    assert batch_counts({"input_ids": ids}, pad_id=8) == (2, 5, 6)
    placeholder = {"input_ids": torch.zeros(1, 1, dtype=torch.long)}
    placeholder["attention_mask"] = torch.ones(1, 1, dtype=torch.long)
    placeholder["sample_ids"] = torch.tensor([-1])
    assert batch_counts(placeholder) == (0, 0, 1)


@pytest.mark.parametrize("workers", [0, 2])
def test_a_run_longer_than_the_epoch_counts_every_sample_once(tmp_path: Path, workers: int) -> None:
    source = JsonlSource(write_id_jsonl(tmp_path / "ids.jsonl", 50, max_len=4))
    lengths = np.array([1 + i % 4 for i in range(50)])

    def make(w: int) -> Loader:
        return Loader(source, batch_size=8, num_workers=w, world=World(), seed=3)

    run = measure_run(make, workers=workers, steps=100)
    assert (run.batches, run.samples, run.real_tokens) == (7, 50, int(lengths.sum()))
    assert run.steady_batches == 6 and run.steady_samples == run.samples - 8
    assert run.padded_tokens >= run.real_tokens
    assert run.starvation is None  # no simulated step: nothing to starve
    if run.memory is not None and workers:
        assert run.memory["peak_children"] >= workers
        assert run.memory["peak_total_mb"] > 0


class SlowRecipe:
    """Sleeps per sample: a loader that is slower than the training step, deterministically."""

    def __init__(self, seconds: float):
        self.seconds = seconds

    def __call__(self, record):  # type: ignore[no-untyped-def]
        time.sleep(self.seconds)
        return record.data


def test_starvation_is_high_when_the_loader_is_slower_than_the_step(tmp_path: Path) -> None:
    source = JsonlSource(write_id_jsonl(tmp_path / "ids.jsonl", 64))

    def slow(w: int) -> Loader:  # 4 samples x 10 ms per batch against a 1 ms step
        return Loader(source, SlowRecipe(0.01), batch_size=4, num_workers=w, world=World())

    starved = measure_run(slow, workers=0, steps=6, step_s=0.001)
    assert starved.starvation is not None and starved.starvation > 0.6

    def fast(w: int) -> Loader:  # cheap batches prepared by a worker during a 40 ms step
        return Loader(source, batch_size=4, num_workers=w, world=World())

    fed = measure_run(fast, workers=1, steps=6, step_s=0.04)
    assert fed.starvation is not None and fed.starvation < 0.5
    assert fed.fetch_ms is not None and fed.fetch_ms < starved.fetch_ms  # type: ignore[operator]


def test_profile_charges_each_stage(tmp_path: Path) -> None:
    source = JsonlSource(write_id_jsonl(tmp_path / "ids.jsonl", 20, broken=[3]))
    prof = profile_stages(
        source, SlowRecipe(0.005), Collate(), ids=range(20), batch_size=4, warmup=0
    )
    assert prof.samples == 20 and prof.rejected == 1  # the broken line fails in the recipe
    shares = prof.shares()
    assert shares["recipe"] > 0.5 and shares["media"] == 0.0
    assert abs(sum(shares.values()) - 1.0) < 1e-9
    with pytest.raises(ValueError, match="at least one sample"):
        profile_stages(source, None, Collate(), ids=[], batch_size=4)


def test_bench_loader_reports_each_worker_count_and_the_recipe_advice(tmp_path: Path) -> None:
    source = JsonlSource(write_id_jsonl(tmp_path / "ids.jsonl", 96))
    config = BenchConfig(batch_size=8, workers=(0, 1), steps=4, profile_samples=16)
    report = bench_loader(source, SlowRecipe(0.002), config=config)
    assert [r.workers for r in report.runs] == [0, 1]
    assert report.samples == 96 and report.batches_per_epoch == 12
    assert report.profile is not None and report.profile.shares()["recipe"] > 0.5
    rules = [a.rule for a in report.advice]
    assert "preprocess" in rules and "step_time" in rules
    out = report.to_json()
    assert out["best_workers"] in (0, 1) and len(out["runs"]) == 2


def test_without_psutil_memory_is_none_and_the_report_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(memory_mod, "psutil_or_none", lambda: None)
    monkeypatch.setattr(run_mod, "psutil_or_none", lambda: None)
    data = [{"input_ids": [1, 2, 3]}] * 32
    report = bench_loader(data, config=BenchConfig(batch_size=8, workers=(0,), steps=2))
    assert report.runs[0].memory is None
    assert any("pip install psutil" in n for n in report.notes)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"batch_size": 0}, "batch_size must be an int >= 1, got 0"),
        ({"batch_size": 4, "steps": 1}, "steps must be an int >= 2, got 1"),
        ({"batch_size": 4, "workers": ()}, "at least one worker count"),
        ({"batch_size": 4, "workers": (0, 0)}, "lists a count twice"),
        ({"batch_size": 4, "workers": (-1,)}, "each worker count in workers"),
        ({"batch_size": 4, "rank": 2, "world_size": 2}, r"rank must be in \[0, world_size=2\)"),
        ({"batch_size": 4, "step_ms": -5.0}, "step_ms must be >= 0"),
        ({"batch_size": 4, "plan": "zigzag"}, "plan must be one of .*'random'.*got 'zigzag'"),
    ],
)
def test_config_errors_name_the_parameter_and_the_value(kwargs: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        BenchConfig(**kwargs)

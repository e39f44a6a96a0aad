"""Bin packing: the grouped best-fit decreasing equals the textbook one; split rows; radix sort."""

from __future__ import annotations

import time

import numpy as np
import pytest

from chute.plan.pack import best_fit_decreasing, radix_argsort, split_rows
from chute.plan.packed import PackedPlanner


def textbook_bfd(lengths: list[int], capacity: int) -> list[int]:
    """Sample by sample: longest first, into the fullest row that still fits (final loads)."""
    loads: list[int] = []
    for size in sorted(lengths, reverse=True):
        fits = [i for i, load in enumerate(loads) if load + size <= capacity]
        if fits:
            best = max(fits, key=lambda i: loads[i])
            loads[best] += size
        else:
            loads.append(size)
    return sorted(loads)


@pytest.mark.parametrize("capacity", [1, 7, 64, 100, 4096])
def test_grouped_bfd_gives_the_same_rows_as_the_textbook_algorithm(capacity: int) -> None:
    rng = np.random.default_rng(capacity)
    for trial in range(60):
        n = int(rng.integers(0, 120))
        high = capacity if trial % 2 else max(1, capacity // 3)  # many small or any size
        lens = rng.integers(1, high + 1, n)
        row, count = best_fit_decreasing(lens, capacity)
        loads = np.bincount(row, weights=lens, minlength=count).astype(int)
        assert count == len(textbook_bfd(lens.tolist(), capacity))
        assert sorted(loads.tolist()) == textbook_bfd(lens.tolist(), capacity)
        assert (loads <= capacity).all() and (np.bincount(row, minlength=count) > 0).all()


def test_bfd_reaches_the_lower_bound_on_many_small_items() -> None:
    lens = np.random.default_rng(0).integers(1, 300, 100_000)
    _, rows = best_fit_decreasing(lens, 2048)
    assert rows == -(-int(lens.sum()) // 2048)


def test_a_million_lengths_pack_near_the_bound_in_seconds() -> None:
    # benchmarks/bench_padding.py times 10M (the target is 10 s); here: correct at scale
    lens = np.clip(np.random.default_rng(1).lognormal(5.5, 1.0, 1_000_000), 1, 2048)
    planner = PackedPlanner(2048, batch_size=16, lengths=lens.astype(np.int32))
    t0 = time.perf_counter()
    plan = planner.build(len(lens), epoch=0, world_size=8)
    assert plan.stats["rows"] <= plan.stats["bound"] * 1.001
    assert time.perf_counter() - t0 < 30  # ~0.5 s unloaded; only a pathological slowdown fails


def test_split_rows_cut_the_concatenation_every_capacity_tokens() -> None:
    item, start, end, rows = split_rows(np.array([5, 2, 6]), capacity=4)
    assert item.tolist() == [0, 0, 1, 2, 2, 2]
    assert list(zip(start.tolist(), end.tolist(), strict=True)) == [
        (0, 4), (4, 5), (0, 2), (0, 1), (1, 5), (5, 6),
    ]  # fmt: skip
    assert rows.tolist() == [0, 1, 4, 5, 6]
    empty = split_rows(np.array([], dtype=np.int64), capacity=4)
    assert [len(a) for a in empty] == [0, 0, 0, 1]


def test_radix_argsort_is_a_stable_argsort() -> None:
    rng = np.random.default_rng(2)
    for high in (10, 70_000, 3_000_000_000):
        keys = rng.integers(0, high, 50_000)
        assert np.array_equal(radix_argsort(keys), np.argsort(keys, kind="stable"))

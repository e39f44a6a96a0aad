"""Shard-window shuffling: exact-once, identical on every rank, resume, and the locality trade."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from chute.errors import ConfigError
from chute.plan import (
    RandomPlanner,
    ShardPlanner,
    ShardWindowOrder,
    continue_epoch,
    dealt_ids,
    make_planner,
    order_locality,
    permutation,
)

# 23 shards of uneven sizes (one empty): remainders everywhere.
SIZES = [37, 5, 0, 64, 12, 40, 40, 3, 77, 18, 25, 31, 9, 50, 44, 1, 60, 22, 14, 38, 27, 33, 16]
BOUNDS = np.concatenate([[0], np.cumsum(SIZES)]).astype(np.int64)
N = int(BOUNDS[-1])


def shard_of(ids: np.ndarray) -> np.ndarray:
    return np.searchsorted(BOUNDS, ids, side="right") - 1


@pytest.mark.parametrize("window", [1, 3, 8, 100])
@pytest.mark.parametrize("epoch", [0, 1])
def test_the_order_is_a_permutation(window: int, epoch: int) -> None:
    ids = ShardWindowOrder(BOUNDS, window, seed=5, epoch=epoch).materialize()
    assert sorted(ids.tolist()) == list(range(N))


def test_each_window_holds_exactly_its_shards() -> None:
    order = ShardWindowOrder(BOUNDS, 4, seed=2, epoch=0)
    ids = order.materialize()
    lo = 0
    for k in range(order.num_windows):
        shards = order.shard_order[4 * k : 4 * k + 4]
        size = int(sum(SIZES[s] for s in shards))
        assert set(shard_of(ids[lo : lo + size]).tolist()) == {s for s in shards if SIZES[s]}
        lo += size
    assert lo == N


def test_epochs_and_seeds_differ_and_take_matches_materialize() -> None:
    a = ShardWindowOrder(BOUNDS, 4, seed=1, epoch=0)
    assert not np.array_equal(a.materialize(), ShardWindowOrder(BOUNDS, 4, 1, 1).materialize())
    assert not np.array_equal(a.materialize(), ShardWindowOrder(BOUNDS, 4, 2, 0).materialize())
    positions = np.array([N - 1, 0, 77, 300, 5])
    assert a.take(positions).tolist() == a.materialize()[positions].tolist()
    assert a.tail(100).take_range(0, 50).tolist() == a.materialize()[100:150].tolist()


@pytest.mark.parametrize("world_size", [1, 2, 3])
@pytest.mark.parametrize("drop_last", [False, True])
def test_plan_is_exact_once_over_ranks_and_workers(world_size: int, drop_last: bool) -> None:
    planner = ShardPlanner(
        batch_size=4, shard_window=3, shard_bounds=BOUNDS, seed=9, drop_last=drop_last
    )
    plan = planner.build(N, epoch=0, world_size=world_size)
    workers = 2
    seen: list[int] = []
    for rank in range(world_size):
        # a rank's batches are split over its workers round-robin, as the Loader does
        for w in range(workers):
            for k in range(w, plan.num_batches, workers):
                seen.extend(plan.batch(rank, k).tolist())
    if drop_last:
        assert len(seen) == len(set(seen)) and len(seen) > N - world_size * 4
    else:
        assert sorted(seen) == list(range(N))


def test_every_rank_builds_the_same_order() -> None:
    planner = ShardPlanner(batch_size=4, shard_window=3, shard_bounds=BOUNDS, seed=9)
    plans = [planner.build(N, epoch=2, world_size=2) for _ in range(2)]  # two "ranks"
    assert np.array_equal(plans[0].order.materialize(), plans[1].order.materialize())
    again = make_planner("shards", batch_size=4, shard_window=3, shard_bounds=BOUNDS, seed=9)
    assert again.params() == planner.params()


def test_resume_and_elastic_resume_continue_the_epoch() -> None:
    planner = ShardPlanner(batch_size=5, shard_window=4, shard_bounds=BOUNDS, seed=3)
    full = planner.build(N, epoch=1, world_size=2)
    whole = dealt_ids(full, full.num_batches)
    # resume on the same layout after 7 steps: the remaining stream is the uninterrupted one
    rest = continue_epoch(planner, N, epoch=1, segments=[(2, 7)], world_size=2)
    assert np.array_equal(
        np.concatenate([rest.batch(r, k) for k in range(rest.num_batches) for r in range(2)]),
        whole[7 * 2 * 5 :],
    )
    # elastic: 7 steps on 2 ranks, then 3 ranks: every sample exactly once
    first = dealt_ids(full, 7)
    elastic = continue_epoch(planner, N, epoch=1, segments=[(2, 7)], world_size=3)
    later = dealt_ids(elastic, elastic.num_batches)
    assert sorted(np.concatenate([first, later]).tolist()) == list(range(N))
    assert np.array_equal(later, full.order.materialize()[7 * 2 * 5 :])


def test_windowed_shuffle_trades_mixing_for_locality() -> None:
    """Measurably less local than file order, far fewer shard switches than a full shuffle."""
    bounds = np.arange(0, 200_001, 1000, dtype=np.int64)  # 200 shards of 1000
    n = int(bounds[-1])
    windowed = order_locality(ShardWindowOrder(bounds, 8, seed=0, epoch=0).materialize(), bounds)
    full = order_locality(permutation(n, seed=0), bounds)
    identity = order_locality(np.arange(n), bounds)
    # mixing: far from file order (a full shuffle moves a sample ~n/3, file order 0)
    assert windowed["displacement"] > 0.2 and abs(windowed["rank_correlation"]) < 0.2
    assert identity["displacement"] == 0.0 and identity["rank_correlation"] == 1.0
    # locality: a window of 8 shards makes ~1/8 of neighbours share a shard; a full
    # permutation ~1/200; so about 25x fewer opens per sample
    assert windowed["same_shard_pairs"] > 0.1 > 0.01 > full["same_shard_pairs"]
    assert windowed["shard_switches_per_1000"] < full["shard_switches_per_1000"] - 100


def test_bad_options_name_the_parameter() -> None:
    with pytest.raises(ConfigError, match="shard_window must be a positive int, got 0"):
        ShardPlanner(batch_size=2, shard_window=0)
    with pytest.raises(ConfigError, match="shard_bounds must start at 0 and never decrease"):
        ShardPlanner(batch_size=2, shard_bounds=[0, 5, 3])
    with pytest.raises(ConfigError, match="plan='shards' needs the sample ranges"):
        ShardPlanner(batch_size=2).build(10, epoch=0, world_size=1)
    with pytest.raises(ConfigError, match="shard_bounds cover 666 samples but the plan deals 10"):
        ShardPlanner(batch_size=2, shard_bounds=BOUNDS).build(10, epoch=0, world_size=1)


def test_unshuffled_is_the_random_planners_order() -> None:
    a = ShardPlanner(batch_size=3, shuffle=False).build(N, epoch=0, world_size=2)
    b = RandomPlanner(batch_size=3, shuffle=False).build(N, epoch=0, world_size=2)
    assert np.array_equal(dealt_ids(a, a.num_batches), dealt_ids(b, b.num_batches))


def test_a_100m_order_is_lazy() -> None:
    """Batches of a 100M-sample, 10k-shard order are computed without materialising it."""
    bounds = np.arange(0, 100_000_001, 10_000, dtype=np.int64)
    order = ShardWindowOrder(bounds, 16, seed=0, epoch=0)
    batch = order.take_range(50_000_000, 50_000_064)
    assert len(set(batch.tolist())) == 64 and batch.max() < 100_000_000
    assert len(set((batch // 10_000).tolist())) <= 16


def test_the_loader_binds_the_files_of_a_source(tmp_path: Path) -> None:
    from chute import JsonlSource, Loader, World

    paths = []
    for f, size in enumerate([7, 0, 12, 5]):
        path = tmp_path / f"part-{f}.jsonl"
        lo = sum([7, 0, 12, 5][:f])
        path.write_text("".join(f'{{"input_ids": [{i}, {i}]}}\n' for i in range(lo, lo + size)))
        paths.append(path)
    source = JsonlSource(paths)
    assert source.shard_bounds().tolist() == [0, 7, 7, 19, 24]
    seen = []
    for rank in range(3):
        loader = Loader(
            source,
            batch_size=2,
            world=World(rank, 3),
            plan="shards",
            plan_options={"shard_window": 2},
            seed=1,
        )
        assert loader.plan.order.describe()["shards"] == 4
        for batch in loader:
            ids = batch["sample_ids"].numpy()
            real = ids >= 0
            assert np.array_equal(batch["input_ids"][:, 0].numpy()[real], ids[real])
            seen.extend(ids[real].tolist())
    assert sorted(seen) == list(range(24))
    with pytest.raises(ConfigError, match="plan='shards' shuffles by the files of a source"):
        Loader([{"input_ids": [1]}] * 4, batch_size=2, plan="shards")

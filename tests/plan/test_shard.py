"""Fixed-size plans: exact-once, equal batch counts, the three remainder rules, lazy remaining."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from chute.errors import ConfigError
from chute.plan import BatchPlan, Plan, RandomPlanner, Sequential, make_planner

WORLD_SIZES = (1, 2, 3, 8)
COUNTS = (1, 7, 61, 100, 103)  # mostly not divisible by world_size * batch_size
BATCH_SIZES = (1, 4, 5)


def all_batches(plan: Plan) -> list[list[np.ndarray]]:
    return [[plan.batch(r, k) for k in range(plan.num_batches)] for r in range(plan.world_size)]


def flat(plan: Plan) -> np.ndarray:
    parts = [b for rank in all_batches(plan) for b in rank]
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)


@pytest.mark.parametrize("shuffle", [True, False])
@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_short_remainder_deals_every_id_exactly_once(world_size: int, shuffle: bool) -> None:
    for n, b in itertools.product(COUNTS, BATCH_SIZES):
        plan = RandomPlanner(b, shuffle=shuffle, seed=3).build(n, epoch=1, world_size=world_size)
        ids = flat(plan)
        assert np.array_equal(np.sort(ids), np.arange(n)), (n, b)
        assert plan.num_batches == -(-n // (world_size * b))
        sizes = np.array([[len(x) for x in rank] for rank in all_batches(plan)])
        assert (sizes[:, :-1] == b).all()  # every step but the last is full
        assert sizes[:, -1].max() - sizes[:, -1].min() <= 1  # the last is split evenly


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_wrap_fills_every_batch_and_repeats_only_the_start_of_the_order(world_size: int) -> None:
    for n, b in itertools.product(COUNTS, BATCH_SIZES):
        plan = RandomPlanner(b, seed=1, wrap=True).build(n, epoch=0, world_size=world_size)
        assert all(len(x) == b for rank in all_batches(plan) for x in rank)
        ids = flat(plan)
        assert set(ids.tolist()) == set(range(n))
        extra = plan.num_batches * world_size * b - n
        assert ids.size == n + extra
        # the filler is the order again from its start (several laps when n < one step)
        order = plan.order.materialize()
        expected = np.bincount(np.concatenate([order, np.resize(order, extra)]), minlength=n)
        assert np.array_equal(np.bincount(ids, minlength=n), expected)


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_drop_deals_full_steps_only_and_never_repeats(world_size: int) -> None:
    for n, b in itertools.product(COUNTS, BATCH_SIZES):
        plan = RandomPlanner(b, seed=1, drop_last=True).build(n, epoch=0, world_size=world_size)
        ids = flat(plan)
        assert plan.num_batches == n // (world_size * b)
        assert ids.size == plan.num_batches * world_size * b
        assert np.unique(ids).size == ids.size
        assert all(len(x) == b for rank in all_batches(plan) for x in rank)


def test_fewer_samples_than_ranks_gives_empty_last_batches_not_fewer_batches() -> None:
    plan = BatchPlan(Sequential(3), world_size=8, batch_size=4)
    assert plan.num_batches == 1
    assert [plan.batch(r, 0).tolist() for r in range(8)] == [[0], [1], [2], [], [], [], [], []]


def test_each_epoch_is_a_new_order_and_the_same_seed_repeats_it() -> None:
    planner = RandomPlanner(4, seed=9)
    e0 = flat(planner.build(101, epoch=0, world_size=3))
    assert np.array_equal(e0, flat(RandomPlanner(4, seed=9).build(101, epoch=0, world_size=3)))
    assert not np.array_equal(e0, flat(planner.build(101, epoch=1, world_size=3)))
    assert not np.array_equal(e0, flat(RandomPlanner(4, seed=10).build(101, epoch=0, world_size=3)))


@pytest.mark.parametrize("remainder", ["short", "wrap", "drop"])
def test_vectorised_batches_equal_one_by_one(remainder: str) -> None:
    planner = RandomPlanner(5, seed=2, drop_last=remainder == "drop", wrap=remainder == "wrap")
    plan = planner.build(203, epoch=3, world_size=3)
    for rank in range(3):
        for lo, hi in [(0, plan.num_batches), (2, 5), (plan.num_batches - 1, plan.num_batches)]:
            got = plan.batches(rank, lo, hi)
            assert [x.tolist() for x in got] == [
                plan.batch(rank, k).tolist() for k in range(lo, hi)
            ]


@pytest.mark.parametrize("remainder", ["short", "wrap", "drop"])
def test_lazy_remaining_equals_the_generic_definition(remainder: str) -> None:
    planner = RandomPlanner(4, seed=5, drop_last=remainder == "drop", wrap=remainder == "wrap")
    for n, ws in [(61, 2), (100, 3), (7, 8), (103, 1)]:
        plan = planner.build(n, epoch=2, world_size=ws)
        for k in range(plan.num_batches + 1):
            lazy = plan.remaining(k).materialize()
            generic = Plan.remaining(plan, k).materialize()
            assert lazy.tolist() == generic.tolist(), (n, ws, k)


def test_batch_position_out_of_range_is_an_index_error() -> None:
    plan = RandomPlanner(4).build(10, epoch=0, world_size=2)
    with pytest.raises(IndexError, match=r"batch must be in \[0, 2\)"):
        plan.batch(0, 2)
    with pytest.raises(IndexError, match=r"rank must be in \[0, 2\)"):
        plan.batch(2, 0)


def test_options_are_checked_with_messages_naming_them() -> None:
    with pytest.raises(ConfigError, match="batch_size must be a positive int, got 0"):
        RandomPlanner(0)
    with pytest.raises(ConfigError, match="drop_last=True and wrap=True contradict"):
        RandomPlanner(4, drop_last=True, wrap=True)
    with pytest.raises(ConfigError, match="world_size must be a positive int"):
        RandomPlanner(4).build(10, epoch=0, world_size=0)
    with pytest.raises(
        ConfigError,
        match=r"plan must be one of \['budget', 'grouped', 'packed', 'random', 'shards'\]",
    ):
        make_planner("sorted", batch_size=4)


def test_params_record_everything_that_shapes_the_plan() -> None:
    params = RandomPlanner(8, seed=3, wrap=True).params()
    assert params == {
        "kind": "random",
        "batch_size": 8,
        "shuffle": True,
        "shuffle_algorithm": "feistel6-v1",
        "seed": 3,
        "drop_last": False,
        "wrap": True,
    }

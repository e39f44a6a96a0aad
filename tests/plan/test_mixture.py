"""Mixture plans: the epoch's selection (counts, subsets, determinism) and every planner over it.

Exact-once over a mixture is a multiset equality: the ids all ranks are dealt in an epoch are
exactly the ids the selection gives (a repeated dataset gives some ids twice).
"""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pytest

from chute.errors import ConfigError
from chute.plan import (
    BudgetPlanner,
    GroupedPlanner,
    PackedPlanner,
    Plan,
    RandomPlanner,
    continue_epoch,
)
from chute.plan.mixture_planner import MixturePlanner, Switch, multiset_minus
from chute.plan.mixture_selection import Selection, Share, counts_of, valid_pools

SIZES = (40, 23, 7)  # three datasets of different sizes (ids 0..39, 40..62, 63..69)
N = sum(SIZES)


def lengths_for(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    lens = rng.integers(1, 50, n).astype(np.int32)
    lens[rng.random(n) < 0.05] = -1
    return lens


LENS = lengths_for(N)

INNER = {
    "random": lambda: RandomPlanner(3, seed=5),
    "random_drop": lambda: RandomPlanner(3, seed=5, drop_last=True),
    "grouped": lambda: GroupedPlanner(3, group_size=2, seed=5, lengths=LENS),
    "budget": lambda: BudgetPlanner(100, seed=5, lengths=LENS),
    "packed": lambda: PackedPlanner(64, batch_size=2, seed=5, lengths=LENS),
}


def shares(weights: tuple[float, float, float] = (0.5, 0.3, 0.2)) -> list[Share]:
    return [Share(n, s, weight=w) for n, s, w in zip("abc", SIZES, weights, strict=True)]


def selection_for(name: str, seed: int = 5, **kw: object) -> Selection:
    pools = valid_pools(None, [s.records for s in shares()], LENS) if name != "random" else None
    if name.startswith("random"):
        pools = None
    return Selection(kw.pop("shares", shares()), seed=seed, pools=pools, **kw)  # type: ignore[arg-type]


def dealt(plan: Plan, start: int = 0, stop: int | None = None) -> list[int]:
    stop = plan.num_batches if stop is None else stop
    return [
        int(i) for k in range(start, stop) for r in range(plan.world_size) for i in plan.batch(r, k)
    ]


# -- the selection ---------------------------------------------------------------------------


def test_weights_hold_within_one_sample_and_sum_to_the_total() -> None:
    for weights in [(0.5, 0.3, 0.2), (1, 1, 1), (0.01, 0.98, 0.01), (3, 0, 1)]:
        for total in (None, 1, 17, 1000, 12345):
            ss = shares(weights)  # type: ignore[arg-type]
            counts = counts_of(ss, SIZES, total)
            # by default the weighted pools' total; a weight of 0 counts no pool of its own
            on = sum(size for size, w in zip(SIZES, weights, strict=True) if w > 0)
            want = total if total is not None else on
            exact = np.array(weights, dtype=float) / sum(weights) * want
            assert counts.sum() == want
            assert np.all(np.abs(counts - exact) < 1), (weights, total, counts)


def test_every_epoch_gives_exactly_the_counts_per_dataset() -> None:
    sel = Selection(
        [Share("a", 40, samples=13), Share("b", 23, repeat=2.5), Share("c", 7, samples=30)],
        seed=3,
    )
    assert sel.counts.tolist() == [13, 58, 30]
    for epoch in range(6):
        ids = sel.order(epoch).materialize()
        assert len(ids) == len(sel) == 101
        assert np.bincount(sel.dataset_of(ids), minlength=3).tolist() == [13, 58, 30]
        per = Counter(ids.tolist())
        a = [i for i in per if i < 40]
        assert all(per[i] == 1 for i in a)  # fewer samples than records: no repeats
        b = [per.get(i, 0) for i in range(40, 63)]
        assert sorted(set(b)) == [2, 3] and b.count(3) == 58 - 46  # twice each, and a half
        c = [per.get(i, 0) for i in range(63, 70)]
        assert sorted(set(c)) == [4, 5] and sum(c) == 30  # with replacement: 4x, +2 once more


def test_downsampled_datasets_see_different_samples_and_all_of_them_over_epochs() -> None:
    sel = Selection([Share("big", 100, samples=30), Share("small", 5)], seed=11)
    seen: set[int] = set()
    subsets = []
    for epoch in range(4):  # ceil(100 / 30) = 4 epochs cover the dataset
        ids = sel.ids_of(0, epoch)
        assert len(set(ids.tolist())) == 30
        subsets.append(frozenset(ids.tolist()))
        seen |= set(ids.tolist())
    assert seen == set(range(100))
    assert len(set(subsets)) == 4
    # the next cycle is another shuffle, not a replay
    assert set(sel.ids_of(0, 4).tolist()) != subsets[0]


def test_fractional_repeat_takes_a_different_half_each_epoch() -> None:
    sel = Selection([Share("a", 20, repeat=2.5)], seed=1)
    halves = []
    for epoch in range(2):
        per = Counter(sel.ids_of(0, epoch).tolist())
        assert all(per[i] >= 2 for i in range(20))
        halves.append({i for i in range(20) if per[i] == 3})
        assert len(halves[-1]) == 10
    assert halves[0].isdisjoint(halves[1])  # one cycle of 2 epochs: both halves, no overlap


def test_selection_is_a_pure_function_of_its_inputs() -> None:
    a = Selection(shares(), seed=9).order(2).materialize()
    b = Selection(shares(), seed=9).order(2).materialize()
    c = Selection(shares(), seed=9).order(3).materialize()
    d = Selection(shares(), seed=10).order(2).materialize()
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c) and not np.array_equal(a, d)
    # the order of the datasets' declaration does not change which samples each gives
    swapped = Selection([Share("b", 23, repeat=0.5), Share("a", 40, repeat=0.5)], seed=9)
    plain = Selection([Share("a", 40, repeat=0.5), Share("b", 23, repeat=0.5)], seed=9)
    assert np.array_equal(swapped.ids_of(1, 4) - 23, plain.ids_of(0, 4))


def test_max_samples_caps_the_pool_with_a_fixed_subset() -> None:
    sel = Selection([Share("a", 50, max_samples=10, repeat=1), Share("b", 5)], seed=2)
    assert sel.pool_sizes.tolist() == [10, 5] and sel.counts.tolist() == [10, 5]
    firsts = {frozenset(sel.ids_of(0, e).tolist()) for e in range(3)}
    assert len(firsts) == 1  # the same capped subset every epoch
    weighted = Selection([Share("a", 50, max_samples=10, weight=1), Share("b", 5, weight=1)])
    assert weighted.counts.tolist() == [8, 7]  # the cap applies before weighting


def test_pools_hold_out_ids_and_refuse_an_empty_pool_that_must_give() -> None:
    pool = np.array([1, 3, 5])
    sel = Selection([Share("a", 6, repeat=2), Share("b", 2)], pools=[pool, None], seed=0)
    assert sorted(sel.ids_of(0, 0).tolist()) == [1, 1, 3, 3, 5, 5]
    with pytest.raises(ConfigError, match="dataset 'a' has no sample left.*val"):
        Selection([Share("a", 6, samples=3), Share("b", 2)], pools=[np.array([], int), None])


@pytest.mark.parametrize(
    ("share", "match"),
    [
        (dict(weight=1, repeat=2), "sets weight and repeat: give exactly one"),
        (dict(weight=-1), "weight must be a number >= 0"),
        (dict(samples=2.5), "samples must be an integer >= 0"),
    ],
)
def test_bad_shares_are_named(share: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        Share("a", 5, **share)  # type: ignore[arg-type]


def test_epoch_samples_must_hold_the_fixed_counts() -> None:
    with pytest.raises(ConfigError, match="epoch_samples=5 cannot hold the 7 samples"):
        Selection([Share("a", 7), Share("b", 3, weight=1)], epoch_samples=5)
    sel = Selection([Share("a", 7), Share("b", 3, weight=1)], epoch_samples=20)
    assert sel.counts.tolist() == [7, 13]


# -- every planner over a selection ----------------------------------------------------------


@pytest.mark.parametrize("name", sorted(INNER))
@pytest.mark.parametrize("world_size", (1, 2, 3))
@pytest.mark.parametrize("batching", ("mixed", "per_dataset"))
def test_every_selected_item_once_and_equal_batches(
    name: str, world_size: int, batching: str
) -> None:
    sel = selection_for(
        name,
        shares=[Share("a", 40, weight=2), Share("b", 23, repeat=1.5), Share("c", 7, samples=11)],
    )
    planner = MixturePlanner(INNER[name](), sel, batching=batching)
    for epoch in range(2):
        plan = planner.build(N, epoch=epoch, world_size=world_size)
        got = Counter(dealt(plan))
        want = Counter(sel.order(epoch).materialize().tolist())
        if name == "random_drop":
            # each dataset's partial last step (per_dataset) or the epoch's (mixed) is dropped
            steps = 3 if batching == "per_dataset" else 1
            assert not got - want and sum((want - got).values()) < steps * world_size * 3
        else:
            assert got == want, (name, world_size, batching, epoch)
        rows = {r: [plan.batch(r, k) for k in range(plan.num_batches)] for r in range(world_size)}
        assert {len(v) for v in rows.values()} == {plan.num_batches}
        if batching == "per_dataset":
            for k in range(plan.num_batches):
                step = np.concatenate([plan.batch(r, k) for r in range(world_size)])
                assert len(set(sel.dataset_of(step).tolist())) <= 1, (name, k)


@pytest.mark.parametrize("name", sorted(INNER))
@pytest.mark.parametrize("batching", ("mixed", "per_dataset"))
@pytest.mark.parametrize(("old", "new"), [(1, 3), (2, 3), (3, 2), (3, 1)])
def test_elastic_continuation_delivers_the_rest_exactly_once(
    name: str, batching: str, old: int, new: int
) -> None:
    if name == "random_drop":
        pytest.skip("drop_last drops a remainder by design")
    sel = selection_for(
        name,
        shares=[Share("a", 40, weight=2), Share("b", 23, repeat=1.5), Share("c", 7, samples=11)],
    )
    planner = MixturePlanner(INNER[name](), sel, batching=batching)
    first = planner.build(N, epoch=1, world_size=old)
    steps = first.num_batches // 2
    rest = continue_epoch(planner, N, epoch=1, segments=[(old, steps)], world_size=new)
    got = Counter(dealt(first, 0, steps)) + Counter(dealt(rest))
    assert got == Counter(sel.order(1).materialize().tolist()), (name, batching, old, new)
    counts = {len([rest.batch(r, k) for k in range(rest.num_batches)]) for r in range(new)}
    assert counts == {rest.num_batches}


def test_per_dataset_steps_come_in_proportion() -> None:
    sel = Selection([Share("a", 600, weight=3), Share("b", 600, weight=1)], seed=4)
    plan = MixturePlanner(RandomPlanner(4, seed=4), sel, batching="per_dataset").build(
        1200, epoch=0, world_size=2
    )
    kinds = [int(sel.dataset_of(plan.batch(0, k))[0]) for k in range(plan.num_batches)]
    assert Counter(kinds) == {0: 113, 1: 38}  # ceil(900 / 8), ceil(300 / 8)
    # spread through the epoch, not in blocks: every quarter holds both datasets
    quarters = [set(kinds[i : i + len(kinds) // 4]) for i in range(0, len(kinds), len(kinds) // 4)]
    assert all(q == {0, 1} for q in quarters[:4])


def test_params_record_the_mixture_and_plans_are_cached() -> None:
    sel = Selection(shares(), seed=1)
    planner = MixturePlanner(RandomPlanner(2, seed=1), sel)
    params = planner.params()
    assert params["kind"] == "random" and params["mixture"]["batching"] == "mixed"
    assert params["mixture"]["names"] == ["a", "b", "c"]
    assert [d["weight"] for d in params["mixture"]["datasets"].values()] == [0.5, 0.3, 0.2]
    assert planner.build(N, epoch=0, world_size=2) is planner.build(N, epoch=0, world_size=2)


# -- a mixture change mid-epoch --------------------------------------------------------------


@pytest.mark.parametrize("name", ["random", "grouped", "packed"])
def test_a_switch_deals_the_new_mixture_minus_what_was_delivered(name: str) -> None:
    old_sel = selection_for(name)
    old = MixturePlanner(INNER[name](), old_sel)
    first = old.build(N, epoch=0, world_size=2)
    steps = first.num_batches // 2
    delivered = Counter(dealt(first, 0, steps))
    new_sel = selection_for(name, shares=shares((0.2, 0.3, 0.5)))
    switch = Switch(0, old.identity(), ((2, steps),))
    new = MixturePlanner(INNER[name](), new_sel).with_switch(switch)
    rest = new.build(N, epoch=0, world_size=3)
    got = Counter(dealt(rest))
    want = Counter(new_sel.order(0).materialize().tolist()) - delivered
    assert got == want
    # nothing delivered before the switch comes again in this epoch unless the new mixture
    # takes it more often than the old one delivered it
    for i in delivered:
        assert got[i] <= max(0, Counter(new_sel.order(0).materialize().tolist())[i] - delivered[i])
    # the next epoch is the new mixture's own
    assert Counter(dealt(new.build(N, epoch=1, world_size=3))) == Counter(
        new_sel.order(1).materialize().tolist()
    )


def test_with_amounts_refuses_other_datasets() -> None:
    sel = Selection(shares(), seed=1)
    other = Selection([Share("a", 40), Share("b", 23), Share("x", 7)], seed=1)
    with pytest.raises(ConfigError, match="datasets .* are not this mixture's"):
        sel.with_amounts(other.identity())


def test_multiset_minus() -> None:
    rng = np.random.default_rng(0)
    for _ in range(20):
        a = rng.integers(0, 10, 50)
        b = rng.integers(0, 12, 20)
        got = multiset_minus(a, b)
        assert Counter(got.tolist()) == Counter(a.tolist()) - Counter(b.tolist())
        # order kept
        assert list(itertools.compress(a.tolist(), [True] * len(a)))[-1] in a.tolist()

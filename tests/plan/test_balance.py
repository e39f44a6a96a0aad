"""``balance``: even tokens and image patches across the ranks of each step, every invariant kept."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from chute.errors import ConfigError
from chute.lengths import Lengths
from chute.plan import (
    BudgetPlanner,
    PackedPlanner,
    RandomPlanner,
    TablePlan,
    continue_epoch,
    dealt_ids,
    make_planner,
    padding_report,
)
from chute.plan.balance import Balance, imbalance_report, rank_loads
from chute.plan.mixture_planner import MixturePlanner
from chute.plan.mixture_selection import Selection, Share
from chute.plan.pack import pack_rows, pack_spread
from chute.plan.rebalance import deal_rows, spread_tail

WORLD_SIZES = (1, 2, 3, 8)
COUNTS = (1, 7, 61, 400)


def skewed(n: int, seed: int = 0, images: float = 0.25, rejected: float = 0.05) -> Lengths:
    """Text samples of 20..300 tokens; a share with an image of 100..600 tokens, longer."""
    rng = np.random.default_rng(seed + n)
    image = np.where(rng.random(n) < images, rng.integers(100, 600, n), 0)
    length = rng.integers(20, 300, n) + image
    length[rng.random(n) < rejected] = -1
    return Lengths(length.astype(np.int32), image_tokens=image.astype(np.int32))


PLANNERS = {
    "budget": lambda lens, b: BudgetPlanner(2048, seed=2, lengths=lens, balance=b),
    "budget_rows": lambda lens, b: BudgetPlanner(
        3000, max_rows=6, pad_to_multiple_of=8, grad_accum=2, lengths=lens, balance=b
    ),
    "packed": lambda lens, b: PackedPlanner(1024, batch_size=1, seed=2, lengths=lens, balance=b),
    "packed_rows": lambda lens, b: PackedPlanner(1024, batch_size=3, lengths=lens, balance=b),
    "packed_window": lambda lens, b: PackedPlanner(
        900, batch_size=2, window=50, overflow="drop", lengths=lens, balance=b
    ),
}
BALANCES = (True, "patches", {"tokens": 1, "patches": 3, "tolerance": 0.2})


def every_batch(plan: TablePlan) -> list[np.ndarray]:
    return [plan.batch(r, k) for k in range(plan.num_batches) for r in range(plan.world_size)]


def flat(plan: TablePlan) -> np.ndarray:
    parts = every_batch(plan)
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)


# -- the option ------------------------------------------------------------------------------


def test_the_option_takes_true_names_and_weights() -> None:
    both = Balance.of(True)
    assert both == Balance.of("tokens+patches") == Balance.of({"patches": 1, "tokens": 1.0})
    assert both is not None and both.names == ("tokens", "patches") and both.tolerance == 0.05
    assert Balance.of(None) is None and Balance.of(False) is None
    assert Balance.of("patches") == Balance((("patches", 1.0),))
    custom = Balance.of({"tokens": 1, "patches": 2.5, "tolerance": 0})
    assert custom is not None
    assert custom.to_json() == {"weights": {"tokens": 1.0, "patches": 2.5}, "tolerance": 0.0}
    assert Balance.of(custom) is custom


@pytest.mark.parametrize(
    "value,match",
    [
        ("flops", r"balance: dimensions must be among \['cost', 'patches', 'tokens'\].*'flops'"),
        ("tokens+", "expected dimension names joined by '\\+'"),
        ({"patches": 0}, "the weight of 'patches' must be a number > 0, got 0"),
        ({"patches": True}, "the weight of 'patches' must be a number > 0"),
        ({"patches": 1, "tolerance": -1}, "tolerance must be a number >= 0.*got -1"),
        ({"tolerance": 0.1}, "dimensions must be among"),
        (3, "expected True, 'tokens\\+patches', 'tokens', 'patches', 'cost' or a mapping"),
    ],
)
def test_bad_values_name_the_option_and_the_fix(value: object, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        Balance.of(value)


def test_params_record_balance_only_when_set() -> None:
    lens = skewed(50)
    plain = PackedPlanner(512, lengths=lens).params()
    assert "balance" not in plain  # states saved before the option existed stay valid
    on = PackedPlanner(512, lengths=lens, balance=True).params()
    assert on["balance"] == {"weights": {"tokens": 1.0, "patches": 1.0}, "tolerance": 0.05}
    assert BudgetPlanner(512, lengths=lens, balance="patches").params()["balance"]["weights"] == {
        "patches": 1.0
    }
    planner = make_planner("budget", batch_size=2, max_tokens=512, balance=True)
    assert planner.params  # built through the registry, as Loader(plan_options=...) does
    with pytest.raises(ConfigError, match="balance= moves whole samples between the rows"):
        PackedPlanner(512, split=True, balance=True)


# -- invariants over simulated topologies -----------------------------------------------------


@pytest.mark.parametrize("name", sorted(PLANNERS))
@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_every_valid_id_once_equal_steps_and_the_same_plan_on_every_rank(
    name: str, world_size: int
) -> None:
    for n, balance in itertools.product(COUNTS, BALANCES):
        lens = skewed(n)
        plan = PACK(name, lens, balance, world_size)
        dropped = plan.undealt if name == "packed_window" else np.empty(0, dtype=np.int64)
        ids = np.sort(np.concatenate([flat(plan), dropped]))
        assert np.array_equal(ids, lens.valid_ids()), (name, n, balance)
        assert len(every_batch(plan)) == plan.num_batches * world_size
        # every rank builds the plan on its own: a fresh planner gives the same arrays
        again = PACK(name, lens, balance, world_size)
        assert np.array_equal(again.ids, plan.ids)
        assert np.array_equal(again.batch_bounds, plan.batch_bounds)
        if plan.row_bounds is not None:
            assert np.array_equal(again.row_bounds, plan.row_bounds)


def PACK(name: str, lens: Lengths, balance: object, world_size: int) -> TablePlan:
    plan = PLANNERS[name](lens, balance).build(len(lens), epoch=1, world_size=world_size)
    assert isinstance(plan, TablePlan)
    return plan


@pytest.mark.parametrize("name", sorted(PLANNERS))
def test_a_new_order_every_epoch(name: str) -> None:
    lens = skewed(400)
    planner = PLANNERS[name](lens, True)
    a, b = (flat(planner.build(400, epoch=e, world_size=3)) for e in (3, 4))
    assert not np.array_equal(a, b) and np.array_equal(np.sort(a), np.sort(b))


@pytest.mark.parametrize("name", sorted(PLANNERS))
def test_remaining_is_exactly_what_was_not_dealt(name: str) -> None:
    lens = skewed(257)
    plan = PACK(name, lens, True, 3)
    for k in range(plan.num_batches + 1):
        rest = plan.remaining(k).materialize()
        done = dealt_ids(plan, k)
        assert not np.intersect1d(rest, done).size
        assert np.array_equal(np.sort(np.concatenate([rest, done])), lens.valid_ids()), k


@pytest.mark.parametrize("name", sorted(PLANNERS))
@pytest.mark.parametrize("old,new", [(2, 3), (3, 2), (1, 8), (8, 1)])
def test_elastic_resume_keeps_exact_once(name: str, old: int, new: int) -> None:
    lens = skewed(301)
    planner = PLANNERS[name](lens, True)
    steps = planner.build(301, epoch=4, world_size=old).num_batches
    for k in sorted({0, 1, steps // 2, steps}):
        first = continue_epoch(planner, 301, epoch=4, segments=[], world_size=old)
        rest = continue_epoch(planner, 301, epoch=4, segments=[(old, k)], world_size=new)
        ids = np.concatenate([dealt_ids(first, k), dealt_ids(rest, rest.num_batches)])
        dropped = rest.undealt if name == "packed_window" else np.empty(0, dtype=np.int64)
        assert np.array_equal(np.sort(np.concatenate([ids, dropped])), lens.valid_ids()), k


def test_balance_keeps_packed_rows_within_max_length_and_as_tight() -> None:
    lens = skewed(6000, seed=3)
    plain = PackedPlanner(1024, batch_size=2, lengths=lens).build(6000, epoch=0, world_size=8)
    even = PackedPlanner(1024, batch_size=2, lengths=lens, balance=True).build(
        6000, epoch=0, world_size=8
    )
    for k, r in itertools.product(range(even.num_batches), range(8)):
        ids, rows, _ = even.layout(r, k)
        assert rows is not None and (rows > 0).all()
        starts = np.concatenate([[0], np.cumsum(rows)])
        assert all(lens.length[ids[a:b]].sum() <= 1024 for a, b in itertools.pairwise(starts))
    assert even.stats["rows"] <= even.stats["bound"] * 1.01
    assert even.stats["rows"] <= plain.stats["rows"] + 2
    assert even.num_batches == plain.num_batches


def test_balance_keeps_budget_batches_within_the_budget_and_padding() -> None:
    lens = skewed(6000, seed=4)
    plain = BudgetPlanner(4096, max_rows=40, lengths=lens).build(6000, epoch=0, world_size=8)
    even = BudgetPlanner(4096, max_rows=40, lengths=lens, balance=True).build(
        6000, epoch=0, world_size=8
    )
    for ids in every_batch(even):
        if len(ids):
            assert len(ids) * int(lens.length[ids].max()) <= 4096 and len(ids) <= 40
    assert even.num_batches == plain.num_batches
    # the same batches, grouped into other steps: padding is unchanged
    same = padding_report(even, lens.length).padded == padding_report(plain, lens.length).padded
    assert same


# -- what balance is for ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "name,batch_size",
    [("packed", 1), ("packed", 4), ("budget", None)],
)
def test_balance_cuts_the_patch_imbalance_of_skewed_data(name: str, batch_size: int | None) -> None:
    # long samples with big images, many short text ones: plain packing fills rows with images
    # first (longest first) and deals them at random; budget batches of neighbours in length
    lens = skewed(20_000, seed=5)
    n = len(lens)

    def build(balance: object) -> TablePlan:
        if name == "packed":
            planner = PackedPlanner(2048, batch_size=batch_size, lengths=lens, balance=balance)
        else:
            planner = BudgetPlanner(8192, lengths=lens, balance=balance)
        plan = planner.build(n, epoch=0, world_size=8)
        assert isinstance(plan, TablePlan)
        return plan

    before = imbalance_report(build(None), lens)
    after = imbalance_report(build(True), lens)
    assert before.patches is not None and after.patches is not None
    assert before.patches[0] > 1.3  # mean over steps of max / mean: the skew is real
    assert after.patches[0] < 1.15 and after.patches[2] < 1.1  # mean, and over the epoch
    assert after.patches[0] < before.patches[0] - 0.2
    assert after.tokens is not None and before.tokens is not None
    assert after.tokens[2] <= before.tokens[2] + 0.02  # tokens stay as even


def test_unbalanced_steps_are_counted_against_the_tolerance() -> None:
    lens = skewed(4000, seed=6)
    loose = PackedPlanner(
        2048, batch_size=4, lengths=lens, balance={"patches": 1, "tolerance": 1.0}
    ).build(4000, epoch=0, world_size=4)
    tight = PackedPlanner(
        2048, batch_size=4, lengths=lens, balance={"patches": 1, "tolerance": 0.0}
    ).build(4000, epoch=0, world_size=4)
    assert loose.stats["unbalanced_steps"] < tight.stats["unbalanced_steps"]
    assert tight.stats["balanced_steps"] >= loose.stats["balanced_steps"]
    ids = tight.ids.astype(np.int64)
    loads = rank_loads(tight, lens.image_tokens[ids])[:, :, 0]
    over = (loads.max(axis=1) * 4 > loads.sum(axis=1) * 1.0) & (loads.sum(axis=1) > 0)
    assert tight.stats["unbalanced_steps"] == int(np.count_nonzero(over))


def test_text_only_data_packs_as_without_balance_and_both_spread_the_last_step() -> None:
    lens = Lengths(np.random.default_rng(7).integers(5, 400, 3000).astype(np.int32))
    plain = PackedPlanner(1024, batch_size=1, lengths=lens).build(3000, epoch=0, world_size=4)
    even = PackedPlanner(1024, batch_size=1, lengths=lens, balance=True).build(
        3000, epoch=0, world_size=4
    )
    assert plain.row_bounds is not None and even.row_bounds is not None
    last = plain.num_batches - 1
    full = int(plain.row_bounds[plain.batch_bounds[last * 4]])
    assert np.array_equal(plain.ids[:full], even.ids[:full])  # the same rows, the same dealing
    assert np.array_equal(plain.row_bounds[: last * 4 + 1], even.row_bounds[: last * 4 + 1])
    # the last step held fewer rows than ranks: as many ranks as it has samples get one, with
    # balance or without (by tokens: the same for text)
    tail = flat(plain)[full:]
    assert [len(plain.batch(r, last)) > 0 for r in range(4)].count(True) == min(4, len(tail))
    assert [len(even.batch(r, last)) > 0 for r in range(4)].count(True) == min(4, len(tail))
    assert sorted(flat(even)[full:].tolist()) == sorted(tail.tolist())
    assert np.array_equal(plain.ids, even.ids) and np.array_equal(
        plain.batch_bounds, even.batch_bounds
    )


# -- mixtures --------------------------------------------------------------------------------


@pytest.mark.parametrize("batching", ["mixed", "per_dataset"])
@pytest.mark.parametrize("kind", ["budget", "packed"])
def test_a_mixture_over_a_balanced_planner_keeps_its_guarantees(batching: str, kind: str) -> None:
    text = skewed(300, seed=8, images=0.0, rejected=0.0)
    images = skewed(100, seed=9, images=1.0, rejected=0.0)
    lens = Lengths(
        np.concatenate([text.length, images.length]),
        image_tokens=np.concatenate([text.image_tokens, images.image_tokens]),
    )
    sel = Selection([Share("text", 300), Share("images", 100, repeat=3)], seed=1)
    inner = (
        PackedPlanner(1024, batch_size=2, lengths=lens, balance=True)
        if kind == "packed"
        else BudgetPlanner(2048, lengths=lens, balance=True)
    )
    planner = MixturePlanner(inner, sel, batching=batching)
    assert planner.params()["balance"]["weights"] == {"tokens": 1.0, "patches": 1.0}
    for world_size in (1, 3, 8):
        plan = planner.build(400, epoch=0, world_size=world_size)
        want = np.sort(sel.order(0).materialize())  # the images three times each
        assert np.array_equal(np.sort(flat(plan)), want), (world_size, batching)
    plain = MixturePlanner(
        PackedPlanner(1024, batch_size=2, lengths=lens), sel, batching=batching
    ).build(400, epoch=0, world_size=8)
    even = planner.build(400, epoch=0, world_size=8)
    if batching == "mixed" and kind == "packed":
        before, after = imbalance_report(plain, lens), imbalance_report(even, lens)
        assert after.patches is not None and before.patches is not None
        assert after.patches[0] < before.patches[0]


# -- the pieces ------------------------------------------------------------------------------


def textbook_bfd(lengths: list[int], capacity: int, loads: list[int]) -> list[int]:
    """Sample by sample, into rows already holding ``loads``: the fullest row that fits."""
    loads = list(loads)
    for size in sorted(lengths, reverse=True):
        fits = [i for i, load in enumerate(loads) if load + size <= capacity]
        if fits:
            best = max(fits, key=lambda i: (loads[i], -i))
            loads[best] += size
        else:
            loads.append(size)
    return sorted(loads)


def test_pack_rows_into_rows_already_open_is_best_fit_decreasing() -> None:
    rng = np.random.default_rng(10)
    for trial in range(80):
        capacity = int(rng.choice([7, 64, 100, 1000]))
        lens = rng.integers(1, capacity + 1, int(rng.integers(0, 80)))
        rooms = rng.integers(0, capacity + 1, int(rng.integers(0, 12)))
        members, counts = pack_rows(lens, capacity, rooms=rooms)
        assert sorted(members.tolist()) == list(range(len(lens)))
        assert len(counts) >= len(rooms)
        starts = np.concatenate([[0], np.cumsum(counts)])
        loads = [
            int(lens[members[a:b]].sum()) + (capacity - int(rooms[r]) if r < len(rooms) else 0)
            for r, (a, b) in enumerate(itertools.pairwise(starts))
        ]
        assert max(loads, default=0) <= capacity
        want = textbook_bfd(lens.tolist(), capacity, (capacity - rooms).tolist())
        assert sorted(loads) == want, trial


def test_pack_spread_deals_the_weighted_items_evenly_over_rows() -> None:
    rng = np.random.default_rng(11)
    lens = rng.integers(10, 200, 3000)
    weight = np.where(rng.random(3000) < 0.2, rng.integers(1, 50, 3000), 0)
    members, counts = pack_spread(lens, 1024, weight)
    assert sorted(members.tolist()) == list(range(3000)) and (counts > 0).all()
    starts = np.concatenate([[0], np.cumsum(counts)])
    rows = [members[a:b] for a, b in itertools.pairwise(starts)]
    assert max(int(lens[r].sum()) for r in rows) <= 1024
    per_row = np.array([int(weight[r].sum()) for r in rows])
    assert len(rows) <= -(-int(lens.sum()) // 1024) + 2
    # the snake: rows holding weighted items differ by at most the heaviest item
    held = per_row[per_row > 0]
    assert held.max() - held.min() <= weight.max()
    plain, plain_counts = pack_rows(lens, 1024)
    plain_starts = np.concatenate([[0], np.cumsum(plain_counts)])
    plain_rows = [int(weight[plain[a:b]].sum()) for a, b in itertools.pairwise(plain_starts)]
    assert np.std(per_row) < 0.5 * np.std(plain_rows)


def test_deal_rows_keeps_each_ranks_row_count_and_evens_the_load() -> None:
    rng = np.random.default_rng(12)
    cost = np.stack([rng.integers(900, 1024, 64), rng.integers(0, 2000, 64)], axis=1)
    order, changed = deal_rows(cost, 4, 4, Balance.of(True))
    assert sorted(order.tolist()) == list(range(64)) and changed > 0
    for s in range(4):  # rows stay in their step
        assert sorted(order[s * 16 : (s + 1) * 16].tolist()) == list(range(s * 16, (s + 1) * 16))
    before = cost.reshape(4, 4, 4, 2).sum(axis=2)
    after = cost[order].reshape(4, 4, 4, 2).sum(axis=2)
    ratio = lambda x: (x.max(axis=1) / x.mean(axis=1)).mean(axis=0)  # noqa: E731
    assert (ratio(after) <= ratio(before)).all() and ratio(after)[1] < ratio(before)[1]
    same, none = deal_rows(cost, 4, 1, Balance.of(True))  # one row per rank: nothing to deal
    assert none == 0 and np.array_equal(same, np.arange(64))


def test_imbalance_report_measures_max_over_mean_per_step() -> None:
    plan = RandomPlanner(1, shuffle=False).build(6, epoch=0, world_size=2)
    lens = Lengths(np.array([3, 1, 2, 2, 8, 0]), image_tokens=np.array([0, 0, 4, 0, 0, 0]))
    report = imbalance_report(plan, lens)
    # steps: tokens (3, 1), (2, 2), (8, 0); patches only in step 1: (4, 0)
    assert report.tokens == pytest.approx(
        (np.mean([1.5, 1.0, 2.0]), 2.0, (3 + 2 + 8) / (2 + 2 + 4))
    )
    assert report.patches == (2.0, 2.0, 2.0) and report.patch_steps == 1
    text = imbalance_report(plan, np.array([3, 1, 2, 2, 8, 1]))
    assert text.patches is None and text.to_json()["patches"]["mean"] is None


def test_spread_tail_gives_every_rank_a_share_within_max_length() -> None:
    rng = np.random.default_rng(13)
    size = rng.integers(50, 300, 20)  # a last step of 3 rows of 2048 on 8 ranks
    cost = np.stack([size, np.where(rng.random(20) < 0.3, size // 2, 0)], axis=1)
    spread = spread_tail(cost, size, 2048, 3, 8, Balance((("tokens", 1.0), ("patches", 1.0))))
    assert spread is not None
    order, counts, per_rank = spread
    assert sorted(order.tolist()) == list(range(20)) and counts.sum() == 20
    assert per_rank.tolist() == [1] * 8 and (counts > 0).all()
    starts = np.concatenate([[0], np.cumsum(counts)])
    loads = [int(size[order[a:b]].sum()) for a, b in itertools.pairwise(starts)]
    assert max(loads) <= 2048 and max(loads) < 1.5 * (size.sum() / 8)
    # a sample that fits no row: the step stays as it was
    assert (
        spread_tail(cost[:2], np.array([900, 900]), 1000, 1, 1, Balance((("tokens", 1.0),))) is None
    )


def test_a_last_partial_step_is_dealt_by_load_each_rank_keeping_its_count() -> None:
    """5 rows over 4 ranks: the rank with two rows took the two heaviest (2x the mean)."""
    from chute.plan.rebalance import deal_rows

    cost = np.array([[100], [100], [100], [100], [5]])
    order, changed = deal_rows(cost, 4, 2, Balance.of("tokens"), tail=np.array([2, 1, 1, 1]))
    per_rank = [cost[order[a:b]].sum() for a, b in [(0, 2), (2, 3), (3, 4), (4, 5)]]
    assert changed == 1 and sorted(per_rank) == [100, 100, 100, 105]
    assert sorted(order.tolist()) == [0, 1, 2, 3, 4]
    same, unchanged = deal_rows(cost, 4, 2, Balance.of("tokens"))  # no tail given: as it was
    assert unchanged == 0 and same.tolist() == [0, 1, 2, 3, 4]


def test_the_last_partial_step_of_a_balanced_plan_is_dealt_by_load() -> None:
    rng = np.random.default_rng(0)
    n = 3000
    lens = np.where(rng.random(n) < 0.03, rng.integers(2000, 4096, n), rng.integers(5, 300, n))
    lens = Lengths(lens.astype(np.int32))
    checked = 0
    for seed in range(6):
        plan = PackedPlanner(4096, batch_size=2, lengths=lens, seed=seed, balance="cost").build(
            n, epoch=0, world_size=4
        )
        assert plan.row_bounds is not None
        last = plan.num_batches - 1
        rows = [  # (rank, tokens) of each row of the last step
            (r, int(lens.length[plan.ids[plan.row_bounds[k] : plan.row_bounds[k + 1]]].sum()))
            for r in range(4)
            for k in range(
                int(plan.batch_bounds[last * 4 + r]), int(plan.batch_bounds[last * 4 + r + 1])
            )
        ]
        counts = np.bincount([r for r, _ in rows], minlength=4)
        if not 4 < len(rows) < 8:
            continue  # not a partial step of more rows than ranks
        lightest = min(rows, key=lambda x: x[1])
        assert counts[lightest[0]] > 1, rows  # a rank with more rows takes the light ones
        assert sorted(flat(plan).tolist()) == list(range(n))
        checked += 1
    assert checked >= 3

"""Length-aware plans: the invariants every plan keeps, and what each strategy promises."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from chute.errors import ConfigError
from chute.lengths import Lengths
from chute.plan import (
    BudgetPlanner,
    GroupedPlanner,
    PackedPlanner,
    Plan,
    TablePlan,
    continue_epoch,
    dealt_ids,
    make_planner,
)
from chute.plan.registry import check_plan_options

WORLD_SIZES = (1, 2, 3, 8)
COUNTS = (1, 7, 61, 103, 400)


def lengths_for(n: int, seed: int = 0, rejected: float = 0.1) -> np.ndarray:
    rng = np.random.default_rng(seed + n)
    lens = rng.integers(1, 60, n).astype(np.int32)
    lens[rng.random(n) < rejected] = -1
    return lens


PLANNERS = {
    "grouped": lambda lens: GroupedPlanner(4, group_size=3, seed=2, lengths=lens),
    "grouped_accum": lambda lens: GroupedPlanner(2, grad_accum=3, group_size=2, lengths=lens),
    "budget": lambda lens: BudgetPlanner(120, seed=2, lengths=lens),
    "budget_rows": lambda lens: BudgetPlanner(200, max_rows=3, pad_to_multiple_of=8, lengths=lens),
    "packed": lambda lens: PackedPlanner(64, batch_size=2, seed=2, lengths=lens),
    "packed_window": lambda lens: PackedPlanner(70, batch_size=3, window=17, lengths=lens),
}


def every_batch(plan: Plan) -> list[list[np.ndarray]]:
    return [[plan.batch(r, k) for k in range(plan.num_batches)] for r in range(plan.world_size)]


def flat(plan: Plan) -> np.ndarray:
    parts = [b for rank in every_batch(plan) for b in rank]
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)


@pytest.mark.parametrize("name", sorted(PLANNERS))
@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_every_valid_id_once_and_equal_batch_counts(name: str, world_size: int) -> None:
    for n in COUNTS:
        lens = lengths_for(n)
        plan = PLANNERS[name](lens).build(n, epoch=1, world_size=world_size)
        assert isinstance(plan, TablePlan)
        assert np.array_equal(np.sort(flat(plan)), np.flatnonzero(lens >= 0)), (name, n)
        # equal counts by construction of the table; every rank answers for every batch
        assert all(len(rank) == plan.num_batches for rank in every_batch(plan))


@pytest.mark.parametrize("name", sorted(PLANNERS))
def test_deterministic_and_a_new_order_every_epoch(name: str) -> None:
    lens = lengths_for(400)
    a = flat(PLANNERS[name](lens).build(400, epoch=3, world_size=3))
    b = flat(PLANNERS[name](lens).build(400, epoch=3, world_size=3))
    c = flat(PLANNERS[name](lens).build(400, epoch=4, world_size=3))
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)
    assert np.array_equal(np.sort(a), np.sort(c))


@pytest.mark.parametrize("name", sorted(PLANNERS))
def test_lazy_remaining_is_what_was_not_dealt(name: str) -> None:
    lens = lengths_for(103)
    plan = PLANNERS[name](lens).build(103, epoch=0, world_size=3)
    for k in range(plan.num_batches + 1):
        rest = plan.remaining(k).materialize()
        assert np.array_equal(np.sort(rest), np.sort(Plan.remaining(plan, k).materialize())), k
        assert not np.intersect1d(rest, dealt_ids(plan, k)).size


@pytest.mark.parametrize("name", sorted(PLANNERS))
@pytest.mark.parametrize("old,new", [(2, 3), (3, 2), (1, 8), (8, 1)])
def test_elastic_chains_keep_exact_once(name: str, old: int, new: int) -> None:
    n = 257
    lens = lengths_for(n)
    planner = PLANNERS[name](lens)
    steps = planner.build(n, epoch=4, world_size=old).num_batches
    for k in sorted({0, 1, steps // 2, steps}):
        first = continue_epoch(planner, n, epoch=4, segments=[], world_size=old)
        rest = continue_epoch(planner, n, epoch=4, segments=[(old, k)], world_size=new)
        ids = np.concatenate([dealt_ids(first, k), dealt_ids(rest, rest.num_batches)])
        assert np.array_equal(np.sort(ids), np.flatnonzero(lens >= 0)), (k, steps)


def test_plans_record_the_lengths_so_a_state_from_other_lengths_is_refused() -> None:
    a = GroupedPlanner(4, lengths=np.array([3, 4, 5])).params()
    b = GroupedPlanner(4, lengths=np.array([3, 4, 6])).params()
    assert a["lengths"]["hash"] != b["lengths"]["hash"]
    assert a["lengths"] | {"hash": None} == {"samples": 3, "valid": 3, "tokens": 12, "hash": None}


# -- grouped --------------------------------------------------------------------------------


def test_grouped_steps_are_sorted_slices_of_a_mega_batch_shuffled_longest_first() -> None:
    n, b, w, g = 960, 4, 2, 5  # mega-batches of 5 steps of 8 samples
    lens = np.random.default_rng(1).permutation(np.arange(1, n + 1)).astype(np.int32)
    plan = GroupedPlanner(b, group_size=g, lengths=lens).build(n, epoch=0, world_size=w)
    steps = [np.concatenate([plan.batch(r, k) for r in range(w)]) for k in range(plan.num_batches)]
    for ids in steps:  # within a step: descending, rank 0 the longest run
        assert (np.diff(lens[ids]) <= 0).all()
    assert lens[steps[0][0]] == n  # the longest sample leads the epoch
    maxima = [int(lens[ids].max()) for ids in steps]
    assert maxima != sorted(maxima, reverse=True)  # not long-to-short over the epoch
    # each rank's batch is a run of neighbours, not every w-th sample of the step (XTuner's
    # round-robin dealing): its spread is well under the whole step's
    rank_spread = [
        np.ptp(lens[plan.batch(r, k)]) for k in range(plan.num_batches) for r in range(w)
    ]
    step_spread = [np.ptp(lens[ids]) for ids in steps]
    assert np.mean(rank_spread) < 0.6 * np.mean(step_spread)


def test_grouped_keeps_gradient_accumulation_blocks_together() -> None:
    n, b, w, a = 600, 2, 2, 3
    lens = np.random.default_rng(2).integers(1, 1000, n).astype(np.int32)
    plan = GroupedPlanner(b, group_size=4, grad_accum=a, lengths=lens, longest_first=False).build(
        n, epoch=0, world_size=w
    )
    sorted_all = []
    for k in range(0, plan.num_batches - 1, a):  # each block of a steps: one descending run
        block = [plan.batch(r, j) for j in range(k, min(k + a, plan.num_batches)) for r in range(w)]
        block = np.concatenate(block)
        sorted_all.append(bool((np.diff(lens[block]) <= 0).all()))
    assert all(sorted_all)


def test_grouped_pads_less_than_random_batches() -> None:
    from chute.plan import RandomPlanner, padding_report

    lens = np.random.default_rng(3).lognormal(5, 1, 5000).astype(np.int32) + 1
    grouped = GroupedPlanner(8, lengths=lens).build(5000, epoch=0, world_size=4)
    random = RandomPlanner(8).build(5000, epoch=0, world_size=4)
    g, r = padding_report(grouped, lens), padding_report(random, lens)
    assert g.tokens == r.tokens and g.steps == r.steps
    assert g.efficiency > 0.9 > 0.4 > r.efficiency


# -- budget ---------------------------------------------------------------------------------


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_budget_batches_fit_the_budget(world_size: int) -> None:
    lens = np.random.default_rng(4).integers(1, 300, 2000).astype(np.int32)
    planner = BudgetPlanner(1024, pad_to_multiple_of=16, max_rows=40, lengths=lens)
    plan = planner.build(2000, epoch=0, world_size=world_size)
    for rank in every_batch(plan):
        for ids in rank:
            if len(ids):
                width = -(-int(lens[ids].max()) // 16) * 16
                assert len(ids) * width <= 1024 and len(ids) <= 40
    sizes = {len(ids) for rank in every_batch(plan) for ids in rank}
    assert len(sizes) > 3  # variable batch sizes
    assert plan.stats["over_budget"] == 0


def test_budget_gives_an_over_long_sample_a_batch_of_its_own() -> None:
    lens = np.array([5, 50, 5, 5, 5, 5], dtype=np.int32)
    plan = BudgetPlanner(20, shuffle=False, lengths=lens).build(6, epoch=0, world_size=1)
    assert [plan.batch(0, k).tolist() for k in range(plan.num_batches)] == [[1], [0, 2, 3, 4], [5]]
    assert plan.stats["over_budget"] == 1


def test_budget_splits_batches_so_every_rank_has_one_per_step() -> None:
    lens = np.full(10, 4, dtype=np.int32)  # budget 40: all ten fit one batch
    plan = BudgetPlanner(40, shuffle=False, lengths=lens).build(10, epoch=0, world_size=3)
    assert plan.num_batches == 1
    assert sorted(len(plan.batch(r, 0)) for r in range(3)) == [2, 3, 5]
    tiny = BudgetPlanner(40, lengths=np.full(2, 4)).build(2, epoch=0, world_size=3)
    assert [len(tiny.batch(r, 0)) for r in range(3)] == [1, 1, 0]  # too few: a placeholder


def test_budget_defaults_to_batch_size_times_max_length() -> None:
    assert BudgetPlanner(batch_size=8, max_length=512, lengths=[1]).max_tokens == 4096
    with pytest.raises(ConfigError, match="plan='budget' needs max_tokens"):
        BudgetPlanner(batch_size=8)


# -- packed ---------------------------------------------------------------------------------


def row_totals(plan: TablePlan, lens: np.ndarray) -> list[int]:
    totals = []
    for k, r in itertools.product(range(plan.num_batches), range(plan.world_size)):
        ids, rows, spans = plan.layout(r, k)
        sizes = spans[:, 1] - spans[:, 0] if spans is not None else lens[ids]
        starts = np.concatenate([[0], np.cumsum(rows)])
        totals += [int(sizes[a:b].sum()) for a, b in itertools.pairwise(starts)]
    return totals


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_packed_rows_never_exceed_max_length_and_are_nearly_full(world_size: int) -> None:
    lens = np.random.default_rng(5).integers(1, 200, 3000).astype(np.int32)
    plan = PackedPlanner(256, batch_size=4, lengths=lens).build(
        3000, epoch=0, world_size=world_size
    )
    totals = row_totals(plan, lens)
    assert max(totals) <= 256 and len(totals) == plan.stats["rows"]
    assert sum(totals) / (len(totals) * 256) > 0.99
    assert len(totals) <= plan.stats["bound"] * 1.01


def test_packed_over_long_samples_are_truncated_or_dropped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    lens = np.array([10, 300, 20, 400, 30], dtype=np.int32)
    with caplog.at_level("WARNING", logger="chute"):
        planner = PackedPlanner(100, lengths=lens)
        cut = planner.build(5, epoch=0, world_size=1)
        planner.build(5, epoch=1, world_size=1)  # said once
    assert cut.stats["truncated"] == 2 and sorted(flat(cut).tolist()) == [0, 1, 2, 3, 4]
    assert max(row_totals(cut, np.minimum(lens, 100))) <= 100
    # a split document's windows cut by a shorter row lost their ends without a word
    said = [r.getMessage() for r in caplog.records if "longer than a packed row" in r.getMessage()]
    assert said == [
        "samples longer than a packed row (max_length=100): 2 were cut to it (their last tokens "
        "are not trained); give the plan a max_length at least the longest sample's "
        "(plan_options={'max_length': ...}), or make the samples shorter (the recipe's "
        "max_length)"
    ]
    caplog.clear()
    with caplog.at_level("WARNING", logger="chute"):
        drop = PackedPlanner(100, overflow="drop", lengths=lens).build(5, epoch=0, world_size=1)
    assert drop.stats["dropped"] == 2 and sorted(flat(drop).tolist()) == [0, 2, 4]
    assert sorted(drop.remaining(0).materialize().tolist()) == [0, 1, 2, 3, 4]
    assert "2 were left out of the epoch (overflow='drop')" in caplog.text


@pytest.mark.parametrize("world_size", [2, 3, 8])
def test_a_short_last_step_of_rows_is_spread_over_every_rank(world_size: int) -> None:
    """Its rows fewer than the ranks, a rank had a placeholder batch (a wasted step, and for a
    vision-language model under DDP a vision tower without gradients)."""
    # rows of 6 samples: 2 full steps, then 1 or 2 rows (fewer than the ranks, more samples)
    tail_rows = 1 if world_size <= 3 else 2
    lens = np.full(6 * (2 * world_size + tail_rows), 10, dtype=np.int32)
    for plan in (
        PackedPlanner(64, lengths=lens, seed=3).build(len(lens), epoch=0, world_size=world_size),
        PackedPlanner(64, lengths=lens, seed=3).plan_ids(
            np.arange(len(lens)), epoch=0, world_size=world_size
        ),
    ):
        last = plan.num_batches - 1
        shares = [plan.batch(r, last) for r in range(world_size)]
        assert all(len(share) for share in shares)  # every rank has samples
        assert sorted(flat(plan).tolist()) == list(range(len(lens)))  # each once
        assert max(row_totals(plan, lens)) <= 64


def test_drop_last_rows_are_not_called_samples_too_long(
    caplog: pytest.LogCaptureFixture,
) -> None:
    lens = np.full(11, 3, dtype=np.int32)
    with caplog.at_level("WARNING", logger="chute"):
        plan = PackedPlanner(8, lengths=lens, window=5, drop_last=True).build(
            11, epoch=0, world_size=2
        )
    assert plan.stats["dropped"] > 0  # drop_last's rows
    assert "longer than a packed row" not in caplog.text


def test_packed_drop_last_leaves_out_the_partial_step_of_rows() -> None:
    lens = np.full(7, 10, dtype=np.int32)  # 7 rows of one sample each
    plan = PackedPlanner(10, batch_size=2, drop_last=True, lengths=lens).build(
        7, epoch=0, world_size=2
    )
    assert plan.num_batches == 1 and len(flat(plan)) == 4 and plan.stats["dropped"] == 3


def test_split_cuts_the_stream_into_full_rows_covering_every_token_once() -> None:
    lens = np.random.default_rng(6).integers(1, 90, 500).astype(np.int32)
    lens[::50] = -1
    plan = PackedPlanner(64, batch_size=3, split=True, lengths=lens).build(
        500, epoch=0, world_size=3
    )
    totals = row_totals(plan, lens)
    assert all(t == 64 for t in totals[:-1]) and 0 < totals[-1] <= 64  # only the last is short
    seen: dict[int, list[tuple[int, int]]] = {}
    for k, r in itertools.product(range(plan.num_batches), range(3)):
        ids, _, spans = plan.layout(r, k)
        for i, (s, e) in zip(ids.tolist(), spans.tolist(), strict=True):
            seen.setdefault(i, []).append((s, e))
    assert sorted(seen) == np.flatnonzero(lens >= 0).tolist()
    for i, pieces in seen.items():  # contiguous pieces from 0 to the sample's length
        bounds = sorted(pieces)
        assert bounds[0][0] == 0 and bounds[-1][1] == lens[i]
        assert all(a[1] == b[0] for a, b in itertools.pairwise(bounds))
    assert plan.stats["split_samples"] > 0


def test_split_elastic_resume_repeats_at_most_the_one_sample_cut_by_the_resume() -> None:
    lens = np.random.default_rng(7).integers(1, 90, 300).astype(np.int32)
    planner = PackedPlanner(64, batch_size=2, split=True, lengths=lens)
    first = planner.build(300, epoch=0, world_size=2)
    for k in range(1, first.num_batches):
        rest = continue_epoch(planner, 300, epoch=0, segments=[(2, k)], world_size=3)
        before, after = dealt_ids(first, k), dealt_ids(rest, rest.num_batches)
        assert set(before) | set(after) == set(range(300))
        assert len(np.intersect1d(before, after)) <= 1


def test_split_refuses_samples_with_image_tokens() -> None:
    lengths = Lengths(np.array([5, 6], dtype=np.int32), image_tokens=np.array([0, 4]))
    with pytest.raises(ConfigError, match="split=True cuts samples at row boundaries"):
        PackedPlanner(8, split=True, lengths=lengths).build(2, epoch=0, world_size=1)


def test_a_small_packing_window_is_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    lens = np.random.default_rng(8).integers(1, 200, 2000).astype(np.int32)
    PackedPlanner(256, window=8, lengths=lens).build(2000, epoch=0, world_size=1)
    assert "packing fills rows poorly" in caplog.text and "raise window=" in caplog.text


# -- options --------------------------------------------------------------------------------


def test_options_are_checked_with_messages_naming_them() -> None:
    with pytest.raises(ConfigError, match="wrap=True is not supported by plan='grouped'"):
        make_planner("grouped", batch_size=4, wrap=True)
    with pytest.raises(ConfigError, match="group_size must be a positive int, got 0"):
        GroupedPlanner(4, group_size=0)
    with pytest.raises(ConfigError, match="plan='packed' needs max_length"):
        PackedPlanner(batch_size=2)
    with pytest.raises(ConfigError, match=r"overflow must be one of \('truncate', 'drop'\)"):
        PackedPlanner(8, overflow="wrap")
    with pytest.raises(ConfigError, match="window= applies to packing whole samples"):
        PackedPlanner(8, split=True, window=100)
    with pytest.raises(ConfigError, match="plan='grouped' needs the length of every sample"):
        GroupedPlanner(4).build(10, epoch=0, world_size=1)
    with pytest.raises(ConfigError, match="has lengths for 3 samples but the source has 4"):
        GroupedPlanner(4, lengths=[1, 2, 3]).build(4, epoch=0, world_size=1)
    with pytest.raises(
        ConfigError,
        match=r"plan_options: plan='packed' has no option 'group_size'; its options: align, "
        r"balance, cost, max_length, overflow, split, window$",
    ):
        make_planner("packed", batch_size=2, max_length=8, group_size=3)
    with pytest.raises(ConfigError, match=r"'max_len' \(did you mean 'max_length'\?\)"):
        make_planner("packed", batch_size=2, max_len=8)
    # the Loader's own arguments in plan_options: named (it was Python's "multiple values")
    with pytest.raises(
        ConfigError,
        match=r"plan_options: 'drop_last' is an argument of the Loader itself \(Loader\(drop_last=\.\.\.\)\)",
    ):
        check_plan_options("packed", {"max_length": 8, "drop_last": True})
    with pytest.raises(ConfigError, match=r"'batch_size', 'seed' are arguments of the Loader"):
        check_plan_options("packed", {"batch_size": 2, "seed": 3})

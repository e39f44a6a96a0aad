"""Compute per sample (``a + b*n + c*n^2``) and ``balance="cost"`` over long-context data."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from chute.errors import ConfigError
from chute.lengths import Lengths
from chute.plan import (
    BudgetPlanner,
    IdOrder,
    PackedPlanner,
    TablePlan,
    continue_epoch,
    dealt_ids,
    make_planner,
    padding_report,
)
from chute.plan.balance import Balance, imbalance_report, rank_loads
from chute.plan.cost import COST_MODELS, DEFAULT_COST, CostModel, sample_costs

ROW = 32768


def long_context(n_short: int = 20_000, n_long: int = 160, n_mid: int = 120, seed: int = 0):
    """Short SFT samples (50..1500 tokens), 32k-token windows and mid-sized documents."""
    rng = np.random.default_rng(seed)
    parts = [
        rng.integers(50, 1500, n_short),
        np.full(n_long, ROW),
        rng.integers(2000, 30000, n_mid),
    ]
    length = np.concatenate(parts)[rng.permutation(n_short + n_long + n_mid)]
    return Lengths(length.astype(np.int32))


# -- the model ---------------------------------------------------------------------------------


def test_the_default_is_llama3_8b_counted_from_its_shape() -> None:
    model = DEFAULT_COST
    assert model is COST_MODELS["llama3-8b"] and model.a == 0
    # Llama-3-8B has 8,030,261,248 parameters; less the input embedding (128,256 x 4,096, a
    # lookup) and the 65 RMSNorm weight vectors (elementwise), 7,504,658,432 multiply per token
    published, embedding, norms = 8_030_261_248, 128_256 * 4096, 65 * 4096
    assert model.b == 6 * (published - embedding - norms)
    assert model.c == 6 * 32 * 4096  # causal scores and values, forward and backward
    assert round(model.crossover) == 57256
    # a 32k-token document costs 1.57x its dense share; 64 samples of 512 tokens 1.009x
    ratio = model.cost(np.array([ROW, 512])) / (model.b * np.array([ROW, 512]))
    assert ratio.round(3).tolist() == [1.572, 1.009]


def test_transformer_counts_the_matrices_of_a_shape() -> None:
    gqa = CostModel.transformer(layers=2, hidden=8, intermediate=16, heads=4, kv_heads=2, vocab=10)
    # per layer: q and o 8x8 each, k and v 8x4 each, three MLP matrices 8x16; the head 10x8
    assert gqa.b == 6 * (2 * (64 + 64 + 32 + 32 + 3 * 128) + 80)
    assert gqa.c == 6 * 2 * 8
    plain = CostModel.transformer(
        layers=2, hidden=8, intermediate=16, heads=4, vocab=10, gated=False
    )
    assert plain.b == 6 * (2 * (4 * 64 + 2 * 128) + 80)
    # Qwen3-style heads wider than the model: attention counts the heads' width
    wide = CostModel.transformer(layers=1, hidden=8, intermediate=8, heads=4, head_dim=4, vocab=1)
    assert wide.c == 6 * 16


@pytest.mark.parametrize(
    "value,match",
    [
        ({"b": -1}, r"cost: b must be a finite number >= 0 .*got -1"),
        ({"a": 0, "b": 0, "c": 0}, "cost: a, b and c are all 0"),
        ({"c": float("inf")}, "cost: c must be a finite number"),
        ("gpt-5", r"cost: no cost model is named 'gpt-5'; give one of \['llama3-70b'"),
        ({"b": 1, "layers": 2}, "cost: give the constants .* not both or others"),
        ({"layers": 0, "hidden": 8, "intermediate": 8, "heads": 1, "vocab": 1}, "layers must"),
        (7, "cost: expected a CostModel, a name"),
    ],
)
def test_bad_models_name_the_option_the_value_and_the_fix(value: object, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        CostModel.of(value)  # type: ignore[arg-type]


def test_the_option_takes_a_model_a_name_constants_or_a_shape() -> None:
    assert CostModel.of(None) is DEFAULT_COST
    assert CostModel.of(" Qwen3-8B ") is COST_MODELS["qwen3-8b"]
    assert CostModel.of({"b": 2, "c": 1}) == CostModel(0, 2, 1)
    shape = {"layers": 32, "hidden": 4096, "intermediate": 14336, "heads": 32, "kv_heads": 8}
    assert CostModel.of({**shape, "vocab": 128256}) == DEFAULT_COST
    assert CostModel.of({"b": 1, "name": "mine"}).name == "mine"


def test_units_are_integers_in_proportion_to_the_cost() -> None:
    model = CostModel(a=3, b=1, c=0.5)
    n = np.array([0, 1, 10, 1000, ROW])
    units = model.units(n)
    assert units.dtype == np.int64 and units[0] == 0 and units[1] == 1000
    want = model.cost(n) / model.cost(np.array([1]))[0] * 1000
    assert np.abs(units - want).max() <= 0.5
    with pytest.raises(ConfigError, match="cost: costs of up to .* overflow integer sums"):
        CostModel(b=0, c=1).units(np.full(10**7, 2**20))


def test_a_pair_costs_its_two_sequences_and_a_cap_cuts_a_sample() -> None:
    model = CostModel(b=1, c=1)
    pairs = Lengths(np.array([30, 9]), longest=np.array([20, 5]), sequences=2)
    got = sample_costs(model, pairs, np.array([0, 1]))
    per_token = model.cost(np.array([1]))[0] / 1000
    assert got.tolist() == [round((420 + 110) / per_token), round((30 + 20) / per_token)]
    capped = sample_costs(model, Lengths.of([100, 5]), np.array([0, 1]), cap=10)
    assert capped.tolist() == [round(110 / per_token), round(30 / per_token)]


# -- a packed row costs the sum over its samples ---------------------------------------------


def test_a_rows_cost_is_the_sum_over_its_samples_not_the_rows_square() -> None:
    # two ranks, one row each of 8 tokens: rank 0 one sample of 8, rank 1 four samples of 2
    lens = Lengths.of([8, 2, 2, 2, 2])
    plan = TablePlan(
        IdOrder(np.arange(5)),
        2,
        ids=np.arange(5),
        batch_bounds=np.array([0, 1, 2]),
        row_bounds=np.array([0, 1, 5]),
        stats={"max_length": 8},
    )
    report = imbalance_report(plan, lens, cost={"b": 1, "c": 1})
    assert report.tokens == (1.0, 1.0, 1.0)
    # rank 0: 8 + 64 = 72; rank 1: 4 x (2 + 4) = 24; the mean 48
    assert report.cost == pytest.approx((1.5, 1.5, 1.5))
    assert report.to_json()["cost"] == {"mean": 1.5, "worst": 1.5, "epoch": 1.5}


# -- the option -------------------------------------------------------------------------------


def test_balance_cost_records_its_model_and_refuses_a_model_it_does_not_use() -> None:
    on = Balance.of("cost")
    assert on is not None and on.cost is DEFAULT_COST
    assert on.to_json() == {
        "weights": {"cost": 1.0},
        "tolerance": 0.05,
        "cost": DEFAULT_COST.to_json(),
    }
    mine = Balance.of({"tokens": 1, "cost": 2}, cost={"b": 1, "c": 0.01})
    assert (
        mine is not None and mine.names == ("tokens", "cost") and mine.cost == CostModel(0, 1, 0.01)
    )
    assert Balance.of(mine) is mine and Balance.of(on, cost="qwen3-8b").cost.name == "qwen3-8b"  # type: ignore[union-attr]
    assert "cost" not in Balance.of(True).to_json()  # type: ignore[union-attr]
    for balance in (None, True, "patches"):
        with pytest.raises(ConfigError, match="cost: sets the model of the 'cost' dimension"):
            Balance.of(balance, cost="llama3-70b")
    planner = make_planner(
        "packed", batch_size=2, max_length=64, balance="cost", cost="llama3-70b", lengths=[5]
    )
    assert planner.params()["balance"]["cost"] == COST_MODELS["llama3-70b"].to_json()
    with pytest.raises(ConfigError, match="cost: sets the model"):
        BudgetPlanner(64, cost={"b": 1})


# -- what it is for --------------------------------------------------------------------------


def cost_of(plan: TablePlan, lens: Lengths) -> tuple[float, float, float]:
    report = imbalance_report(plan, lens)
    assert report.cost is not None
    return report.cost


@pytest.mark.parametrize("batch_size", [1, 4])
def test_balance_cost_evens_compute_where_tokens_are_already_even(batch_size: int) -> None:
    lens = long_context()
    n = len(lens)

    def build(balance: object) -> TablePlan:
        planner = PackedPlanner(ROW, batch_size=batch_size, lengths=lens, balance=balance)
        plan = planner.build(n, epoch=0, world_size=8)
        assert isinstance(plan, TablePlan)
        return plan

    plain, tokens, cost = build(None), build("tokens"), build("cost")
    assert imbalance_report(plain, lens).tokens[0] < 1.02  # type: ignore[index]
    # equal tokens are not equal compute: a row of one 32k window costs 1.57x a row of SFT
    assert cost_of(plain, lens)[0] > 1.05 and cost_of(plain, lens)[2] > 1.05
    assert cost_of(tokens, lens)[0] > 1.05
    after = cost_of(cost, lens)
    assert after[0] < 1.02 and after[2] < 1.01, after
    assert imbalance_report(cost, lens).tokens[2] <= imbalance_report(plain, lens).tokens[2] + 0.005  # type: ignore[index]
    # the same rows (packing is unchanged), only grouped into other steps; the same steps
    assert cost.num_batches == plain.num_batches
    assert cost.stats["rows"] == plain.stats["rows"]
    # padding differs only where the last, partial step's samples now reach every rank (rows
    # the measure counts, where plain packing left ranks a placeholder row it does not count)
    extra = padding_report(cost, lens.length).padded - padding_report(plain, lens.length).padded
    assert 0 <= extra <= 7 * ROW


def test_balance_cost_on_budget_steps() -> None:
    lens = long_context(n_short=30_000, seed=1)
    n = len(lens)
    plain = BudgetPlanner(2 * ROW, group_size=4, lengths=lens).build(n, epoch=0, world_size=8)
    even = BudgetPlanner(2 * ROW, group_size=4, lengths=lens, balance="cost").build(
        n, epoch=0, world_size=8
    )
    assert isinstance(plain, TablePlan) and isinstance(even, TablePlan)
    before, after = cost_of(plain, lens), cost_of(even, lens)
    # mega-batches end in small batches: the light steps that gather them stay uneven (the
    # mean over steps), but they weigh little in the epoch's time
    assert after[0] < before[0] - 0.1 and after[2] < 1.02 < before[2], (before, after)
    # the same batches in other steps: the padding is unchanged
    assert padding_report(even, lens.length).padded == padding_report(plain, lens.length).padded


def test_unbalanced_steps_count_compute_above_the_tolerance() -> None:
    lens = long_context(n_short=6000, n_long=40, n_mid=40, seed=2)
    plan = PackedPlanner(ROW, batch_size=2, lengths=lens, balance={"cost": 1, "tolerance": 0.0})
    built = plan.build(len(lens), epoch=0, world_size=4)
    assert isinstance(built, TablePlan)
    costs = sample_costs(DEFAULT_COST, lens, built.ids.astype(np.int64), ROW)
    loads = rank_loads(built, costs)[:, :, 0]
    over = loads.max(axis=1) * 4 > loads.sum(axis=1)
    assert built.stats["unbalanced_steps"] == int(np.count_nonzero(over)) > 0


# -- invariants over simulated topologies -----------------------------------------------------

PLANNERS = {
    "packed": lambda lens: PackedPlanner(ROW, batch_size=1, seed=3, lengths=lens, balance="cost"),
    "packed_rows": lambda lens: PackedPlanner(
        ROW, batch_size=3, lengths=lens, balance={"tokens": 1, "cost": 2}, cost="qwen3-8b"
    ),
    "budget": lambda lens: BudgetPlanner(2 * ROW, seed=3, lengths=lens, balance="cost"),
}


def with_rejects(n: int, seed: int) -> Lengths:
    lens = long_context(n_short=n, n_long=max(1, n // 50), n_mid=max(1, n // 80), seed=seed)
    length = lens.length.copy()
    length[np.random.default_rng(seed).random(len(length)) < 0.05] = -1
    return Lengths(length)


@pytest.mark.parametrize("name", sorted(PLANNERS))
@pytest.mark.parametrize("world_size", [1, 2, 3, 8])
def test_every_valid_id_once_equal_steps_and_the_same_plan_on_every_rank(
    name: str, world_size: int
) -> None:
    for n in (3, 60, 700):
        lens = with_rejects(n, seed=n)
        plan = PLANNERS[name](lens).build(len(lens), epoch=1, world_size=world_size)
        assert isinstance(plan, TablePlan)
        batches = [plan.batch(r, k) for k in range(plan.num_batches) for r in range(world_size)]
        assert np.array_equal(np.sort(np.concatenate(batches)), lens.valid_ids()), (name, n)
        again = PLANNERS[name](lens).build(len(lens), epoch=1, world_size=world_size)
        assert isinstance(again, TablePlan)
        assert np.array_equal(again.ids, plan.ids)
        assert np.array_equal(again.batch_bounds, plan.batch_bounds)


@pytest.mark.parametrize("name", sorted(PLANNERS))
@pytest.mark.parametrize("old,new", [(2, 3), (3, 2), (1, 8), (8, 1)])
def test_elastic_resume_keeps_exact_once(name: str, old: int, new: int) -> None:
    lens = with_rejects(900, seed=4)
    n = len(lens)
    planner = PLANNERS[name](lens)
    steps = planner.build(n, epoch=2, world_size=old).num_batches
    for k in sorted({0, 1, steps // 2, steps}):
        first = continue_epoch(planner, n, epoch=2, segments=[], world_size=old)
        rest = continue_epoch(planner, n, epoch=2, segments=[(old, k)], world_size=new)
        ids = np.concatenate([dealt_ids(first, k), dealt_ids(rest, rest.num_batches)])
        assert np.array_equal(np.sort(ids), lens.valid_ids()), k


@pytest.mark.parametrize("name", sorted(PLANNERS))
def test_a_new_order_every_epoch_and_remaining_is_what_was_not_dealt(name: str) -> None:
    lens = with_rejects(900, seed=5)
    planner = PLANNERS[name](lens)
    a, b = (planner.build(len(lens), epoch=e, world_size=3) for e in (3, 4))
    assert isinstance(a, TablePlan) and isinstance(b, TablePlan)
    assert not np.array_equal(a.ids, b.ids)
    for k in itertools.chain(range(3), [a.num_batches]):
        rest, done = a.remaining(k).materialize(), dealt_ids(a, k)
        assert np.array_equal(np.sort(np.concatenate([rest, done])), lens.valid_ids()), k

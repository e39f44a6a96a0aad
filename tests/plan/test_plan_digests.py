"""Plans are part of the resume contract: their exact output is pinned by digests.

A resume state records a plan's parameters, not its ids; a run restored after an upgrade
rebuilds the plan and continues from a batch index. Any change to what a planner deals (a
faster shuffle that is not bit for bit the same, a sort that breaks ties differently) would
silently replay or skip samples. Each case below builds a plan (the chunked 100M path and the
materialising one) over fixed lengths and compares a hash of every array it holds with the
value recorded by the code that first shipped it (``chute.plan`` before issue 30). A digest may
change only together with ``shuffle.ALGORITHM`` or a planner's parameters, or where only the
arrangement inside a step changes (the same samples in every step, the same step count), which
no resume position can see: states are taken between steps. So changed ``packed_rejects``,
``packed_sorted`` and ``mixture_packed`` when a short last step of a packed plan came to be
spread over every rank by default (its samples and every other step as before, checked
against the earlier code).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable

import numpy as np
import pytest

from chute.plan.base import Plan
from chute.plan.budget import BudgetPlanner
from chute.plan.grouped import GroupedPlanner
from chute.plan.mixture_planner import MixturePlanner
from chute.plan.mixture_selection import Selection, Share, valid_pools
from chute.plan.packed import PackedPlanner
from chute.plan.shuffle import Permutation
from chute.plan.table import TablePlan

N = 60_000


def lengths(n: int, seed: int, rejects: float) -> np.ndarray:
    rng = np.random.default_rng(seed)
    lens = np.clip(rng.lognormal(5.5, 1.0, n), 1, 4096).astype(np.int32)
    lens[rng.random(n) < rejects] = -1
    return lens


CLEAN = lengths(N, 0, 0.0)
REJECTS = lengths(N, 1, 0.05)


def digest(plan: Plan) -> str:
    """A hash of every array and count of a table plan (ids as int64: dtype-free)."""
    assert isinstance(plan, TablePlan)
    h = hashlib.sha256()
    for array in (plan.ids, plan.batch_bounds, plan.row_bounds, plan.undealt):
        h.update(b"-" if array is None else np.asarray(array, dtype=np.int64).tobytes())
    h.update(json.dumps(plan.stats, sort_keys=True, default=int).encode())
    return h.hexdigest()[:16]


def mixture(inner: Callable[[np.ndarray], GroupedPlanner | BudgetPlanner | PackedPlanner]) -> Plan:
    sizes = (30_000, 20_000, 10_000)
    shares = [
        Share("a", sizes[0], weight=0.6),
        Share("b", sizes[1], weight=0.4),
        Share("c", sizes[2], repeat=2),
    ]
    pools = valid_pools(None, list(sizes), REJECTS)
    planner = MixturePlanner(inner(REJECTS), Selection(shares, seed=4, pools=pools))
    return planner.build(N, epoch=1, world_size=3)


CASES: dict[str, Callable[[], Plan]] = {
    "grouped": lambda: GroupedPlanner(32, lengths=CLEAN).build(N, epoch=0, world_size=8),
    "grouped_rejects": lambda: GroupedPlanner(4, group_size=7, grad_accum=2, lengths=REJECTS).build(
        N, epoch=3, world_size=3
    ),
    "grouped_sorted": lambda: GroupedPlanner(
        5, shuffle=False, drop_last=True, lengths=REJECTS
    ).build(N, epoch=0, world_size=2),
    "budget": lambda: BudgetPlanner(32 * 4096, lengths=CLEAN).build(N, epoch=0, world_size=8),
    "budget_rejects": lambda: BudgetPlanner(
        8192, max_rows=9, pad_to_multiple_of=8, grad_accum=2, lengths=REJECTS
    ).build(N, epoch=2, world_size=3),
    "packed": lambda: PackedPlanner(4096, batch_size=8, lengths=CLEAN).build(
        N, epoch=0, world_size=8
    ),
    "packed_rejects": lambda: PackedPlanner(2048, overflow="drop", lengths=REJECTS).build(
        N, epoch=1, world_size=3
    ),
    "packed_align": lambda: PackedPlanner(4096, align=8, batch_size=3, lengths=REJECTS).build(
        N, epoch=0, world_size=5
    ),
    "packed_sorted": lambda: PackedPlanner(2048, shuffle=False, lengths=CLEAN).build(
        N, epoch=0, world_size=2
    ),
    "mixture_grouped": lambda: mixture(lambda lens: GroupedPlanner(4, seed=4, lengths=lens)),
    "mixture_budget": lambda: mixture(lambda lens: BudgetPlanner(16384, seed=4, lengths=lens)),
    "mixture_packed": lambda: mixture(
        lambda lens: PackedPlanner(2048, batch_size=2, seed=4, lengths=lens)
    ),
}

DIGESTS = {
    "budget": "80252318236d14b8",
    "budget_rejects": "56c36a4fb248596d",
    "grouped": "baad7620650a4706",
    "grouped_rejects": "72c53e0a986a9161",
    "grouped_sorted": "b3835f0c6e01894d",
    "mixture_budget": "7d8b2ff30f06a87a",
    "mixture_grouped": "e12c768126b8a2bd",
    "mixture_packed": "e99d737bf7e01737",
    "packed": "e370bff3445b1b11",
    "packed_align": "35be3b0eb4dbab52",
    "packed_rejects": "bab1e07a33f5bcb0",
    "packed_sorted": "9d872ed75e624d73",
}


def permutation_digest(n: int, seed: int, epoch: int) -> str:
    """The shuffle itself: the whole of small ones, 5,000 positions of huge ones."""
    perm = Permutation(n, seed, epoch)
    if n <= 2_000_000:
        ids = perm.materialize()
    else:
        ids = perm.take(np.linspace(0, n - 1, 5000).astype(np.int64))
    return hashlib.sha256(ids.astype(np.int64).tobytes()).hexdigest()[:16]


SHUFFLES = [
    (0, 0, 0),
    (1, 5, 0),
    (2, 0, 1),
    (3, 7, 7),
    (1000, 1, 2),
    (65_537, 2, 0),
    (1_000_003, 2**64 - 1, 3),
    (100_000_000, 0, 0),
    (2**31 + 5, 9, 1),
    (2**32, 1, 0),  # the largest 32-bit domain: nothing lies outside it
    (2**33 + 1, 3, 2),
    (2**40, 11, 0),
]

SHUFFLE_DIGESTS = {
    "0:0:0": "e3b0c44298fc1c14",
    "1:5:0": "af5570f5a1810b7a",
    "2:0:1": "9d34149fbd1fe777",
    "3:7:7": "b3db6650e4598ca5",
    "1000:1:2": "367d93e2be1d20eb",
    "65537:2:0": "51e359ee8a9c6d83",
    "1000003:18446744073709551615:3": "cf9a0974377e59d5",
    "100000000:0:0": "109fd74045d1454a",
    "2147483653:9:1": "065da042da10944b",
    "4294967296:1:0": "f114d79333487834",
    "8589934593:3:2": "e7e397a3d41106e7",
    "1099511627776:11:0": "47091b3731696dec",
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_plans_are_the_same_as_recorded(name: str) -> None:
    assert digest(CASES[name]()) == DIGESTS[name]


@pytest.mark.parametrize(("n", "seed", "epoch"), SHUFFLES)
def test_shuffles_are_the_same_as_recorded(n: int, seed: int, epoch: int) -> None:
    assert permutation_digest(n, seed, epoch) == SHUFFLE_DIGESTS[f"{n}:{seed}:{epoch}"]


if __name__ == "__main__":  # print the digests of this code (to record them above)
    print({name: digest(make()) for name, make in sorted(CASES.items())})
    print({f"{n}:{s}:{e}": permutation_digest(n, s, e) for n, s, e in SHUFFLES})

"""The Loader with parallel groups: plans deal over data-parallel ranks, groups share samples.

Ranks are simulated as ``World`` values in one process (``tests/distributed`` runs real ones).
With ``cp``, ``sp`` (or ``tp`` / ``pp``) set, every rank of one data-parallel rank must get the
same batches, every valid sample must come once over the data-parallel ranks, all ranks must
yield the same number of batches, and resume (exact and elastic, keyed by the data-parallel
size) must continue exactly: with whole batches and with per-rank slices.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from chute import Loader, StateMismatch, World  # noqa: E402
from chute.collate.slices import gather_slices  # noqa: E402
from chute.loader.collectives import dp_shares  # noqa: E402
from chute.testing import check_elastic, check_resume, take  # noqa: E402

pytestmark = [
    pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning"),
]

N = 83
BROKEN = (3, 17, 40)
VALID = [i for i in range(N) if i not in BROKEN]
PLANS = {
    "random": ("random", None),
    "grouped": ("grouped", {"group_size": 2}),
    "budget": ("budget", {"max_tokens": 16}),
    "packed": ("packed", {"max_length": 16}),
}
LAYOUTS = {
    "dp1-cp2": (2, {"cp": 2}),
    "dp2-cp2": (4, {"cp": 2}),
    "dp3-cp2": (6, {"cp": 2}),
    "dp2-sp4": (8, {"sp": 4}),
    "dp2-tp2-cp2": (8, {"tp": 2, "cp": 2}),
    "dp3-pp2": (6, {"pp": 2}),
}


def loader(source: Any, world: World, name: str, **kw: Any) -> Loader:
    plan, options = PLANS[name]
    return Loader(source, batch_size=2, seed=4, world=world, plan=plan, plan_options=options, **kw)


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("name", sorted(PLANS))
def test_groups_share_batches_and_data_parallel_ranks_see_every_sample_once(
    id_source, name: str, layout: str
) -> None:
    source = id_source(N, broken=BROKEN)
    world_size, groups = LAYOUTS[layout]
    streams = {}
    for rank in range(world_size):
        world = World(rank=rank, world_size=world_size, **groups)
        streams[rank] = [b["sample_ids"].tolist() for b in loader(source, world, name)]
    assert len({len(s) for s in streams.values()}) == 1  # equal step counts on every rank
    first = World(world_size=world_size, **groups)
    seen = []
    for leader in first.dp_leaders():
        for peer in first.at(leader).dp_peers:
            assert streams[peer] == streams[leader]  # a group reads the same samples
        seen += [i for batch in streams[leader] for i in batch if i >= 0]
    assert sorted(seen) == VALID
    # the plan is the one of a plain world of dp_size ranks
    dp = first.dp_size
    plain = [
        [b["sample_ids"].tolist() for b in loader(source, World(d, dp), name)] for d in range(dp)
    ]
    assert [streams[r] for r in first.dp_leaders()] == plain


@pytest.mark.parametrize("name", sorted(PLANS))
def test_a_rank_of_a_cp_group_resumes_exactly(id_source, name: str) -> None:
    source = id_source(N, broken=BROKEN)

    def make(num_workers: int = 0) -> Loader:
        world = World(rank=3, world_size=4, cp=2)
        return loader(source, world, name, num_workers=num_workers)

    assert check_resume(make, epochs=2, every=2) > 0


@pytest.mark.parametrize("kind", ["cp", "sp"])
def test_slices_resume_exactly(id_source, kind: str) -> None:
    source = id_source(N, broken=BROKEN)

    def make(num_workers: int = 0) -> Loader:
        world = World(rank=1, world_size=4, **{kind: 2})
        return loader(source, world, "packed", num_workers=num_workers, slices=kind)

    assert check_resume(make, epochs=2, every=2, num_workers=[2, 0]) > 0


@pytest.mark.parametrize("name", ["random", "packed", "budget"])
@pytest.mark.parametrize(
    ("old", "new"),
    [
        ((4, {"cp": 2}), (6, {"cp": 2})),  # dp 2 -> 3
        ((6, {"cp": 2}), (2, {"cp": 2})),  # dp 3 -> 1
        ((4, {"cp": 2}), (4, {})),  # same GPUs, cp 2 -> none: dp 2 -> 4
        ((8, {"sp": 2, "tp": 2}), (4, {"sp": 2})),  # dp 2 -> 2, other groups
    ],
)
def test_elastic_resume_over_data_parallel_ranks(id_source, name: str, old, new) -> None:
    source = id_source(N, broken=BROKEN)

    def make(world: World) -> Loader:
        return loader(source, world, name)

    steps = len(make(World(world_size=old[0], **old[1])))
    for k in sorted({0, 1, steps // 2, steps}):
        consumed, delivered = check_elastic(
            make,
            old_world_size=old[0],
            new_world_size=new[0],
            steps=k,
            old_layout=old[1],
            new_layout=new[1],
        )
        assert np.sort(np.concatenate([consumed, delivered])).tolist() == VALID, k


def test_elastic_resume_of_slices_across_cp_sizes_with_align_pinned(id_source) -> None:
    """cp 2 -> 4 on the same eight ranks: the plan packs with align 8 in both, so it is one
    plan; only how each row is cut changes."""
    source = id_source(N, broken=BROKEN)
    options = {"max_length": 32, "align": 8}

    def make(world: World) -> Loader:
        return Loader(
            source,
            batch_size=1,
            seed=2,
            world=world,
            plan="packed",
            plan_options=options,
            slices="cp",
        )

    steps = len(make(World(world_size=8, cp=2)))
    consumed, delivered = check_elastic(
        make,
        old_world_size=8,
        new_world_size=8,
        steps=steps // 2,
        old_layout={"cp": 2},
        new_layout={"cp": 4},
    )
    assert np.sort(np.concatenate([consumed, delivered])).tolist() == VALID


def test_a_state_records_the_data_parallel_size_and_refuses_another_align(id_source) -> None:
    source = id_source(N, broken=BROKEN)
    cp2 = [loader(source, World(r, 4, cp=2), "packed", slices="cp") for r in range(4)]
    for one in cp2:
        take(one, 2)
    state = cp2[1].state_dict()
    assert state["world_size"] == 2 and state["layout"] == {"cp": 2, "order": "tp-sp-cp-dp-pp"}
    assert all(s.state_dict()["batches"] == 2 for s in cp2)
    plain = loader(source, World(0, 4), "packed").state_dict()
    assert "layout" not in plain and plain["world_size"] == 4
    # cp 4 pads to multiples of 8 (the rows differ): refused, naming the plan's align
    cp4 = loader(source, World(0, 8, cp=4), "packed", slices="cp")
    with pytest.raises(StateMismatch, match="align"):
        cp4.load_state_dict(state)


def test_slices_of_a_group_put_back_are_its_whole_batches(id_source) -> None:
    source = id_source(N, broken=BROKEN)
    options = {"max_length": 16, "align": 4}
    whole = [
        Loader(source, batch_size=2, seed=4, world=World(d, 2), plan="packed", plan_options=options)
        for d in range(2)
    ]
    cut = [loader(source, World(r, 4, cp=2), "packed", slices="cp") for r in range(4)]
    for d in range(2):
        peers = World(world_size=4, cp=2).groups("cp")[d]
        for w, *parts in zip(whole[d], *(cut[p] for p in peers), strict=True):
            back = gather_slices(parts)
            assert torch.equal(back["input_ids"], w["input_ids"])
            assert torch.equal(back["position_ids"], w["position_ids"])


def test_counts_over_ranks_take_each_data_parallel_rank_once() -> None:
    world = World(rank=0, world_size=8, cp=2, tp=2)
    gathered = [{"bad_json": r} for r in range(8)]
    assert dp_shares(gathered, world) == [gathered[0], gathered[4]]
    assert dp_shares(gathered, World(0, 8)) == gathered


def test_a_recipes_row_length_that_slices_cannot_take_names_the_recipe(tmp_path) -> None:
    from cache_helpers import write_alpaca, write_tokenizer
    from chute import ConfigError, Recipe

    recipe = Recipe(tokenizer=write_tokenizer(tmp_path / "tok"), template="chatml", max_length=1001)
    data = write_alpaca(tmp_path / "d.jsonl", 8)
    with pytest.raises(ConfigError, match=r"align=4(.|\n)*the recipe's max_length, 1001"):
        Loader(data, recipe, batch_size=1, plan="packed", world=World(0, 2, cp=2), slices="cp")
    # set on the plan, the plan's own message (no word of the recipe)
    with pytest.raises(ConfigError, match=r"align=4") as info:
        Loader(data, recipe, batch_size=1, plan="packed", plan_options={"max_length": 1001},
               world=World(0, 2, cp=2), slices="cp")  # fmt: skip
    assert "recipe's max_length" not in str(info.value)


def test_a_pairs_row_length_names_the_recipes_own(tmp_path) -> None:
    import json

    from cache_helpers import write_tokenizer
    from chute import ConfigError, Recipe

    tok = write_tokenizer(tmp_path / "tok")
    recipe = Recipe(tokenizer=tok, template="chatml", max_length=1001, task="preference")
    pair = {"prompt": "q", "chosen": "a", "rejected": "b"}
    data = tmp_path / "p.jsonl"
    data.write_text(json.dumps(pair) + "\n")
    with pytest.raises(ConfigError, match=r"twice the recipe's max_length \(a row holds both"):
        Loader(data, recipe, batch_size=1, plan="packed", plan_options={"align": 8}, world=World())

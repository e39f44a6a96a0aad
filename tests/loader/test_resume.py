"""Resume: every checkpoint continues the stream exactly; elastic resume keeps exact-once."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pytest

from chute import ConfigError, JsonlSource, Loader, StateMismatch, World
from chute.testing import check_elastic, check_resume, take

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")

PLANS = {
    "random": {},
    "sequential": {"shuffle": False},
    "wrap": {"wrap": True},
    "drop_last": {"drop_last": True},
}


@pytest.mark.parametrize("plan", sorted(PLANS))
def test_every_checkpoint_continues_the_stream_exactly(id_source, plan: str) -> None:
    source = id_source(45, broken=[3, 17])

    def make(num_workers: int = 0, world: World = World(rank=1, world_size=3)) -> Loader:
        return Loader(
            source, batch_size=4, seed=5, world=world, num_workers=num_workers, **PLANS[plan]
        )

    # every step of two epochs, each restored twice in a row, in-process
    assert check_resume(make, epochs=2) == 2 * len(make()) + 1


@pytest.mark.parametrize("plan", sorted(PLANS))
def test_a_different_num_workers_continues_the_same_stream(id_source, plan: str) -> None:
    source = id_source(45, broken=[3, 17])

    def make(num_workers: int = 0) -> Loader:
        return Loader(
            source,
            batch_size=4,
            seed=5,
            world=World(rank=0, world_size=2),
            num_workers=num_workers,
            **PLANS[plan],
        )

    checkpoints = 2 * len(make()) + 1
    checked = check_resume(make, epochs=2, every=3, num_workers=[1, 3, 2])
    assert checked == len(range(0, checkpoints, 3))


def test_counts_and_budget_continue_after_resume(id_source) -> None:
    source = id_source(40, broken=range(0, 40, 5))
    loader = Loader(source, batch_size=4, world=World(), seed=1)
    take(loader, 5)
    resumed = Loader(source, batch_size=4, world=World(), seed=1)
    resumed.load_state_dict(loader.state_dict())
    assert resumed.stats == loader.stats and resumed.budget.seen == loader.budget.seen
    take(resumed, resumed.batches_left)
    assert sum(resumed.stats.values()) == 8
    assert resumed.summary()["samples"] == 40


@pytest.mark.parametrize("new", [2, 3])
def test_counts_over_ranks_stay_the_epochs_when_every_rank_loads_rank_0s_state(
    id_source, new: int
) -> None:
    # the usual checkpoint: rank 0 saves, every rank (of this world or a larger one) loads it;
    # rank 0's counts were copied to every rank, and the epoch's total counted them again
    source = id_source(203, broken=range(0, 203, 10))

    def make(rank: int, world: int) -> Loader:
        return Loader(source, batch_size=4, seed=2, world=World(rank=rank, world_size=world))

    first = [make(r, 2) for r in range(2)]
    for loader in first:
        take(loader, 10)
    state = first[0].state_dict()
    resumed = [make(r, new) for r in range(new)]
    for loader in resumed:
        loader.load_state_dict(state)
        take(loader, loader.batches_left)
    before = first[1].summary()  # rank 1's counts before the checkpoint: its state was not loaded
    total = sum(r.summary()["samples"] for r in resumed) + before["samples"]
    assert total == 203
    bad = sum(r.summary()["rejected"] for r in resumed)
    assert bad + before["rejected"] == 21  # ids 0, 10, ..., 200
    assert resumed[0].summary()["samples"] >= first[0].summary()["samples"]  # its own go on


@pytest.mark.parametrize("old,new", [(2, 3), (3, 2), (2, 1), (1, 3)])
def test_elastic_resume_sees_every_sample_once(id_source, old: int, new: int) -> None:
    source = id_source(101)

    def make(world: World) -> Loader:
        return Loader(source, batch_size=4, seed=3, world=world)

    steps = len(make(World(rank=0, world_size=old)))
    for k in range(steps + 1):
        consumed, delivered = check_elastic(make, old_world_size=old, new_world_size=new, steps=k)
        assert np.array_equal(np.sort(np.concatenate([consumed, delivered])), np.arange(101))


def test_elastic_resume_twice_then_the_next_epoch_is_normal(id_source) -> None:
    source = id_source(101)

    def make(world: World, num_workers: int = 0) -> Loader:
        return Loader(source, batch_size=4, seed=3, world=world, num_workers=num_workers)

    seen = []
    states = []
    for rank in range(2):  # 5 steps on 2 ranks
        loader = make(World(rank=rank, world_size=2))
        seen += [b["sample_ids"] for b in take(loader, 5)]
        states.append(loader.state_dict())
    states3 = []
    for rank in range(3):  # 2 steps on 3 ranks, with workers
        loader = make(World(rank=rank, world_size=3), num_workers=2)
        loader.load_state_dict(states[0])
        seen += [b["sample_ids"] for b in take(loader, 2)]
        states3.append(loader.state_dict())
    assert orjson.loads(orjson.dumps(states3[0]))["segments"] == [[2, 5]]
    for rank in range(4):  # the rest on 4 ranks
        loader = make(World(rank=rank, world_size=4))
        loader.load_state_dict(states3[rank % 3])
        seen += [b["sample_ids"] for b in take(loader, loader.batches_left)]
        if rank == 0:
            fresh = make(World(rank=0, world_size=4))
            fresh.set_epoch(1)
            assert [b["sample_ids"].tolist() for b in take(loader, 3)] == [
                b["sample_ids"].tolist() for b in take(fresh, 3)
            ]
    ids = np.concatenate(seen)
    assert np.array_equal(np.sort(ids[ids >= 0]), np.arange(101))


def test_state_is_small_json(id_source) -> None:
    loader = Loader(id_source(1000), batch_size=8, world=World(rank=3, world_size=4))
    take(loader, 3)
    state = loader.state_dict()
    assert state["epoch"] == 0 and state["batches"] == 3 and state["rank"] == 3
    assert len(orjson.dumps(state)) < 2048


def test_a_state_from_another_plan_is_refused_naming_the_difference(id_source) -> None:
    source = id_source(50)
    state = Loader(source, batch_size=4, seed=1, world=World()).state_dict()
    with pytest.raises(
        StateMismatch,
        match=r"(?s)different plan:\n  plan.batch_size: state 4, this loader 8\n  plan.seed: "
        r"state 1, this loader 2\n",
    ):
        Loader(source, batch_size=8, seed=2, world=World()).load_state_dict(state)


def test_a_state_from_another_dataset_is_refused_naming_the_difference(id_source) -> None:
    state = Loader(id_source(50), batch_size=4, world=World()).state_dict()
    other = id_source(51, name="other.jsonl")
    with pytest.raises(
        StateMismatch,
        match=r"(?s)different dataset:\n.*  source.files\[0\].records: state 50, this loader 51\n"
        r".*source.files\[0\].size: state 1357, this loader 1379",
    ):
        Loader(other, batch_size=4, world=World()).load_state_dict(state)


def test_a_copy_of_the_data_at_another_path_resumes(id_source, tmp_path) -> None:
    source = id_source(50)
    loader = Loader(source, batch_size=4, world=World())
    take(loader, 2)
    copy = tmp_path / "elsewhere" / "ids.jsonl"
    copy.parent.mkdir()
    copy.write_bytes(Path(source.paths[0]).read_bytes())  # a new path and a new mtime
    moved = Loader(JsonlSource(copy), batch_size=4, world=World())
    moved.load_state_dict(loader.state_dict())
    assert moved.batches_left == len(loader) == 11


def test_a_changed_file_is_a_different_dataset(id_source, tmp_path) -> None:
    source = id_source(50)
    state = Loader(source, batch_size=4, world=World()).state_dict()
    with open(source.paths[0], "ab") as f:
        f.write(b'{"input_ids": [50]}\n')
    with pytest.raises(StateMismatch, match=r"source.files\[0\].records: state 50, this loader 51"):
        Loader(JsonlSource(source.paths), batch_size=4, world=World()).load_state_dict(state)


def test_something_else_than_a_loader_state_is_refused(id_source) -> None:
    loader = Loader(id_source(10), world=World())
    with pytest.raises(ConfigError, match=r"needs a state from chute's Loader\.state_dict"):
        loader.load_state_dict({"model": 1})
    state = loader.state_dict()
    state["batches"] = 99
    with pytest.raises(
        ConfigError, match="99 batches of epoch 0 were consumed, but that epoch has 10"
    ):
        loader.load_state_dict(state)


def test_a_state_of_another_recipe_resumes_the_random_plan_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The random plan's ids do not depend on the recipe, so the run goes on, saying so; a
    length-aware plan's lengths do, and its state is refused (the plan's lengths differ)."""
    import logging

    from cache_helpers import write_alpaca, write_tokenizer
    from chute import Recipe

    data = write_alpaca(tmp_path / "d.jsonl", 40)
    tok = write_tokenizer(tmp_path / "tok")

    def make(max_length: int, plan: str = "random") -> Loader:
        recipe = Recipe(tokenizer=tok, template="chatml", max_length=max_length)
        return Loader(data, recipe, batch_size=4, plan=plan, world=World())

    first = make(256)
    take(first, 2)
    state = orjson.loads(orjson.dumps(first.state_dict()))
    with caplog.at_level(logging.WARNING, logger="chute.loader"):
        make(256).load_state_dict(state)
        assert not caplog.records
        later = make(32)
        later.load_state_dict(state)
    (said,) = [r.getMessage() for r in caplog.records]
    assert "saved with another recipe (recipe.max_length 256 -> 32)" in said
    assert later.state_dict()["batches"] == 2
    grouped = make(256, "grouped")
    take(grouped, 1)
    with pytest.raises(StateMismatch, match=r"plan.lengths.hash"):
        make(32, "grouped").load_state_dict(grouped.state_dict())

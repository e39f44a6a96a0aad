"""One dataset is a mixture of one: the same ids, exact-once and resume either way (issue 29).

A plain source (a JSONL path) and the same file as a ``Mixture`` of one entry with weight 1 must
give every rank the same ids, every sample once per epoch over ranks x workers, and resume to the
identical remaining stream. The plain source plans through ``MixturePlanner(inner)``, which must
leave the plan, ``params()`` and the state as the inner planner's own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from chute import Loader, Mixture, MixtureEntry, World
from chute.plan import RandomPlanner
from chute.plan.mixture_planner import MixturePlanner
from chute.testing import check_resume, write_id_jsonl

N = 47  # prime: every world size leaves a remainder
PLANS: dict[str, dict[str, Any]] = {
    "random": {"batch_size": 4},
    "in_order": {"batch_size": 3, "shuffle": False},
    "grouped": {"batch_size": 4, "plan": "grouped"},
    "packed": {"batch_size": 2, "plan": "packed", "plan_options": {"max_length": 12}},
}


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_id_jsonl(tmp_path_factory.mktemp("one") / "train.jsonl", N)


def source_of(kind: str, path: Path) -> Any:
    if kind == "plain":
        return str(path)
    return Mixture([MixtureEntry("train", str(path), weight=1.0)])


def ids_by_rank(kind: str, path: Path, plan: str, world_size: int, **kw: Any) -> list[list[int]]:
    out = []
    for rank in range(world_size):
        world = World(rank=rank, world_size=world_size)
        loader = Loader(source_of(kind, path), world=world, seed=5, **PLANS[plan], **kw)
        out.append(
            [i for b in loader for i in np.asarray(b["sample_ids"]).ravel().tolist() if i >= 0]
        )
    return out


@pytest.mark.parametrize("plan", sorted(PLANS))
@pytest.mark.parametrize("world_size", [1, 3])
def test_plain_source_and_mixture_of_one_give_each_rank_the_same_ids(
    data: Path, plan: str, world_size: int
) -> None:
    plain = ids_by_rank("plain", data, plan, world_size)
    mixed = ids_by_rank("mixture", data, plan, world_size)
    assert plain == mixed
    seen = [i for rank in plain for i in rank]
    assert sorted(seen) == list(range(N))  # every sample once over the ranks


@pytest.mark.parametrize("kind", ["plain", "mixture"])
def test_exact_once_over_ranks_and_workers(data: Path, kind: str) -> None:
    ranks = ids_by_rank(kind, data, "random", 2, num_workers=2)
    seen = [i for rank in ranks for i in rank]
    assert len(seen) == len(set(seen)) and set(seen) == set(range(N))
    assert ranks == ids_by_rank(kind, data, "random", 2)  # workers change nothing


@pytest.mark.parametrize("plan", ["random", "grouped", "packed"])
@pytest.mark.parametrize("kind", ["plain", "mixture"])
def test_resume_continues_the_same_stream(data: Path, kind: str, plan: str) -> None:
    def make(num_workers: int = 0) -> Loader:
        world = World(rank=1, world_size=2)
        return Loader(
            source_of(kind, data), world=world, seed=5, num_workers=num_workers, **PLANS[plan]
        )

    assert check_resume(make, epochs=2, every=3) > 0


def test_one_dataset_plans_through_a_pass_through_mixture_planner(data: Path) -> None:
    loader = Loader(str(data), batch_size=4, seed=5, plan="grouped")
    assert isinstance(loader.planner, MixturePlanner) and loader.planner.sole
    inner = loader.planner.inner
    assert loader.planner.params() == inner.params() and "mixture" not in loader.planner.params()
    for epoch in (0, 1):
        want = inner.build(N, epoch=epoch, world_size=3)
        got = loader.planner.build(N, epoch=epoch, world_size=3)
        assert got is want  # the inner plan itself, not a copy or a re-deal
    assert repr(loader.planner) == repr(inner)


def test_a_plain_source_reports_one_dataset(data: Path) -> None:
    loader = Loader(str(data), batch_size=4, seed=5)
    for _ in loader:
        pass
    counts = loader.summary()["datasets"]
    assert list(counts) == ["data"]
    assert counts["data"]["samples"] == counts["data"]["valid"] == N
    assert counts["data"]["tokens"] == sum(1 + i % 7 for i in range(N))
    assert loader.dataset_report().splitlines()[2].split()[:3] == ["data", str(N), str(N)]


def test_a_pass_through_planner_refuses_a_mixture_switch() -> None:
    from chute.errors import ConfigError
    from chute.plan.mixture_planner import Switch

    with pytest.raises(ConfigError, match="no mixture to switch"):
        MixturePlanner(RandomPlanner(2)).with_switch(Switch(0, {}, ((1, 1),)))
    with pytest.raises(ConfigError, match="no datasets to batch apart"):
        MixturePlanner(RandomPlanner(2), batching="per_dataset")


def test_one_dataset_read_alone_has_no_amounts_and_no_val_split(data: Path) -> None:
    from chute.errors import ConfigError
    from chute.mixture.opened import OpenedMixture

    sole = OpenedMixture.of_one(str(data), None)
    with pytest.raises(ConfigError, match="no amounts"):
        sole.selection()
    with pytest.raises(ConfigError, match="split='val' needs a mixture"):
        Loader(str(data), batch_size=4, split="val")


def test_one_datasets_planner_attributes_read_through_the_wrapper() -> None:
    from chute.plan import GroupedPlanner

    inner = GroupedPlanner(4, seed=1)
    sole = MixturePlanner(inner)
    assert sole.batch_size == inner.batch_size  # as loader.planner read before the wrapper
    with pytest.raises(AttributeError, match="no_such"):
        sole.no_such

"""One plan per node: built by the rank that claims it, memory-mapped by the others."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from chute._internal.owner import Owner
from chute.errors import ConfigError
from chute.loader.planning import node_ranks
from chute.plan.budget import BudgetPlanner
from chute.plan.grouped import GroupedPlanner
from chute.plan.packed import PackedPlanner
from chute.plan.shared import KEEP_OTHERS, PlanShare, plan_key
from chute.world import World


def lengths(n: int = 3000) -> np.ndarray:
    rng = np.random.default_rng(0)
    lens = np.clip(rng.lognormal(4.5, 1.0, n), 1, 2000).astype(np.int32)
    lens[rng.random(n) < 0.05] = -1
    return lens


PLANNERS = [
    lambda lens: GroupedPlanner(4, lengths=lens),
    lambda lens: BudgetPlanner(4096, lengths=lens),
    lambda lens: PackedPlanner(1024, batch_size=2, lengths=lens),
    lambda lens: PackedPlanner(1024, split=True, lengths=lens),
]


@pytest.mark.parametrize("make", PLANNERS)
def test_a_shared_plan_is_the_plan_and_the_second_rank_maps_it(make, tmp_path: Path) -> None:
    lens = lengths()
    alone = make(lens).build(len(lens), epoch=1, world_size=3)
    share = PlanShare(tmp_path)
    first = make(lens).with_share(share).build(len(lens), epoch=1, world_size=3)
    second = make(lens).with_share(share).build(len(lens), epoch=1, world_size=3)
    for plan in (first, second):
        assert np.array_equal(plan.ids, alone.ids)
        assert np.array_equal(plan.batch_bounds, alone.batch_bounds)
        assert (plan.row_bounds is None) == (alone.row_bounds is None)
        if alone.row_bounds is not None:
            assert np.array_equal(plan.row_bounds, alone.row_bounds)
        if alone.spans is not None:
            assert np.array_equal(plan.spans[0], alone.spans[0])
        assert np.array_equal(plan.undealt, alone.undealt) and plan.stats == alone.stats
        k = plan.num_batches // 2
        assert np.array_equal(plan.remaining(k).materialize(), alone.remaining(k).materialize())
    assert isinstance(second.ids.base, np.memmap) or isinstance(second.ids, np.memmap)
    assert len(list(tmp_path.glob("*-e1/plan.json"))) == 1
    assert not list(tmp_path.glob("*.claim"))


@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
def test_ranks_racing_build_once_and_agree(tmp_path: Path) -> None:
    lens = lengths(20000)
    share = PlanShare(tmp_path)
    calls: list[int] = []
    original = PackedPlanner.plan_order

    def counted(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(1)
        return original(self, *args, **kwargs)

    results: list[np.ndarray] = []
    PackedPlanner.plan_order = counted  # type: ignore[method-assign]
    try:
        threads = [
            threading.Thread(
                target=lambda: results.append(
                    PackedPlanner(1024, lengths=lens)
                    .with_share(share)
                    .build(len(lens), epoch=0, world_size=2)
                    .ids
                )
            )
            for _ in range(4)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        PackedPlanner.plan_order = original  # type: ignore[method-assign]
    assert len(results) == 4 and all(np.array_equal(r, results[0]) for r in results)
    assert len(calls) == 1


def test_a_claim_whose_holder_is_gone_or_silent_does_not_block(tmp_path: Path) -> None:
    lens = lengths()
    planner = GroupedPlanner(4, lengths=lens)
    key = plan_key(planner.params(), len(lens), 2)
    dead = Owner.here()
    dead = type(dead)(**{**dead.__dict__, "pid": 2**22 + 12345})  # no such process
    (tmp_path / f"{key}-e0.claim").write_bytes(dead.to_bytes())
    plan = planner.with_share(PlanShare(tmp_path, wait_timeout=30)).build(
        len(lens), epoch=0, world_size=2
    )
    assert np.array_equal(plan.ids, planner.build(len(lens), epoch=0, world_size=2).ids)
    (tmp_path / f"{key}-e1.claim").write_bytes(Owner.here().to_bytes())  # alive, never builds
    late = planner.with_share(PlanShare(tmp_path, wait_timeout=0.2))
    assert late.build(len(lens), epoch=1, world_size=2).num_batches > 0


def test_older_epochs_are_removed(tmp_path: Path) -> None:
    lens = lengths()
    planner = GroupedPlanner(4, lengths=lens).with_share(PlanShare(tmp_path))
    for epoch in range(4):
        planner.build(len(lens), epoch=epoch, world_size=2)
    assert sorted(p.name.split("-e")[1] for p in tmp_path.glob("*-e*")) == ["2", "3"]


def test_other_plans_folders_are_collected_but_the_newest_young_and_held(
    tmp_path: Path,
) -> None:
    def other(name: str, age_hours: float, claim: Owner | None = None) -> None:
        folder = tmp_path / f"{name}-e0"
        folder.mkdir()
        (folder / "ids.npy").write_bytes(b"")
        (folder / "plan.json").write_text("{}")
        when = time.time() - age_hours * 3600
        os.utime(folder / "plan.json", (when, when))
        if claim is not None:
            (tmp_path / f"{name}-e0.claim").write_bytes(claim.to_bytes())

    dead = Owner.here()
    dead = type(dead)(**{**dead.__dict__, "pid": 2**22 + 12345})  # no such process
    for i in range(KEEP_OTHERS):
        other(f"newest{i}", 2 + i)  # the newest: kept however old
    other("old", 30)
    other("old_dead_claim", 31, claim=dead)
    other("old_live_claim", 32, claim=Owner.here())  # a running job holds it: kept
    (tmp_path / "unpublished-e0").mkdir()  # no plan.json: being written, kept
    lens = lengths()
    planner = GroupedPlanner(4, lengths=lens).with_share(PlanShare(tmp_path))
    planner.build(len(lens), epoch=0, world_size=2)
    ours = plan_key(planner.params(), len(lens), 2)
    kept = {p.name for p in tmp_path.iterdir() if p.is_dir()}
    assert kept == {
        *(f"newest{i}-e0" for i in range(KEEP_OTHERS)),
        "old_live_claim-e0",
        "unpublished-e0",
        f"{ours}-e0",
    }
    # young folders beyond the newest few are other jobs' current plans: kept; the older
    # ones now beyond the newest few go
    for i in range(KEEP_OTHERS + 2):
        other(f"young{i}", 0.1 + i / 100)
    planner.build(len(lens), epoch=1, world_size=2)
    kept = {p.name for p in tmp_path.iterdir() if p.is_dir()}
    assert kept == {
        *(f"young{i}-e0" for i in range(KEEP_OTHERS + 2)),
        "old_live_claim-e0",
        "unpublished-e0",
        f"{ours}-e0",
        f"{ours}-e1",
    }


def test_the_loader_shares_when_torchrun_starts_several_ranks_per_node(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert node_ranks() == 1
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    assert node_ranks() == 8
    assert World.detect().local_world_size == 8  # carried by the World value
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "eight")
    with pytest.raises(ConfigError, match=r"LOCAL_WORLD_SIZE='eight' is not an integer"):
        node_ranks()  # as LOCAL_RANK: a launcher's variable that is wrong is said, not guessed
    with pytest.raises(ConfigError, match="local_world_size must be >= 1"):
        World(local_world_size=0)


def test_a_share_that_cannot_be_written_builds_each_ranks_own_plan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A read-only folder (here: under a regular file, which no one can make a folder of) or a
    full one: every rank builds the same plan itself, with a warning, instead of failing."""
    import errno
    import logging

    from chute.plan import shared

    lens = lengths()
    alone = GroupedPlanner(4, lengths=lens).build(len(lens), epoch=1, world_size=3)
    (tmp_path / "blocker").write_text("a file")
    caplog.set_level(logging.WARNING)
    for root in (tmp_path / "blocker" / "plans", tmp_path / "full"):
        if root.name == "full":

            def full(*args: object) -> None:
                raise OSError(errno.ENOSPC, "No space left on device")

            monkeypatch.setattr(shared, "_publish", full)
        share = PlanShare(root)
        for _ in range(2):
            planner = GroupedPlanner(4, lengths=lens).with_share(share)
            plan = planner.build(len(lens), epoch=1, world_size=3)
            assert np.array_equal(plan.ids, alone.ids)
            assert np.array_equal(plan.batch_bounds, alone.batch_bounds)
    assert "cannot write plans under" in caplog.text and "No space left" in caplog.text
    assert not list((tmp_path / "full").glob("*.claim"))


@pytest.mark.parametrize("damage", ["ids cut short", "bounds past the ids", "plan.json"])
def test_a_damaged_shared_plan_is_built_again_in_its_place(
    damage: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A published plan damaged afterwards (a bad disk, a copy over it): numpy's errors from
    inside, or worse a plan that reads, were what every rank met; now it is set aside and built
    again, and the next rank maps the new one."""
    import logging

    lens = lengths()
    alone = PackedPlanner(1024, batch_size=2, lengths=lens).build(len(lens), epoch=1, world_size=3)
    share = PlanShare(tmp_path)
    PackedPlanner(1024, batch_size=2, lengths=lens).with_share(share).build(
        len(lens), epoch=1, world_size=3
    )
    (folder,) = tmp_path.glob("*-e1")
    if damage == "ids cut short":
        ids = folder / "ids.npy"
        ids.write_bytes(ids.read_bytes()[:-64])
    elif damage == "bounds past the ids":
        np.save(folder / "ids.npy", np.arange(5, dtype=np.int32))
    else:
        (folder / "plan.json").write_text('{"format": 1, "world')
    caplog.set_level(logging.WARNING)
    for _ in range(2):  # the rank that finds it damaged, then one that maps the new one
        plan = (
            PackedPlanner(1024, batch_size=2, lengths=lens)
            .with_share(share)
            .build(len(lens), epoch=1, world_size=3)
        )
        assert np.array_equal(plan.ids, alone.ids)
        assert np.array_equal(plan.batch_bounds, alone.batch_bounds)
        assert np.array_equal(plan.row_bounds, alone.row_bounds)
    assert caplog.text.count("is damaged") == 1, caplog.text
    assert [p.name for p in tmp_path.iterdir() if not p.name.endswith(".claim")] == [folder.name]

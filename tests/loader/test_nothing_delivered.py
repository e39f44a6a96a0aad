"""A run with nothing valid in it stops, with the reason and the fix, on every rank alike.

The error budget's fraction waits for ``budget_min_samples`` (1,000) samples and its run limit
for ``max_consecutive_bad`` (1,000); these tests are about data smaller than that: the first
100 samples of a run all bad, or a whole epoch all bad.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import orjson
import pytest

from chute import ConfigError, ErrorBudgetExceeded, Loader, SampleError, World
from chute.loader import delivery

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


def raw_records(path: Path, n: int) -> Path:
    """Alpaca-shaped records: what a Loader without a recipe cannot train on."""
    rows = [
        orjson.dumps({"instruction": f"q{i}", "input": "", "output": f"a{i}"}) for i in range(n)
    ]
    path.write_bytes(b"\n".join(rows) + b"\n")
    return path


@pytest.fixture
def unprobed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Raw records are the simplest data with nothing valid in it, but a Loader without a
    recipe now refuses them before the first batch (``check_tokenized``, tested below). These
    tests are about the budget, which stops what that probe of the first records cannot see
    (records bad further in, a source it cannot probe): the probe is left out here."""
    from chute.loader import core

    monkeypatch.setattr(core, "check_tokenized", lambda source: None)


def count_until_error(loader: Loader) -> tuple[int, ErrorBudgetExceeded | None]:
    yielded = 0
    try:
        for _ in loader:
            yielded += 1
    except ErrorBudgetExceeded as exc:
        return yielded, exc
    return yielded, None


@pytest.mark.parametrize("num_workers", [0, 2])
def test_untokenized_records_stop_after_the_first_100_samples_with_the_fix(
    tmp_path: Path, num_workers: int, unprobed: None
) -> None:
    # 600 records: fewer than budget_min_samples and max_consecutive_bad
    loader = Loader(
        raw_records(tmp_path / "alpaca.jsonl", 600),
        batch_size=4,
        world=World(),
        num_workers=num_workers,
    )
    with pytest.raises(
        ErrorBudgetExceeded,
        match=r"(?s)on rank 0: the first 100 samples of this run were all bad: nothing to train "
        r"on\. The records are not tokenized: pass a Recipe \(recipe=Recipe\(tokenizer=\.\.\.\)\)"
        r".*By reason:\n  missing_field: 100  e\.g\. .*alpaca\.jsonl:\d+",
    ) as caught:
        for _ in loader:
            pass
    assert loader.summary()["batches"] == 25  # stopped at the 25th batch, not at the 150th
    assert caught.value.tally is not None and dict(caught.value.tally.counts) == {
        "missing_field": 100
    }


def test_a_dataset_smaller_than_100_samples_stops_at_the_end_of_its_epoch(
    tmp_path: Path, unprobed: None
) -> None:
    loader = Loader(raw_records(tmp_path / "a.jsonl", 30), batch_size=4, world=World())
    yielded, error = count_until_error(loader)
    assert error is not None and yielded == 7  # the 8th and last batch of epoch 0 stops it
    assert "the 30 samples of epoch 0 were all bad" in str(error)


@pytest.mark.parametrize("plan", ["random", "packed"])
def test_records_without_a_recipe_and_without_input_ids_are_refused_at_once(
    tmp_path: Path, plan: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Refused before the first batch, and before a lengths pass would read every record."""
    from chute.loader import planning

    def no_pass(*args: object, **kwargs: object) -> None:
        raise AssertionError("the lengths pass ran")

    monkeypatch.setattr(planning, "lengths_of", no_pass)
    with pytest.raises(
        ConfigError,
        match=r"recipe: the records are not tokenized: pass a Recipe \(recipe=Recipe\(tokenizer="
        r"\.\.\.\)\) to build input_ids and labels from them \(the records hold 'input', "
        r"'instruction', 'output', no input_ids\)",
    ):
        Loader(
            raw_records(tmp_path / "a.jsonl", 30),
            batch_size=4,
            world=World(),
            plan=plan,
            plan_options={"max_length": 64} if plan == "packed" else None,
        )


def test_records_with_input_ids_among_the_first_pass_the_probe(tmp_path: Path) -> None:
    """Some tokenized records among the first (a few raw ones mixed in): the budget counts the
    rest, as for any bad sample."""
    path = tmp_path / "mixed.jsonl"
    rows = [{"input_ids": [1, 2, 3]} if i % 2 else {"text": f"raw {i}"} for i in range(40)]
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    loader = Loader(path, batch_size=4, world=World(), max_bad_fraction=0.6)
    delivered = [int(i) for b in loader for i in b["sample_ids"] if i >= 0]
    assert sorted(delivered) == list(range(1, 40, 2))  # the tokenized ones, once each
    assert loader.summary()["rejected"] == 20


def test_a_source_that_raises_for_its_first_item_is_not_refused_by_the_probe() -> None:
    """A map-style dataset whose item 0 is bad (it raises): the probe is inconclusive, and the
    budget counts that sample as for any other."""

    class FirstBad:
        def __len__(self) -> int:
            return 12

        def __getitem__(self, i: int) -> dict[str, Any]:
            if i == 0:
                raise SampleError("image_missing", "no such file: 0.jpg", field="images")
            return {"input_ids": [1, 2, i]}

    loader = Loader(FirstBad(), batch_size=4, world=World(), shuffle=False)
    delivered = [int(i) for b in loader for i in b["sample_ids"] if i >= 0]
    assert sorted(delivered) == list(range(1, 12))  # every other sample, once
    assert loader.summary()["rejected"] == 1


def test_a_few_bad_records_at_the_start_do_not_stop_a_good_run(id_source) -> None:
    loader = Loader(id_source(300, broken=range(99)), batch_size=4, shuffle=False, world=World())
    batches = list(loader)  # 99 bad in a row, then the 100th sample is valid
    assert len(batches) == 75
    assert loader.summary()["rejected"] == 99 and loader.summary()["valid"] == 201


def test_max_bad_fraction_none_turns_the_check_off(tmp_path: Path) -> None:
    loader = Loader(
        raw_records(tmp_path / "a.jsonl", 30), batch_size=4, world=World(), max_bad_fraction=None
    )
    assert len(list(loader)) == 8
    assert loader.summary()["placeholder_batches"] == 8


class FailLater:
    """A recipe whose samples all fail once ``failing`` is set (images gone mid-run, say)."""

    def __init__(self) -> None:
        self.failing = False

    def __call__(self, record: Any) -> dict[str, Any]:
        if self.failing:
            raise SampleError("image_missing", "no such file: img/1.jpg", field="images")
        return dict(record.data)


def test_a_later_epoch_that_delivers_nothing_stops_with_the_hint_of_its_reason(id_source) -> None:
    recipe = FailLater()
    loader = Loader(id_source(150), recipe, batch_size=5, world=World())
    assert len(list(loader)) == 30  # epoch 0: every sample valid
    recipe.failing = True
    yielded, error = count_until_error(loader)
    assert error is not None and yielded == 29
    assert "the 150 samples of epoch 1 were all bad" in str(error)
    assert "The images are not where the records point: check media_root" in str(error)


def test_a_restored_loader_checks_its_first_samples_again(id_source) -> None:
    recipe = FailLater()
    source = id_source(400)
    first = Loader(source, recipe, batch_size=4, world=World())
    it = iter(first)
    for _ in range(30):
        next(it)
    state = first.state_dict()
    recipe.failing = True  # resumed with what makes every sample bad (a wrong recipe, say)
    resumed = Loader(source, recipe, batch_size=4, world=World())
    resumed.load_state_dict(state)
    yielded, error = count_until_error(resumed)
    assert error is not None and yielded == 24
    assert "the first 100 samples of this run were all bad" in str(error)


def test_the_lengths_pass_rejecting_every_record_stops_before_the_first_batch(
    tmp_path: Path, unprobed: None
) -> None:
    with pytest.raises(
        ErrorBudgetExceeded,
        match=r"the 30 records the lengths pass read were all bad: nothing to train on\. The "
        r"records are not tokenized: pass a Recipe",
    ):
        Loader(raw_records(tmp_path / "a.jsonl", 30), batch_size=4, world=World(), plan="grouped")


class Group:
    """A process group of threads: ``all_gather`` exchanges one value per rank at a barrier."""

    def __init__(self, world_size: int) -> None:
        self.barrier = threading.Barrier(world_size, timeout=60)
        self.slots: list[Any] = [None] * world_size
        self.local = threading.local()

    def all_gather(self, value: Any, world_size: int | None = None) -> list[Any]:
        self.slots[self.local.rank] = value
        self.barrier.wait()
        out = list(self.slots)
        self.barrier.wait()  # nobody overwrites a slot before everyone read it
        return out


def run_ranks(monkeypatch: pytest.MonkeyPatch, make: Any, world_size: int) -> list[Any]:
    """Each rank's loader iterated in its own thread, collectives through a thread group."""
    group = Group(world_size)
    monkeypatch.setattr(delivery, "all_gather", group.all_gather)
    results: list[Any] = [None] * world_size

    def rank(r: int) -> None:
        group.local.rank = r
        results[r] = count_until_error(make(r))

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(world_size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return results


def test_ranks_decide_together_on_the_counts_of_every_rank(monkeypatch, id_source) -> None:
    n, world_size = 203, 2

    def make(r: int, source: Any) -> Loader:
        return Loader(
            source,
            batch_size=4,
            seed=11,
            world=World(rank=r, world_size=world_size),
            sample_timeout=None,
        )

    # rank 0's first samples are all bad; one of rank 1's is valid: nobody stops
    probe = make(1, id_source(n, name="probe.jsonl"))
    keep = int(probe.plan.batch(1, 3)[0])
    one_good = id_source(n, broken=set(range(n)) - {keep}, name="one_good.jsonl")
    results = run_ranks(monkeypatch, lambda r: make(r, one_good), world_size)
    assert results == [(26, None), (26, None)]

    # every sample bad: both ranks stop at the same step, on the counts of both
    all_bad = id_source(n, broken=range(n), name="all_bad.jsonl")
    results = run_ranks(monkeypatch, lambda r: make(r, all_bad), world_size)
    assert [yielded for yielded, _ in results] == [12, 12]  # 13 steps of 8 samples reach 100
    for r, (_, error) in enumerate(results):
        assert f"on rank {r}: the first 104 samples of this run (over 2 ranks) were all bad" in str(
            error
        )

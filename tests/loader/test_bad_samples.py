"""Bad samples: skipped in the worker, counted, logged once, written out; budgets; hangs."""

from __future__ import annotations

import logging
import os
import signal
import time

import numpy as np
import orjson
import pytest

from chute import (
    ErrorBudgetExceeded,
    Loader,
    LoaderTimeout,
    SampleError,
    SourceChanged,
    World,
)
from chute.loader.watchdog import Watchdog
from chute.testing import BROKEN_KINDS

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


def run(loader: Loader) -> list[dict[str, np.ndarray]]:
    return [{k: v.numpy() for k, v in b.items()} for b in loader]


def test_ten_percent_broken_every_valid_sample_once_every_broken_one_counted(
    id_source, tmp_path, caplog
) -> None:
    n = 300
    broken = set(range(5, n, 10))
    source = id_source(n, broken=broken)
    clean = Loader(id_source(n, name="clean.jsonl"), batch_size=8, world=World(0, 2), seed=3)
    seen, stats, batch_counts = [], {}, set()
    caplog.set_level(logging.WARNING, logger="chute.loader")
    for rank in range(2):
        loader = Loader(
            source,
            batch_size=8,
            world=World(rank=rank, world_size=2),
            seed=3,
            num_workers=2,
            rejects=tmp_path / "rejects.jsonl",
        )
        batches = run(loader)
        batch_counts.add(len(batches))
        seen += [i for b in batches for i in b["sample_ids"].tolist()]
        for kind, count in loader.stats.items():
            stats[kind] = stats.get(kind, 0) + count
        summary = loader.summary()
        assert summary["valid"] + summary["rejected"] == summary["samples"]
    assert batch_counts == {len(clean)}  # bad samples never change the number of batches
    assert sorted(seen) == sorted(set(range(n)) - broken)
    expected = {}
    for j in range(len(broken)):
        kind = BROKEN_KINDS[j % len(BROKEN_KINDS)][1]
        expected[kind] = expected.get(kind, 0) + 1
    assert stats == expected
    # each reason is logged once per rank, with path:line
    logged = [r.getMessage() for r in caplog.records if "skipped a bad sample" in r.getMessage()]
    assert len(logged) == 2 * len(expected)
    assert all("ids.jsonl:" in m for m in logged)
    # the rejects files (one per rank) hold every broken record, in validate's format
    entries = [
        orjson.loads(line)
        for rank in range(2)
        for line in (tmp_path / f"rejects.rank{rank}.jsonl").read_bytes().splitlines()
    ]
    assert sorted(e["index"] for e in entries) == sorted(broken)
    assert all(e["line"] == e["index"] + 1 for e in entries)
    assert set(entries[0]) >= {"path", "line", "index", "reason", "message", "field", "raw"}


def test_rejects_are_written_once_even_over_several_epochs(id_source, tmp_path) -> None:
    loader = Loader(
        id_source(50, broken=[3, 30]), batch_size=5, world=World(), rejects=tmp_path / "r.jsonl"
    )
    for _ in range(3):
        run(loader)
    assert len((tmp_path / "r.jsonl").read_bytes().splitlines()) == 2
    assert loader.stats == {"bad_json": 3, "missing_field": 3}


@pytest.mark.parametrize("plan", ["grouped", "packed"])
def test_records_a_length_aware_plan_leaves_out_are_in_the_rejects_file(
    id_source, tmp_path, plan: str
) -> None:
    """They are excluded before any rank sees them: rank 0's file lists them, once a run."""
    broken = [3, 17, 30]
    options = {"max_length": 8} if plan == "packed" else {}
    source = id_source(50, broken=broken)

    def make(rank: int = 0) -> Loader:
        return Loader(
            source,
            batch_size=5,
            world=World(rank, 2),
            plan=plan,
            plan_options=options,
            rejects=tmp_path / "r.jsonl",
        )

    loaders = [make(0), make(1)]
    for loader in loaders:
        run(loader)
    entries = [orjson.loads(x) for x in (tmp_path / "r.rank0.jsonl").read_bytes().splitlines()]
    assert sorted(e["index"] for e in entries) == broken
    assert {e["reason"] for e in entries} == {"bad_json", "missing_field", "wrong_type"}
    assert all(e["line"] == e["index"] + 1 and e["raw"] for e in entries)
    assert not (tmp_path / "r.rank1.jsonl").exists()
    assert loaders[0].summary()["excluded"] == 3 and loaders[0].summary()["rejected"] == 0
    make(0)  # a resumed run (the file has lines): nothing written twice
    assert len((tmp_path / "r.rank0.jsonl").read_bytes().splitlines()) == 3


def test_sixty_percent_broken_stops_early_with_a_summary_by_reason(id_source) -> None:
    n = 400
    rng = np.random.default_rng(0)
    broken = rng.choice(n, size=int(0.6 * n), replace=False).tolist()
    loader = Loader(
        id_source(n, broken=broken),
        batch_size=10,
        world=World(),
        num_workers=2,
        max_bad_fraction=0.3,
        budget_min_samples=50,
    )
    yielded = 0
    with pytest.raises(
        ErrorBudgetExceeded,
        match=r"(?s)on rank 0: \d+ of \d+ samples were bad \(\d+\.\d%\), above "
        r"max_bad_fraction=0.3.*By reason:.*bad_json: \d+  e\.g\. .*ids\.jsonl:\d+",
    ) as caught:
        for _ in loader:
            yielded += 1
    assert yielded < 10  # early, not at the end of the epoch (40 batches)
    assert caught.value.tally is not None and caught.value.tally.total > 0.3 * 50


def test_a_long_run_of_bad_records_stops_the_run(id_source) -> None:
    loader = Loader(
        id_source(200, broken=range(40, 80)),
        batch_size=8,
        shuffle=False,
        world=World(),
        max_consecutive_bad=25,
        max_bad_fraction=None,
    )
    with pytest.raises(
        ErrorBudgetExceeded, match=r"3\d bad samples in a row, reaching max_consecutive_bad=25"
    ):
        run(loader)


def test_a_batch_whose_every_sample_failed_is_one_placeholder_row(id_source) -> None:
    loader = Loader(
        id_source(12, broken=[4, 5, 6, 7]),
        batch_size=4,
        shuffle=False,
        world=World(),
        pad_to_multiple_of=8,
        max_consecutive_bad=None,
    )
    batches = run(loader)
    assert len(batches) == 3
    empty = batches[1]
    assert empty["sample_ids"].tolist() == [-1]
    assert empty["labels"].tolist() == [[-100] * 8]
    assert empty["attention_mask"].tolist() == [[1] + [0] * 7]
    assert loader.summary()["placeholder_batches"] == 1


def test_top_up_refills_batches_with_repeats_and_reports_them(id_source) -> None:
    loader = Loader(
        id_source(40, broken=[1, 2, 11]),
        batch_size=5,
        shuffle=False,
        world=World(),
        top_up=True,
    )
    batches = run(loader)
    assert [len(b["sample_ids"]) for b in batches] == [5] * 8
    assert batches[0]["sample_ids"].tolist() == [0, 3, 4, 0, 3]
    assert loader.summary()["topped_up"] == 3


def recipe_with_kinds(record):
    data = record.data
    if data["input_ids"][0] % 10 == 1:
        raise SampleError("too_long", "longer than max_length")
    if data["input_ids"][0] % 10 == 2:
        raise ValueError("a bug in user code")
    return data


def test_recipe_errors_are_typed_skips_and_bugs_become_unexpected_error(id_source) -> None:
    loader = Loader(id_source(40), recipe_with_kinds, batch_size=8, world=World(), num_workers=1)
    ids = [i for b in run(loader) for i in b["sample_ids"].tolist()]
    assert sorted(ids) == [i for i in range(40) if i % 10 not in (1, 2)]
    assert loader.stats == {"too_long": 4, "unexpected_error": 4}
    assert "ValueError: a bug in user code" in loader.tally.examples["unexpected_error"][0]


def test_a_changed_file_stops_the_run_instead_of_being_a_bad_sample(id_source) -> None:
    source = id_source(20)
    loader = Loader(source, batch_size=4, world=World())
    with open(source.paths[0], "ab") as f:
        f.write(b'{"input_ids": [1]}\n')
    with pytest.raises(SourceChanged, match="changed after it was indexed"):
        run(loader)


def test_bad_items_of_a_map_style_dataset_are_located_by_index() -> None:
    data = [{"input_ids": [i + 1]} for i in range(10)]
    data[4] = {"input_ids": [[1, 2]]}
    loader = Loader(data, batch_size=5, world=World(), shuffle=False)
    assert [b["sample_ids"].tolist() for b in loader] == [[0, 1, 2, 3], [5, 6, 7, 8, 9]]
    assert loader.tally.examples["wrong_type"] == [
        "list[4]: wrong_type: input_ids must be 1-D, got shape (1, 2) (field 'input_ids')"
    ]


def hang_on_seven(record):
    if record.data["input_ids"][0] == 7:
        time.sleep(3600)
    return record.data


@pytest.mark.timeout(60)
@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_hanging_sample_is_skipped_after_sample_timeout(id_source, num_workers: int) -> None:
    loader = Loader(
        id_source(20),
        hang_on_seven,
        batch_size=4,
        world=World(),
        num_workers=num_workers,
        sample_timeout=1.5,
    )
    t0 = time.monotonic()
    ids = [i for b in run(loader) for i in b["sample_ids"].tolist()]
    assert time.monotonic() - t0 < 20
    assert sorted(ids) == [i for i in range(20) if i != 7]
    assert loader.stats == {"sample_timeout": 1}
    assert "sample_timeout=1.5" in loader.tally.examples["sample_timeout"][0]


@pytest.mark.timeout(60)
def test_a_hang_the_watchdog_cannot_see_fails_the_batch_with_a_clear_error(id_source) -> None:
    loader = Loader(
        id_source(20),
        hang_on_seven,
        batch_size=4,
        shuffle=False,
        world=World(),
        num_workers=2,
        sample_timeout=None,
        timeout=3,
    )
    t0 = time.monotonic()
    with pytest.raises(
        LoaderTimeout,
        match=r"rank 0: batch 1 of epoch 0 \(sample ids \[4, 5, 6, 7\]\) was not ready after "
        r"timeout=3.0 s.*set sample_timeout",
    ):
        run(loader)
    assert time.monotonic() - t0 < 30


def test_a_new_loader_is_not_timed_from_an_earlier_loader_s_sample() -> None:
    """Each loader's watchdog counts samples from 0; the one watching thread per process must
    not take a new loader's sample 3 for the sample 3 it saw an earlier loader start long ago
    (that skipped a valid sample as sample_timeout, at random, in a long test session)."""
    earlier = Watchdog(1.0)
    with earlier.guarding():
        for _ in range(3):
            with earlier:
                pass
        time.sleep(0.4)  # the watching thread sees sample 3 of this watchdog
    time.sleep(1.2)  # longer ago than the limit
    later = Watchdog(1.0)
    with later.guarding():
        for _ in range(2):
            with later:
                pass
        with later:
            time.sleep(0.6)  # sample 3, within the limit (the thread looks in meanwhile)


def bus_error_on_nine(record):  # type: ignore[no-untyped-def]
    """A recipe whose read of record 9 dies as a read of a mapped file cut short does."""
    if record.data["input_ids"][0] == 9:
        os.kill(os.getpid(), signal.SIGBUS)
    return record.data


def test_a_worker_killed_by_a_bus_error_says_a_mapped_file_was_cut(id_source) -> None:
    """torch reports a worker's SIGBUS as shared memory or a reset connection; the cause is
    almost always a memory-mapped file (a cache chunk) truncated under the run."""
    loader = Loader(
        id_source(20), bus_error_on_nine, batch_size=4, shuffle=False, world=World(), num_workers=1
    )
    with pytest.raises(
        SourceChanged,
        match=r"rank 0: a DataLoader worker was killed by SIGBUS .* batch \d of epoch 0: a file "
        r"it had memory-mapped was cut short under the run .*chute validate CACHE",
    ):
        run(loader)

"""Plans at 100M samples: the chunked, int32, histogram paths equal the one-shot ones.

The length-aware planners build a fresh epoch (and any given order) through ``plan_order``:
chunks of the order, threads, a counting sort and packing over a size histogram. The
materialising ``plan_ids`` (still the path of ``balance``, ``window``, ``split`` and
``by_modality``) is the reference: every array of the plan must be the same. Chunk and task
sizes are shrunk here so that small inputs cross many chunks and threads; the 100M figures are
in ``benchmarks/bench_scale.py``.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from chute.plan import bulk, pack, shuffle
from chute.plan.budget import BudgetPlanner
from chute.plan.grouped import GroupedPlanner
from chute.plan.order import IdOrder, Mapped, Sequential
from chute.plan.pack import pack_rows, pack_sorted
from chute.plan.packed import PackedPlanner, length_counts
from chute.plan.shuffle import Permutation
from chute.plan.table import TablePlan


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks, tasks and Feistel blocks of a few hundred: many of each on small inputs."""
    monkeypatch.setattr(bulk, "CHUNK", 300)
    monkeypatch.setattr(bulk, "TASK", 200)
    monkeypatch.setattr(bulk, "MAX_THREADS", 3)
    monkeypatch.setattr(bulk, "worker_threads", lambda: 3)
    monkeypatch.setattr(shuffle, "_PART", 256)
    monkeypatch.setattr(shuffle, "_BLOCK", 64)
    for module in ("grouped", "budget", "packed"):
        mod = __import__(f"chute.plan.{module}", fromlist=["CHUNK"])
        if hasattr(mod, "CHUNK"):
            monkeypatch.setattr(mod, "CHUNK", 300)


def lengths_with_rejects(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    lens = np.clip(rng.lognormal(4.5, 1.1, n), 0, 3000).astype(np.int32)
    lens[rng.random(n) < 0.07] = -1
    return lens


def same_plan(a: TablePlan, b: TablePlan) -> None:
    assert np.array_equal(a.ids, b.ids)
    assert np.array_equal(a.batch_bounds, b.batch_bounds)
    assert (a.row_bounds is None) == (b.row_bounds is None)
    if a.row_bounds is not None:
        assert np.array_equal(a.row_bounds, b.row_bounds)
    assert np.array_equal(a.undealt, b.undealt)
    assert a.stats == b.stats
    assert a.ids.dtype == np.int32  # a 100M-sample plan holds 4 bytes per id


PLANNERS = {
    "grouped": lambda lens: GroupedPlanner(4, group_size=3, lengths=lens),
    "grouped_accum": lambda lens: GroupedPlanner(3, group_size=2, grad_accum=3, lengths=lens),
    "grouped_sorted": lambda lens: GroupedPlanner(4, shuffle=False, lengths=lens),
    "grouped_drop": lambda lens: GroupedPlanner(
        5, longest_first=False, drop_last=True, lengths=lens
    ),
    "budget": lambda lens: BudgetPlanner(8192, lengths=lens),
    "budget_rows": lambda lens: BudgetPlanner(
        4096, max_rows=7, pad_to_multiple_of=8, group_size=3, grad_accum=2, lengths=lens
    ),
    "packed": lambda lens: PackedPlanner(2048, batch_size=2, lengths=lens),
    "packed_drop": lambda lens: PackedPlanner(1024, overflow="drop", lengths=lens),
    "packed_align": lambda lens: PackedPlanner(
        2048, align=8, batch_size=3, drop_last=True, lengths=lens
    ),
    "packed_sorted": lambda lens: PackedPlanner(1024, shuffle=False, lengths=lens),
}


@pytest.mark.parametrize("name", sorted(PLANNERS))
def test_chunked_plans_equal_the_materialised_ones(name: str, small_chunks: None) -> None:
    for n, seed in ((0, 0), (1, 1), (45, 2), (2500, 3)):
        lens = lengths_with_rejects(n, seed)
        planner = PLANNERS[name](lens)
        for world in (1, 3, 8):
            for epoch in (0, 1):
                fresh = planner.build(n, epoch=epoch, world_size=world)
                ids = planner.epoch_order(epoch).materialize(np.int32)
                reference = planner.plan_ids(ids, epoch=epoch, world_size=world)
                same_plan(fresh, reference)
                if not fresh.num_batches:
                    continue
                rest = fresh.remaining(fresh.num_batches // 2)  # an elastic continuation
                again = planner.build(n, epoch=epoch, world_size=2, order=rest)
                want = planner.plan_ids(rest.materialize(np.int32), epoch=epoch, world_size=2)
                same_plan(again, want)


def test_grouped_moves_the_longest_sample_to_the_first_step(small_chunks: None) -> None:
    for seed in range(6):
        lens = lengths_with_rejects(3000, seed)
        lens[np.flatnonzero(lens >= 0)[-7]] = 5000  # one longest, somewhere late
        plan = GroupedPlanner(2, group_size=2, grad_accum=2, lengths=lens).build(
            3000, epoch=seed, world_size=3
        )
        first_step = np.concatenate([plan.batch(r, 0) for r in range(3)])
        assert lens[first_step].max() == 5000


def test_permutation_ranges_equal_positions_and_threads_change_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for n in (0, 1, 2, 977, 5000):
        want = Permutation(n, 3, 1).take(np.arange(n, dtype=np.int64))
        monkeypatch.setattr(shuffle, "_PART", 100)
        monkeypatch.setattr(shuffle, "_BLOCK", 32)
        monkeypatch.setattr(shuffle, "worker_threads", lambda: 4)
        got = Permutation(n, 3, 1).materialize(np.int32)
        assert got.dtype == np.int32 and np.array_equal(got, want)
        if n > 10:
            assert np.array_equal(Permutation(n, 3, 1).take_range(5, n - 3), want[5 : n - 3])
        monkeypatch.undo()


def test_orders_read_by_range() -> None:
    table = np.array([4, 7, 9, 12, 20], dtype=np.int32)
    mapped = Mapped(Permutation(5, 0, 0), table)
    full = table[Permutation(5, 0, 0).materialize()]
    assert mapped.materialize().tolist() == full.tolist()
    assert mapped.take_range(1, 4, np.empty(3, dtype=np.int64)).tolist() == full[1:4].tolist()
    assert mapped.tail(2).take_range(0, 3).tolist() == full[2:].tolist()
    assert IdOrder(table).take_range(2, 5).tolist() == [9, 12, 20]
    assert Sequential(6).take_range(2, 4, np.empty(2, dtype=np.int32)).tolist() == [2, 3]
    with pytest.raises(IndexError):
        Sequential(3).take_range(2, 5)


def test_counting_sort_is_a_stable_descending_sort(small_chunks: None) -> None:
    rng = np.random.default_rng(0)
    ids = rng.permutation(5000).astype(np.int32)
    keys = rng.integers(1, 40, 5000)
    parts = [
        bulk.rank_desc(ids[lo : lo + 333], keys[lo : lo + 333], 40) for lo in range(0, 5000, 333)
    ]
    got = bulk.place_desc(parts, np.bincount(keys, minlength=41), np.empty(5000, np.int32))
    assert np.array_equal(got, ids[np.argsort(-keys, kind="stable")])


def test_take_segments_equals_the_gather(small_chunks: None) -> None:
    rng = np.random.default_rng(1)
    src = rng.integers(0, 10**6, 4000).astype(np.int32)
    sizes = rng.integers(0, 30, 300)
    starts = rng.integers(0, 4000 - 30, 300)
    want = np.concatenate([src[s : s + k] for s, k in zip(starts, sizes, strict=True)])
    assert np.array_equal(bulk.take_segments(src, starts, sizes), want)


def test_valid_ids_and_spans(small_chunks: None) -> None:
    lens = lengths_with_rejects(2000, 5)
    got = bulk.valid_ids(lens)
    assert got.dtype == np.int32 and np.array_equal(got, np.flatnonzero(lens >= 0))
    covered = bulk.spans(1000, 7)
    assert covered[0][0] == 0 and covered[-1][1] == 1000
    assert all(lo % 7 == 0 for lo, _ in covered)
    assert all(a[1] == b[0] for a, b in itertools.pairwise(covered))


@pytest.mark.parametrize("write", [1 << 18, 7, 1])
def test_packing_over_a_histogram_lays_rows_out_in_any_order(
    write: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pack, "_WRITE", write)  # the writes in pieces of a few rows
    rng = np.random.default_rng(2)
    lens = rng.integers(1, 500, 3000)
    members, counts = pack_rows(lens, 1000)
    order = np.argsort(-lens, kind="stable")
    hist = np.bincount(lens, minlength=1001)
    rows = rng.permutation(len(counts))
    laid, laid_counts = pack_sorted(order, hist, 1000, arrange=lambda c: rows)
    starts = np.cumsum(counts) - counts
    want = np.concatenate([members[starts[r] : starts[r] + counts[r]] for r in rows])
    assert np.array_equal(laid_counts, counts[rows]) and np.array_equal(laid, want)
    with pytest.raises(ValueError, match="histogram"):
        pack_sorted(order[:-1], hist, 1000)


@pytest.mark.parametrize("write", [1 << 18, 64, 1])
def test_packing_writes_on_threads_equal_the_writes_in_the_loop(
    write: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(5)
    lens = np.clip(rng.lognormal(5.0, 1.2, 200_000).astype(np.int64), 1, 2048)
    order = np.argsort(-lens, kind="stable").astype(np.int32)
    hist = np.bincount(lens, minlength=2049)
    arrange = lambda c: np.random.default_rng(1).permutation(len(c))  # noqa: E731
    monkeypatch.setattr(bulk, "worker_threads", lambda: 1)
    want, want_counts = pack_sorted(order, hist, 2048, arrange=arrange)
    monkeypatch.setattr(bulk, "worker_threads", lambda: 4)
    monkeypatch.setattr(pack, "_WRITE", write)
    monkeypatch.setattr(pack, "_WRITE_INLINE", 0)  # every write handed to a thread
    got, counts = pack_sorted(order, hist, 2048, arrange=arrange)
    assert np.array_equal(counts, want_counts) and np.array_equal(got, want)


def test_side_tasks_raise_the_first_error_and_cancel_the_rest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(bulk, "worker_threads", lambda: 2)
    done: list[int] = []

    def step(k: int) -> None:
        if k == 3:
            raise ValueError("step 3 failed")
        done.append(k)

    with pytest.raises(ValueError, match="step 3 failed"), bulk.side_tasks() as submit:
        for k in range(100):
            submit(step, k)
    assert 3 not in done and len(done) < 100  # the queue is bounded: the rest never ran


def test_lookup_table_is_a_narrow_exact_copy(small_chunks: None, tmp_path: Path) -> None:
    lens = lengths_with_rejects(2000, 6)  # int32, -1 .. 3000: fits int16
    np.save(tmp_path / "lengths.npy", lens)
    mapped = np.load(tmp_path / "lengths.npy", mmap_mode="r")  # as a lengths cache gives them
    table = bulk.lookup_table(mapped)
    assert table.dtype == np.int16 and not isinstance(table, np.memmap)
    assert np.array_equal(table, lens)
    assert bulk.lookup_table(table) is table  # narrow in memory already
    wide = lens.astype(np.int64) * 100  # up to 300,000: int32
    assert bulk.lookup_table(wide).dtype == np.int32
    huge = wide * 10**6  # fits neither: the array itself
    assert bulk.lookup_table(huge) is huge
    small = lens[:100]  # fewer than a chunk: the array itself
    assert bulk.lookup_table(small) is small
    ids = np.random.default_rng(0).permutation(2000).astype(np.int32)
    assert np.array_equal(bulk.lookup(table, ids), lens[ids])
    out = np.empty(2000, dtype=np.int16)
    assert bulk.lookup(table, ids, out=out) is out and np.array_equal(out, lens[ids])


def test_take_segments_copies_long_segments_as_slices(small_chunks: None) -> None:
    rng = np.random.default_rng(3)
    src = rng.integers(0, 10**6, 50_000).astype(np.int32)
    sizes = rng.integers(200, 2000, 40)  # mean above SLICED: slice by slice
    starts = rng.integers(0, 50_000 - 2000, 40)
    want = np.concatenate([src[s : s + k] for s, k in zip(starts, sizes, strict=True)])
    assert sizes.mean() >= bulk.SLICED
    assert np.array_equal(bulk.take_segments(src, starts, sizes), want)


def test_argsort_desc_with_a_known_top_is_the_same_stable_order() -> None:
    rng = np.random.default_rng(4)
    for top, dtype in ((40, np.int16), (70_000, np.int64)):
        keys = rng.integers(0, top, 3000).astype(dtype)
        want = np.argsort(-keys.astype(np.int64), kind="stable")
        assert np.array_equal(bulk.argsort_desc(keys), want)
        assert np.array_equal(bulk.argsort_desc(keys, top), want)


def test_shuffle_walks_values_outside_the_range_across_blocks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # n just above a power of two: almost half the domain lies outside [0, n) and is walked
    for n in (2**12 + 1, 3 * 2**11):
        want = Permutation(n, 5, 0).take(np.arange(n, dtype=np.int64))
        monkeypatch.setattr(shuffle, "_BLOCK", 37)
        monkeypatch.setattr(shuffle, "_WALK", 500)
        got = Permutation(n, 5, 0).materialize(np.int32)
        monkeypatch.undo()
        assert sorted(got.tolist()) == list(range(n)) and np.array_equal(got, want)


def test_mixture_orders_read_long_ranges_in_chunks_on_threads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from chute.plan import mixture_selection
    from chute.plan.mixture_selection import Selection, Share

    sel = Selection([Share("a", 700, weight=0.7), Share("b", 300, repeat=2)], seed=3)
    order = sel.order(2)
    want = order.take(np.arange(len(order), dtype=np.int64))
    monkeypatch.setattr(mixture_selection, "RANGE_CHUNK", 64)
    monkeypatch.setattr(bulk, "worker_threads", lambda: 4)  # chunks on threads, any core count
    assert np.array_equal(order.take_range(0, len(order)), want)
    got = order.take_range(5, len(order) - 9, np.empty(len(order) - 14, dtype=np.int32))
    assert np.array_equal(got, want[5:-9])


@pytest.mark.parametrize("epoch", [0, 1, 5])
def test_a_mixture_order_s_multiset_is_its_ids_with_their_counts(epoch: int) -> None:
    from chute.plan.mixture_selection import Selection, Share

    rejected = np.ones(90, dtype=bool)
    rejected[[3, 17, 40]] = False  # a pool without its rejected records
    sel = Selection(
        [
            Share("a", 700, weight=0.7),  # part of its pool: the permutation's next ids
            Share("b", 300, repeat=2.5),  # twice over, and half once more
            Share("c", 90, repeat=3),  # a pool, three times over
            Share("d", 200, max_samples=50, weight=0.05),  # a capped pool
        ],
        seed=7,
        epoch_samples=2000,
        pools=[None, None, np.flatnonzero(rejected), None],
    )
    order = sel.order(epoch)
    want = np.bincount(order.materialize(), minlength=1290)
    for size in (64, 10_000):
        got = np.zeros(1290, dtype=np.int64)
        for part in order.multiset_parts(size, np.int32):
            ids, times = part()
            assert ids.dtype == np.int32 and len(ids) <= size
            np.add.at(got, ids, times)
        assert np.array_equal(got, want)
    # a tail of it (an elastic resume) is read as its range, and so is any other order
    tail = order.tail(333)
    got = np.concatenate([part()[0] for part in tail.multiset_parts(100)])
    assert np.array_equal(got, tail.materialize())


@pytest.mark.parametrize(("first", "last"), [(0, 100), (10, 40), (90, 130), (105, 120), (3, 303)])
def test_a_permuted_part_reads_its_positions_around_the_end(first: int, last: int) -> None:
    from chute.plan.mixture_selection import _permuted_part
    from chute.plan.shuffle import Permutation

    perm = Permutation(100, 11, 2)
    want = perm.take(np.arange(first, last, dtype=np.int64) % 100)
    ids, times = _permuted_part(perm, first, last, None, 1000, np.int32)
    assert times == 1 and ids.dtype == np.int32
    assert np.array_equal(ids, want + 1000)
    pool = np.arange(100, dtype=np.int32)[::-1] * 3
    ids, _ = _permuted_part(perm, first, last, pool, 0, np.int64)
    assert np.array_equal(ids, pool[want])


@pytest.mark.parametrize("dtype", [np.int16, np.int32, np.int64])
def test_length_counts_count_each_length_and_the_longer_ones(dtype: type) -> None:
    rng = np.random.default_rng(5)
    lens = rng.integers(-3, 900, 5000).astype(dtype)
    counts = length_counts(lens, top=600)
    valid = lens[lens >= 0].astype(np.int64)
    assert counts.tolist() == [
        *np.bincount(valid[valid <= 600], minlength=601).tolist(),
        int(np.count_nonzero(valid > 600)),
    ]
    assert length_counts(np.array([5, 32767], dtype=np.int16), top=32767).tolist()[-2:] == [1, 0]


def reference_local_ids(sel: Any, d: int, slots: np.ndarray, epoch: int) -> np.ndarray:
    """``Selection.local_ids`` as first written: one int64 modulo for every slot."""
    m, count = int(sel.pool_sizes[d]), int(sel.counts[d])
    copies = (count // m) * m
    out = np.empty(len(slots), dtype=np.int64)
    full = slots < copies
    out[full] = slots[full] % m
    rest = np.flatnonzero(~full)
    if rest.size:
        r = count - copies
        cycle, step = divmod(epoch, -(-m // r))
        perm = Permutation(m, sel._seeds[d], cycle)
        out[rest] = perm.take((step * r + slots[rest] - copies) % m)
    pool = sel.pools[d]
    return out if pool is None else pool[out].astype(np.int64)


@pytest.mark.parametrize("epoch", [0, 1, 2, 7])
def test_mixture_local_ids_equal_the_modulo_formula(epoch: int) -> None:
    from chute.plan.mixture_selection import Selection, Share

    sel = Selection(
        [
            Share("a", 700, weight=0.7),  # a part of its pool: the walk only
            Share("b", 300, repeat=2.5),  # copies and a walk
            Share("c", 90, repeat=1),  # one copy: the slot is the id
            Share("d", 200, max_samples=50, weight=0.3),  # a capped pool, copies and a walk
        ],
        seed=11,
        epoch_samples=1500,
        pools=[None, None, np.arange(0, 90, 2), None],
    )
    rng = np.random.default_rng(epoch)
    for d, count in enumerate(sel.counts.tolist()):
        every = np.arange(count, dtype=np.int64)
        for slots in (every, every[: count // 3], every[count // 2 :], rng.permutation(every)):
            want = reference_local_ids(sel, d, slots, epoch)
            assert np.array_equal(sel.local_ids(d, slots, epoch), want)
        assert sel.local_ids(d, every[:0], epoch).tolist() == []


@pytest.mark.parametrize("datasets", [1, 3, 17, 40])
def test_a_slot_s_dataset_by_compares_equals_the_binary_search(datasets: int) -> None:
    from chute.plan.mixture_selection import _bucket_of

    rng = np.random.default_rng(datasets)
    counts = rng.integers(0, 5, datasets)  # empty datasets too: their bound repeats
    counts[-1] += 1
    bounds = np.concatenate([[0], np.cumsum(counts)])
    slots = rng.permutation(int(bounds[-1]))
    want = np.searchsorted(bounds, slots, side="right") - 1
    assert np.array_equal(_bucket_of(slots, bounds), want)

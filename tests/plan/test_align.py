"""``PackedPlanner(align=k)``: each sample takes its length rounded up to ``k`` in its row.

Context-parallel slices pad every sample to a multiple of ``2 * cp``; rows packed by real length
would then overflow ``max_length``. With ``align`` the plan packs the padded sizes, so a row
always has room, and everything else (exact-once, equal batches, resume) holds as before.
"""

from __future__ import annotations

import numpy as np
import pytest

from chute import ConfigError
from chute.plan import PackedPlanner
from chute.plan.elastic import continue_epoch, dealt_ids


def lengths(n: int, seed: int, high: int = 70) -> np.ndarray:
    rng = np.random.default_rng(seed)
    lens = rng.integers(1, high, n).astype(np.int32)
    lens[rng.random(n) < 0.05] = -1  # rejected records: never dealt
    return lens


def rows_of(plan, world_size: int):  # type: ignore[no-untyped-def]
    """Every packed row of the plan (its ids), over every rank and step."""
    out = []
    for k in range(plan.num_batches):
        for r in range(world_size):
            ids, rows, _ = plan.layout(r, k)
            out += np.split(ids, np.cumsum(rows)[:-1]) if len(ids) else []
    return out


@pytest.mark.parametrize("align", [1, 2, 4, 8, 16])
@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_aligned_rows_fit_and_every_sample_is_dealt_once(align: int, world_size: int) -> None:
    lens = lengths(400, seed=align * 10 + world_size)
    planner = PackedPlanner(64, batch_size=2, align=align, lengths=lens, seed=3)
    plan = planner.build(len(lens), epoch=1, world_size=world_size)
    rows = rows_of(plan, world_size)
    room = [int((-(-np.minimum(lens[row], 64) // align) * align).sum()) for row in rows]
    assert max(room) <= 64
    dealt = np.sort(dealt_ids(plan, plan.num_batches))
    assert dealt.tolist() == np.flatnonzero(lens > 0).tolist()
    assert plan.stats["tokens"] == int(np.minimum(lens[lens > 0], 64).sum())  # not padded
    if align > 1:
        # packing by real length would have overflowed some rows with the padding
        plain = PackedPlanner(64, batch_size=2, lengths=lens, seed=3)
        loose = rows_of(plain.build(len(lens), epoch=1, world_size=world_size), world_size)
        padded = [int((-(-lens[row] // align) * align).sum()) for row in loose]
        assert max(padded) > 64


def test_align_is_part_of_the_plan_and_only_when_set() -> None:
    lens = lengths(50, seed=1)
    assert "align" not in PackedPlanner(64, lengths=lens).params()  # old states stay valid
    assert PackedPlanner(64, align=8, lengths=lens).params()["align"] == 8
    assert "align=8" in repr(PackedPlanner(64, align=8, lengths=lens))


def test_an_elastic_continuation_keeps_aligned_rows() -> None:
    lens = lengths(300, seed=5)
    planner = PackedPlanner(64, batch_size=1, align=8, lengths=lens, seed=2)
    first = planner.build(len(lens), epoch=0, world_size=4)
    rest = continue_epoch(planner, len(lens), epoch=0, segments=[(4, 3)], world_size=2)
    seen = np.concatenate([dealt_ids(first, 3), dealt_ids(rest, rest.num_batches)])
    assert np.sort(seen).tolist() == np.flatnonzero(lens > 0).tolist()
    for row in rows_of(rest, 2):
        assert int((-(-np.minimum(lens[row], 64) // 8) * 8).sum()) <= 64


def test_long_samples_take_a_whole_row_and_padding_takes_room() -> None:
    lens = np.array([100, 5, 64, 59], dtype=np.int32)
    for align, sizes in ((8, [1, 1, 1, 1]), (1, [1, 1, 2])):  # 8 + 64 > 64; 5 + 59 fits
        planner = PackedPlanner(64, align=align, lengths=lens, shuffle=False)
        plan = planner.build(4, epoch=0, world_size=1)
        assert plan.stats["truncated"] == 1
        assert sorted(len(r) for r in rows_of(plan, 1)) == sizes


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"max_length": 60, "align": 8}, "max_length=60 is not a multiple of align=8.*64"),
        ({"max_length": 64, "align": 8, "split": True}, "align=8 pads every sample"),
        ({"max_length": 64, "align": 0}, "align must be a positive int"),
    ],
)
def test_impossible_alignments_are_refused_with_the_fix(kwargs: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        PackedPlanner(lengths=lengths(10, seed=0), **kwargs)

"""Per-rank slices of packed batches: zig-zag (context parallelism) and contiguous (Ulysses).

Every check is against the unsliced batch: the slices of all ranks put back at their
``token_index`` are the whole batch exactly; the aligned batch holds each sample as the plain
packed batch does; ``shift_labels`` pair every token with the target a model's own shift gives
it; each CP rank gets the same causal attention work.
"""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from chute import ConfigError, Loader, World  # noqa: E402
from chute.collate import MediaCollate, PackedCollate, PackedPreferenceCollate  # noqa: E402
from chute.collate.slices import (  # noqa: E402
    ContextParallelCollate,
    SequenceParallelCollate,
    gather_slices,
    shift_labels,
    thd_params,
    zigzag_index,
)
from chute.plan import PackedPlanner  # noqa: E402


def random_samples(seed: int, n: int, high: int = 40) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        length = int(rng.integers(1, high))
        ids = rng.integers(1, 1000, length)
        labels = ids.copy()
        labels[: int(rng.integers(0, length))] = -100  # a prompt that is not trained
        out.append({"input_ids": ids, "labels": labels, "i": i})
    return out


def random_rows(seed: int, samples: list[dict[str, Any]], width: int, align: int) -> list[int]:
    """Samples per row, each row holding at most ``width`` aligned tokens (as a plan packs)."""
    rows, fill = [0], 0
    for s in samples:
        room = -(-len(s["input_ids"]) // align) * align
        if fill + room > width:
            rows.append(0)
            fill = 0
        rows[-1] += 1
        fill += room
    return rows


def reference_zigzag(cu: np.ndarray, cp: int, r: int) -> list[int]:
    out: list[int] = []
    for start, end in itertools.pairwise(cu):
        chunk = (end - start) // (2 * cp)
        for c in (r, 2 * cp - 1 - r):
            out += range(start + c * chunk, start + (c + 1) * chunk)
    return out


@pytest.mark.parametrize("cp", [1, 2, 3, 4, 8])
def test_zigzag_index_is_the_thd_partition(cp: int) -> None:
    rng = np.random.default_rng(cp)
    lens = rng.integers(1, 6, 30) * 2 * cp
    cu = np.concatenate([[0], np.cumsum(lens)])
    parts = [zigzag_index(cu, cp, r) for r in range(cp)]
    for r in range(cp):
        assert parts[r].tolist() == reference_zigzag(cu, cp, r)
        assert len(parts[r]) == cu[-1] // cp
    assert np.sort(np.concatenate(parts)).tolist() == list(range(cu[-1]))


@pytest.mark.parametrize("cp", [2, 3, 4])
def test_every_cp_rank_gets_the_same_causal_attention_work(cp: int) -> None:
    # a token at position p attends to p + 1 keys; chunks r and 2cp-1-r sum to the same work
    full = PackedCollate(96 * cp, align=2 * cp)
    samples = random_samples(cp, 12, high=60)
    rows = random_rows(cp, samples, 96 * cp, 2 * cp)
    work = []
    for r in range(cp):
        b = ContextParallelCollate(full, cp, r)(samples, rows=rows)
        work.append(int((b["position_ids"] + 1).sum()))
    assert len(set(work)) == 1, work
    # a contiguous cut (no zig-zag) would not be even
    contiguous = [int((np.arange(r * 8, (r + 1) * 8) + 1).sum()) for r in range(2 * cp)]
    assert len(set(contiguous)) > 1


@pytest.mark.parametrize("cp", [1, 2, 3, 4])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_cp_slices_put_back_are_the_whole_batch(cp: int, seed: int) -> None:
    width = 24 * 2 * cp
    full = PackedCollate(width, pad_id=0, align=2 * cp)
    samples = random_samples(seed, 25)
    rows = random_rows(seed, samples, width, 2 * cp)
    whole = full(samples, rows=rows)
    slices = [ContextParallelCollate(full, cp, r)(samples, rows=rows) for r in range(cp)]
    for s in slices:
        assert s["input_ids"].shape == (len(rows), width // cp)
        assert "labels" not in s  # only shifted labels cross the cut
        for key in ("cu_seqlens", "cu_seqlens_padded", "max_seqlen"):
            assert torch.equal(s[key], whole[key]), key  # the whole batch's, on every rank
    back = gather_slices(slices)
    assert torch.equal(back["input_ids"], whole["input_ids"])
    assert torch.equal(back["position_ids"], whole["position_ids"])
    want = shift_labels(whole["labels"].numpy(), whole["cu_seqlens_padded"].numpy())
    assert back["shift_labels"].reshape(-1).tolist() == want.tolist()


@pytest.mark.parametrize("align", [2, 4, 6, 8])
def test_the_aligned_batch_holds_every_sample_as_the_plain_one(align: int) -> None:
    samples = random_samples(align, 20)
    rows = random_rows(align, samples, 120, align)
    plain = PackedCollate(120)(samples, rows=rows)
    aligned = PackedCollate(120, align=align)(samples, rows=rows)
    cu_real, cu_pad = aligned["cu_seqlens"].numpy(), aligned["cu_seqlens_padded"].numpy()
    assert (np.diff(cu_pad) % align == 0).all()
    got_ids, got_pos, got_lab = [], [], []
    flat = {k: aligned[k].reshape(-1) for k in ("input_ids", "position_ids", "labels")}
    for start, real in zip(cu_pad[:-1], np.diff(cu_real), strict=True):
        got_ids.append(flat["input_ids"][start : start + real])
        got_pos.append(flat["position_ids"][start : start + real])
        got_lab.append(flat["labels"][start : start + real])
        pad = slice(start + real, None if start == cu_pad[-2] else cu_pad[cu_pad > start][0])
        assert (flat["labels"][pad] == -100).all()  # alignment padding has no target
    want_ids = [plain["input_ids"].reshape(-1)[a:b] for a, b in _segments(plain)]
    want_pos = [plain["position_ids"].reshape(-1)[a:b] for a, b in _segments(plain)]
    want_lab = [plain["labels"].reshape(-1)[a:b] for a, b in _segments(plain)]
    real_segments = [i for i, x in enumerate(got_ids) if (x != 0).any()]
    assert [got_ids[i].tolist() for i in real_segments] == [x.tolist() for x in want_ids]
    assert [got_pos[i].tolist() for i in real_segments] == [x.tolist() for x in want_pos]
    assert [got_lab[i].tolist() for i in real_segments] == [x.tolist() for x in want_lab]


def _segments(batch: dict[str, Any]) -> list[tuple[int, int]]:
    """The sample segments of a plain packed batch (tail padding, all pad ids, left out)."""
    cu = batch["cu_seqlens"].tolist()
    ids = batch["input_ids"].reshape(-1)
    return [(a, b) for a, b in itertools.pairwise(cu) if (ids[a:b] != 0).any()]


@pytest.mark.parametrize("kind", ["cp", "sp"])
def test_shift_labels_give_each_token_the_target_a_models_shift_gives_it(kind: str) -> None:
    samples = random_samples(7, 30)
    rows = random_rows(7, samples, 64, 4)
    plain = PackedCollate(64)(samples, rows=rows)
    want = Counter()
    ids, lab = plain["input_ids"], plain["labels"]
    for r in range(ids.shape[0]):  # what a Hugging Face causal LM scores: labels[i + 1]
        for i in range(ids.shape[1] - 1):
            if lab[r, i + 1] != -100:
                want[(int(ids[r, i]), int(lab[r, i + 1]))] += 1
    if kind == "cp":
        full = PackedCollate(64, align=4)
        slices = [ContextParallelCollate(full, 2, r)(samples, rows=rows) for r in range(2)]
    else:
        full = PackedCollate(64)
        slices = [SequenceParallelCollate(full, 4, r)(samples, rows=rows) for r in range(4)]
    got = Counter()
    for s in slices:
        keep = s["shift_labels"] != -100
        pairs = zip(s["input_ids"][keep].tolist(), s["shift_labels"][keep].tolist(), strict=True)
        got.update(pairs)
    assert got == want and sum(want.values()) > 100


@pytest.mark.parametrize("sp", [1, 2, 4])
def test_sp_slices_are_contiguous_and_carry_the_whole_batchs_boundaries(sp: int) -> None:
    samples = random_samples(sp, 25)
    rows = random_rows(sp, samples, 64, 1)
    full = PackedCollate(64)
    whole = full(samples, rows=rows)
    slices = [SequenceParallelCollate(full, sp, r)(samples, rows=rows) for r in range(sp)]
    for r, s in enumerate(slices):
        w = 64 // sp
        assert torch.equal(s["input_ids"], whole["input_ids"][:, r * w : (r + 1) * w])
        assert torch.equal(s["position_ids"], whole["position_ids"][:, r * w : (r + 1) * w])
        assert torch.equal(s["cu_seqlens"], whole["cu_seqlens"])
    back = gather_slices(slices)
    assert torch.equal(back["input_ids"], whole["input_ids"])
    want = shift_labels(whole["labels"].numpy(), whole["cu_seqlens"].numpy())
    assert back["shift_labels"].reshape(-1).tolist() == want.tolist()


def test_3d_positions_token_types_and_media_follow_the_slice() -> None:
    samples = random_samples(3, 10)
    rows = random_rows(3, samples, 64, 4)
    whole = PackedCollate(64, align=4)(samples, rows=rows)
    pos = whole["position_ids"]
    whole["position_ids"] = torch.stack([pos, pos * 2, pos * 3 + 1, pos * 5])  # (4, rows, w)
    whole["mm_token_type_ids"] = (whole["input_ids"] % 3).clone()
    whole["pixel_values"] = torch.randn(7, 12)
    whole["image_grid_thw"] = torch.tensor([[1, 2, 2]])
    slices = [
        ContextParallelCollate(PackedCollate(64, align=4), 2, r).cut(dict(whole)) for r in range(2)
    ]
    for s in slices:
        assert s["position_ids"].shape == (4, len(rows), 32)
        assert s["pixel_values"] is whole["pixel_values"]  # images whole on every rank
        assert torch.equal(s["full_input_ids"], whole["input_ids"])
        flat = whole["position_ids"].reshape(4, -1)[:, s["token_index"]]
        assert torch.equal(s["position_ids"].reshape(4, -1), flat)
    back = gather_slices(slices)
    assert torch.equal(back["position_ids"], whole["position_ids"])
    assert torch.equal(back["mm_token_type_ids"], whole["mm_token_type_ids"])
    # text-only batches carry no full_input_ids
    text = ContextParallelCollate(PackedCollate(64, align=4), 2, 0)(samples, rows=rows)
    assert "full_input_ids" not in text


def test_thd_params_name_the_whole_batchs_boundaries_as_transformer_engine_does() -> None:
    samples = random_samples(4, 8)
    b = ContextParallelCollate(PackedCollate(64, align=4), 2, 1)(samples, rows=[8])
    p = thd_params(b)
    assert p["qkv_format"] == "thd"
    assert torch.equal(p["cu_seqlens_q"], b["cu_seqlens"])
    assert torch.equal(p["cu_seqlens_kv_padded"], b["cu_seqlens_padded"])
    assert p["max_seqlen_q"] == int(b["max_seqlen"])
    # each sequence's two chunks lie at cu_seqlens_padded / cp in the rank's flattened tokens
    local = (b["cu_seqlens_padded"] // 2).tolist()
    index = b["token_index"]
    for start, end in itertools.pairwise(local):
        seg = index[start:end]
        assert len(seg) and bool((seg[: len(seg) // 2].diff() == 1).all())


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: ContextParallelCollate(PackedCollate(64, align=2), 2, 0), "align=4"),
        (
            lambda: ContextParallelCollate(PackedCollate(64), 4, 0),
            "PackedCollate\\(..., align=8\\)",
        ),
        (
            lambda: ContextParallelCollate(PackedCollate(64, align=4, block_mask=True), 2, 0),
            "block_attention_mask",
        ),
        (
            lambda: ContextParallelCollate(PackedPreferenceCollate(64, align=4), 2, 0),
            "cuts the rows of chute.PackedCollate",
        ),
        (lambda: ContextParallelCollate(PackedCollate(64, align=4), 2, 2), r"\[0, cp_size=2\)"),
        (lambda: SequenceParallelCollate(PackedCollate(60), 8, 0), "max_length=64"),
        (
            lambda: SequenceParallelCollate(
                PackedCollate(64, pad_to_max_length=False, pad_to_multiple_of=6), 4, 0
            ),
            "pad_to_multiple_of=12",
        ),
    ],
)
def test_layouts_that_cannot_be_sliced_are_refused_with_the_fix(make: Any, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        make()


def test_media_collate_inside_is_sliced_too() -> None:
    samples = [
        {"input_ids": np.arange(1, 9), "pixel_values": [np.ones((3, 2, 2), np.float32)]},
        {"input_ids": np.arange(20, 25)},
    ]
    cut = ContextParallelCollate(MediaCollate(PackedCollate(16, align=4)), 2, 0)
    b = cut(samples, rows=[2])
    assert b["input_ids"].shape == (1, 8) and b["pixel_values"].shape == (1, 3, 2, 2)
    assert b["full_input_ids"][0, :8].tolist() == list(range(1, 9))


# -- through the Loader --------------------------------------------------------------------------


def id_data(n: int = 60) -> list[dict[str, Any]]:
    return [{"input_ids": [i + 1] * (1 + (i * 7) % 23)} for i in range(n)]


def test_loader_slices_cp_aligns_the_plan_and_gives_each_rank_its_slice() -> None:
    data = id_data()
    kw: dict[str, Any] = {"batch_size": 2, "plan": "packed", "plan_options": {"max_length": 32}}
    whole = Loader(
        data,
        world=World(0, 2, cp=2),
        plan_options={"max_length": 32, "align": 4},
        **{k: v for k, v in kw.items() if k != "plan_options"},
    )
    cut = [Loader(data, world=World(r, 2, cp=2), slices="cp", **kw) for r in range(2)]
    assert cut[0].planner.params()["align"] == 4  # 2 x cp, set by slices="cp"
    assert len(cut[0]) == len(cut[1]) == len(whole)
    for w, *parts in zip(whole, *cut, strict=True):
        assert all(torch.equal(p["sample_ids"], w["sample_ids"]) for p in parts)
        assert torch.equal(gather_slices(parts)["input_ids"], w["input_ids"])


def test_loader_slices_sp_gives_contiguous_slices() -> None:
    data = id_data()
    kw: dict[str, Any] = {"batch_size": 1, "plan": "packed", "plan_options": {"max_length": 32}}
    whole = Loader(data, world=World(0, 1), **kw)
    cut = [Loader(data, world=World(r, 4, sp=4), slices="sp", **kw) for r in range(4)]
    for w, *parts in zip(whole, *cut, strict=True):
        assert torch.equal(torch.cat([p["input_ids"] for p in parts], dim=1), w["input_ids"])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"slices": "cp", "plan": "random"}, "use plan='packed'"),
        ({"slices": "tp", "plan": "packed"}, "slices must be 'cp'"),
        ({"slices": "cp", "plan": "packed", "world": World(0, 4, cp=2, sp=2)}, "at once"),
        (
            {"slices": "cp", "plan": "packed", "plan_options": {"max_length": 32, "align": 6}},
            "align=6 is not one",
        ),
        (
            {"slices": "cp", "plan": PackedPlanner(32, align=2)},
            "packs with align=2; build it with align=4",
        ),
        # rows are a multiple of 4 wide, but capped at max_length=66 once a row is that full
        # (found when the epoch reached such a row, mid-training)
        (
            {
                "slices": "sp",
                "plan": "packed",
                "plan_options": {"max_length": 66},
                "pad_to_multiple_of": 4,
                "world": World(0, 4, sp=4),
            },
            r"a full packed row is max_length=66 wide, not a multiple of 4; use max_length=68",
        ),
        (
            {"slices": "sp", "plan": "packed", "pad_to_multiple_of": 6, "world": World(0, 4, sp=4)},
            r"pad_to_multiple_of=6\); use pad_to_multiple_of=12",
        ),
    ],
)
def test_loader_refuses_what_it_cannot_slice(kwargs: dict[str, Any], match: str) -> None:
    kwargs.setdefault("world", World(0, 2, cp=2))
    if kwargs.get("plan") == "packed":
        kwargs.setdefault("plan_options", {"max_length": 32})
    with pytest.raises(ConfigError, match=match):
        Loader(id_data(), batch_size=1, **kwargs)

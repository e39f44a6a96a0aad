"""Training on the slices is training on the batch: a tiny causal LM (float32, CPU) gives the same
loss from context-parallel slices with ring attention, and from Ulysses slices, as from the whole
packed batch scored the usual way (``logits[i]`` against ``labels[i + 1]``).

Three controls show the check can fail: attention without the ring (each rank's own keys), labels
cut first and shifted after, and positions counted per slice instead of carried.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from chute.collate import PackedCollate  # noqa: E402
from chute.collate.slices import ContextParallelCollate, SequenceParallelCollate  # noqa: E402
from ring_reference import TinyLM, ring_loss, ulysses_loss, whole_loss  # noqa: E402

VOCAB = 300
TOLERANCE = 1e-6  # relative: float32 sums in another order (measured: under 2e-7)
WRONG = 1e-3  # relative: what the controls miss by (measured: 3e-3 to 2e-2)


def samples_and_rows(seed: int, width: int, align: int, n: int = 14) -> tuple[list[Any], list[int]]:
    rng = np.random.default_rng(seed)
    samples, rows, fill = [], [0], 0
    for _ in range(n):
        length = int(rng.integers(2, width // 2))
        ids = rng.integers(1, VOCAB, length)
        labels = ids.copy()
        labels[: int(rng.integers(0, length // 2 + 1))] = -100  # an untrained prompt
        room = -(-length // align) * align
        if fill + room > width:
            rows.append(0)
            fill = 0
        rows[-1] += 1
        fill += room
        samples.append({"input_ids": ids, "labels": labels})
    return samples, rows


@pytest.fixture(scope="module")
def model() -> TinyLM:
    return TinyLM(VOCAB, dim=32, heads=4, layers=2, seed=1)


@pytest.mark.parametrize("cp", [1, 2, 3, 4])
@pytest.mark.parametrize("seed", [0, 1])
def test_ring_attention_over_cp_slices_gives_the_whole_batchs_loss(
    model: TinyLM, cp: int, seed: int
) -> None:
    width = 48 * cp
    samples, rows = samples_and_rows(seed, width, 2 * cp)
    with torch.no_grad():
        want = whole_loss(model, PackedCollate(width)(samples, rows=rows))
        full = PackedCollate(width, align=2 * cp)
        slices = [ContextParallelCollate(full, cp, r)(samples, rows=rows) for r in range(cp)]
        got = ring_loss(model, slices)
    assert got == pytest.approx(want, rel=TOLERANCE)


@pytest.mark.parametrize("sp", [1, 2, 4])
def test_ulysses_over_sp_slices_gives_the_whole_batchs_loss(model: TinyLM, sp: int) -> None:
    samples, rows = samples_and_rows(sp, 96, 1)
    with torch.no_grad():
        batch = PackedCollate(96)(samples, rows=rows)
        want = whole_loss(model, batch)
        cut = [SequenceParallelCollate(PackedCollate(96), sp, r) for r in range(sp)]
        got = ulysses_loss(model, [c(samples, rows=rows) for c in cut])
    assert got == pytest.approx(want, rel=TOLERANCE)


def test_the_checks_fail_without_the_ring_with_late_shifts_or_local_positions(
    model: TinyLM,
) -> None:
    cp = 2
    samples, rows = samples_and_rows(5, 96, 2 * cp)
    full = PackedCollate(96, align=2 * cp)
    with torch.no_grad():
        want = whole_loss(model, PackedCollate(96)(samples, rows=rows))
        slices = [ContextParallelCollate(full, cp, r)(samples, rows=rows) for r in range(cp)]
        assert ring_loss(model, slices) == pytest.approx(want, rel=TOLERANCE)
        # each rank attending to its own chunks only
        assert abs(ring_loss(model, slices, exchange=False) - want) > WRONG * want
        # labels cut with the tokens, then shifted on each rank: targets across the cut are lost
        # and the chunk boundaries pair tokens with the wrong targets
        whole = full(samples, rows=rows)
        for s in slices:
            labels = whole["labels"].reshape(-1)[s["token_index"]].reshape(s["input_ids"].shape)
            late = torch.full_like(labels, -100)
            late[:, :-1] = labels[:, 1:]
            s["late_labels"] = late
        assert abs(ring_loss(model, slices, labels_key="late_labels") - want) > WRONG * want
        # positions counted on each rank's slice instead of the true positions
        local = [dict(s) for s in slices]
        for s in local:
            rows_, w = s["input_ids"].shape
            s["position_ids"] = torch.arange(w).repeat(rows_, 1)
        assert abs(ring_loss(model, local) - want) > WRONG * want


def test_a_hugging_face_model_scores_shift_labels_as_its_own_shift() -> None:
    """``labels=`` switches a Hugging Face model's loss on and ``shift_labels=`` is what it
    scores: with the slices' targets the loss is the packed batch's usual one; given as
    ``labels`` alone they would be shifted a second time."""
    transformers = pytest.importorskip("transformers")
    from chute.collate import hf_packed_inputs

    config = transformers.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        attn_implementation="sdpa",
    )
    with torch.random.fork_rng():
        torch.manual_seed(0)
        llama = transformers.LlamaForCausalLM(config).eval()
    samples, rows = samples_and_rows(9, 96, 4)
    with torch.no_grad():
        want = llama(**hf_packed_inputs(PackedCollate(96)(samples, rows=rows))).loss
        # cp 2 on one rank's view: the aligned rows, as whole slices of sp 1 would carry them
        aligned = ContextParallelCollate(PackedCollate(96, align=4), 1, 0)(samples, rows=rows)
        flat = {k: aligned[k].reshape(1, -1) for k in ("input_ids", "position_ids")}
        target = aligned["shift_labels"].reshape(1, -1)
        got = llama(**flat, labels=target, shift_labels=target, use_cache=False).loss
        twice = llama(**flat, labels=target, use_cache=False).loss
    assert float(got) == pytest.approx(float(want), rel=1e-5)
    assert abs(float(twice) - float(want)) > WRONG * float(want)

"""No packed sample attends to another: outputs packed equal outputs one sample at a time.

A small causal attention model (pure torch, CPU, two layers, learned positions read through
``position_ids``) runs three ways over the same samples:

1. each sample alone (the reference);
2. packed rows from ``PackedCollate`` with its block-diagonal mask (the SDPA route);
3. the flattened batch cut at ``cu_seqlens``, attention per segment (what flash-attn's varlen
   kernels compute).

Per-sample outputs agree within float tolerance; the negative controls (a plain causal mask, or
positions that do not restart) differ, so the comparison can fail. The loss with the packed
labels equals the loss of the samples alone, and a Hugging Face Llama fed the packed rows with
``position_ids`` (no attention mask) gives each sample the logits it gets alone.
"""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest
import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

from chute import PackedCollate
from chute.collate.packed import hf_packed_inputs
from chute.plan import PackedPlanner

VOCAB, DIM, HEADS = 64, 32, 4


class TinyLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(VOCAB, DIM)
        self.pos = nn.Embedding(64, DIM)
        self.qkv = nn.ModuleList(nn.Linear(DIM, 3 * DIM) for _ in range(2))
        self.proj = nn.ModuleList(nn.Linear(DIM, DIM) for _ in range(2))
        self.head = nn.Linear(DIM, VOCAB)

    def forward(self, ids: torch.Tensor, positions: torch.Tensor, attend) -> torch.Tensor:  # type: ignore[no-untyped-def]
        x = self.embed(ids) + self.pos(positions)
        for qkv, proj in zip(self.qkv, self.proj, strict=True):
            q, k, v = qkv(x).chunk(3, dim=-1)
            b, n, _ = q.shape
            q, k, v = (t.view(b, n, HEADS, -1).transpose(1, 2) for t in (q, k, v))
            x = x + proj(attend(q, k, v).transpose(1, 2).reshape(b, n, DIM))
        return self.head(x)


def causal(q, k, v):  # type: ignore[no-untyped-def]
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def masked(mask: torch.Tensor):  # type: ignore[no-untyped-def]
    return lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def varlen(cu_seqlens: torch.Tensor):  # type: ignore[no-untyped-def]
    """Attention over a (1, total) batch, causal within each [cu[i], cu[i+1]) and nowhere else."""
    bounds = cu_seqlens.tolist()

    def attend(q, k, v):  # type: ignore[no-untyped-def]
        parts = [causal(q[:, :, a:b], k[:, :, a:b], v[:, :, a:b]) for a, b in pairwise(bounds)]
        return torch.cat(parts, dim=2)

    return attend


@pytest.fixture(scope="module")
def packed() -> tuple[list[np.ndarray], dict, list[list[int]]]:
    """Samples of 1..20 tokens packed by the real planner into rows of 32."""
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 21, 24)
    samples = [rng.integers(1, VOCAB, n) for n in lengths]
    plan = PackedPlanner(32, batch_size=64, shuffle=False, lengths=lengths).build(
        24, epoch=0, world_size=1
    )
    ids, rows, _ = plan.layout(0, 0)
    batch = PackedCollate(32, block_mask=True)(
        [{"input_ids": samples[i]} for i in ids.tolist()], rows=rows.tolist()
    )
    starts = np.concatenate([[0], np.cumsum(rows)])
    members = [ids[a:b].tolist() for a, b in pairwise(starts)]
    return samples, batch, members


def outputs_per_sample(out: torch.Tensor, batch: dict, members: list[list[int]]) -> dict:
    """Each sample's output rows: its tokens sit back to back from the start of its row."""
    width = batch["input_ids"].shape[1]
    flat = out.reshape(-1, out.shape[-1])
    lengths = np.diff(batch["cu_seqlens"].numpy())
    per: dict[int, torch.Tensor] = {}
    segment = 0
    for r, row in enumerate(members):
        at = r * width
        for sample_id in row:
            per[sample_id] = flat[at : at + lengths[segment]]
            at += lengths[segment]
            segment += 1
        segment += at < (r + 1) * width  # the row's padding segment
    return per


def alone(model: TinyLM, tokens: np.ndarray) -> torch.Tensor:
    ids = torch.as_tensor(tokens, dtype=torch.int64)[None]
    return model(ids, torch.arange(len(tokens))[None], causal)[0]


@torch.no_grad()
def test_packed_rows_with_the_block_mask_equal_samples_alone(packed) -> None:  # type: ignore[no-untyped-def]
    samples, batch, members = packed
    model = TinyLM()
    out = model(batch["input_ids"], batch["position_ids"], masked(batch["block_attention_mask"]))
    per = outputs_per_sample(out, batch, members)
    assert sorted(per) == list(range(24)) and len(members) < 24  # rows really hold several
    for i, tokens in enumerate(samples):
        torch.testing.assert_close(per[i], alone(model, tokens), atol=1e-5, rtol=1e-5)


@torch.no_grad()
def test_varlen_attention_over_cu_seqlens_equals_samples_alone(packed) -> None:  # type: ignore[no-untyped-def]
    samples, batch, members = packed
    model = TinyLM()
    flat_ids, flat_pos = batch["input_ids"].reshape(1, -1), batch["position_ids"].reshape(1, -1)
    out = model(flat_ids, flat_pos, varlen(batch["cu_seqlens"]))
    per = outputs_per_sample(out, batch, members)
    for i, tokens in enumerate(samples):
        torch.testing.assert_close(per[i], alone(model, tokens), atol=1e-5, rtol=1e-5)
    blocked = model(
        batch["input_ids"], batch["position_ids"], masked(batch["block_attention_mask"])
    )
    torch.testing.assert_close(out.reshape(blocked.shape), blocked, atol=1e-5, rtol=1e-5)


@torch.no_grad()
def test_without_the_block_mask_or_restarting_positions_samples_leak(packed) -> None:  # type: ignore[no-untyped-def]
    samples, batch, members = packed
    model = TinyLM()
    leaky = outputs_per_sample(
        model(batch["input_ids"], batch["position_ids"], causal), batch, members
    )
    row_pos = torch.arange(batch["input_ids"].shape[1]).expand_as(batch["input_ids"])
    shifted = outputs_per_sample(
        model(batch["input_ids"], row_pos, masked(batch["block_attention_mask"])), batch, members
    )
    later = [row[1] for row in members if len(row) > 1]  # samples that follow another in a row
    for i in later:
        assert (leaky[i] - alone(model, samples[i])).abs().max() > 1e-3
        assert (shifted[i] - alone(model, samples[i])).abs().max() > 1e-3


@torch.no_grad()
def test_the_packed_loss_equals_the_loss_of_the_samples_alone(packed) -> None:  # type: ignore[no-untyped-def]
    samples, batch, _ = packed
    model = TinyLM()
    logits = model(batch["input_ids"], batch["position_ids"], masked(batch["block_attention_mask"]))
    # the usual causal-LM loss: logits at i predict labels[i + 1], -100 ignored
    packed_loss = F.cross_entropy(
        logits[:, :-1].reshape(-1, VOCAB), batch["labels"][:, 1:].reshape(-1), reduction="sum"
    )
    total = torch.zeros(())
    for tokens in samples:
        ids = torch.as_tensor(tokens, dtype=torch.int64)
        total += F.cross_entropy(alone(model, tokens)[:-1], ids[1:], reduction="sum")
    torch.testing.assert_close(packed_loss, total, atol=1e-3, rtol=1e-5)


@pytest.fixture(scope="module")
def llama():  # type: ignore[no-untyped-def]
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        attn_implementation="sdpa",
    )
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).eval()


@torch.no_grad()
def test_a_hugging_face_llama_sees_each_packed_sample_alone(packed, llama) -> None:  # type: ignore[no-untyped-def]
    samples, batch, members = packed
    rows = llama(
        input_ids=batch["input_ids"], position_ids=batch["position_ids"], use_cache=False
    ).logits
    flat = llama(**hf_packed_inputs(batch)).logits.reshape(rows.shape)
    per_row, per_flat = (outputs_per_sample(x, batch, members) for x in (rows, flat))
    for i, tokens in enumerate(samples):
        ref = llama(input_ids=torch.as_tensor(tokens, dtype=torch.int64)[None]).logits[0]
        torch.testing.assert_close(per_row[i], ref, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(per_flat[i], ref, atol=1e-4, rtol=1e-4)


@torch.no_grad()
def test_a_hugging_face_llama_with_its_kv_cache_on_lets_samples_leak(packed, llama) -> None:  # type: ignore[no-untyped-def]
    # why hf_packed_inputs sets use_cache=False: with a cache the packing check is skipped
    samples, batch, members = packed
    logits = llama(input_ids=batch["input_ids"], position_ids=batch["position_ids"]).logits
    per = outputs_per_sample(logits, batch, members)
    i = next(row[1] for row in members if len(row) > 1)
    ref = llama(input_ids=torch.as_tensor(samples[i], dtype=torch.int64)[None]).logits[0]
    assert (per[i] - ref).abs().max() > 1e-3


def test_a_placeholder_batchs_hugging_face_loss_is_zero_not_nan(llama) -> None:  # type: ignore[no-untyped-def]
    """A rank with nothing left in the last step gets a placeholder row (no target).

    Its loss through the model's own mean over no token was NaN in every log; with
    ``num_items_in_batch=1`` it is 0, and a batch with targets keeps its mean.
    """
    from chute import Loader, World

    data = [{"input_ids": list(range(1, 9))}]  # one sample, two ranks: rank 1 has none
    kw = {"batch_size": 1, "plan": "packed", "plan_options": {"max_length": 16}}
    (real,) = list(Loader(data, world=World(0, 2), **kw))
    (empty,) = list(Loader(data, world=World(1, 2), **kw))
    assert empty["sample_ids"].tolist() == [-1]
    inputs = hf_packed_inputs(empty)
    assert inputs["num_items_in_batch"] == 1
    loss = llama(**inputs).loss
    assert loss.item() == 0.0
    loss.backward()  # a gradient (all zero), so a DDP step meets every parameter
    assert all(p.grad is not None and not p.grad.isnan().any() for p in llama.parameters())
    llama.zero_grad()
    with torch.no_grad():
        inputs = hf_packed_inputs(real)
        assert "num_items_in_batch" not in inputs
        logits = llama(**inputs).logits[0, :8]
        mean = F.cross_entropy(logits[:-1], real["input_ids"][0, 1:8])
        torch.testing.assert_close(llama(**inputs).loss, mean)

"""A tiny causal LM (float32, CPU) run three ways: whole rows, ring attention over context-parallel
slices, and Ulysses over sequence-parallel slices. The ranks are simulated in one process.

Ring attention: each CP rank keeps its queries; keys and values travel around the ring (rank
``r`` sees the block of rank ``r - s`` at step ``s``) and the partial softmaxes merge by their
running maximum and sum, as ring attention and TransformerEngine's THD path do. Which keys a query
may see comes from the global token indices (``token_index``) and the whole batch's
``cu_seqlens_padded``: the same segment, not after the query. Ulysses: an all-to-all gives each
rank all tokens of ``heads / sp`` heads, attention runs over whole rows with the whole batch's
``cu_seqlens``, and a second all-to-all returns each rank its tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from chute.collate import loss_sum


class TinyLM(torch.nn.Module):
    """Embedding, ``layers`` pre-norm blocks (rotary attention, MLP), a head. Deterministic."""

    def __init__(self, vocab: int, dim: int = 32, heads: int = 4, layers: int = 2, seed: int = 0):
        super().__init__()
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            self.emb = torch.nn.Embedding(vocab, dim)
            self.blocks = torch.nn.ModuleList(
                torch.nn.ModuleDict(
                    {
                        "n1": torch.nn.LayerNorm(dim),
                        "qkv": torch.nn.Linear(dim, 3 * dim),
                        "out": torch.nn.Linear(dim, dim),
                        "n2": torch.nn.LayerNorm(dim),
                        "up": torch.nn.Linear(dim, 4 * dim),
                        "down": torch.nn.Linear(4 * dim, dim),
                    }
                )
                for _ in range(layers)
            )
            self.norm = torch.nn.LayerNorm(dim)
            self.head = torch.nn.Linear(dim, vocab)
            for block in self.blocks:  # sharper attention: which keys a query sees matters more
                block["qkv"].weight.data *= 4
            self.head.weight.data *= 4
        self.heads, self.dim = heads, dim

    def qkv(self, i: int, h: torch.Tensor, pos: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """``(q, k, v)`` of tokens ``h`` (``(T, dim)``) at positions ``pos``: ``(T, H, D)`` each."""
        block = self.blocks[i]
        q, k, v = block["qkv"](block["n1"](h)).split(self.dim, dim=-1)
        shape = (h.shape[0], self.heads, self.dim // self.heads)
        q, k, v = (t.reshape(shape) for t in (q, k, v))
        return rotary(q, pos), rotary(k, pos), v

    def post(self, i: int, h: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
        block = self.blocks[i]
        h = h + block["out"](attn.reshape(h.shape[0], self.dim))
        return h + block["down"](torch.nn.functional.gelu(block["up"](block["n2"](h))))

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(h))


def rotary(x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    freqs = 1.0 / (10000.0 ** (torch.arange(half, dtype=torch.float32) / half))
    angle = pos.to(torch.float32)[:, None] * freqs[None]
    cos, sin = angle.cos()[:, None], angle.sin()[:, None]
    a, b = x[..., :half], x[..., half:]
    return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)


def segments_of(cu: Sequence[int], total: int) -> torch.Tensor:
    """The segment of every token of the flattened batch, from cumulative offsets."""
    seg = np.zeros(total, dtype=np.int64)
    seg[np.asarray(cu[1:-1], dtype=np.int64)] = 1
    return torch.from_numpy(np.cumsum(seg))


def allowed(seg: torch.Tensor, q_at: torch.Tensor, k_at: torch.Tensor) -> torch.Tensor:
    """``(queries, keys)``: the key is in the query's segment and not after it."""
    return (seg[q_at][:, None] == seg[k_at][None, :]) & (k_at[None, :] <= q_at[:, None])


class Partial:
    """Online softmax over key blocks: running max, sum and weighted values per query and head."""

    def __init__(self, q: torch.Tensor):
        t, h, d = q.shape
        self.q, self.scale = q, d**-0.5
        self.m = torch.full((h, t), float("-inf"))
        self.s = torch.zeros(h, t)
        self.o = torch.zeros(h, t, d)

    def add(self, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> None:
        scores = torch.einsum("qhd,khd->hqk", self.q, k) * self.scale
        scores = scores.masked_fill(~mask[None], float("-inf"))
        m_new = torch.maximum(self.m, scores.amax(-1))
        safe = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
        p = torch.exp(scores - safe[..., None])
        keep = torch.exp(
            torch.where(torch.isinf(self.m), torch.full_like(self.m, -1e30), self.m) - safe
        )
        self.s = self.s * keep + p.sum(-1)
        self.o = self.o * keep[..., None] + torch.einsum("hqk,khd->hqd", p, v)
        self.m = m_new

    def result(self) -> torch.Tensor:
        return (self.o / self.s[..., None]).permute(1, 0, 2)  # (T, H, D)


def whole_loss(model: TinyLM, batch: dict[str, Any], embeds: torch.Tensor | None = None) -> float:
    """The loss of an unsliced packed batch, scored as a Hugging Face causal LM does
    (``logits[i]`` against ``labels[i + 1]`` in each row, mean over targets)."""
    ids, labels = batch["input_ids"], batch["labels"]
    rows, width = ids.shape
    pos = text_positions(batch).reshape(-1)
    seg = segments_of(batch.get("cu_seqlens_padded", batch["cu_seqlens"]).tolist(), rows * width)
    h = model.emb(ids.reshape(-1)) if embeds is None else embeds
    at = torch.arange(rows * width)
    for i in range(len(model.blocks)):
        q, k, v = model.qkv(i, h, pos)
        attn = torch.empty_like(q)
        for r in range(rows):  # segments never cross rows
            sl = slice(r * width, (r + 1) * width)
            part = Partial(q[sl])
            part.add(k[sl], v[sl], allowed(seg, at[sl], at[sl]))
            attn[sl] = part.result()
        h = model.post(i, h, attn)
    logits = model.logits(h).reshape(rows, width, -1)
    return float(
        torch.nn.functional.cross_entropy(
            logits[:, :-1].reshape(-1, logits.shape[-1]),
            labels[:, 1:].reshape(-1),
            ignore_index=-100,
        )
    )


def text_positions(batch: dict[str, Any]) -> torch.Tensor:
    """1-D positions (row 0 of Qwen-VL's ``(4, rows, width)``)."""
    pos = batch["position_ids"]
    return pos[0] if pos.ndim == 3 else pos


def ring_loss(
    model: TinyLM,
    slices: Sequence[dict[str, Any]],
    embeds: Sequence[torch.Tensor] | None = None,
    *,
    exchange: bool = True,
    labels_key: str = "shift_labels",
) -> float:
    """The loss of CP slices with ring attention; ``exchange=False`` keeps each rank's own keys
    only (what a model without the ring would compute)."""
    cp = len(slices)
    rows, local = slices[0]["input_ids"].shape
    width = local * cp
    seg = segments_of(slices[0]["cu_seqlens_padded"].tolist(), rows * width)
    at = [s["token_index"].reshape(rows, local) for s in slices]
    pos = [text_positions(s) for s in slices]
    h = [
        model.emb(s["input_ids"].reshape(-1)) if embeds is None else embeds[r]
        for r, s in enumerate(slices)
    ]
    for i in range(len(model.blocks)):
        qkv = [model.qkv(i, h[r], pos[r].reshape(-1)) for r in range(cp)]
        attn = [torch.empty_like(qkv[r][0]) for r in range(cp)]
        for row in range(rows):
            sl = slice(row * local, (row + 1) * local)
            for r in range(cp):
                part = Partial(qkv[r][0][sl])
                for step in range(cp if exchange else 1):
                    src = (r - step) % cp  # the block that reached rank r at this step
                    mask = allowed(seg, at[r][row], at[src][row])
                    part.add(qkv[src][1][sl], qkv[src][2][sl], mask)
                attn[r][sl] = part.result()
        h = [model.post(i, h[r], attn[r]) for r in range(cp)]
    total, count = torch.zeros(()), torch.zeros((), dtype=torch.int64)
    for r, s in enumerate(slices):
        part_sum, part_count = loss_sum(model.logits(h[r]), s[labels_key])
        total, count = total + part_sum, count + part_count
    return float(total / count)


def ulysses_loss(model: TinyLM, slices: Sequence[dict[str, Any]]) -> float:
    """The loss of SP slices with Ulysses: all-to-all to heads, attention over whole rows, back."""
    sp = len(slices)
    rows, local = slices[0]["input_ids"].shape
    width = local * sp
    heads = model.heads // sp
    cu = slices[0].get("cu_seqlens_padded", slices[0]["cu_seqlens"]).tolist()
    seg = segments_of(cu, rows * width)
    h = [model.emb(s["input_ids"].reshape(-1)) for s in slices]
    pos = [text_positions(s).reshape(-1) for s in slices]
    at = torch.arange(rows * width)
    for i in range(len(model.blocks)):
        qkv = [model.qkv(i, h[r], pos[r]) for r in range(sp)]
        out = [torch.empty_like(qkv[r][0]) for r in range(sp)]
        for g in range(sp):  # rank g after the all-to-all: every token, heads of group g
            hs = slice(g * heads, (g + 1) * heads)
            gathered = [
                torch.cat([qkv[r][j][:, hs].reshape(rows, local, heads, -1) for r in range(sp)], 1)
                for j in range(3)
            ]
            for row in range(rows):
                sl = slice(row * width, (row + 1) * width)
                q, k, v = (t[row] for t in gathered)
                part = Partial(q)
                part.add(k, v, allowed(seg, at[sl], at[sl]))
                res = part.result()  # (width, heads, D): back to the ranks that hold the tokens
                for r in range(sp):
                    out[r][row * local : (row + 1) * local, hs] = res[r * local : (r + 1) * local]
        h = [model.post(i, h[r], out[r]) for r in range(sp)]
    total, count = torch.zeros(()), torch.zeros((), dtype=torch.int64)
    for r, s in enumerate(slices):
        part_sum, part_count = loss_sum(model.logits(h[r]), s["shift_labels"])
        total, count = total + part_sum, count + part_count
    return float(total / count)

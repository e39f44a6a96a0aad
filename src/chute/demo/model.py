"""A tiny vision-language causal LM in pure torch, for ``chute demo`` (a few hundred K params).

It consumes exactly what a packed chute batch carries: ``input_ids``, ``labels`` (each packed
sample's first label is -100), ``position_ids`` (restarting at 0 for every sample, which is
how the model keeps samples apart: attention is causal *within* a sample only; of Qwen-VL's
``(4, rows, width)`` multimodal positions it reads row 0, the 1-D text positions), and, for
multimodal data, ``pixel_values`` whose features replace the image tokens in order, in either
layout chute's media stages make:

* ``(images, 3, H, W)``: fixed-size images (LLaVA, a fixed ``image_tokens``); each image is
  pooled to a grid of ``tokens_per_image`` cells;
* ``(patches, 3 * temporal_patch * patch**2)`` with ``image_grid_thw``: Qwen2-VL dynamic
  resolution; every ``merge_size**2`` consecutive patches (one merge window) make one feature,
  as many as the recipe counted image tokens.

Example:
    >>> import torch
    >>> model = TinyVLM(vocab_size=50, image_token_id=None, max_length=16)
    >>> batch = {"input_ids": torch.randint(0, 50, (2, 16)), "labels": torch.randint(0, 50, (2, 16)),
    ...          "position_ids": torch.arange(16).repeat(2, 1)}
    >>> model.loss(batch).ndim
    0
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812 (the universal spelling)
from torch import nn

__all__ = ["TinyVLM", "segment_mask"]


def segment_mask(position_ids: torch.Tensor) -> torch.Tensor:
    """Causal attention inside each packed sample: ``(B, 1, T, T)`` bools, True = may attend.

    A new sample starts wherever ``position_ids`` is 0, so token ``i`` sees token ``j`` only
    when ``j <= i`` and no sample starts in ``(j, i]``.
    """
    segments = torch.cumsum(position_ids == 0, dim=1)
    same = segments[:, :, None] == segments[:, None, :]
    t = position_ids.shape[1]
    causal = torch.ones(t, t, dtype=torch.bool, device=position_ids.device).tril()
    return (same & causal)[:, None]


class _Block(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.out = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, d // self.heads).unbind(2)
        y = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask
        )
        x = x + self.out(y.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.norm2(x))


class TinyVLM(nn.Module):
    """Embeddings, ``layers`` pre-norm transformer blocks, a tied output head.

    Args:
        vocab_size: token ids the data uses (the tokenizer's vocabulary).
        buckets: the model's own vocabulary. A real tokenizer has 32k-150k ids, which would make
            the embedding (and the logits of every step) far bigger than a tiny demo model, so
            ids are folded into ``buckets`` rows (``id % buckets``) for the inputs and the
            targets alike. A toy, not a technique for real models.
        image_token_id: the id whose positions take image features (``None``: text only).
        tokens_per_image: image features per fixed-size image (a grid of patches of the image).
        merge_size: patches per side merged into one feature, for dynamic-resolution patches
            (the recipe's ``DynamicImageTokens.merge_size``).
        max_length: the longest row (positions).
        dim, layers, heads: model size.
    """

    def __init__(
        self,
        vocab_size: int,
        image_token_id: int | None,
        tokens_per_image: int = 4,
        max_length: int = 256,
        merge_size: int = 2,
        dim: int = 96,
        layers: int = 2,
        heads: int = 4,
        buckets: int = 4096,
    ):
        super().__init__()
        self.image_token_id = image_token_id
        self.vocab = min(vocab_size, buckets)
        self.grid = _grid(tokens_per_image)
        self.merge = merge_size * merge_size
        self.embed = nn.Embedding(self.vocab, dim)
        self.positions = nn.Embedding(max_length, dim)
        self.patch = nn.Linear(3 * 4, dim)  # each image feature: a 2x2 RGB cell of its patch
        self.blocks = nn.ModuleList(_Block(dim, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        for module in self.modules():  # GPT-2's small init: tied logits start near uniform
            if isinstance(module, nn.Linear | nn.Embedding):
                nn.init.normal_(module.weight, std=0.02)

    def image_features(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """Image pixels -> ``(features, dim)``, one feature per image token, in order.

        ``(images, C, H, W)`` gives ``images * tokens_per_image`` features (row-major cells);
        ``(patches, C * temporal_patch * patch**2)`` gives ``patches // merge_size**2``.
        """
        x = pixel_values.float()
        if x.ndim == 2:  # dynamic resolution: each row one patch, merge windows consecutive
            patches, width = x.shape
            if patches % self.merge or width % 3:
                raise ValueError(
                    f"pixel_values of shape {tuple(x.shape)}: expected (patches, 3 * k) with "
                    f"patches a multiple of merge_size**2 = {self.merge}; pass the model the "
                    "recipe's merge_size"
                )
            # each patch: 4 features per colour channel (its pixels pooled in 4 runs)
            cells = F.adaptive_avg_pool1d(x.view(patches, 3, width // 3), 4).reshape(-1, 12)
            return self.patch(cells.view(-1, self.merge, 12).mean(dim=1))
        if x.ndim != 4:
            raise ValueError(
                f"pixel_values of shape {tuple(x.shape)}: expected (images, 3, H, W) or "
                "(patches, 3 * temporal_patch * patch**2)"
            )
        gh, gw = self.grid
        pooled = F.adaptive_avg_pool2d(x, (2 * gh, 2 * gw))
        cells = pooled.unfold(2, 2, 2).unfold(3, 2, 2)  # (N, C, gh, gw, 2, 2)
        cells = cells.permute(0, 2, 3, 1, 4, 5).reshape(-1, 3 * 4)
        return self.patch(cells)

    def forward(self, batch: dict[str, Any]) -> torch.Tensor:
        ids, positions = batch["input_ids"], batch["position_ids"]
        if positions.ndim == 3:  # Qwen-VL's (4, rows, width): row 0 holds the 1-D text positions
            positions = positions[0]
        x = self.embed(ids % self.vocab)
        if self.image_token_id is not None and "pixel_values" in batch:
            slots = ids == self.image_token_id
            features = self.image_features(batch["pixel_values"])
            if int(slots.sum()) == len(features):  # chute guarantees it; a model should check
                x = x.masked_scatter(slots[..., None], features.to(x.dtype))
        x = x + self.positions(positions.clamp(max=self.positions.num_embeddings - 1))
        mask = segment_mask(positions)
        for block in self.blocks:
            x = block(x, mask)
        return self.norm(x) @ self.embed.weight.T

    def loss(self, batch: dict[str, Any]) -> torch.Tensor:
        """Mean next-token loss over trained labels (0 for a batch without any)."""
        logits = self(batch)[:, :-1]
        labels = batch["labels"][:, 1:]
        labels = torch.where(labels == -100, labels, labels % self.vocab)
        total = F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]),
            labels.reshape(-1),
            ignore_index=-100,
            reduction="sum",
        )
        return total / (labels != -100).sum().clamp(min=1)


def _grid(tokens: int) -> tuple[int, int]:
    rows = max(d for d in range(1, math.isqrt(tokens) + 1) if tokens % d == 0)
    return rows, tokens // rows

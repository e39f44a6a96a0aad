r"""Packed collation: several samples per row, with what attention needs to keep them apart.

Three samples packed into two rows of ``max_length = 8`` (``P`` pad, ``-`` label -100)::

    rows          [a1 a2 a3 b1 b2 P  P  P ]   [c1 c2 c3 c4 c5 c6 c7 c8]
    labels        [-  a2 a3 -  b2 -  -  - ]   [-  c2 c3 c4 c5 c6 c7 c8]
    position_ids  [0  1  2  0  1  0  1  2 ]   [0  1  2  3  4  5  6  7 ]
    cu_seqlens    [0, 3, 5, 8, 16]            (over the flattened batch: a, b, padding, c)
    max_seqlen    8
    sample_ids    [[7, 2], [5]] as row_sample_ids [[7, 2], [5, -1]]; flat [7, 2, 5]

    block_attention_mask (row 0; 1 = may attend):
         a1 a2 a3 b1 b2 P  P  P
    a1 [ 1                      ]
    a2 [ 1  1                   ]
    a3 [ 1  1  1                ]
    b1 [          1             ]
    b2 [          1  1          ]
    P  [                1       ]
    P  [                1  1    ]
    P  [                1  1  1 ]

- ``position_ids`` restart at 0 for every sample (and for the padding tail, which is a segment
  of its own), so rotary embeddings see each sample exactly as if it were alone.
- ``labels`` are the recipe's labels, with the **first token of every sample set to -100**. The
  model shifts labels (logits at ``i`` predict ``labels[i + 1]``), so this stops the last token of
  one sample from being trained to predict the first token of the next. Unpacked training never
  uses a first token as a target either, so the loss is the same as one sample per row.
- ``cu_seqlens`` (int32) and ``max_seqlen`` are flash-attn's varlen arguments over the batch
  flattened to ``(rows * width)`` tokens; every boundary is a position where ``position_ids`` is 0.
- ``block_attention_mask`` (``block_mask=True``; bool ``(rows, 1, width, width)``, True = attend)
  is for ``torch.nn.functional.scaled_dot_product_attention(attn_mask=...)``. It costs
  ``rows x width^2`` bytes, so it is off by default.

With ``align=k`` (context parallelism: ``k = 2 * cp``) every sample is padded to a multiple of
``k`` tokens inside its own segment, so it cuts into ``2 * cp`` equal chunks; the padding
continues the sample's positions and has no target. ``cu_seqlens`` then counts the real tokens of
each segment and ``cu_seqlens_padded`` its padded extent, as TransformerEngine's THD attention
takes them (``cu_seqlens_q`` and ``cu_seqlens_q_padded``); offsets into the flattened rows are
``cu_seqlens_padded``. ``align=4``, ``max_length=12``::

    rows               [a1 a2 a3 a4 a5 .  .  .  b1 b2 .  . ]      . alignment padding
    position_ids       [0  1  2  3  4  5  6  7  0  1  2  3 ]
    cu_seqlens         [0, 5, 7]          real tokens of a, b
    cu_seqlens_padded  [0, 8, 12]         where a and b lie in the row

There is deliberately no 2-D ``attention_mask``: given one, Hugging Face models build a padding
mask that lets packed samples attend to each other. Without it, with ``position_ids`` and
``use_cache=False``, they detect the packing themselves (see ``hf_packed_inputs`` and
``docs/padding.md``).

Example:
    >>> import numpy as np
    >>> collate = PackedCollate(max_length=8, pad_id=0)
    >>> batch = collate([{"input_ids": np.array([1, 2, 3])}, {"input_ids": np.array([4, 5])},
    ...                  {"input_ids": np.arange(10, 18)}], rows=[2, 1])
    >>> batch["position_ids"].tolist()
    [[0, 1, 2, 0, 1, 0, 1, 2], [0, 1, 2, 3, 4, 5, 6, 7]]
    >>> batch["labels"][0].tolist(), batch["cu_seqlens"].tolist(), int(batch["max_seqlen"])
    ([-100, 2, 3, -100, 5, -100, -100, -100], [0, 3, 5, 8, 16], 8)
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from chute._internal.lazy_torch import require_torch
from chute.collate.padded import IGNORE_INDEX
from chute.errors import ConfigError
from chute.media.positions import MRopePositions
from chute.plan.base import check_positive

__all__ = [
    "PackedCollate",
    "add_mrope",
    "flatten_packed",
    "hf_packed_inputs",
    "row_sample_ids",
]

log = logging.getLogger("chute.collate")


# input_ids, labels, position_ids (rows x width), cu_seqlens, max_seqlen, segment lengths,
# real tokens of each segment (equal to the lengths unless samples are aligned)
_Layout = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int, np.ndarray, np.ndarray]


class PackedCollate:
    """Packs samples into rows (``rows[i]`` samples in row ``i``) as int64 tensors.

    Args:
        max_length: tokens per row; longer rows are cut (and logged once).
        pad_id: the token id of padding.
        pad_to_max_length: every row is ``max_length`` wide (static shapes); ``False``: as
            wide as the fullest row of the batch (rounded up to ``pad_to_multiple_of``).
        pad_to_multiple_of: with ``pad_to_max_length=False``, round the width up to this.
        block_mask: also return ``block_attention_mask`` for SDPA.
        label_pad_id: the label of padding and of each sample's first token.
        positions: a ``chute.media.positions.MRopePositions`` (Qwen2/2.5/3-VL): then
            ``position_ids`` is ``(4, rows, width)``, a 1-D text row above the 3-D positions of
            each sample (restarting per sample), and ``mm_token_type_ids`` (0 text, 1 image, 2
            video) is added. The Loader sets it from the recipe's ``image_tokens`` family.
        align: pad every sample to a multiple of ``align`` tokens within its segment and add
            ``cu_seqlens_padded`` (see the module docstring); ``max_length`` must be a
            multiple. Pack with ``PackedPlanner(align=...)`` so rows keep room for it.
    """

    packed = True

    def __init__(
        self,
        max_length: int,
        pad_id: int = 0,
        *,
        pad_to_max_length: bool = True,
        pad_to_multiple_of: int | None = None,
        block_mask: bool = False,
        label_pad_id: int = IGNORE_INDEX,
        positions: MRopePositions | None = None,
        align: int = 1,
    ):
        self.max_length = check_positive("max_length", max_length)
        self.align = check_positive("align", align)
        if self.max_length % self.align:
            raise ConfigError(
                f"max_length={self.max_length} is not a multiple of align={self.align}: rows "
                f"hold samples padded to multiples of align; use max_length="
                f"{-(-self.max_length // self.align) * self.align}",
                param="max_length",
            )
        self.positions = positions
        if isinstance(pad_id, bool) or not isinstance(pad_id, int | np.integer) or pad_id < 0:
            raise ConfigError(f"pad_id must be a token id (an int >= 0), got {pad_id!r}")
        self.pad_id = int(pad_id)
        self.pad_to_max_length = bool(pad_to_max_length)
        self.multiple = (
            1
            if pad_to_multiple_of is None
            else check_positive("pad_to_multiple_of", pad_to_multiple_of)
        )
        self.block_mask = bool(block_mask)
        self.label_pad_id = int(label_pad_id)
        self._warned = False

    def _width(self, fullest: int) -> int:
        if self.pad_to_max_length:
            return self.max_length
        step = math.lcm(self.multiple, self.align)
        return min(self.max_length, max(step, -(-fullest // step) * step))

    def room(self, lens: np.ndarray) -> np.ndarray:
        """The tokens each sample takes in its row: its length rounded up to ``align``."""
        return lens if self.align == 1 else -(-lens // self.align) * self.align

    def __call__(
        self, samples: Sequence[Mapping[str, Any]], rows: Sequence[int] | None = None
    ) -> dict[str, Any]:
        sizes = (
            np.ones(len(samples), dtype=np.int64)
            if rows is None
            else np.asarray(rows, dtype=np.int64)
        )
        if int(sizes.sum()) != len(samples) or (sizes < 0).any():
            raise ConfigError(
                f"rows must give the number of samples in each row ({len(samples)} in all), "
                f"got {sizes.tolist()}"
            )
        sizes = sizes[sizes > 0]
        if not len(samples):
            return self.placeholder()
        ids = [np.asarray(s["input_ids"]) for s in samples]
        labels = [np.asarray(s.get("labels", s["input_ids"])) for s in samples]
        lens = np.fromiter((len(x) for x in ids), dtype=np.int64, count=len(ids))
        row_of = np.repeat(np.arange(len(sizes)), sizes)
        lens = self._fit(lens, row_of, len(sizes))
        layout, flat = self._layout(ids, labels, lens, row_of, len(sizes))
        batch = self._tensors(*layout)
        if self.positions is not None:
            add_mrope(batch, self.positions, samples, lens, flat)
        return batch

    def _fit(self, lens: np.ndarray, row_of: np.ndarray, num_rows: int) -> np.ndarray:
        """Cut samples so no row holds more than ``max_length`` tokens.

        A plan gives a sample longer than a row a row of its own, to be cut here (its
        ``overflow="truncate"``); a row of several samples that overflows means the plan's
        lengths were not the samples' (warned once).
        """
        room = self.room(lens)
        ends = np.cumsum(room)
        per_row = np.bincount(row_of, minlength=num_rows)
        first = np.concatenate([[0], np.cumsum(per_row)[:-1]])
        start_in_row = ends - room - (ends - room)[first][row_of]  # each sample's first column
        fitted = np.clip(np.minimum(lens, self.max_length - start_in_row), 0, None)
        unplanned = (fitted < lens) & (per_row[row_of] > 1)
        if unplanned.any() and not self._warned:
            self._warned = True
            log.warning(
                "a packed row held more than max_length=%d tokens (samples longer than the plan's "
                "lengths: a non-deterministic recipe, or lengths from another recipe?); the row "
                "was cut to fit",
                self.max_length,
            )
        return fitted

    def _layout(
        self,
        ids: list[np.ndarray],
        labels: list[np.ndarray],
        lens: np.ndarray,
        row_of: np.ndarray,
        num_rows: int,
    ) -> tuple[_Layout, np.ndarray]:
        """The batch arrays, and where each kept token went in the flattened rows."""
        room = self.room(lens)  # the sample's extent in its row (lens unless aligned)
        row_fill = np.bincount(row_of, weights=room, minlength=num_rows).astype(np.int64)
        width = self._width(int(row_fill.max()))
        starts = np.cumsum(lens) - lens  # each sample's first token in the concatenation
        spans = np.cumsum(room) - room  # each sample's first column in the concatenated rows
        first = np.concatenate([[0], np.cumsum(np.bincount(row_of, minlength=num_rows))[:-1]])
        in_row = spans - spans[first][row_of]  # each sample's offset within its row
        total = int(lens.sum())
        local = np.arange(total, dtype=np.int64) - np.repeat(starts, lens)  # position in sample
        flat = np.repeat(row_of * width + in_row, lens) + local
        tokens = np.concatenate([x[:n] for x, n in zip(ids, lens.tolist(), strict=True)])
        targets = np.concatenate([x[:n] for x, n in zip(labels, lens.tolist(), strict=True)])
        targets = targets.astype(np.int64)
        targets[starts[lens > 0]] = self.label_pad_id  # no target across a sample boundary
        input_ids = np.full(num_rows * width, self.pad_id, dtype=np.int64)
        input_ids[flat] = tokens
        label_arr = np.full(num_rows * width, self.label_pad_id, dtype=np.int64)
        label_arr[flat] = targets
        column = np.arange(width, dtype=np.int64)
        positions = np.where(column < row_fill[:, None], 0, column - row_fill[:, None]).ravel()
        if self.align == 1:
            positions[flat] = local
        else:  # alignment padding continues its sample's positions
            extent = int(room.sum())
            padded = np.arange(extent, dtype=np.int64) - np.repeat(spans, room)
            positions[np.repeat(row_of * width + in_row, room) + padded] = padded
        pad = width - row_fill  # each row's padding tail: a segment of its own
        seg_rows = np.concatenate([row_of, np.arange(num_rows)])
        seg_lens = np.concatenate([room, pad])
        seg_real = np.concatenate([lens, pad])
        order = np.argsort(seg_rows * 2 + (np.arange(len(seg_rows)) >= len(lens)), kind="stable")
        seg_lens, seg_real = seg_lens[order], seg_real[order]
        keep = seg_lens > 0
        seg_lens, seg_real = seg_lens[keep], seg_real[keep]
        cu = np.concatenate([[0], np.cumsum(seg_lens)]).astype(np.int32)
        shape = (num_rows, width)
        layout = (
            input_ids.reshape(shape),
            label_arr.reshape(shape),
            positions.reshape(shape),
            cu,
            int(seg_lens.max()),
            seg_lens,
            seg_real,
        )
        return layout, flat

    def _placeholder(self) -> _Layout:
        """One row of padding without loss, standing for a batch with no valid sample."""
        width = self._width(1)
        seg = np.array([width], dtype=np.int64)
        return (
            np.full((1, width), self.pad_id, dtype=np.int64),
            np.full((1, width), self.label_pad_id, dtype=np.int64),
            np.arange(width, dtype=np.int64)[None, :],
            np.array([0, width], dtype=np.int32),
            width,
            seg,
            seg,
        )

    def _tensors(
        self,
        input_ids: np.ndarray,
        labels: np.ndarray,
        positions: np.ndarray,
        cu: np.ndarray,
        max_seqlen: int,
        seg_lens: np.ndarray,
        seg_real: np.ndarray,
    ) -> dict[str, Any]:
        torch = require_torch()
        batch = {
            "input_ids": torch.from_numpy(input_ids),
            "labels": torch.from_numpy(labels),
            "position_ids": torch.from_numpy(positions),
            "cu_seqlens": torch.from_numpy(cu),
            "max_seqlen": torch.tensor(max_seqlen, dtype=torch.int64),
        }
        if self.align > 1:  # TransformerEngine's pair: real tokens, and where they lie
            real = np.concatenate([[0], np.cumsum(seg_real)]).astype(np.int32)
            batch["cu_seqlens"] = torch.from_numpy(real)
            batch["cu_seqlens_padded"] = torch.from_numpy(cu)
        if self.block_mask:
            rows, width = input_ids.shape
            segment = np.repeat(np.arange(len(seg_lens)), seg_lens).reshape(rows, width)
            same = segment[:, :, None] == segment[:, None, :]
            causal = np.tril(np.ones((width, width), dtype=bool))
            batch["block_attention_mask"] = torch.from_numpy((same & causal)[:, None])
        return batch

    def placeholder(self) -> dict[str, Any]:
        batch = self._tensors(*self._placeholder())
        if self.positions is not None:
            add_mrope(batch, self.positions, [], np.zeros(0, np.int64), np.zeros(0, np.int64))
        return batch

    def __repr__(self) -> str:
        return (
            f"PackedCollate(max_length={self.max_length}, pad_id={self.pad_id}, "
            f"pad_to_max_length={self.pad_to_max_length}, block_mask={self.block_mask}"
            + (f", positions={self.positions!r}" if self.positions is not None else "")
            + (f", align={self.align}" if self.align > 1 else "")
            + ")"
        )


def add_mrope(
    batch: dict[str, Any],
    rule: MRopePositions,
    samples: Sequence[Mapping[str, Any]],
    lens: np.ndarray,
    flat: np.ndarray,
) -> None:
    """Each sample's 3-D positions (restarting per sample) under a leading text row.

    ``position_ids`` becomes ``(4, rows, width)``: row 0 the 1-D positions of the batch (what
    ``transformers``' Qwen-VL models read to keep packed samples apart), rows 1-3 time, height
    and width of each sample's first ``lens`` tokens, placed at ``flat`` in the flattened rows;
    the padding tail keeps its 1-D positions in all four. ``mm_token_type_ids`` (0 text, 1
    image, 2 video) is added beside it.
    """
    torch = require_torch()
    text = batch["position_ids"].numpy()
    rows = np.repeat(text.reshape(1, -1), 4, axis=0)
    types = np.zeros(text.size, dtype=np.int64)
    if len(samples):
        kept = lens.tolist()
        layouts = [rule.layout(s) for s in samples]
        rows[1:, flat] = np.concatenate(
            [p[:, :n] for (p, _), n in zip(layouts, kept, strict=True)], axis=1
        )
        types[flat] = np.concatenate([t[:n] for (_, t), n in zip(layouts, kept, strict=True)])
    batch["position_ids"] = torch.from_numpy(rows.reshape(4, *text.shape))
    batch["mm_token_type_ids"] = torch.from_numpy(types.reshape(text.shape))


def row_sample_ids(sample_ids: Sequence[int], rows: Sequence[int]) -> np.ndarray:
    """The sample ids of each row, padded with -1: ``([7, 2, 5], [2, 1]) -> [[7, 2], [5, -1]]``.

    Example:
        >>> row_sample_ids([7, 2, 5], [2, 1]).tolist()
        [[7, 2], [5, -1]]
    """
    sizes = np.asarray(rows, dtype=np.int64)
    sizes = sizes[sizes > 0]
    if not len(sizes):
        return np.full((1, 1), -1, dtype=np.int64)
    out = np.full((len(sizes), int(sizes.max())), -1, dtype=np.int64)
    col = np.arange(len(sample_ids)) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    out[np.repeat(np.arange(len(sizes)), sizes), col] = np.asarray(sample_ids, dtype=np.int64)
    return out


def hf_packed_inputs(batch: Mapping[str, Any]) -> dict[str, Any]:
    """A packed batch as keyword arguments for a Hugging Face causal LM, flattened to one row.

    ``input_ids``, ``labels`` and ``position_ids`` become ``(1, rows * width)`` (flash-attention-2
    in transformers detects packing only in a batch of one row), plus the varlen kwargs
    ``cu_seq_lens_q/k`` and ``max_length_q/k`` that transformers passes to flash-attn. No
    ``attention_mask``: with ``position_ids`` alone, SDPA and eager attention build the
    block-causal mask themselves, but only without a KV cache, so ``use_cache=False`` is set
    (with the default ``use_cache=True`` a model makes a cache even in training mode, skips the
    packing check, and lets the samples of a row attend to each other).

    Qwen-VL batches (``PackedCollate(positions=...)``): ``position_ids`` ``(4, rows, width)``
    becomes ``(4, 1, rows * width)`` and ``mm_token_type_ids`` ``(1, rows * width)``; the media
    keys (``pixel_values``, ``image_grid_thw``, ``pixel_values_videos``, ``video_grid_thw``,
    ``second_per_grid_ts``, ``image_sizes``) pass through unchanged.

    A batch with no target (a placeholder row) also gets ``num_items_in_batch=1``, so the
    model's loss is 0 there (its mean over no token would be NaN).

    Example:
        >>> out = model(**hf_packed_inputs(batch))  # doctest: +SKIP
    """
    if "cu_seqlens" not in batch or "max_seqlen" not in batch:
        raise ConfigError(
            "hf_packed_inputs takes a packed batch (plan='packed': rows with cu_seqlens and "
            "max_seqlen); a padded batch goes to the model as it is (model(**batch), without "
            "sample_ids)"
        )
    max_seqlen = int(batch["max_seqlen"])
    cu = batch.get("cu_seqlens_padded", batch["cu_seqlens"])  # offsets into the flattened rows
    out = flatten_packed({k: v for k, v in batch.items() if k in _PACKED_INPUTS})
    out.update(cu_seq_lens_q=cu, cu_seq_lens_k=cu, max_length_q=max_seqlen, max_length_k=max_seqlen)
    labels = out.get("labels")
    if labels is not None and not bool((labels[..., 1:] != IGNORE_INDEX).any()):
        # a batch with no target (the placeholder row of a rank with nothing left): the
        # model's mean loss over no token is NaN; a sum over no token divided by 1 is 0
        out["num_items_in_batch"] = 1
    return out


# The keys of a packed batch that a model takes (the rest is chute's bookkeeping).
_PACKED_INPUTS = frozenset(
    (
        "input_ids",
        "labels",
        "position_ids",
        "mm_token_type_ids",
        "pixel_values",
        "image_grid_thw",
        "pixel_values_videos",
        "video_grid_thw",
        "second_per_grid_ts",
        "image_sizes",
        "batch_num_images",  # LLaVA-OneVision: a sample with several images gets no tiles
    )
)


def flatten_packed(inputs: Mapping[str, Any]) -> dict[str, Any]:
    """The per-token keys of packed rows as one row (``(1, tokens)``), ``use_cache=False``.

    ``position_ids`` of 3-D positions (``(k, rows, width)``) become ``(k, 1, rows * width)``;
    every other key is passed on as it is.
    """
    out = dict(inputs)
    for key in ("input_ids", "labels", "mm_token_type_ids"):
        if key in out:
            out[key] = out[key].reshape(1, -1)
    positions = out.get("position_ids")
    if positions is not None:
        rows = positions.shape[0] if positions.ndim == 3 else None
        out["position_ids"] = (
            positions.reshape(1, -1) if rows is None else positions.reshape(rows, 1, -1)
        )
    out["use_cache"] = False
    return out

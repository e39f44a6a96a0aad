r"""Per-rank slices of packed batches: context parallelism (zig-zag, THD) and Ulysses (contiguous).

With context parallelism every rank of a ``cp`` group holds a slice of every sample and ring
attention (TransformerEngine's THD attention, ``flash-attn`` ring kernels) passes keys and values
around the group. Each sample, padded to a multiple of ``2 * cp`` tokens (``PackedCollate(align=
2 * cp)``), is cut into ``2 * cp`` equal chunks and CP rank ``r`` takes chunks ``r`` and
``2 * cp - 1 - r``, so every rank gets as much causal attention work as the others (the chunks
late in a sample attend to more keys; each rank gets one early and one late chunk)::

    one row, cp = 2: samples a (6 tokens + 2 alignment padding) and b (3 + 1), 12 columns

    row          [a0 a1 a2 a3 a4 a5 .  . |b0 b1 b2 . ]
    chunks        --0-- --1-- --2-- --3-- -0 -1 -2 -3          each sample: 4 chunks
    cp rank 0    [a0 a1 .  .  b0 .]     chunks 0 and 3 of a, then of b
    cp rank 1    [a2 a3 a4 a5 b1 b2]    chunks 1 and 2
    position_ids rank 0 [0 1 6 7 0 3], rank 1 [2 3 4 5 1 2]      the true positions

    cu_seqlens         [0, 6, 9]      real tokens of each sample (TE's cu_seqlens_q)
    cu_seqlens_padded  [0, 8, 12]     padded extents (TE's cu_seqlens_q_padded)
    these are the whole batch's, as TransformerEngine takes them; it divides by cp itself

This is the order of Megatron-LM's ``get_batch_on_this_cp_rank`` and of TransformerEngine's
``thd_get_partitioned_indices`` (``zigzag_index`` here). With sequence parallelism (DeepSpeed
Ulysses, as ms-swift and XTuner use it) each row is cut into ``sp`` contiguous slices instead; an
all-to-all then gives every rank all tokens of ``heads / sp`` heads, so attention takes the
whole batch's ``cu_seqlens``::

    sp = 2       row [a0 a1 a2 a3 a4 a5 b0 b1 b2 P  P  P ]
    sp rank 0        [a0 a1 a2 a3 a4 a5]     sp rank 1 [b0 b1 b2 P P P]

**Labels are shifted before the cut.** A causal LM scores the logits at ``i`` against the label
at ``i + 1``; once a sample is cut over ranks, ``i + 1`` may be on another rank. So slices carry
``shift_labels``: ``shift_labels[i]`` is the target of token ``i`` (the label of the token after
it in the same sample; -100 at a sample's last token and on padding), and no ``labels``. Score
them without shifting: ``loss_sum(logits, batch["shift_labels"])``, or pass them to a Hugging
Face model as ``shift_labels=`` (its loss then skips its own shift). Megatron-LM's ``labels``
follow the same convention.

**Images are never cut.** Vision embeddings are computed before the split, as Megatron-LM,
NeMo and ms-swift do for multimodal models with context parallelism: a batch with media keeps
``pixel_values`` (and grids) whole and adds ``full_input_ids`` (the unsliced rows); the model
embeds them, merges the image features at the image tokens, and keeps its tokens with
``embeddings.flatten(0, 1)[token_index]``. Moving an image span whole into one chunk cannot meet
THD's equal chunks (an image of 16k tokens does not fit a chunk of 4k).

Example:
    >>> import numpy as np
    >>> from chute.collate import PackedCollate
    >>> full = PackedCollate(12, align=4)
    >>> rank1 = ContextParallelCollate(full, cp_size=2, cp_rank=1)
    >>> b = rank1([{"input_ids": np.arange(1, 7)}, {"input_ids": np.array([7, 8, 9])}], rows=[2])
    >>> b["input_ids"].tolist(), b["position_ids"].tolist(), b["shift_labels"].tolist()
    ([[3, 4, 5, 6, 8, 9]], [[2, 3, 4, 5, 1, 2]], [[4, 5, 6, -100, 9, -100]])
    >>> b["cu_seqlens"].tolist(), b["cu_seqlens_padded"].tolist()
    ([0, 6, 9], [0, 8, 12])
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from chute._internal.lazy_torch import require_torch
from chute.collate.media import MediaCollate
from chute.collate.packed import PackedCollate
from chute.collate.padded import IGNORE_INDEX
from chute.errors import ConfigError

__all__ = [
    "ContextParallelCollate",
    "SequenceParallelCollate",
    "gather_slices",
    "loss_sum",
    "shift_labels",
    "thd_params",
    "zigzag_index",
]

# Keys with one value per token of the rows: sliced (position_ids may lead with a 3-D axis).
TOKEN_KEYS = ("input_ids", "shift_labels", "position_ids", "mm_token_type_ids")
_MEDIA_KEYS = ("pixel_values", "pixel_values_videos", "audio_values")


def zigzag_index(cu_seqlens_padded: Any, cp_size: int, cp_rank: int) -> np.ndarray:
    """The tokens of CP rank ``cp_rank``: chunks ``r`` and ``2 cp - 1 - r`` of every sequence.

    Indices into the flattened batch, sequence after sequence, as TransformerEngine's
    ``thd_get_partitioned_indices(cu_seqlens_padded, total, cp_size, cp_rank)`` returns them.
    Every sequence's padded length must be a multiple of ``2 * cp_size``.

    Example:
        >>> zigzag_index([0, 8, 12], 2, 0).tolist(), zigzag_index([0, 8, 12], 2, 1).tolist()
        ([0, 1, 6, 7, 8, 11], [2, 3, 4, 5, 9, 10])
    """
    cu = np.asarray(cu_seqlens_padded, dtype=np.int64)
    lens = np.diff(cu)
    parts = 2 * cp_size
    if not 0 <= cp_rank < cp_size:
        raise ConfigError(f"cp_rank must be in [0, cp_size={cp_size}), got {cp_rank}")
    if (lens % parts).any():
        bad = int(lens[lens % parts != 0][0])
        raise ConfigError(
            f"a sequence of {bad} padded tokens cannot be cut into 2 x cp = {parts} equal "
            f"chunks; pad every sample to a multiple of {parts} (PackedCollate(align={parts}), "
            f"which Loader(slices='cp') sets)",
            param="align",
        )
    chunk = lens // parts
    firsts = np.stack([cu[:-1] + cp_rank * chunk, cu[:-1] + (parts - 1 - cp_rank) * chunk], 1)
    sizes = np.repeat(chunk, 2)
    total = int(sizes.sum())
    offsets = np.cumsum(sizes) - sizes
    return np.repeat(firsts.ravel() - offsets, sizes) + np.arange(total, dtype=np.int64)


def shift_labels(labels: Any, cu_seqlens: Any, ignore_index: int = IGNORE_INDEX) -> np.ndarray:
    """Labels shifted left within each sequence: the target of every token, flattened.

    ``out[i] = labels[i + 1]`` where token ``i + 1`` is in the same sequence (per
    ``cu_seqlens``, offsets into the flattened batch), ``ignore_index`` at each sequence's end.

    Example:
        >>> shift_labels([[1, 2, 3, 4, 5]], [0, 3, 5]).tolist()
        [2, 3, -100, 5, -100]
    """
    flat = np.asarray(labels, dtype=np.int64).reshape(-1)
    out = np.full_like(flat, ignore_index)
    out[:-1] = flat[1:]
    ends = np.asarray(cu_seqlens, dtype=np.int64)[1:] - 1
    out[ends[ends >= 0]] = ignore_index
    return out


class _Slicer:
    """What both slicing collates share: the packed collate inside, and the cut batch."""

    kind = ""

    def __init__(self, collate: Callable[..., dict[str, Any]], size: int, rank: int):
        for name, value in ((f"{self.kind}_size", size), (f"{self.kind}_rank", rank)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"{name} must be an int, got {value!r}", param=name)
        if size < 1 or not 0 <= rank < size:
            raise ConfigError(
                f"{self.kind}_rank must be in [0, {self.kind}_size={size}), got {rank}",
                param=f"{self.kind}_rank",
            )
        self.collate, self.size, self.rank = collate, size, rank
        self.packed = packed_inside(collate)
        if self.packed is None or type(self.packed) is not PackedCollate:
            raise ConfigError(
                f"{type(self).__name__} cuts the rows of chute.PackedCollate (alone or inside "
                f"MediaCollate); got {collate!r}. Use plan='packed' with the default collate",
                param="collate",
            )
        if self.packed.block_mask:
            raise ConfigError(
                f"{type(self).__name__}: a block_attention_mask spans whole rows and cannot be "
                f"sliced; drop block_mask (the slices carry cu_seqlens)",
                param="block_mask",
            )

    def __call__(
        self, samples: Sequence[Mapping[str, Any]], rows: Sequence[int] | None = None
    ) -> dict[str, Any]:
        batch = self.collate(list(samples), rows=rows)
        return self.cut(batch)

    def cut(self, batch: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def _slice(self, batch: dict[str, Any], index: np.ndarray, bounds: Any) -> dict[str, Any]:
        """``batch`` with its per-token keys taken at ``index`` (row by row), labels shifted."""
        torch = require_torch()
        assert self.packed is not None
        rows = batch["input_ids"].shape[0]
        targets = shift_labels(batch["labels"].numpy(), bounds, self.packed.label_pad_id)
        out = {k: v for k, v in batch.items() if k not in ("labels", *TOKEN_KEYS)}

        def take(values: np.ndarray) -> Any:  # numpy: several times faster than torch's take
            return torch.from_numpy(values.reshape(-1)[index].reshape(rows, -1))

        out["input_ids"] = take(batch["input_ids"].numpy())
        out["shift_labels"] = take(targets)
        positions = batch["position_ids"].numpy()
        if positions.ndim == 3:  # Qwen-VL: (4, rows, width)
            lead = positions.shape[0]
            picked = positions.reshape(lead, -1)[:, index].reshape(lead, rows, -1)
            out["position_ids"] = torch.from_numpy(picked)
        else:
            out["position_ids"] = take(positions)
        if "mm_token_type_ids" in batch:
            out["mm_token_type_ids"] = take(batch["mm_token_type_ids"].numpy())
        out["token_index"] = torch.from_numpy(index)
        if any(k in batch for k in _MEDIA_KEYS):  # the model embeds the whole rows first
            out["full_input_ids"] = batch["input_ids"]
        return out

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.collate!r}, {self.kind}_size={self.size}, "
            f"{self.kind}_rank={self.rank})"
        )


class ContextParallelCollate(_Slicer):
    """This CP rank's zig-zag slice of every packed batch (see the module docstring).

    Args:
        collate: ``PackedCollate(..., align=k)`` with ``k`` a multiple of ``2 * cp_size``, or
            ``MediaCollate`` around one.
        cp_size: ranks in the context-parallel group (``World.cp_size``).
        cp_rank: this rank's place in it (``World.cp_rank``).

    The batch holds ``input_ids``, ``shift_labels``, ``position_ids`` (and
    ``mm_token_type_ids``) of shape ``(rows, width / cp_size)``, in THD order (flattened, each
    sequence's two chunks at ``cu_seqlens_padded / cp_size``); the whole batch's
    ``cu_seqlens``, ``cu_seqlens_padded`` and ``max_seqlen`` (``thd_params`` names them as
    TransformerEngine does); ``token_index``, where each token lies in the unsliced flattened
    rows; the media keys whole and ``full_input_ids`` when there are media; and the loader's
    ``sample_ids`` / ``row_sample_ids``, the same on every rank of the group.
    """

    kind = "cp"

    def __init__(self, collate: Callable[..., dict[str, Any]], cp_size: int, cp_rank: int):
        super().__init__(collate, cp_size, cp_rank)
        assert self.packed is not None
        if self.packed.align % (2 * cp_size):
            raise ConfigError(
                f"ContextParallelCollate(cp_size={cp_size}) cuts each sample into 2 x cp = "
                f"{2 * cp_size} equal chunks, so samples must be padded to a multiple of it; "
                f"the packed collate has align={self.packed.align}: build it with "
                f"PackedCollate(..., align={2 * cp_size}) and pack with "
                f"plan_options={{'align': {2 * cp_size}}} (Loader(slices='cp') does both)",
                param="align",
            )

    def cut(self, batch: dict[str, Any]) -> dict[str, Any]:
        """This rank's slice of a batch of ``PackedCollate(align=...)``."""
        bounds = batch["cu_seqlens_padded"].numpy()
        return self._slice(batch, zigzag_index(bounds, self.size, self.rank), bounds)


class SequenceParallelCollate(_Slicer):
    """This SP rank's contiguous slice of every packed row (DeepSpeed Ulysses).

    Args:
        collate: ``PackedCollate`` (or ``MediaCollate`` around one) whose rows are a multiple of
            ``sp_size`` wide.
        sp_size: ranks in the sequence-parallel group (``World.sp_size``).
        sp_rank: this rank's place in it (``World.sp_rank``).

    The batch holds ``input_ids``, ``shift_labels``, ``position_ids`` (and
    ``mm_token_type_ids``) of shape ``(rows, width / sp_size)``: columns ``sp_rank * w`` to
    ``(sp_rank + 1) * w`` of every row; the whole batch's ``cu_seqlens`` and ``max_seqlen``
    (the attention after the all-to-all sees every token); ``token_index``; the media keys
    whole and ``full_input_ids`` when there are media.

    Example:
        >>> import numpy as np
        >>> sp = SequenceParallelCollate(PackedCollate(6), sp_size=2, sp_rank=1)
        >>> b = sp([{"input_ids": np.array([1, 2, 3, 4])}], rows=[1])
        >>> b["input_ids"].tolist(), b["shift_labels"].tolist(), b["cu_seqlens"].tolist()
        ([[4, 0, 0]], [[-100, -100, -100]], [0, 4, 6])
    """

    kind = "sp"

    def __init__(self, collate: Callable[..., dict[str, Any]], sp_size: int, sp_rank: int):
        super().__init__(collate, sp_size, sp_rank)
        assert self.packed is not None
        packed = self.packed
        # a row is max_length wide, or (pad_to_multiple_of) a multiple of the step up to
        # max_length, where it is capped: both must cut into sp_size equal slices
        if packed.max_length % sp_size:
            raise ConfigError(
                f"SequenceParallelCollate(sp_size={sp_size}) cuts every row into {sp_size} equal "
                f"slices, but a full packed row is max_length={packed.max_length} wide, not a "
                f"multiple of {sp_size}; use "
                f"max_length={-(-packed.max_length // sp_size) * sp_size}",
                param="max_length",
            )
        step = math.lcm(packed.multiple, packed.align)
        if not packed.pad_to_max_length and step % sp_size:
            raise ConfigError(
                f"SequenceParallelCollate(sp_size={sp_size}) cuts every row into {sp_size} equal "
                f"slices, but the packed rows are not always a multiple of {sp_size} wide "
                f"(pad_to_multiple_of={packed.multiple}); use "
                f"pad_to_multiple_of={math.lcm(packed.multiple, sp_size)}",
                param="pad_to_multiple_of",
            )

    def cut(self, batch: dict[str, Any]) -> dict[str, Any]:
        """This rank's slice of a ``PackedCollate`` batch."""
        rows, width = batch["input_ids"].shape
        if width % self.size:
            raise ConfigError(
                f"a packed row of width {width} cannot be cut into sp_size={self.size} equal "
                f"slices; make rows a multiple of {self.size} wide (max_length or "
                f"pad_to_multiple_of)",
                param="max_length",
            )
        part = width // self.size
        local = np.arange(self.rank * part, (self.rank + 1) * part, dtype=np.int64)
        index = (np.arange(rows, dtype=np.int64)[:, None] * width + local).ravel()
        bounds = batch.get("cu_seqlens_padded", batch["cu_seqlens"]).numpy()
        return self._slice(batch, index, bounds)


def packed_inside(collate: Any) -> PackedCollate | None:
    """The ``PackedCollate`` that ``collate`` is, or wraps (through ``MediaCollate``)."""
    while isinstance(collate, MediaCollate | _Slicer):
        collate = collate.text if isinstance(collate, MediaCollate) else collate.collate
    return collate if isinstance(collate, PackedCollate) else None


def gather_slices(slices: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The unsliced per-token keys, put together from every rank's slice of one batch.

    Each slice's tokens go back to ``token_index``; the result has ``input_ids``,
    ``shift_labels``, ``position_ids`` (and ``mm_token_type_ids``) of the whole rows.
    For checks and debugging: training never needs it.

    Example:
        >>> import numpy as np
        >>> full = PackedCollate(8, align=4)
        >>> parts = [ContextParallelCollate(full, 2, r)([{"input_ids": np.arange(1, 7)}],
        ...          rows=[1]) for r in range(2)]
        >>> gather_slices(parts)["input_ids"].tolist()
        [[1, 2, 3, 4, 5, 6, 0, 0]]
    """
    torch = require_torch()
    rows = slices[0]["input_ids"].shape[0]
    index = torch.cat([s["token_index"] for s in slices])
    total = int(index.numel())
    if total % rows or sorted(index.tolist()) != list(range(total)):
        raise ConfigError(
            "the slices do not cover the batch exactly once: pass every rank's slice of the "
            "same batch (each rank of the group, once)",
            param="slices",
        )
    out: dict[str, Any] = {}
    for key in TOKEN_KEYS:
        if key not in slices[0]:
            continue
        parts = [s[key] for s in slices]
        if parts[0].ndim == 3:  # (k, rows, w): positions of several axes
            lead = parts[0].shape[0]
            values = torch.cat([p.reshape(lead, -1) for p in parts], dim=1)
            whole = torch.empty_like(values)
            whole[:, index] = values
            out[key] = whole.reshape(lead, rows, -1)
        else:
            values = torch.cat([p.reshape(-1) for p in parts])
            whole = torch.empty_like(values)
            whole[index] = values
            out[key] = whole.reshape(rows, -1)
    return out


def thd_params(batch: Mapping[str, Any]) -> dict[str, Any]:
    """A slice's boundaries under TransformerEngine's and Megatron-LM's names.

    The keyword arguments of TransformerEngine's ``DotProductAttention`` with ``qkv_format=
    "thd"``, and the fields of Megatron-LM's ``PackedSeqParams`` (``PackedSeqParams(
    **thd_params(batch))``): the whole batch's ``cu_seqlens`` as ``cu_seqlens_q/kv``, its
    ``cu_seqlens_padded`` as ``cu_seqlens_q/kv_padded``, ``max_seqlen`` as ``max_seqlen_q/kv``.

    Example:
        >>> import torch
        >>> p = thd_params({"cu_seqlens": torch.tensor([0, 6]), "max_seqlen": torch.tensor(8),
        ...                 "cu_seqlens_padded": torch.tensor([0, 8])})
        >>> p["cu_seqlens_q_padded"].tolist(), p["max_seqlen_kv"], p["qkv_format"]
        ([0, 8], 8, 'thd')
    """
    cu = batch["cu_seqlens"]
    padded = batch.get("cu_seqlens_padded", cu)
    longest = int(batch["max_seqlen"])
    return {
        "qkv_format": "thd",
        "cu_seqlens_q": cu,
        "cu_seqlens_kv": cu,
        "cu_seqlens_q_padded": padded,
        "cu_seqlens_kv_padded": padded,
        "max_seqlen_q": longest,
        "max_seqlen_kv": longest,
    }


def loss_sum(logits: Any, shift_labels: Any, ignore_index: int = IGNORE_INDEX) -> tuple[Any, Any]:
    """``(sum of cross-entropy over the targets, number of targets)`` of one slice.

    Labels are already shifted (``shift_labels``), so logits and labels line up token for
    token. The mean over a group is ``all_reduce(sum) / all_reduce(count)``: dividing each
    rank's mean by the group size weighs ranks with few targets too heavily.

    Example:
        >>> import torch
        >>> total, count = loss_sum(torch.zeros(1, 3, 4), torch.tensor([[1, -100, 2]]))
        >>> round(float(total / count), 4), int(count)
        (1.3863, 2)
    """
    torch = require_torch()
    flat = logits.reshape(-1, logits.shape[-1]).float()
    targets = shift_labels.reshape(-1).to(flat.device)
    total = torch.nn.functional.cross_entropy(
        flat, targets, ignore_index=ignore_index, reduction="sum"
    )
    return total, (targets != ignore_index).sum()

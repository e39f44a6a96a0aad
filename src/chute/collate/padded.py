"""Padded collation: samples of different lengths into one batch of tensors.

Each row is a sample, padded on the right to the longest sample of the batch (optionally
rounded up to a multiple, e.g. 8 for tensor cores)::

    sample 7:  a b c d          input_ids       labels            attention_mask
    sample 2:  e f              a b c d         A B C D           1 1 1 1
                                e f P P         E F -100 -100     1 1 0 0

``P`` is the pad id (the tokenizer's, when the recipe knows it; else 0). Labels are padded with
-100, which PyTorch's cross-entropy ignores. (The loader adds ``sample_ids``, each row's global
sample id, from its plan.)

Example:
    >>> import numpy as np
    >>> batch = Collate(pad_id=0)([
    ...     {"input_ids": np.array([5, 6, 7]), "labels": np.array([-100, 6, 7])},
    ...     {"input_ids": np.array([8])},
    ... ])
    >>> batch["input_ids"].tolist(), batch["labels"].tolist()
    ([[5, 6, 7], [8, 0, 0]], [[-100, 6, 7], [8, -100, -100]])
    >>> batch["attention_mask"].tolist()
    [[1, 1, 1], [1, 0, 0]]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from chute._internal.lazy_torch import require_torch
from chute.errors import ConfigError
from chute.media.positions import MRopePositions

__all__ = ["IGNORE_INDEX", "Collate"]

IGNORE_INDEX = -100


class Collate:
    """Pads a list of samples (``input_ids``, optional ``labels``) into int64 tensors.

    A batch whose every sample failed (or an empty last batch of the ``short`` remainder) is
    one placeholder row: ``input_ids = [pad_id]``, ``labels = [-100]``, ``attention_mask =
    [1]`` (the loader adds ``sample_ids = [-1]``). It carries no loss; the mask is 1 so no
    attention row is fully masked (which makes some attention kernels produce NaN).

    Args:
        pad_id: the token id used for padding ``input_ids``.
        pad_to_multiple_of: round the padded length up to a multiple of this (e.g. 8).
        label_pad_id: the label of padding positions (-100: ignored by the loss).
        positions: a ``chute.media.positions.MRopePositions`` (Qwen2/2.5/3-VL): then the batch
            also carries ``position_ids`` ``(3, rows, width)`` (each sample's 3-D positions, 0
            on padding, as the model's own ``get_rope_index`` gives them) and
            ``mm_token_type_ids`` (0 text, 1 image, 2 video). The Loader sets it from the
            recipe's ``image_tokens`` family.
    """

    def __init__(
        self,
        pad_id: int = 0,
        pad_to_multiple_of: int | None = None,
        label_pad_id: int = IGNORE_INDEX,
        positions: MRopePositions | None = None,
    ):
        if isinstance(pad_id, bool) or not isinstance(pad_id, int | np.integer) or pad_id < 0:
            raise ConfigError(f"pad_id must be a token id (an int >= 0), got {pad_id!r}")
        m = pad_to_multiple_of
        if m is not None and (isinstance(m, bool) or not isinstance(m, int) or m < 1):
            raise ConfigError(f"pad_to_multiple_of must be a positive int or None, got {m!r}")
        self.pad_id = int(pad_id)
        self.pad_to_multiple_of = m
        self.label_pad_id = int(label_pad_id)
        self.positions = positions

    def padded_length(self, longest: int) -> int:
        m = self.pad_to_multiple_of or 1
        return max(m, -(-longest // m) * m)

    def __call__(self, samples: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        torch = require_torch()
        n = len(samples)
        if n == 0:
            return self.placeholder()
        ids = [s["input_ids"] for s in samples]
        labels = [s.get("labels", s["input_ids"]) for s in samples]
        lengths = np.fromiter((len(x) for x in ids), dtype=np.int64, count=n)
        width = self.padded_length(int(lengths.max()))
        mask = np.arange(width, dtype=np.int64)[None, :] < lengths[:, None]
        input_ids = np.full((n, width), self.pad_id, dtype=np.int64)
        input_ids[mask] = np.concatenate(ids)  # row-major: row by row, left to right
        label_arr = np.full((n, width), self.label_pad_id, dtype=np.int64)
        label_arr[mask] = np.concatenate(labels)
        batch = {
            "input_ids": torch.from_numpy(input_ids),
            "labels": torch.from_numpy(label_arr),
            "attention_mask": torch.from_numpy(mask.astype(np.int64)),
        }
        if self.positions is not None:
            rule = self.positions
            layouts = [rule.layout(s) for s in samples]
            positions = np.zeros((3, n, width), dtype=np.int64)
            positions[:, mask] = np.concatenate([p for p, _ in layouts], axis=1)
            types = np.zeros((n, width), dtype=np.int64)
            types[mask] = np.concatenate([t for _, t in layouts])
            batch["position_ids"] = torch.from_numpy(positions)
            batch["mm_token_type_ids"] = torch.from_numpy(types)
        return batch

    def placeholder(self) -> dict[str, Any]:
        """The one-row batch that stands for a batch with no valid sample."""
        torch = require_torch()
        width = self.padded_length(1)
        mask = np.zeros((1, width), dtype=np.int64)
        mask[0, 0] = 1
        batch = {
            "input_ids": torch.full((1, width), self.pad_id, dtype=torch.int64),
            "labels": torch.full((1, width), self.label_pad_id, dtype=torch.int64),
            "attention_mask": torch.from_numpy(mask),
        }
        if self.positions is not None:
            batch["position_ids"] = torch.zeros((3, 1, width), dtype=torch.int64)
            batch["mm_token_type_ids"] = torch.zeros((1, width), dtype=torch.int64)
        return batch

    def __repr__(self) -> str:
        return (
            f"Collate(pad_id={self.pad_id}, pad_to_multiple_of={self.pad_to_multiple_of}, "
            f"label_pad_id={self.label_pad_id})"
        )

r"""Collation of preference data: pairs into ``chosen_*`` / ``rejected_*`` tensors; KTO labels.

A pair sample holds both sequences back to back (``chute.recipe.preference``). The padded
collate gives each side its own tensors, padded per batch to that side's longest (TRL's
``DataCollatorForPreference`` layout, by name)::

    pair 0: chosen (p c c), rejected (p r)      pair 1: chosen (p p c), rejected (p p r r r)

    chosen_input_ids        [[p c c], [p p c]]            (P pad, - label -100)
    chosen_labels           [[- c c], [- - c]]
    chosen_attention_mask   [[1 1 1], [1 1 1]]
    rejected_input_ids      [[p r P P P], [p p r r r]]
    rejected_labels         [[- r - - -], [- - r r r]]
    rejected_attention_mask [[1 1 0 0 0], [1 1 1 1 1]]

With images (always in the prompt both sides share) the batch carries each pair's pixels once
(``pixel_values``, ``image_grid_thw``: the inputs of either side's forward; concatenate them
twice for one forward over chosen and rejected rows, as TRL does), and with a Qwen-VL recipe
each side's ``chosen_position_ids`` / ``rejected_position_ids`` and ``*_mm_token_type_ids``.

Packed (``plan="packed"``), each pair is two segments of one row, chosen then rejected, with
``PackedCollate``'s ``position_ids`` / ``cu_seqlens``, plus ``pair_index`` (the pair of each
token in the batch, -1 for padding) and ``chosen_mask`` (True on chosen tokens), enough to sum
each side's log-probabilities per pair::

    row 0       [c0 c0 c0 r0 r0 c1 c1 r1 P P]
    pair_index  [0  0  0  0  0  1  1  1  -1 -1]
    chosen_mask [1  1  1  0  0  1  1  0  0  0]

``KTOCollate`` wraps any collate and adds ``label`` (bool, one per sample in ``sample_ids``
order).

Example:
    >>> import numpy as np
    >>> pair = {"input_ids": np.array([1, 2, 3, 1, 4]), "labels": np.array([-100, 2, 3, -100, 4]),
    ...         "chosen_length": 3}
    >>> batch = PreferenceCollate(pad_id=0)([pair])
    >>> batch["chosen_input_ids"].tolist(), batch["rejected_labels"].tolist()
    ([[1, 2, 3]], [[-100, 4]])
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from chute._internal.lazy_torch import require_torch
from chute.collate.packed import PackedCollate
from chute.collate.padded import IGNORE_INDEX, Collate
from chute.errors import ConfigError
from chute.media.positions import MRopePositions
from chute.recipe.preference import pair_sides

__all__ = ["KTOCollate", "PackedPreferenceCollate", "PreferenceCollate"]


class PreferenceCollate:
    """Pairs into ``chosen_*`` and ``rejected_*`` tensors, each side padded to its longest.

    Args:
        pad_id: the token id of padding.
        pad_to_multiple_of: round each side's padded length up to a multiple of this.
        label_pad_id: the label of padding positions.
        positions: a ``chute.media.positions.MRopePositions``: each side gets its 3-D
            positions (``chosen_position_ids``, ``rejected_mm_token_type_ids``, ...).
    """

    def __init__(
        self,
        pad_id: int = 0,
        pad_to_multiple_of: int | None = None,
        label_pad_id: int = IGNORE_INDEX,
        positions: MRopePositions | None = None,
    ):
        self.pad = Collate(pad_id, pad_to_multiple_of, label_pad_id, positions=positions)

    def __call__(self, samples: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        sides = [pair_sides(dict(s)) for s in samples]
        out: dict[str, Any] = {}
        for k, name in enumerate(("chosen", "rejected")):
            batch = self.pad([pair[k] for pair in sides])
            out.update({f"{name}_{key}": value for key, value in batch.items()})
        return out

    def __repr__(self) -> str:
        return f"PreferenceCollate(pad_id={self.pad.pad_id})"


class PackedPreferenceCollate(PackedCollate):
    """Pairs packed into rows, each pair two segments (see the module docstring).

    Takes ``PackedCollate``'s arguments; ``max_length`` is the row length (a pair needs room
    for both sides: the loader's default is twice the recipe's ``max_length``). A pair's images
    appear in both of its segments, so ``MediaCollate`` gives their pixels once per side, in
    token order (decoded once per pair).
    """

    media_per_side = True  # MediaCollate: the media of each side, in token order

    def __call__(
        self, samples: Sequence[Mapping[str, Any]], rows: Sequence[int] | None = None
    ) -> dict[str, Any]:
        torch = require_torch()
        if self.align != 1:
            raise ConfigError(
                f"PackedPreferenceCollate lays out both sides of a pair itself and takes no "
                f"align (got align={self.align}); context-parallel slices of preference pairs "
                f"are not supported",
                param="align",
            )
        sides = [side for s in samples for side in pair_sides(dict(s))]
        per_row = np.ones(len(samples), dtype=np.int64) if rows is None else np.asarray(rows)
        batch = super().__call__(sides, rows=(2 * per_row).tolist())
        shape = tuple(batch["input_ids"].shape)
        pair_index = np.full(shape, -1, dtype=np.int64)
        chosen = np.zeros(shape, dtype=bool)
        if sides:
            sizes = 2 * per_row[per_row > 0]
            row_of = np.repeat(np.arange(len(sizes)), sizes)
            raw = np.fromiter((len(s["input_ids"]) for s in sides), np.int64, len(sides))
            lens = self._fit(raw, row_of, len(sizes))
            width = shape[1]
            starts = np.cumsum(lens) - lens
            first = np.concatenate([[0], np.cumsum(sizes)[:-1]])
            in_row = starts - starts[first][row_of]
            local = np.arange(int(lens.sum()), dtype=np.int64) - np.repeat(starts, lens)
            flat = np.repeat(row_of * width + in_row, lens) + local
            side = np.arange(len(sides))
            pair_index.reshape(-1)[flat] = np.repeat(side // 2, lens)
            chosen.reshape(-1)[flat] = np.repeat(side % 2 == 0, lens)
        batch["pair_index"] = torch.from_numpy(pair_index)
        batch["chosen_mask"] = torch.from_numpy(chosen)
        return batch

    def __repr__(self) -> str:
        return f"PackedPreferenceCollate(max_length={self.max_length}, pad_id={self.pad_id})"


class KTOCollate:
    """``collate(samples)`` plus ``label``: each sample's desirability (bool), in order.

    Args:
        collate: the text collate (``Collate``, ``PackedCollate``).
    """

    def __init__(self, collate: Callable[..., dict[str, Any]]):
        self.collate = collate
        self.packed = bool(getattr(collate, "packed", False))

    def __call__(self, samples: Sequence[Mapping[str, Any]], **kwargs: Any) -> dict[str, Any]:
        torch = require_torch()
        batch = self.collate(samples, **kwargs)
        labels = [bool(s["label"]) for s in samples] or [False]
        batch["label"] = torch.tensor(labels, dtype=torch.bool)
        return batch

    def __repr__(self) -> str:
        return f"KTOCollate({self.collate!r})"

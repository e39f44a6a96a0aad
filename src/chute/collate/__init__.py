"""Collation: a list of samples into one batch of tensors.

* ``Collate`` (``padded.py``): one sample per row, padded to the longest (or a multiple).
* ``PackedCollate`` (``packed.py``): several samples per row, with ``position_ids``,
  ``cu_seqlens`` and an optional block mask so no sample attends to another.
* ``PreferenceCollate``, ``PackedPreferenceCollate``, ``KTOCollate`` (``preference.py``):
  preference pairs as ``chosen_*`` / ``rejected_*`` tensors (packed: two segments per pair),
  KTO's ``label``.
* ``MediaCollate`` (``media.py``): wraps a text collate and adds the media stage's tensors
  (``pixel_values``, ``image_grid_thw``, video and audio), so media batching lives with the rest
  of batching and ``chute.media`` stays about decoding and counting.
* ``ContextParallelCollate``, ``SequenceParallelCollate`` (``slices.py``): each rank's slice of
  packed rows for context parallelism (zig-zag, TransformerEngine's THD layout) and DeepSpeed
  Ulysses, with labels shifted before the cut (``shift_labels``; ``loss_sum``, ``thd_params``).
"""

from chute.collate.media import MediaCollate, collate_media
from chute.collate.packed import PackedCollate, hf_packed_inputs, row_sample_ids
from chute.collate.padded import IGNORE_INDEX, Collate
from chute.collate.preference import KTOCollate, PackedPreferenceCollate, PreferenceCollate
from chute.collate.slices import (
    ContextParallelCollate,
    SequenceParallelCollate,
    gather_slices,
    loss_sum,
    thd_params,
)

__all__ = [
    "IGNORE_INDEX",
    "Collate",
    "ContextParallelCollate",
    "KTOCollate",
    "MediaCollate",
    "PackedCollate",
    "PackedPreferenceCollate",
    "PreferenceCollate",
    "SequenceParallelCollate",
    "collate_media",
    "gather_slices",
    "hf_packed_inputs",
    "loss_sum",
    "row_sample_ids",
    "thd_params",
]

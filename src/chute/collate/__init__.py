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
"""

from chute.collate.media import MediaCollate, collate_media
from chute.collate.packed import PackedCollate, hf_packed_inputs, row_sample_ids
from chute.collate.padded import IGNORE_INDEX, Collate
from chute.collate.preference import KTOCollate, PackedPreferenceCollate, PreferenceCollate

__all__ = [
    "IGNORE_INDEX",
    "Collate",
    "KTOCollate",
    "MediaCollate",
    "PackedCollate",
    "PackedPreferenceCollate",
    "PreferenceCollate",
    "collate_media",
    "hf_packed_inputs",
    "row_sample_ids",
]

"""Deprecated alias of ``chute.collate.packed``, kept because earlier docs showed this path; removed in 0.3."""

import warnings

warnings.warn(
    "chute.collate_packed is deprecated; import from chute.collate.packed instead",
    DeprecationWarning,
    stacklevel=2,
)

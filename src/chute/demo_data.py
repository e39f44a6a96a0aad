"""Deprecated alias of ``chute.demo.data``, kept because earlier docs showed this path; removed in 0.3."""

import warnings

warnings.warn(
    "chute.demo_data is deprecated; import from chute.demo.data instead",
    DeprecationWarning,
    stacklevel=2,
)

"""Old public names that still resolve, with a ``DeprecationWarning`` on each use.

A renamed public class keeps its old name for a release: the package's module ``__getattr__``
(PEP 562) hands the lookup here, which warns, naming the new spelling, and returns the new
object itself, so ``isinstance`` checks and pickles of either name agree.

Example:
    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     entry = renamed_attribute("chute", "Dataset", "MixtureEntry", "chute.mixture")
    >>> entry.__name__, str(caught[0].message)
    ('MixtureEntry', 'chute.Dataset is deprecated: it is chute.MixtureEntry now (removed in 0.3)')
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

__all__ = ["REMOVED_IN", "renamed_attribute"]

# the release that drops the old names (as chute.demo_data and chute.collate_packed)
REMOVED_IN = "0.3"


def renamed_attribute(package: str, old: str, new: str, home: str) -> Any:
    """``home.new``, after warning that ``package.old`` is its deprecated name."""
    warnings.warn(
        f"{package}.{old} is deprecated: it is {package}.{new} now (removed in {REMOVED_IN})",
        DeprecationWarning,
        stacklevel=3,  # the user's line that read package.old, past __getattr__
    )
    return getattr(importlib.import_module(home), new)

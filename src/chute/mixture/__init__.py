"""Mixtures: several datasets in one run, each with its own options, weighted (docs/mixtures.md).

``Mixture`` and its ``MixtureEntry`` items define one (in Python or YAML); ``open_mixture`` binds it to its
files (``open_cached_mixture`` to its caches); ``preprocess_mixture`` builds one cache per
dataset; ``find_duplicates`` checks datasets and splits for exact duplicates by content.
The epoch's selection itself is pure plan arithmetic (``chute.plan.mixture_selection``).
"""

from typing import TYPE_CHECKING

from chute.mixture.build import MixtureReport, preprocess_any, preprocess_mixture
from chute.mixture.config import Mixture, is_mixture_config
from chute.mixture.entry import PER_DATASET, RUN_WIDE, MixtureEntry
from chute.mixture.hashes import content_hashes
from chute.mixture.opened import OpenedMixture, open_cached_mixture, open_mixture
from chute.mixture.source import MixtureRecipe, MixtureSource

__all__ = [
    "PER_DATASET",
    "RUN_WIDE",
    "Mixture",
    "MixtureEntry",
    "MixtureRecipe",
    "MixtureReport",
    "MixtureSource",
    "OpenedMixture",
    "content_hashes",
    "is_mixture_config",
    "open_cached_mixture",
    "open_mixture",
    "preprocess",
    "preprocess_any",
    "preprocess_mixture",
]

# chute.preprocess: a plain config builds one cache, a mixture config one per dataset
preprocess = preprocess_any

if TYPE_CHECKING:  # typed code that still says Dataset keeps checking; at run time it warns
    Dataset = MixtureEntry


def __getattr__(name: str) -> object:
    # chute.mixture.Dataset: the old name of MixtureEntry, kept for earlier code until 0.3
    if name == "Dataset":
        from chute._internal.deprecation import renamed_attribute

        return renamed_attribute("chute.mixture", name, "MixtureEntry", "chute.mixture.entry")
    raise AttributeError(f"module 'chute.mixture' has no attribute {name!r}")

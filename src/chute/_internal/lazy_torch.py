"""torch, imported only where it is needed, with an install hint when it is missing."""

from __future__ import annotations

import importlib
from types import ModuleType

from chute.errors import MissingDependency

__all__ = ["require_torch"]

INSTALL_HINT = (
    "chute's Loader and collation need PyTorch, which chute does not install for you (pip "
    "would pick a multi-GB CUDA build). Install the build that matches your machine, e.g. "
    "`pip install torch==2.13.0` (see https://pytorch.org/get-started/locally/ for CUDA/CPU "
    "wheels); sources, plans, validation and caches work without it."
)


def require_torch() -> ModuleType:
    """The ``torch`` module, or an ``ImportError`` that says how to install it."""
    try:
        return importlib.import_module("torch")
    except ImportError as exc:
        raise MissingDependency(f"{INSTALL_HINT} (import failed: {exc})") from exc

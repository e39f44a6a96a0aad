"""Process-pool plumbing shared by validate, preprocess and length passes."""

from __future__ import annotations

import multiprocessing
import sys
from multiprocessing.context import BaseContext

__all__ = ["pool_context"]


def pool_context() -> BaseContext:
    """The start method for chute's process pools: ``fork`` on Linux, else ``spawn``.

    Fork starts fast and shares the parent's imports and memory maps; chute's pools run only
    chute code, which holds no locks or threads at fork time.
    """
    method = "fork" if sys.platform.startswith("linux") else "spawn"
    return multiprocessing.get_context(method)

"""``lazy_exports``: a package's public names imported on first use (PEP 562).

A package lists each public name with the module that defines it; the names resolve when first
read (then stay in the package's namespace) and ``dir()`` lists them before that. ``chute``
and ``chute.media`` use it, so importing a light part does not import every heavy one.

Example:
    >>> getattr_, dir_ = lazy_exports("pkg", {"sqrt": "math"}, {})
    >>> getattr_("sqrt")(9.0), "sqrt" in dir_()
    (3.0, True)
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, exports: Mapping[str, str], namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package`` for ``exports`` (name -> module).

    ``namespace``: the package's ``globals()``; a resolved name is stored there, so later
    lookups skip ``__getattr__``.
    """

    def getattr_(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def dir_() -> list[str]:
        return sorted(set(namespace) | set(exports))

    return getattr_, dir_

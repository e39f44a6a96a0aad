"""How an error message writes a parameter: as a Python keyword, a CLI flag or a config key.

The same option reaches chute three ways: ``Recipe(media_root=...)`` in Python,
``--media-root`` on the command line, ``recipe.media_root`` in a preprocessing config. An error
should name it the way the user wrote it. Messages therefore never spell a parameter
themselves; they call ``spell("media_root")`` or ``spell_set("image_tokens", 576)``, which write
it in the *current spelling*. Python is the default; a front end sets its own for the duration
of a call (``with spelling(FLAGS): ...``), and process pools carry it into their workers
(``chute._internal.pools``), so a message built anywhere in the job reads the same.

Example:
    >>> spell("media_root"), spell_set("image_tokens", "qwen2-vl")
    ('media_root', "image_tokens='qwen2-vl'")
    >>> flags = Spelling("cli", {"media_root": "--media-root", "image_tokens": "--image-tokens"},
    ...                  assign=" ", quote=False)
    >>> with spelling(flags):
    ...     spell("media_root"), spell_set("image_tokens", "qwen2-vl"), spell("video_tokens")
    ('--media-root', '--image-tokens qwen2-vl', 'video_tokens')
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import shlex
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

__all__ = [
    "PYTHON",
    "Spelling",
    "current_spelling",
    "spell",
    "spell_set",
    "spell_value",
    "spelled_as",
    "spelling",
]

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Spelling:
    """One front end's way of writing parameters (plain data: it pickles into workers).

    Args:
        front: a label (``python``, ``cli``, ``config``).
        names: parameter -> how this front end writes it; a parameter it has no name for is
            written as in Python (the option exists only there).
        assign: what joins a name and a value (``=`` or a space).
        quote: write string values as Python literals (``'qwen2-vl'``); else bare, shell-quoted
            where needed.
    """

    front: str
    names: Mapping[str, str] = field(default_factory=dict)
    assign: str = "="
    quote: bool = True

    def key(self, param: str) -> str:
        return self.names.get(param, param)

    def value(self, value: Any) -> str:
        if self.quote or not isinstance(value, str):
            return repr(value) if isinstance(value, str) else _plain(value, self.quote)
        return shlex.quote(value) if self.assign == " " else value

    def setting(self, param: str, value: Any) -> str:
        if param not in self.names and self is not PYTHON:  # an option only Python has
            return PYTHON.setting(param, value)
        return f"{self.key(param)}{self.assign}{self.value(value)}"

    def with_names(self, names: Mapping[str, str]) -> Spelling:
        """This spelling with more (or other) parameter names."""
        return Spelling(self.front, {**self.names, **names}, self.assign, self.quote)


def _plain(value: Any, python: bool) -> str:
    if value is None:
        return "None" if python else "null"
    if isinstance(value, bool):
        return str(value) if python else str(value).lower()
    return str(value)


PYTHON = Spelling("python")
_CURRENT: contextvars.ContextVar[Spelling] = contextvars.ContextVar(
    "chute_spelling", default=PYTHON
)


def current_spelling() -> Spelling:
    """The spelling messages use now."""
    return _CURRENT.get()


@contextlib.contextmanager
def spelling(how: Spelling) -> Iterator[Spelling]:
    """Write parameters as ``how`` does inside the block."""
    token = _CURRENT.set(how)
    try:
        yield how
    finally:
        _CURRENT.reset(token)


def spelled_as(how: Spelling) -> Callable[[F], F]:
    """Decorator: the function's errors spell parameters as ``how`` does."""

    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            with spelling(how):
                return fn(*args, **kwargs)

        return run  # type: ignore[return-value]

    return decorate


def spell(param: str) -> str:
    """``param`` as the current front end writes it (``media_root``, ``--media-root``...)."""
    return _CURRENT.get().key(param)


def spell_set(param: str, value: Any) -> str:
    """``param`` set to ``value`` (``max_length=4096``, ``--max-length 4096``...)."""
    return _CURRENT.get().setting(param, value)


def spell_value(value: Any) -> str:
    """A value as the current front end writes it (``'qwen2-vl'`` in Python, else bare)."""
    return _CURRENT.get().value(value)

"""Output helpers shared by the subcommands: JSON for scripts, tables for people, clean errors."""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Callable, Iterator
from typing import Any

import orjson
import typer

from chute._internal.progress import Progress, progress
from chute._internal.spelling import spelling
from chute._internal.tables import table
from chute.cli._options import FLAGS
from chute.errors import ChuteError

__all__ = ["emit_json", "fail", "handle_errors", "progress_bar", "shown", "table"]


def emit_json(obj: Any) -> None:
    """Print one JSON object on stdout (numpy scalars and arrays allowed)."""
    sys.stdout.write(
        orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_INDENT_2).decode()
    )
    sys.stdout.write("\n")


def progress_bar(total: int, desc: str, unit: str = "B", enabled: bool = True) -> Progress:
    """Chute's progress reporter (``chute._internal.progress``) for a command's own step.

    A bar on stderr when it is a terminal, else a line now and then; rank 0 only under a
    launcher; nothing with ``enabled=False`` (``--quiet``, ``--json``).
    """
    return progress(total, desc, unit=unit, enabled=shown(enabled))


def shown(enabled: bool) -> bool | None:
    """The ``progress=`` a library call gets from a command: off, or the default (rank 0)."""
    return None if enabled else False


@contextlib.contextmanager
def _progress_lines() -> Iterator[None]:
    """Where stderr is no terminal, progress is a log line now and then: print those."""
    logger = logging.getLogger("chute.progress")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def fail(message: str, code: int = 2) -> typer.Exit:
    typer.secho(f"error: {message}", err=True, fg=typer.colors.RED)
    return typer.Exit(code)


@contextlib.contextmanager
def handle_errors() -> Iterator[None]:
    """Turn chute's errors into one clear line on stderr and exit code 2, not a traceback.

    Inside, errors name parameters by their flags (``--media-root``, not ``media_root=``).
    """
    try:
        with spelling(FLAGS), _progress_lines():
            yield
    except ChuteError as exc:  # MissingDependency (torch, an extra) included
        raise fail(str(exc)) from None


def guarded(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Decorator form of ``handle_errors`` for command functions."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with handle_errors():
            return fn(*args, **kwargs)

    return wrapper

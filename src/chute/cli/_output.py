"""Output helpers shared by the subcommands: JSON for scripts, tables for people, clean errors."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import Any

import orjson
import typer
from tqdm import tqdm

from chute._internal.spelling import spelling
from chute._internal.tables import table
from chute.cli._options import FLAGS
from chute.errors import ChuteError

__all__ = ["emit_json", "fail", "handle_errors", "progress_bar", "table"]


def emit_json(obj: Any) -> None:
    """Print one JSON object on stdout (numpy scalars and arrays allowed)."""
    sys.stdout.write(
        orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_INDENT_2).decode()
    )
    sys.stdout.write("\n")


def progress_bar(total: int, desc: str, unit: str = "B", enabled: bool = True) -> tqdm:
    """A tqdm bar on stderr; disabled bars cost nothing."""
    return tqdm(
        total=total,
        desc=desc,
        unit=unit,
        unit_scale=True,
        unit_divisor=1024 if unit == "B" else 1000,
        disable=not enabled,
        file=sys.stderr,
        leave=False,
    )


def fail(message: str, code: int = 2) -> typer.Exit:
    typer.secho(f"error: {message}", err=True, fg=typer.colors.RED)
    return typer.Exit(code)


@contextlib.contextmanager
def handle_errors() -> Iterator[None]:
    """Turn chute's errors into one clear line on stderr and exit code 2, not a traceback.

    Inside, errors name parameters by their flags (``--media-root``, not ``media_root=``).
    """
    try:
        with spelling(FLAGS):
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

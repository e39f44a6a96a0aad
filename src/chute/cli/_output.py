"""Output helpers shared by the subcommands: JSON for scripts, tables for people, clean errors."""

from __future__ import annotations

import contextlib
import errno
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

__all__ = [
    "emit_json",
    "fail",
    "handle_errors",
    "os_error_message",
    "progress_bar",
    "shown",
    "table",
]


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


# What to do about an operating-system error, by its kind (the OS's own words say what failed).
_OS_HINTS: dict[type[OSError], str] = {
    FileNotFoundError: "check the path: a file read must exist, a file written needs its folder",
    PermissionError: "check its permissions, or use a path you may read or write",
    IsADirectoryError: "pass a file there, not a folder",
    NotADirectoryError: "a part of the path is a file, not a folder: check the path",
    FileExistsError: "remove it or choose another path",
}
_OS_HINTS_BY_ERRNO = {
    errno.ENOSPC: "the disk is full: free space or write somewhere else",
    errno.EROFS: "the file system is read-only: write somewhere else",
}


def os_error_message(exc: OSError) -> str:
    """One line for an operating-system error: the path(s), the OS's reason, what to do.

    Example:
        >>> os_error_message(FileNotFoundError(2, "No such file or directory", "/proc/nope"))
        '/proc/nope: No such file or directory (check the path: a file read must exist, a file written needs its folder)'
    """
    reason = exc.strerror or str(exc) or type(exc).__name__
    where = [str(name) for name in (exc.filename, exc.filename2) if name is not None]
    text = f"{' -> '.join(where)}: {reason}" if where else reason
    hint = _OS_HINTS_BY_ERRNO.get(exc.errno or 0) or next(
        (h for kind, h in _OS_HINTS.items() if isinstance(exc, kind)), None
    )
    return f"{text} ({hint})" if hint else text


@contextlib.contextmanager
def handle_errors(as_json: bool = False) -> Iterator[None]:
    """Turn errors about the user's input into one clear line on stderr and exit code 2.

    Not a traceback for: chute's own errors (``ChuteError``, ``MissingDependency`` included),
    operating-system errors on the user's paths (``OSError``: a missing file, a folder that
    cannot be created, no permission, a full disk), and files that are not UTF-8 text
    (``UnicodeDecodeError``). Anything else is a bug in chute and keeps its traceback. A closed
    output pipe (``chute ... | head``) is left to the normal exit.

    Inside, errors name parameters by their flags (``--media-root``, not ``media_root=``).
    With ``as_json`` (the command's ``--json``), stdout gets the error as its one JSON object
    too (``{"error": {"message": ..., "exit_code": 2}}``): a script reading it gets JSON.
    """
    try:
        with spelling(FLAGS), _progress_lines():
            yield
    except ChuteError as exc:  # MissingDependency (torch, an extra) included
        raise _failed(str(exc), as_json) from None
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise _failed(os_error_message(exc), as_json) from None
    except UnicodeDecodeError as exc:
        raise _failed(
            f"a file is not UTF-8 text: {exc.reason} at byte {exc.start} ({exc.encoding}); "
            "save it as UTF-8",
            as_json,
        ) from None


def _failed(message: str, as_json: bool) -> typer.Exit:
    if as_json:
        emit_json({"error": {"message": message, "exit_code": 2}})
    return fail(message)


def guarded(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Decorator form of ``handle_errors`` for command functions."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with handle_errors(as_json=bool(kwargs.get("as_json"))):
            return fn(*args, **kwargs)

    return wrapper

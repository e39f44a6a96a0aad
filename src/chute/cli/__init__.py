"""The ``chute`` command: one console script, one module per subcommand.

Each subcommand lives in ``chute/cli/<name>_cmd.py`` and exposes ``register(app)``; add new ones
to ``_COMMANDS`` below (``chute --help`` lists them all). Commands print human tables by default
and one JSON object with ``--json``; progress goes to stderr so ``--json`` output stays
parseable.
"""

from __future__ import annotations

import atexit
import importlib
import inspect
import os
import sys
import threading
from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any

import typer
import typer.core

__all__ = ["app", "main"]

_COMMANDS = [
    "index",
    "validate",
    "inspect",
    "stats",
    "preprocess",
    "shard",
    "bench",
    "demo",
    "migrate",
]


# typer's click command (``typer`` 0.2x carries its own copy of click: no ``click`` import here)
_Command = Any


def _load_command(name: str) -> _Command:
    """Import ``chute.cli.<name>_cmd`` and make its click command (or group, for ``migrate``)."""
    module = importlib.import_module(f"chute.cli.{name}_cmd")
    holder = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    holder.callback()(lambda: None)  # a callback makes it a group whatever register() adds
    module.register(holder)
    command = typer.main.get_command(holder).commands[name]  # type: ignore[attr-defined]
    _reflow_help(command)
    return command


def _reflow_help(command: _Command) -> None:
    """Join the lines of each paragraph of a command's help (and its subcommands') into one.

    Help texts are docstrings, broken at the source's line width; typer (0.2x, rich mode) keeps
    those breaks and the terminal then wraps each line again, so an 80-column terminal showed
    every paragraph as alternating long and short lines. Paragraphs (blank-line separated) stay.
    """
    if command.help:
        paragraphs = inspect.cleandoc(command.help).split("\n\n")
        command.help = "\n\n".join(" ".join(p.split()) for p in paragraphs)
    for sub in getattr(command, "commands", {}).values():
        _reflow_help(sub)


class _Commands(MutableMapping[str, _Command]):
    """The subcommands by name, each module imported when its command is first looked up.

    A run of ``chute preprocess`` then imports what ``preprocess`` needs, not what ``stats``,
    ``validate`` or ``bench`` do (the plans' statistics, the media checks, the benchmarks), and
    typer builds the options of one command, not of all (docs/benchmarks.md, "Commands
    imported when they run"). The names are known without importing anything, so ``--help``
    lists them all, and a mistyped name is still matched against every command.
    """

    def __init__(self, loaded: Mapping[str, _Command]):
        self._loaded = dict(loaded)

    def __getitem__(self, name: str) -> _Command:
        if name not in self._loaded:
            if name not in _COMMANDS:
                raise KeyError(name)
            self._loaded[name] = _load_command(name)
        return self._loaded[name]

    def __setitem__(self, name: str, command: _Command) -> None:
        self._loaded[name] = command

    def __delitem__(self, name: str) -> None:
        del self._loaded[name]

    def __iter__(self) -> Iterator[str]:
        return iter(dict.fromkeys([*_COMMANDS, *self._loaded]))

    def __len__(self) -> int:
        return len(dict.fromkeys([*_COMMANDS, *self._loaded]))


# click's UsageError as typer carries it (its own copy of click): BadParameter's base
_USAGE_ERROR: Any = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")


class _LazyGroup(typer.core.TyperGroup):
    """The ``chute`` group, its commands in a ``_Commands`` mapping (imported on first use)."""

    def __init__(self, *args: object, **kwargs: object):
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.commands = _Commands(self.commands)

    def list_commands(self, ctx: Any) -> list[str]:
        return list(self.commands)  # the names alone: listing them imports nothing

    def invoke(self, ctx: Any) -> Any:
        given = [*getattr(ctx, "_protected_args", ()), *ctx.args]  # before click takes them
        try:
            return super().invoke(ctx)
        except _USAGE_ERROR as exc:
            # a misspelt option fails before the command runs: with --json, stdout still gets
            # the error as its one JSON object, as for the command's own errors
            if "--json" in given:
                from chute.cli._output import emit_json

                emit_json({"error": {"message": exc.format_message(), "exit_code": exc.exit_code}})
            raise


app = typer.Typer(
    name="chute",
    cls=_LazyGroup,
    help="Feed PyTorch training of LLMs from your JSONL / JSON data: check it, measure it, cache "
    "it, and see what the loader does with it. Every command takes --help.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def version() -> str:
    """The installed chute's version."""
    from importlib import metadata  # here: importing it costs every command 25 ms

    try:
        return metadata.version("chute")
    except metadata.PackageNotFoundError:  # running from a source tree
        return "unknown (not installed)"


def _show_version(value: bool) -> None:
    if value:
        typer.echo(f"chute {version()}")
        raise typer.Exit()


@app.callback()
def _main(
    show_version: bool = typer.Option(
        False,
        "--version",
        help="Print chute's version and exit.",
        callback=_show_version,
        is_eager=True,
    ),
) -> None:
    """Feed PyTorch training of LLMs from your JSONL / JSON data.

    index, validate, inspect, stats, preprocess, bench, demo and migrate: every command takes
    --help.
    """


def main(prog_name: str | None = None) -> None:
    """Entry point of the ``chute`` console script (and of ``python -m chute``).

    Run as the ``chute`` program, it ends the process as soon as the command is done: exit
    handlers run and output is flushed as in a normal exit, but the interpreter does not tear
    itself down. That teardown frees a loaded tokenizer object by object (Qwen3's tables: ~0.13 s,
    ``benchmarks/profile_preprocess.py``'s ``start`` part with and without it), time every
    command paid after its work. Called any other way (``python -c``, a test, a notebook), it
    exits as ``typer`` does, with ``SystemExit``.
    """
    try:
        app(prog_name=prog_name)
    except SystemExit as done:
        if _as_program() and (done.code is None or isinstance(done.code, int)):
            _leave(done.code or 0)
        raise


def _as_program() -> bool:
    """True when this process is the ``chute`` program with no non-daemon thread left."""
    name = os.path.basename(sys.argv[0]) if sys.argv else ""
    if name not in ("chute", "chute.exe", "chute-script.py") or sys.flags.interactive:
        return False
    main_thread = threading.main_thread()
    return all(t is main_thread or t.daemon for t in threading.enumerate())


def _leave(code: int) -> None:
    """Exit with ``code`` after what a normal exit does but freeing memory.

    Returns only when flushing the output failed (a closed pipe): the normal exit then reports it.
    """
    atexit._run_exitfuncs()  # logging, multiprocessing and user handlers, as at a normal exit
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):  # a closed pipe: let the normal exit report it
        return
    os._exit(code)

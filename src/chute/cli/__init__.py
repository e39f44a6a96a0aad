"""The ``chute`` command: one console script, one module per subcommand.

Each subcommand lives in ``chute/cli/<name>_cmd.py`` and exposes ``register(app)``; add new ones
to ``_COMMANDS`` below (``chute --help`` lists them all). Commands print human tables by default
and one JSON object with ``--json``; progress goes to stderr so ``--json`` output stays
parseable.
"""

from __future__ import annotations

import atexit
import importlib
import os
import sys
import threading

import typer

__all__ = ["app", "main"]

app = typer.Typer(
    name="chute",
    help="Feed PyTorch training of LLMs from your JSONL / JSON data: check it, measure it, cache "
    "it, and see what the loader does with it. Every command takes --help.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

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

for _name in _COMMANDS:
    importlib.import_module(f"chute.cli.{_name}_cmd").register(app)


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


def main() -> None:
    """Entry point of the ``chute`` console script.

    Run as the ``chute`` program, it ends the process as soon as the command is done: exit
    handlers run and output is flushed as in a normal exit, but the interpreter does not tear
    itself down. That teardown frees a loaded tokenizer object by object (Qwen3's tables: ~0.13 s,
    ``benchmarks/profile_preprocess.py``'s ``start`` part with and without it), time every
    command paid after its work. Called any other way (``python -c``, a test, a notebook), it
    exits as ``typer`` does, with ``SystemExit``.
    """
    try:
        app()
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

"""The ``chute`` command: one console script, one module per subcommand.

Each subcommand lives in ``chute/cli/<name>_cmd.py`` and exposes ``register(app)``; add new ones
to ``_COMMANDS`` below (``chute --help`` lists them all). Commands print human tables by default
and one JSON object with ``--json``; progress goes to stderr so ``--json`` output stays
parseable.
"""

from __future__ import annotations

import importlib

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

_COMMANDS = ["index", "validate", "inspect", "stats", "preprocess", "bench", "demo", "migrate"]

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
    """Entry point of the ``chute`` console script."""
    app()

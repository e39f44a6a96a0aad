"""The ``chute`` command: one console script, one module per subcommand.

Each subcommand lives in ``chute/cli/<name>_cmd.py`` and exposes ``register(app)``; add new ones
to ``_COMMANDS`` below. Commands print human tables by default and one JSON object with
``--json``; progress bars go to stderr so ``--json`` output stays parseable.
"""

from __future__ import annotations

import importlib

import typer

__all__ = ["app", "main"]

app = typer.Typer(
    name="chute",
    help="Feed PyTorch training of LLMs from JSONL: index, validate, inspect, stats, preprocess.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

_COMMANDS = ["index", "validate", "inspect", "stats", "preprocess", "bench", "demo"]

for _name in _COMMANDS:
    importlib.import_module(f"chute.cli.{_name}_cmd").register(app)


def main() -> None:
    """Entry point of the ``chute`` console script."""
    app()

"""``chute demo``: the main job, end to end, on generated data (or yours)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import typer

from chute.cli._options import RecipeArgs, recipe_options
from chute.cli._output import guarded
from chute.errors import ConfigError


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)


@guarded
@recipe_options(
    exclude=("max_length",),  # --max-length is the packed rows' length here, for every run
    help={"tokenizer": "With --data: tokenizer.json, folder or tiktoken file."},
)
def demo(
    out: Path | None = typer.Option(None, help="Working directory (default: a new temp dir)."),
    data: Path | None = typer.Option(
        None, help="Run on your JSONL / JSON instead of generated data (with --tokenizer)."
    ),
    records: int | None = typer.Option(
        None, min=1, help="Generated records (default 3,000; with --data, every record is read)."
    ),
    steps: int = typer.Option(100, help="Training steps."),
    batch_size: int = typer.Option(8, help="Packed rows per batch."),
    max_length: int = typer.Option(256, help="Tokens per packed row (the recipe's max_length)."),
    workers: int = typer.Option(2, help="DataLoader workers."),
    *,
    recipe: RecipeArgs,
) -> None:
    """Index, validate, measure padding, cache, train a tiny model and resume exactly.

    Every step prints what it proves. Exits with status 1 if a claim does not hold (planted
    faults not all found, loss not falling, resumed stream different). With --data and
    --tokenizer it runs on your data, with the recipe options of the other commands (same
    defaults: the tokenizer's chat template, image tokens auto).
    """
    from chute._internal.lazy_torch import require_torch
    from chute.demo import run_demo

    require_torch()  # the demo trains a model: say so before any step runs
    options: dict[str, Any] | None = None
    tokenizer: Path | None = None
    if data is None:
        recipe.refuse_without_tokenizer("leave them out (they apply to --data)")
        if recipe.tokenizer is not None:
            raise ConfigError("--tokenizer applies to --data (the generated data has its own)")
    else:
        _refuse_mixture(data)
        if records is not None:
            raise ConfigError(
                "--records sizes the generated data; with --data the demo reads every record "
                "of your file (give it a smaller file to run on fewer)"
            )
        if recipe.tokenizer is None:
            raise ConfigError(
                "--data needs --tokenizer (a tokenizer.json, folder or tiktoken file)"
            )
        keywords = recipe.keywords()
        tokenizer = Path(keywords.pop("tokenizer"))
        keywords.pop("max_length")
        options = {k: v for k, v in keywords.items() if v not in (None, {}, [])}
        if "media_root" in options:
            options["media_root"] = str(options["media_root"])
    root = out or Path(tempfile.mkdtemp(prefix="chute-demo-"))
    result = run_demo(
        root,
        data=data,
        tokenizer=tokenizer,
        recipe_options=options,
        records=3000 if records is None else records,
        steps=steps,
        batch_size=batch_size,
        max_length=max_length,
        workers=workers,
        echo=typer.echo,
    )
    ok = result.resumed_equal and result.losses[-1] < result.losses[0]
    if data is None:
        ok = ok and result.rejected == result.planted
    if not ok:
        typer.secho("a demo claim did not hold (see above)", fg=typer.colors.RED, err=True)
        raise typer.Exit(1)
    flags = _flags(recipe.given(ignore=("max_length",))) if data is not None else ""
    typer.echo(next_steps(data, recipe.tokenizer, flags, max_length if data is not None else None))


def _flags(given: dict[str, Any]) -> str:
    """The recipe flags as they were typed, to repeat them in the next commands."""
    import shlex

    parts = []
    for flag, value in given.items():
        for one in value if isinstance(value, list | tuple) else [value]:
            parts.append(flag if one is True else f"{flag} {shlex.quote(str(one))}")
    return "".join(f" {p}" for p in parts)


def next_steps(
    data: Path | None,
    tokenizer: str | None,
    flags: str = "",
    max_length: int | None = None,
) -> str:
    """What to run next: the commands of the demo's steps on the user's own data.

    With ``--data`` they name it and repeat the recipe flags the demo ran with (``flags``,
    already spelled) and its ``--max-length``, so each gives what the demo showed; where
    ``chute`` is not on the ``PATH`` (``make demo`` installs it in ``.venv``), a line says how
    to reach it.
    """
    import shutil

    where = str(data) if data is not None else "data.jsonl"
    tok = (tokenizer or "TOKENIZER") + flags  # TOKENIZER: a tokenizer.json, its folder, ...
    length = f" --max-length {max_length}" if max_length else ""
    lines = ["", "Next, on your own data (TOKENIZER: a tokenizer.json or the folder holding it):"]
    if shutil.which("chute") is None:
        lines.append(
            "  (chute is in the virtualenv: run `source .venv/bin/activate` first, or call "
            "it as .venv/bin/chute)"
        )
    rows = [
        ("every bad record", f"chute validate {where} --tokenizer {tok}{length}"),
        ("one as the model sees it", f"chute inspect {where} --tokenizer {tok}{length} -i 0"),
        (
            "padding of every plan",
            f"chute stats {where} --tokenizer {tok} --max-length {max_length or 4096} "
            f"--batch-size 8",
        ),
        ("the token cache", "chute preprocess config.yaml --out cache/  (docs/cache.md)"),
        ("this demo on it", f"chute demo --data {where} --tokenizer {tok}{length}"),
    ]
    width = max(len(why) for why, _ in rows) + 1
    lines += [f"  {why + ':':<{width}}  {cmd}" for why, cmd in rows]
    lines.append("The same steps by hand, in Python: docs/quickstart.md")
    return "\n".join(lines)


def _refuse_mixture(data: Path) -> None:
    """The demo runs on one data file: a mixture YAML is named, with the commands that take it."""
    from chute.mixture import is_mixture_config

    if is_mixture_config(data):
        raise ConfigError(
            f"--data: {data} is a mixture YAML; chute demo runs on one JSONL / JSON data file "
            f"(pass one of its datasets' files, with --tokenizer); the mixture itself goes to "
            f"chute index, validate, inspect, stats, bench and preprocess ({data} [key=value ...])"
        )
    if data.suffix in (".yaml", ".yml"):
        raise ConfigError(
            f"--data: {data} is a YAML file, not data; chute demo runs on one JSONL / JSON data "
            f"file (with --tokenizer)"
        )

"""``chute demo``: the main job, end to end, on generated data (or yours)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import typer

from chute.cli._output import guarded


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)


@guarded
def demo(
    out: Path | None = typer.Option(None, help="Working directory (default: a new temp dir)."),
    data: Path | None = typer.Option(
        None, help="Run on your JSONL / JSON instead of generated data."
    ),
    tokenizer: Path | None = typer.Option(
        None, help="With --data: tokenizer.json, folder or tiktoken file."
    ),
    template: str = typer.Option(
        "chatml", help="With --data: chat template (built-in name, .jinja, tokenizer_config.json)."
    ),
    format: str = typer.Option("auto", "--format", help="With --data: record format."),
    image_tokens: int | None = typer.Option(
        None, help="With --data: image tokens per image (fixed count)."
    ),
    media_root: Path | None = typer.Option(
        None, help="With --data: folder image paths are relative to."
    ),
    records: int = typer.Option(3000, help="Generated records."),
    steps: int = typer.Option(100, help="Training steps."),
    batch_size: int = typer.Option(8, help="Packed rows per batch."),
    max_length: int = typer.Option(256, help="Tokens per packed row."),
    workers: int = typer.Option(2, help="DataLoader workers."),
) -> None:
    """Index, validate, measure padding, cache, train a tiny model and resume exactly.

    Every step prints what it proves. Exits with status 1 if a claim does not hold (planted
    faults not all found, loss not falling, resumed stream different).
    """
    from chute.demo import run_demo

    root = out or Path(tempfile.mkdtemp(prefix="chute-demo-"))
    options: dict[str, Any] | None = None
    if data is not None:
        options = {"template": template, "format": format}
        if image_tokens is not None:
            options["image_tokens"] = image_tokens
        if media_root is not None:
            options["media_root"] = str(media_root)
    result = run_demo(
        root,
        data=data,
        tokenizer=tokenizer,
        recipe_options=options,
        records=records,
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

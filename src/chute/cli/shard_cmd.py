"""``chute shard DATA... --out DIR``: records and the images they reference into tar shards.

The shards are WebDataset tar files (``train-000000.tar``, ...) of about ``--shard-size``
bytes, each written under a temporary name and renamed (or uploaded whole, for an
``s3://...`` output) once complete; they read back through every command and the ``Loader``
as the same records, sample ids included (``chute.recipe.shards``).
"""

from __future__ import annotations

import time
from pathlib import Path

import typer

from chute.cli._options import CACHE_DIR, OutputArgs, output_options
from chute.cli._output import emit_json, guarded, progress_bar, table


def register(app: typer.Typer) -> None:
    app.command("shard")(shard)


@guarded
@output_options
def shard(
    paths: list[str] = typer.Argument(
        ..., help="JSONL / JSON / Parquet files, globs or URLs: the records to write."
    ),
    out: str = typer.Option(
        ..., "--out", "-o", help="Output folder, or an fsspec URL (s3://bucket/shards)."
    ),
    shard_size: str = typer.Option(
        "256MB",
        "--shard-size",
        help="Bytes per shard: 256MB, 1GB, 512MiB (a larger sample gets a shard of its own).",
    ),
    prefix: str = typer.Option("train", "--prefix", help="Shard names: PREFIX-000000.tar, ..."),
    format: str = typer.Option(
        "auto", "--format", help="The records' format (finds their media references)."
    ),
    media_root: str | None = typer.Option(
        None,
        "--media-root",
        help="Folder relative media paths resolve against (default: each "
        "data file's folder), as for the recipe.",
    ),
    cache_dir: Path | None = CACHE_DIR,
    *,
    output: OutputArgs,
) -> None:
    """Write records and their media into WebDataset tar shards.

    Each record becomes one sample: its JSON (media references rewritten to the members) and
    each image, video or audio clip it references. A record whose media cannot be read is
    skipped and counted; the exit status is then 1.
    """
    from chute.recipe.shards import write_shards
    from chute.sources import open_source

    source = open_source(paths, cache_dir=cache_dir)
    t0 = time.perf_counter()
    with progress_bar(len(source), "sharding", unit="records", enabled=output.progress) as bar:
        report = write_shards(
            source,
            out,
            shard_size=shard_size,
            prefix=prefix,
            format=format,
            media_root=media_root,
            progress=bar.update,
        )
    summary = {**report.to_json(), "seconds": round(time.perf_counter() - t0, 3)}
    code = 1 if report.tally.total else 0
    if output.as_json:
        emit_json(summary)
        raise typer.Exit(code)
    rows = [[s["name"], s["samples"], s["bytes"]] for s in report.shards]
    typer.echo(table(["shard", "samples", "bytes"], rows))
    typer.echo(
        f"\n{report.samples:,} samples ({report.media:,} media files) in "
        f"{len(report.shards)} shards under {out}; {report.tally.total:,} records skipped"
    )
    if report.tally.total:
        typer.echo(report.tally.summary())
    raise typer.Exit(code)

"""``chute demo``: the main job on data it generates. Grows as chute's stages land."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import typer

from chute.cli._output import guarded, table
from chute.demo_data import write_demo_dataset, write_demo_tokenizer
from chute.errors import FingerprintMismatch
from chute.sources import JsonlSource
from chute.validate import validate_source


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)


@guarded
def demo(
    out: Path | None = typer.Option(
        None, help="Directory for the generated data (default: a temp dir)."
    ),
    records: int = typer.Option(20_000, help="How many records to generate."),
) -> None:
    """Generate a dataset with planted broken lines, index it, validate it, cache it."""
    root = out or Path(tempfile.mkdtemp(prefix="chute-demo-"))
    root.mkdir(parents=True, exist_ok=True)
    typer.secho("1. Generate a JSONL dataset with a few planted broken lines", bold=True)
    path, planted = write_demo_dataset(root / "demo.jsonl", records)
    typer.echo(
        f"   {path} ({path.stat().st_size / 1e6:.1f} MB, {records:,} records, {len(planted)} broken)"
    )

    typer.secho("\n2. Index it: a byte offset per record, cached, memory-mapped on read", bold=True)
    t0 = time.perf_counter()
    source = JsonlSource(path, cache_dir=root / "cache", rebuild=True)
    dt = time.perf_counter() - t0
    typer.echo(
        f"   {len(source):,} records, {source.blank_lines} blank lines, indexed in {dt:.3f} s"
    )
    mid = len(source) // 2
    typer.echo(f"   random access: record {mid} is at {source[mid].location}")

    typer.secho(
        "\n3. Validate every record in parallel; bad lines are counted, never fatal", bold=True
    )
    report = validate_source(source, rejects=root / "rejects.jsonl")
    typer.echo(f"   {report.valid:,} valid, {report.rejected} rejected (planted: {len(planted)})")
    typer.echo(table(["reason", "records"], [[k, n] for k, n in report.tally.counts.most_common()]))
    typer.echo(f"   rejects with file:line and reason: {report.rejects_path}")
    if report.rejected != len(planted):
        raise typer.Exit(1)

    typer.secho(
        "\n4. Tokenize it once into a cache: chunks committed atomically, resumable", bold=True
    )
    from chute.cache import open_cache, preprocess

    recipe = {
        "tokenizer": str(write_demo_tokenizer(root / "tokenizer")),
        "template": "chatml",
        "max_length": 512,
    }
    built = preprocess(
        sources=[str(path)], recipe=recipe, out=root / "token-cache", overwrite=True
    ).to_json()
    typer.echo(
        f"   {built['samples']:,} samples, {built['rejected']} rejected, {built['tokens']:,} "
        f"tokens in {built['chunks']} chunks ({built['bytes_per_token']} bytes/token), "
        f"{built['seconds']:.2f} s"
    )
    cache = open_cache(root / "token-cache", recipe=recipe)
    lengths = cache.lengths
    typer.echo(
        f"   lengths memory-mapped for the plans: mean {lengths.mean():.0f}, longest "
        f"{lengths.max()}; sample 0 came from {cache[0]['path']}:{cache[0]['line']}"
    )
    try:
        open_cache(root / "token-cache", recipe={**recipe, "max_length": 1024})
    except FingerprintMismatch as exc:
        typer.echo(f"   a stale cache is refused: {str(exc).splitlines()[1].strip()}")

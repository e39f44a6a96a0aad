"""``chute preprocess CONFIG.yaml --out DIR [key=value ...]``: build (or finish) a token cache.

Runs the config's recipe over every record with a pool of processes (or Ray tasks with
``--engine ray``), one chunk at a time, each committed atomically; running the same command
again after a crash resumes at the first uncommitted chunk. Under torchrun (``RANK``/``WORLD_SIZE``) or with ``--shard i/N`` each rank
builds its share into the same directory; the last to finish writes the manifest.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer

from chute.cli._options import OutputArgs, output_options
from chute.cli._output import emit_json, guarded, shown, table


def register(app: typer.Typer) -> None:
    app.command("preprocess")(preprocess)


@guarded
@output_options
def preprocess(
    config: Path = typer.Argument(..., help="YAML config: sources, recipe, cache options."),
    overrides: list[str] | None = typer.Argument(
        None, help="Dotted overrides of config keys, e.g. recipe.max_length=4096."
    ),
    out: str | None = typer.Option(
        None,
        "--out",
        "-o",
        help="The cache directory, or a URL (s3://bucket/caches/run1); default: the config's out.",
    ),
    workers: int | None = typer.Option(
        None, min=1, help="Processes on this rank (default: this machine's cores / ranks on it)."
    ),
    shard: str | None = typer.Option(
        None, help="Build share i of N (e.g. 0/4); default: RANK/WORLD_SIZE, else everything."
    ),
    full_hash: bool | None = typer.Option(
        None, "--full-hash/--no-full-hash", help="Hash every source file whole (slower, exact)."
    ),
    wait_timeout: float | None = typer.Option(
        None, help="Seconds to wait for other ranks' chunks after this rank's (default 3600)."
    ),
    overwrite: bool = typer.Option(
        False, "--overwrite", help="Delete a cache of another config in --out first."
    ),
    pixels: bool = typer.Option(
        False,
        "--pixels",
        help="Also store every image decoded and resized (uint8), so training reads no JPEG.",
    ),
    image_size: int | None = typer.Option(
        None,
        "--image-size",
        help="With --pixels: resize images to this (shorter side, then a square center crop).",
    ),
    image_transform: str | None = typer.Option(
        None,
        "--image-transform",
        help="With --pixels: fixed (one size) or dynamic (Qwen2-VL; default when the recipe "
        "counts image tokens from image sizes).",
    ),
    engine: str | None = typer.Option(
        None,
        "--engine",
        help="Where chunks run: local (processes on this machine; default) or ray (Ray tasks, "
        "pip install 'chute[ray]'). Same cache either way.",
    ),
    address: str | None = typer.Option(
        None,
        "--address",
        help="With --engine ray: the Ray cluster (auto, host:6379, ray://host:10001); default "
        "RAY_ADDRESS, else a local Ray with this machine's cores.",
    ),
    *,
    output: OutputArgs,
) -> None:
    """Tokenize every record once, into a fingerprinted, memory-mappable cache.

    Open it with chute.open_cache(DIR) or train from it with Loader(open_cache(DIR)); a
    changed source, tokenizer, template or max_length is refused there, naming the field.
    A mixture config (with datasets:) builds one cache per dataset in DIR/<name>; weights
    are not part of any cache, so changing them rebuilds nothing (docs/mixtures.md).
    """
    from chute.cache.config import ENGINES
    from chute.errors import ConfigError
    from chute.mixture import preprocess_any as run

    options: dict[str, Any] = {}
    if image_transform is not None:
        options["transform"] = image_transform
    if image_size is not None:
        options["size"] = image_size
    if options and not pixels:
        raise ConfigError("--image-size and --image-transform set up --pixels; add --pixels")
    if engine is not None and engine not in ENGINES:
        raise ConfigError(f"--engine: expected one of {', '.join(ENGINES)}, got {engine!r}")
    # stdout carries the summary (or the JSON) alone: what workers print while the build runs
    # (Ray echoes its workers' and raylets' logs into the driver's stdout) goes to stderr
    with contextlib.redirect_stdout(sys.stderr), _interruptible():
        report = run(
            config,
            out=out,
            overrides=overrides or [],
            workers=workers,
            shard=shard,
            full_hash=full_hash,
            wait_timeout=wait_timeout,
            overwrite=overwrite,
            pixels=options or pixels,
            progress=shown(output.progress),
            engine=engine,
            address=address,
        )
    if output.as_json:
        emit_json(report.to_json())
        return
    data = report.to_json()
    if "datasets" not in data:
        _print(data)
        return
    for name, r in data["datasets"].items():  # a mixture: one cache per dataset
        typer.echo(f"== dataset {name}")
        _print(r)
        typer.echo("")
    done = "complete" if data["finalized"] else "not complete (other ranks finish it)"
    typer.echo(f"mixture caches: {data['path']} ({done}); Loader(open_cache(DIR)) reads them")


@contextlib.contextmanager
def _interruptible() -> Iterator[None]:
    """An interrupt (Ctrl-C, SIGINT) ends the command with 130 and how to go on, no traceback.

    By then the workers are stopped (``chute._internal.pools.stop_pool``) and every chunk
    committed stays committed: the same command resumes.
    """
    try:
        yield
    except KeyboardInterrupt:
        typer.echo("interrupted; run the same command to resume", err=True)
        raise typer.Exit(130) from None


def _print(r: dict[str, Any]) -> None:
    i, n = r["shard"]
    who = "this run wrote the manifest" if r["finalized"] else "complete"
    typer.echo(f"cache: {r['path']} ({who})")
    typer.echo(
        f"{r['records']:,} records -> {r['samples']:,} samples, {r['rejected']:,} rejected; "
        f"{r['tokens']:,} tokens ({r['trained_tokens']:,} trained), {r['bytes'] / 1e6:,.1f} MB "
        f"({r['bytes_per_token']} bytes/token)"
    )
    if r.get("untrained_windows"):
        typer.echo(
            f"{r['untrained_windows']:,} windows of split records held no trained token (a "
            f"prompt longer than max_length) and were left out"
        )
    rate = f", {r['records_per_s']:,} records/s" if r["records_per_s"] and r["chunks_built"] else ""
    typer.echo(
        f"shard {i}/{n}: built {r['chunks_built']} chunk(s), reused {r['chunks_reused']} already "
        f"committed, in {r['seconds']:.2f} s{rate}; {r['chunks']} chunks in all"
    )
    if not r["engine"].startswith("local"):
        typer.echo(f"engine: {r['engine']}")
    px = r.get("stage_outputs", {}).get("pixels")
    if px:
        failed = sum((px.get("failures") or {}).values())
        typer.echo(
            f"pixels: {px['images']:,} images pre-decoded ({px['bytes'] / 1e6:,.1f} MB of uint8)"
            + (f"; {failed:,} could not be (see pixels/failures.jsonl)" if failed else "")
        )
    if r["rejected"]:
        rows = [
            [kind, count] for kind, count in sorted(r["by_reason"].items(), key=lambda x: -x[1])
        ]
        typer.echo("\n" + table(["reason", "records"], rows))
        for kind, _ in rows:
            typer.echo(f"\n{kind}:")
            for example in r["examples"].get(kind, []):
                typer.echo(f"  {example}")
        typer.echo(f"\nrejected records: {r['path'].rstrip('/')}/rejects.jsonl")

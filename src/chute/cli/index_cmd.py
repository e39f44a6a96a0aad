"""``chute index PATH...``: build (or check) the byte-offset index of each data file.

Tar shards (WebDataset layout) get their member index (key -> member offsets and sizes).

Parquet files carry their own index (the row groups in the footer): they are listed with their
rows and row groups, nothing is built. URLs (``s3://...``) are indexed like local files.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import typer

from chute._internal.tables import rate
from chute.cli._data import open_data_files
from chute.cli._options import CACHE_DIR, OutputArgs, output_options
from chute.cli._output import emit_json, guarded, progress_bar, table
from chute.sources import expand_paths, open_parquet
from chute.sources.base import is_parquet


def register(app: typer.Typer) -> None:
    app.command("index")(index)


@guarded
@output_options
def index(
    paths: list[str] = typer.Argument(
        ...,
        help="JSONL / JSON-array / Parquet files, globs or URLs (s3://bucket/*.jsonl), or a "
        "mixture YAML (every dataset's files) and key=value overrides of its keys.",
    ),
    cache_dir: Path | None = CACHE_DIR,
    rebuild: bool = typer.Option(
        False, "--rebuild", help="Rebuild even when a valid index exists."
    ),
    *,
    output: OutputArgs,
) -> None:
    """Index data files: records, blank lines, bytes and scan speed.

    An index is reused while the file is unchanged (size, mtime, bytes at both ends); pass
    --rebuild to time a fresh scan. A file that holds no records (e.g. a dataset_info.json a
    glob caught) is reported and skipped; the others are indexed, and the exit status is 1.
    """
    from chute.cli._mixture_args import mixture_args
    from chute.cli._mixture_views import mixture_files

    mixture = mixture_args(paths, "index")
    files = mixture_files(mixture) if mixture is not None else expand_paths(paths)
    total_bytes = sum(Path(p).stat().st_size for p in files if Path(p).is_file())
    rows: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    with progress_bar(total_bytes, "indexing", enabled=output.progress) as bar:
        data = open_data_files(files, cache_dir=cache_dir, rebuild=rebuild, progress=bar.update)
    for p, ix in zip(data.paths, data.indexes, strict=True):
        if is_parquet(p):
            rows.append(_parquet_row(p))
            continue
        if ix.kind == "tar":
            rows.append(_tar_row(p, ix))
            continue
        rows.append(
            {
                "path": p,
                "kind": ix.kind,
                "records": len(ix),
                "blank_lines": ix.blank_lines,
                "bytes": ix.bytes,
                "seconds": round(ix.seconds, 4),
                "built": ix.built,
                "closed": ix.closed,
            }
        )
    seconds = time.perf_counter() - t0
    built_bytes = sum(r["bytes"] for r in rows if r["built"])
    built_seconds = sum(r["seconds"] for r in rows if r["built"])
    summary: dict[str, Any] = {
        "records": sum(r["records"] for r in rows),
        "blank_lines": sum(r["blank_lines"] for r in rows),
        "bytes": sum(r["bytes"] for r in rows),
        "seconds": round(seconds, 4),
        "gb_per_s": round(built_bytes / built_seconds / 1e9, 3) if built_seconds > 0 else None,
        "files": rows,
        "skipped": data.to_json(),
    }
    data.warn()
    if output.as_json:
        emit_json(summary)
        raise typer.Exit(data.exit_code())
    body = [
        [
            r["path"],
            r["kind"],
            r["records"],
            r["blank_lines"],
            _size(r["bytes"]),
            r.get("index") or ("built" if r["built"] else "up to date"),
            r["seconds"],
        ]
        for r in rows
    ]
    typer.echo(table(["file", "kind", "records", "blank", "size", "index", "seconds"], body))
    for r in rows:
        if not r["closed"]:
            typer.secho(
                f"warning: {r['path']}: the JSON array is not closed (truncated file?)", fg="yellow"
            )
    if summary["gb_per_s"] is None:
        speed = " (all indexes were up to date)"
    else:
        speed = f", {rate(built_bytes / built_seconds / 1e9)} GB/s"
    typer.echo(
        f"\n{summary['records']:,} records, {summary['blank_lines']:,} blank lines, "
        f"{_size(summary['bytes'])} in {seconds:.3f} s{speed}"
    )
    raise typer.Exit(data.exit_code())


def _parquet_row(path: str) -> dict[str, Any]:
    t0 = time.perf_counter()
    pf = open_parquet(path)
    return {
        "path": path,
        "kind": "parquet",
        "records": len(pf),
        "blank_lines": 0,
        "bytes": pf.bytes,
        "seconds": round(time.perf_counter() - t0, 4),
        "built": False,
        "closed": True,
        "row_groups": pf.row_groups,
        "index": f"footer: {pf.row_groups} row groups",
    }


def _tar_row(path: str, ix: Any) -> dict[str, Any]:
    return {
        "path": path,
        "kind": "tar",
        "records": len(ix),
        "blank_lines": 0,
        "bytes": ix.bytes,
        "seconds": round(ix.seconds, 4),
        "built": ix.built,
        "closed": True,
        "members": len(ix.members),
        "index": f"{len(ix.members)} members" + (", built" if ix.built else ""),
    }


def _size(n: float) -> str:
    """``1234567`` -> ``1.2 MB`` (decimal units)."""
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"

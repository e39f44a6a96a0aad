"""``chute validate`` and ``chute inspect`` on a cache directory instead of data files.

* ``validate DIR``: every file hashed against its commit record, lengths checked, sources
  checked, the build's rejects summarised (``--rejects`` copies them out); with recipe options,
  the recipe checked against the one that built the cache. Problems exit with status 1.
* ``inspect DIR --index I``: one cached sample decoded with the cache's tokenizer (or
  ``--tokenizer``), trained tokens marked, with the record it came from.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

import typer

from chute.cli._output import emit_json, progress_bar, table
from chute.cli._render import decode_marked, pretty_sample, sample_summary
from chute.errors import ConfigError

__all__ = ["inspect_cache", "validate_cache", "warn_if_stale"]


def validate_cache(
    path: str,
    *,
    recipe: Any,
    rejects: Path | None,
    strict: bool,
    as_json: bool,
    quiet: bool,
) -> None:
    from chute.cache.verify import verify_cache

    manifest_bytes = _manifest_bytes(path)
    with progress_bar(manifest_bytes, "verifying", enabled=not (quiet or as_json)) as bar:
        check = verify_cache(path, recipe, progress=bar.update)
    m = check.manifest
    if rejects is not None and m:
        shutil.copyfile(Path(path) / "rejects.jsonl", rejects)
    failed = not check.ok or bool(strict and m.get("rejected"))
    summary = {
        "target": "cache",
        "ok": not failed,
        "records": m.get("records"),
        "valid": m.get("samples"),
        "rejected": m.get("rejected"),
        "by_reason": m.get("by_reason", {}),
        "examples": m.get("examples", {}),
        "rejects_file": str(rejects) if rejects is not None and m else None,
        "cache": check.to_json(),
    }
    if as_json:
        emit_json(summary)
    else:
        _print_check(check, summary)
    if failed:
        raise typer.Exit(1)


def _manifest_bytes(path: str) -> int:
    from chute.cache.layout import Layout

    layout = Layout(path)
    manifest = layout.read_json(layout.manifest)
    if not isinstance(manifest, dict):
        return 0
    return sum(f["bytes"] for c in manifest.get("chunks", []) for f in c["files"].values())


def _print_check(check: Any, summary: dict[str, Any]) -> None:
    typer.echo(f"cache: {check.path}")
    if summary["records"] is not None:
        typer.echo(
            f"{summary['records']:,} records -> {summary['valid']:,} samples, "
            f"{summary['rejected']:,} rejected when it was built"
        )
    if summary["by_reason"]:
        rows = sorted(summary["by_reason"].items(), key=lambda kv: -kv[1])
        typer.echo("\n" + table(["reason", "records"], [list(r) for r in rows]))
    typer.echo(
        f"\n{check.chunks} chunks, {check.bytes_read / 1e6:,.1f} MB read and hashed: "
        + ("all files intact" if check.ok else f"{len(check.problems)} problem(s)")
    )
    for problem in check.problems:
        typer.secho(f"  {problem}", fg="red")
    if summary["rejects_file"] and summary["rejected"]:
        typer.echo(f"\nrejected records written to {summary['rejects_file']}")
    elif summary["rejects_file"]:
        typer.echo(f"\nno record was rejected ({summary['rejects_file']} is empty)")


def warn_if_stale(cache: Any) -> None:
    """Say on stderr when a cache's local source files changed since it was built.

    ``stats`` and ``inspect`` read a cache as it was built (``verify_sources=False``); a
    warning says it no longer matches its files (``chute validate DIR`` names each change).
    Whole-file hashes and objects in storage are left to ``validate``: too costly for a look.
    """
    from chute._internal.remote import is_url
    from chute.cache.fingerprint import source_changes

    sources = cache.manifest["fingerprint"]["sources"]
    if sources.get("full_hash"):
        return
    local = {**sources, "files": [f for f in sources.get("files", []) if not is_url(f["path"])]}
    changed = source_changes(local)
    if changed:
        names = sorted({name.split(": ")[0].removeprefix("source ") for name, _, _ in changed})
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        typer.secho(
            f"warning: {cache.root}: built from files that changed since ({shown}): this is "
            f"the cache as built; `chute validate {cache.root}` names each change, and chute "
            f"preprocess rebuilds it",
            err=True,
            fg=typer.colors.YELLOW,
        )


def inspect_cache(path: str, index: int, tokenizer: str | None, as_json: bool, color: Any) -> None:
    from chute.cache import open_cache
    from chute.tokenize import load_tokenizer

    cache = open_cache(path, verify_sources=False)
    warn_if_stale(cache)
    try:
        sample = cache[index]
    except IndexError:
        raise ConfigError(
            f"--index: {index} is out of range; {path} has {len(cache)} samples"
        ) from None
    stored = cache.recipe_config().recipe
    tok = load_tokenizer(
        tokenizer or stored.tokenizer, special_tokens=stored.special_tokens or None
    )
    ids, labels = sample["input_ids"], sample["labels"]
    trained = labels != -100
    summary = sample_summary(sample)
    where = f"{sample['path']}:{sample['line']}"
    if as_json:
        emit_json(
            {
                "cache": str(cache.root),
                "sample": index % len(cache),
                "path": sample["path"],
                "line": sample["line"],
                "index": sample["index"],
                "format": stored.format,
                "template": stored.template,
                "input_ids": ids.tolist(),
                "labels": labels.tolist(),
                "text": decode_marked(tok, ids),
                "trained_text": decode_marked(tok, ids[trained]),
                **summary,
                "tokenizer_engine": tok.engine,
                "image_refs": sample["images"],
                "videos": sample["videos"],
                "audios": sample["audios"],
            }
        )
        return
    use_color = sys.stdout.isatty() if color is None else color
    typer.secho(
        f"{cache.root}: sample {index % len(cache)} of {len(cache)}, from {where} (record "
        f"{sample['index']})",
        bold=True,
    )
    rule = "-" * 78
    typer.echo(rule)
    typer.echo(pretty_sample(tok, ids, labels, sample["images"], use_color), color=use_color)
    typer.echo(rule)
    legend = "green" if use_color else "[[...]]"
    typer.echo(
        f"tokens {summary['length']:,}: trained {summary['trained']:,} ({legend}), masked "
        f"{summary['masked']:,}; images {summary['images']} ({summary['image_tokens']:,} "
        f"tokens); truncated: {'yes' if summary['truncated'] else 'no'}"
    )

"""``chute validate --overlap A B ...``: exact duplicates within and between groups of records.

Each argument is a group: a data file or glob (read with ``--format``/``--columns``/``--tags``,
default auto), or a mixture YAML, whose datasets are groups (``name:train`` and ``name:val`` for
datasets with ``val``). Prints records, unique contents and in-group duplicates per group, the
contents each pair of groups shares, and examples with ``path:line``; ``--rejects FILE`` writes
one rejects-file line per duplicate. Exit status 1 when two groups share content (leakage), or
with ``--strict`` when any record is a duplicate.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from chute.cli._mixture_args import is_override
from chute.cli._output import emit_json, table
from chute.errors import ConfigError
from chute.formats import FormatSpec
from chute.mixture.config import Mixture, is_mixture_config
from chute.mixture.opened import open_mixture
from chute.mixture.overlap import Group, find_duplicates, mixture_groups


def groups_of(paths: list[str], spec: FormatSpec, cache_dir: Path | None) -> list[Group]:
    """One group per data argument; a mixture YAML gives one per dataset (and split).

    ``key=value`` items after a mixture YAML override its keys, as for every command that
    reads one (``mix.yaml datasets.alpaca.val=0.05``).
    """
    from chute.sources import open_source

    items: list[tuple[str, list[str]]] = []
    for path in paths:
        if is_override(path):
            if not items or not is_mixture_config(items[-1][0]):
                raise ConfigError(
                    f"{path}: a key=value override follows the mixture YAML whose key it sets "
                    f"(chute validate --overlap mix.yaml {path})"
                )
            items[-1][1].append(path)
        else:
            items.append((path, []))
    out: list[Group] = []
    for path, overrides in items:
        if is_mixture_config(path):
            opened = open_mixture(
                Mixture.load(path, overrides), cache_dir=cache_dir, records_only=True
            )
            out += mixture_groups(opened)
        else:
            out.append(Group(path, open_source(path, cache_dir=cache_dir), spec))
    return out


def run_overlap(
    paths: list[str],
    spec: FormatSpec,
    *,
    rejects: Path | None,
    workers: int | None,
    cache_dir: Path | None,
    max_memory_mb: int,
    strict: bool,
    as_json: bool,
    progress: bool | None,
) -> None:
    """Check ``paths`` for duplicates, print the report, exit 1 on leakage (see module)."""
    groups = groups_of(paths, spec, cache_dir)
    report = find_duplicates(
        groups,
        rejects=rejects,
        max_memory=max_memory_mb << 20,
        workers=workers,
        cache_dir=cache_dir,
        progress=progress,
    )
    shared = {pair: v for pair, v in report.between.items() if v["contents"]}
    failed = bool(shared) or bool(strict and report.duplicates)
    if as_json:
        emit_json({"target": "overlap", "ok": not failed, **report.to_json()})
    else:
        _print(report.to_json(), shared)
    if failed:
        raise typer.Exit(1)


def _print(r: dict[str, Any], shared: dict[str, Any]) -> None:
    total = sum(r["records"].values())
    typer.echo(
        f"{total:,} records in {len(r['groups'])} group(s) hashed in {r['seconds']:.2f} s "
        f"({r['records_per_s']:,} records/s, {r['partitions']} partition(s)); "
        f"{r['duplicates']:,} duplicate record(s)"
    )
    rows = [[g, r["records"][g], r["unique"][g], r["within"][g]] for g in r["groups"]]
    typer.echo("\n" + table(["group", "records", "unique", "repeats inside"], rows))
    if shared:
        rows = []
        for pair, v in shared.items():
            a, b = pair.split("|")
            rows.append([a, b, v["contents"], v[f"records_{a}"], v[f"records_{b}"]])
        typer.echo("\nshared between groups (leakage):")
        typer.echo(table(["group", "other", "contents", "records", "records (other)"], rows))
    else:
        typer.echo("\nno content is shared between groups")
    if r["examples"]:
        typer.echo("\nexamples (every copy of one content):")
        for example in r["examples"]:
            typer.echo("  " + "\n    = ".join(example))
    if r["rejects"]:
        typer.echo(f"\nduplicate records written to {r['rejects']}")

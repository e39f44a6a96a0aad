"""``chute validate``, ``inspect`` and ``index`` on a mixture YAML instead of data files.

* ``validate MIXTURE [key=value ...]``: every dataset's records through its own recipe (the
  mixture's, the dataset's options over it), every image decoded; a table per dataset, then
  the whole mixture's report. Exit status 1 when the whole or any one dataset rejects more
  than ``--max-bad-fraction`` (the Loader reads each dataset in its share of every epoch).
* ``inspect MIXTURE --index I [--dataset NAME]``: record ``I`` of a dataset (default: of the
  datasets laid end to end, as the Loader numbers them) with that dataset's recipe.
* ``index MIXTURE``: the files of every dataset.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from chute.cli._mixture_args import MixtureArgs
from chute.cli._output import emit_json, shown, table
from chute.errors import ConfigError

__all__ = ["mixture_files", "mixture_record", "validate_mixture"]


def _open(mixture: MixtureArgs, command: str) -> Any:
    """The ``Mixture`` of a YAML (a folder of caches is refused, naming what to run instead)."""
    if mixture.cached:
        raise ConfigError(
            f"{mixture.path} holds the caches of a mixture: chute {command} reads the mixture "
            f"YAML (chute {command} {Path(mixture.path) / 'mixture.yaml'}), or one cache "
            f"(chute {command} {Path(mixture.path) / 'NAME'})"
        )
    return mixture.load()


def _source(dataset: Any, cache_dir: Path | None) -> Any:
    from chute.sources import open_source

    try:
        return open_source(dataset.sources, cache_dir=cache_dir)
    except ConfigError as exc:
        raise ConfigError(f"dataset {dataset.name!r}: {exc}") from None


def mixture_files(mixture: MixtureArgs) -> list[str]:
    """Every file of every dataset, in the mixture's order (``chute index MIXTURE``)."""
    from chute.sources import expand_paths

    out: list[str] = []
    for dataset in _open(mixture, "index"):
        out.extend(p for p in expand_paths(dataset.sources) if p not in out)
    return out


def mixture_record(
    mixture: MixtureArgs, index: int, dataset: str | None, cache_dir: Path | None
) -> tuple[Any, Any, Any, str]:
    """``(recipe, source, record, dataset name)`` of record ``index`` (``chute inspect``).

    Args:
        mixture: the mixture and its overrides.
        index: the record (negative: from the end), of ``dataset`` or of the datasets end to end.
        dataset: a dataset's name, or ``None``.
        cache_dir: the index cache.
    """
    from chute.mixture.opened import build_recipes

    mix = _open(mixture, "inspect")
    if dataset is not None and dataset not in mix.names:
        raise ConfigError(
            f"--dataset: {dataset!r} is not a dataset of {mixture.path}; it has "
            f"{', '.join(mix.names)}"
        )
    recipes = build_recipes(mix)
    if recipes is None:
        raise ConfigError(
            f"{mixture.path} has no recipe (its records are taken as pre-tokenized): give it "
            f"recipe: {{tokenizer: ...}} (or the override recipe.tokenizer=PATH) to inspect "
            f"records as the model sees them"
        )
    names = [dataset] if dataset is not None else mix.names
    sources = {name: _source(mix[name], cache_dir) for name in names}
    total = sum(len(s) for s in sources.values())
    where = f"dataset {dataset!r}" if dataset is not None else f"{mixture.path} (all datasets)"
    if not -total <= index < total:
        raise ConfigError(f"--index: {index} is out of range; {where} has {total} records")
    local = index % total if total else 0
    for name in names:
        if local < len(sources[name]):
            return recipes[mix.names.index(name)], sources[name], sources[name][local], name
        local -= len(sources[name])
    raise AssertionError("unreachable: the index is in range")  # pragma: no cover


def validate_mixture(
    mixture: MixtureArgs,
    *,
    rejects: Path | None,
    workers: int | None,
    cache_dir: Path | None,
    decode: bool,
    strict: bool,
    max_bad_fraction: float | None,
    as_json: bool,
    progress: bool,
    print_report: Callable[[Any], None],
) -> None:
    """Validate every dataset with its own recipe, report per dataset and in all, and exit.

    ``print_report`` prints a ``ValidationReport`` as ``chute validate`` does for data files.
    """
    from chute._spelling import spelling
    from chute.media.check import MediaCheck
    from chute.mixture.opened import build_recipes, dataset_spelling
    from chute.recipe.outcome import SampleCheck
    from chute.recipe.validate import ValidationReport, check_json_object, validate_source
    from chute.sample.budget import ErrorBudget

    budget = ErrorBudget(max_bad_fraction=max_bad_fraction)  # checks the value, names the flag
    mix = _open(mixture, "validate")
    recipes = build_recipes(mix)
    described = f"mixture {mixture.describe()}: " + (
        "each dataset's recipe" + (", media decoded" if decode else "")
        if recipes is not None
        else "JSON objects (no recipe: records taken as pre-tokenized)"
    )
    reports: dict[str, Any] = {}
    parts = Path(tempfile.mkdtemp(prefix="chute-rejects-")) if rejects is not None else None
    try:
        for d, dataset in enumerate(mix):
            check: Any = check_json_object
            if recipes is not None:
                check = SampleCheck(recipes[d])
                if decode:
                    check = MediaCheck(check)
            # a message's fix names the dataset's key (datasets.NAME.media_root), not a flag
            # the mixture refuses
            with spelling(dataset_spelling(dataset.name)):
                reports[dataset.name] = validate_source(
                    _source(dataset, cache_dir),
                    check,
                    workers=workers,
                    rejects=None if parts is None else parts / f"{d:04d}.jsonl",
                    progress=shown(progress),
                )
        if rejects is not None and parts is not None:
            _concatenate(sorted(parts.iterdir()), rejects)
    finally:
        if parts is not None:
            shutil.rmtree(parts, ignore_errors=True)
    merged = ValidationReport()
    for report in reports.values():
        merged.records += report.records
        merged.valid += report.valid
        merged.truncated += report.truncated
        merged.blank_lines += report.blank_lines
        merged.seconds += report.seconds
        merged.tally.merge(report.tally)
    merged.rejects_path = None if rejects is None else os.fspath(rejects)
    # a dataset over the budget is enough (the whole can be over only if one dataset is)
    over = [
        name
        for name, report in reports.items()
        if budget.exceeded_by(report.rejected, report.records)
    ]
    failed = bool(over) or bool(strict and merged.rejected)
    if as_json:
        emit_json(
            {
                "target": "mixture",
                "ok": not failed,
                **merged.to_json(),
                "check": described,
                "datasets": {name: report.to_json() for name, report in reports.items()},
                "max_bad_fraction": max_bad_fraction,
                "over_budget": bool(over),
                "datasets_over_budget": over,
            }
        )
    else:
        typer.echo(f"check: {described}")
        rows = [
            [
                name,
                r.records,
                r.valid,
                r.rejected,
                ", ".join(f"{k} {n}" for k, n in r.tally.counts.most_common(3)) or "-",
            ]
            for name, r in reports.items()
        ]
        typer.echo(table(["dataset", "records", "valid", "rejected", "reasons"], rows) + "\n")
        print_report(merged)
    for name in over:
        r = reports[name]
        typer.secho(
            f"error: dataset {name!r}: {r.rejected:,} of {r.records:,} records rejected "
            f"({r.rejected / r.records:.1%}), above --max-bad-fraction {max_bad_fraction}: the "
            f"Loader's error budget would stop training on this data",
            err=True,
            fg=typer.colors.RED,
        )
    if failed:
        raise typer.Exit(1)


def _concatenate(parts: list[Path], out: Path) -> None:
    from chute._internal.files import atomic_file

    with atomic_file(out) as f:
        for part in parts:
            with open(part, "rb") as src:
                shutil.copyfileobj(src, f)

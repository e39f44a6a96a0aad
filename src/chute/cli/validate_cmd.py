"""``chute validate PATH...``: check every record in parallel; count rejects; write them out.

Given a cache directory instead, it verifies the cache (see ``chute.cli._cache_views``).

Without recipe options it checks that each record is a JSON object. With ``--format`` it also
converts each record into a conversation; with ``--tokenizer`` it runs the whole recipe
(template, tokenizer, media token counts, ``--max-length``) and reports every kind of bad sample.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import typer

from chute.cli._cache_views import validate_cache
from chute.cli._data import open_data_files
from chute.cli._mixture_args import mixture_args, refuse_recipe_flags
from chute.cli._mixture_views import validate_mixture
from chute.cli._options import (
    CACHE_DIR,
    RECIPE_FLAG_HELP,
    OutputArgs,
    RecipeArgs,
    output_options,
    parse_pairs,
    recipe_options,
)
from chute.cli._output import emit_json, guarded, shown, table
from chute.errors import ConfigError
from chute.formats import FormatReader, FormatSpec
from chute.media.check import MediaCheck
from chute.recipe.outcome import SampleCheck
from chute.recipe.validate import ValidationReport, check_json_object, validate_source
from chute.sample.budget import ErrorBudget
from chute.sources import open_source
from chute.sources.record import Record, check_size


def register(app: typer.Typer) -> None:
    app.command("validate")(validate)


class FormatCheck:
    """A picklable check that converts each record with a format adapter (no tokenizer).

    Records over ``max_record_bytes`` (unread) and over ``max_turns`` are rejected as the
    recipe rejects them.
    """

    def __init__(self, spec: FormatSpec, max_record_bytes: int | None, max_turns: int | None):
        self.reader = FormatReader(spec, max_turns=max_turns)
        self.max_record_bytes = max_record_bytes

    def __call__(self, record: Record) -> Any:
        check_size(record, self.max_record_bytes)
        return self.reader(record.data)


@guarded
@recipe_options(
    help={"format": RECIPE_FLAG_HELP["format"] + " Without --tokenizer: checks shapes only."},
    defaults={"format": None},
)
@output_options
def validate(
    paths: list[str] = typer.Argument(
        ...,
        help="JSONL / JSON-array files or globs, or one cache directory, or a mixture YAML and "
        "key=value overrides of its keys.",
    ),
    rejects: Path | None = typer.Option(
        None, help="Write every rejected record (location, reason, text) to this JSONL file."
    ),
    workers: int | None = typer.Option(None, min=1, help="Worker processes (default: all cores)."),
    cache_dir: Path | None = CACHE_DIR,
    decode: bool = typer.Option(
        True,
        "--decode/--no-decode",
        help="With --tokenizer: decode every image fully (and probe videos and audio), so "
        "truncated and corrupt files are rejected too. --no-decode checks paths and headers only.",
    ),
    strict: bool = typer.Option(
        False, "--strict", help="Exit with status 1 when any record is rejected."
    ),
    max_bad_fraction: float | None = typer.Option(
        ErrorBudget.max_bad_fraction,
        "--max-bad-fraction",
        help="Exit with status 1 when a larger share of the records is rejected: the Loader's "
        "error budget, which stops training on such data (default 0.25, its default).",
    ),
    overlap: bool = typer.Option(
        False,
        "--overlap",
        help="Find exact duplicates (by content: normalized text and media references) within "
        "and between the PATHS, each a group (a mixture YAML: one per dataset and split); "
        "--rejects writes one line per duplicate; exit 1 when groups share content.",
    ),
    max_memory: int = typer.Option(
        256,
        "--max-memory",
        help="--overlap: MiB the duplicate count may allocate (more spill to disk).",
    ),
    *,
    recipe: RecipeArgs,
    output: OutputArgs,
) -> None:
    """Parse every record and report what is wrong, by reason, with path:line examples.

    With --tokenizer (and optionally --template, --format, --max-length, --image-tokens,
    --media-root ...) every record goes through the full recipe, and every image it references
    is decoded fully, so template, tokenizer, length and media errors (unsafe paths, URLs,
    missing, corrupt, truncated, too large) are reported too.

    Exit status: 1 when the rejected share is above --max-bad-fraction (the Loader would stop
    on this data; default 0.25, the Loader's error budget), when --strict and any record is
    rejected, or when a file holds no records (it is reported and skipped, the others are
    checked); 2 on an error in the command itself.

    Given a mixture YAML (then any dotted key=value overrides, e.g. recipe.max_length=4096):
    every dataset through its own recipe, a table per dataset, then the whole; the recipe flags
    do not apply (the YAML sets each dataset's recipe), and any dataset over --max-bad-fraction
    exits with status 1.

    Given a cache directory (from chute preprocess): hash every file against its commit record,
    check lengths and sources, summarise the build's rejects; with recipe options, check the
    recipe is the one that built it. Exits with status 1 on any problem.
    """
    from chute.cache import is_cache_dir

    if overlap:
        from chute.cli._overlap import run_overlap

        recipe.refuse_without_tokenizer(
            "with --overlap only --format, --columns and --tags (records are hashed, not "
            "tokenized)",
            ignore=("format", "columns", "tags"),
        )
        spec = FormatSpec(
            recipe.format or "auto",
            columns=parse_pairs(recipe.columns, "--columns"),
            tags=parse_pairs(recipe.tags, "--tags"),
        )
        run_overlap(
            paths,
            spec,
            rejects=rejects,
            workers=workers,
            cache_dir=cache_dir,
            max_memory_mb=max_memory,
            strict=strict,
            as_json=output.as_json,
            progress=shown(output.progress),
        )
        return
    mixture = mixture_args(paths, "validate")
    if mixture is not None:
        refuse_recipe_flags(mixture, recipe)
        validate_mixture(
            mixture,
            rejects=rejects,
            workers=workers,
            cache_dir=cache_dir,
            decode=decode,
            strict=strict,
            max_bad_fraction=max_bad_fraction,
            as_json=output.as_json,
            progress=output.progress,
            print_report=_print_report,
        )
        return
    caches = [p for p in paths if is_cache_dir(p)]
    if caches:
        if len(paths) > 1:
            raise ConfigError(
                f"validate one cache directory at a time (not with other paths): {caches[0]}"
            )
        if recipe.format is not None and recipe.tokenizer is None:
            raise ConfigError("--format with a cache needs --tokenizer (the recipe to check)")
        built = recipe.build() if recipe.tokenizer is not None else None
        validate_cache(
            caches[0],
            recipe=built,
            rejects=rejects,
            strict=strict,
            as_json=output.as_json,
            quiet=output.quiet,
        )
        return
    check: Any = functools.partial(check_json_object, max_record_bytes=recipe.max_record_bytes)
    described = "JSON objects"
    if recipe.tokenizer is not None:
        built = recipe.build()
        described = repr(built)
        check = SampleCheck(built)  # judged as stats, preprocess and the Loader judge it
        if decode:
            check = MediaCheck(check)
            described += ", media decoded"
    else:
        shapes = recipe.format is not None or bool(recipe.columns or recipe.tags)
        recipe.refuse_without_tokenizer(
            "only --format (with --columns, --tags, --max-turns) to check record shapes",
            ignore=("format", "columns", "tags", "max_record_bytes")
            + (("max_turns",) if shapes else ()),
        )
        if shapes:
            spec = FormatSpec(
                recipe.format or "auto",
                columns=parse_pairs(recipe.columns, "--columns"),
                tags=parse_pairs(recipe.tags, "--tags"),
            )
            check = FormatCheck(spec, recipe.max_record_bytes, recipe.max_turns)
            described = f"format {spec.name}"
    budget = ErrorBudget(max_bad_fraction=max_bad_fraction)  # checks the value, names the flag
    data = open_data_files(paths, cache_dir=cache_dir)
    source = open_source(data.paths, cache_dir=cache_dir)
    report = validate_source(
        source, check, workers=workers, rejects=rejects, progress=shown(output.progress)
    )
    over = budget.exceeded_by(report.rejected, report.records)
    failed = over or bool(strict and report.rejected) or bool(data.skipped)
    data.warn()
    if output.as_json:
        emit_json(
            {
                "target": "files",
                "ok": not failed,
                **report.to_json(),
                "check": described,
                "max_bad_fraction": max_bad_fraction,
                "over_budget": over,
                "skipped": data.to_json(),
            }
        )
    else:
        typer.echo(f"check: {described}")
        _print_report(report)
    if over:
        typer.secho(
            f"error: {report.rejected:,} of {report.records:,} records rejected "
            f"({report.rejected / report.records:.1%}), above --max-bad-fraction "
            f"{max_bad_fraction}: the Loader's error budget would stop training on this data",
            err=True,
            fg=typer.colors.RED,
        )
    if failed:
        raise typer.Exit(1)


def _print_report(report: ValidationReport) -> None:
    cut = f" ({report.truncated:,} truncated)" if report.truncated else ""
    typer.echo(
        f"{report.records:,} records: {report.valid:,} valid{cut}, {report.rejected:,} rejected"
        f" ({report.blank_lines:,} blank lines skipped) in {report.seconds:.2f} s"
    )
    if report.rejected:
        rows = [[kind, n] for kind, n in report.tally.counts.most_common()]
        typer.echo("\n" + table(["reason", "records"], rows))
        for kind, _ in report.tally.counts.most_common():
            typer.echo(f"\n{kind}:")
            for example in report.tally.examples.get(kind, []):
                typer.echo(f"  {example}")
    if report.rejects_path and report.rejected:
        typer.echo(f"\nrejected records written to {report.rejects_path}")
    elif report.rejects_path:
        typer.echo(f"\nno record was rejected ({report.rejects_path} is empty)")

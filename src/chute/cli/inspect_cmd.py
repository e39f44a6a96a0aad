"""``chute inspect PATH --index I --tokenizer T``: one record as the model will see it.

Prints the rendered conversation with trained tokens set apart from masked ones (green on a
terminal, ``[[...]]`` otherwise), images as ``<image x N>``, and the token counts; ``--json``
prints ``input_ids``, ``labels``, ``text``, ``path``, ``line`` and more.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import typer

from chute.cli._cache_views import inspect_cache
from chute.cli._options import CACHE_DIR, RECIPE_FLAG_HELP, RecipeArgs, recipe_options
from chute.cli._output import emit_json, guarded
from chute.cli._render import decode_marked, pretty_sample, sample_summary
from chute.errors import ConfigError, SampleError
from chute.sources import open_source
from chute.tokenize import Tokenizer


def register(app: typer.Typer) -> None:
    app.command("inspect")(inspect)


@guarded
@recipe_options(
    help={
        "tokenizer": RECIPE_FLAG_HELP["tokenizer"]
        + " Required for data files; a cache knows its own."
    }
)
def inspect(
    path: str = typer.Argument(
        ..., help="A JSONL / JSON-array data file, a cache directory, or a mixture YAML."
    ),
    overrides: list[str] | None = typer.Argument(
        None,
        help="After a mixture YAML: dotted overrides of its keys, e.g. recipe.max_length=4096.",
    ),
    index: int = typer.Option(
        0, "--index", "-i", help="Record number (0-based; -1 = last); in a cache: sample number."
    ),
    dataset: str | None = typer.Option(
        None,
        "--dataset",
        help="Of a mixture: the dataset whose record --index is (default: the datasets end to "
        "end, in the mixture's order).",
    ),
    cache_dir: Path | None = CACHE_DIR,
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
    color: bool | None = typer.Option(
        None, "--color/--no-color", help="Colour trained tokens (default: when on a terminal)."
    ),
    *,
    recipe: RecipeArgs,
) -> None:
    """Show one record rendered and tokenized, trained spans marked, with token counts.

    Given a cache directory, show one cached sample (decoded with the cache's tokenizer) and
    the record it came from. Given a mixture YAML (and any key=value overrides), show a record
    of one of its datasets with that dataset's recipe.
    """
    from chute.cache import is_cache_dir
    from chute.cli._mixture_args import mixture_args, refuse_recipe_flags
    from chute.cli._mixture_views import mixture_record

    mixture = mixture_args([path, *(overrides or [])], "inspect")
    if dataset is not None and mixture is None:
        raise ConfigError(f"--dataset applies to a mixture YAML; {path} is not one")
    if mixture is not None:
        refuse_recipe_flags(mixture, recipe)
        built, source, record, name = mixture_record(mixture, index, dataset, cache_dir)
        _show(record, source, built, as_json, color, dataset=name)
        return
    if is_cache_dir(path):
        if recipe.given():
            raise ConfigError(
                f"{path} is a cache: its samples were made by the recipe it was built with; "
                f"recipe options other than --tokenizer do not apply (chute validate {path} "
                f"--tokenizer ... checks a recipe against it)"
            )
        inspect_cache(path, index, recipe.tokenizer, as_json, color)
        return
    if recipe.tokenizer is None:
        raise ConfigError(f"--tokenizer is required to inspect a data file ({path})")
    built = recipe.build()
    source = open_source(path, cache_dir=cache_dir)
    try:
        record = source[index]
    except IndexError:
        raise ConfigError(
            f"--index: {index} is out of range; {path} has {len(source)} records"
        ) from None
    _show(record, source, built, as_json, color)


def _show(
    record: Any,
    source: Any,
    built: Any,
    as_json: bool,
    color: bool | None,
    *,
    dataset: str | None = None,
) -> None:
    """Print ``record`` as ``built`` makes it (``dataset``: the mixture's dataset it is of)."""
    mixed = {} if dataset is None else {"dataset": dataset}
    try:
        sample = built(record)
    except SampleError as exc:
        if as_json:
            emit_json(
                {
                    **mixed,
                    "path": record.path,
                    "line": record.line,
                    "index": record.index,
                    "error": exc.to_json(),
                }
            )
        else:
            typer.secho(f"{record.location}: rejected", fg="red", bold=True)
            typer.echo(str(exc))
        raise typer.Exit(1) from None
    tok = built.tokenizer
    ids: np.ndarray = sample["input_ids"]
    labels: np.ndarray = sample["labels"]
    trained = labels != -100
    summary = sample_summary(sample)
    if as_json:
        emit_json(
            {
                **mixed,
                "path": record.path,
                "line": record.line,
                "index": record.index,
                "format": built.format_of(record),
                "template": built.template.name,
                "input_ids": ids.tolist(),
                "labels": labels.tolist(),
                "text": decode_marked(tok, ids),
                "trained_text": decode_marked(tok, ids[trained]),
                **summary,
                "tokenizer_engine": tok.engine,
                "image_refs": sample["images"],
                "videos": sample["videos"],
                "audios": sample["audios"],
                **({"sides": _sides_json(tok, sample)} if "chosen_length" in sample else {}),
            }
        )
        return
    use_color = sys.stdout.isatty() if color is None else color
    fmt = built.format_of(record)
    of = f"record {record.index} of {len(source)}" + (f" of dataset {dataset}" if dataset else "")
    typer.secho(
        f"{record.location}  ({of}; format {fmt}, template {built.template.name})",
        bold=True,
    )
    rule = "-" * 78
    typer.echo(rule)
    if "chosen_length" in sample:  # a preference pair: each side on its own
        for name, part, images in _sides(sample):
            typer.secho(f"{name}:", bold=True)
            typer.echo(
                pretty_sample(tok, ids[part], labels[part], images, use_color), color=use_color
            )
            typer.echo(rule)
    else:
        typer.echo(pretty_sample(tok, ids, labels, sample["images"], use_color), color=use_color)
        typer.echo(rule)
    legend = "green" if use_color else "[[...]]"
    typer.echo(
        f"tokens {summary['length']:,}: trained {summary['trained']:,} ({legend}), masked "
        f"{summary['masked']:,}; images {summary['images']} ({summary['image_tokens']:,} "
        f"tokens); truncated: {'yes' if summary['truncated'] else 'no'}"
        + (f"; windows: {sample['windows']}" if sample.get("windows", 1) > 1 else "")
        + ("; label: " + str(sample["label"]).lower() if "label" in sample else "")
    )
    typer.echo(_engine_line(tok))


def _sides(sample: dict[str, Any]) -> list[tuple[str, slice, list[dict[str, Any]]]]:
    """A preference pair's ``(side, its tokens, its images with spans into them)``."""
    k = int(sample["chosen_length"])
    images = sample["images"]
    rejected = [{**im, "span": [a - k, b - k]} for im in images for a, b in [im["rejected_span"]]]
    return [("chosen", slice(0, k), images), ("rejected", slice(k, None), rejected)]


def _sides_json(tok: Tokenizer, sample: dict[str, Any]) -> dict[str, Any]:
    """Each side of a pair on its own: its length, trained tokens, text and trained text."""
    out = {}
    for name, part, _ in _sides(sample):
        ids, labels = sample["input_ids"][part], sample["labels"][part]
        trained = labels != -100
        out[name] = {
            "length": len(ids),
            "trained": int(trained.sum()),
            "text": decode_marked(tok, ids),
            "trained_text": decode_marked(tok, ids[trained]),
        }
    return out


def _engine_line(tok: Tokenizer) -> str:
    """Which library encoded, and why not tiktoken where a ``tokenizer.json`` could be."""
    return f"tokenizer: {tok.engine}" + (f" ({tok.engine_note})" if tok.engine_note else "")

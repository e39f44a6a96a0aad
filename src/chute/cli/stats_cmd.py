"""``chute stats PATH... --max-length L --batch-size B``: how much of each batch is padding.

Gets every sample's length (the recipe with ``--tokenizer``, else pre-tokenized records'
``input_ids``), cached by the lengths pass, or from a token cache directory, then plans one epoch with every strategy and prints
length percentiles, a histogram and each plan's padding efficiency; ``--json`` prints one
object (``samples``, ``tokens``, ``efficiency`` by plan, ...), ``--plot FILE.png`` draws it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from chute.cli._data import DataFiles, open_data_files, the_cache_among
from chute.cli._options import (
    OutputArgs,
    RecipeArgs,
    output_options,
    parse_pairs,
    recipe_options,
)
from chute.cli._output import emit_json, guarded, shown, table
from chute.errors import ConfigError
from chute.lengths import Lengths, lengths_of
from chute.plan.cost import CostModel, CostOption
from chute.sources import open_source
from chute.stats import padding_stats


def register(app: typer.Typer) -> None:
    app.command("stats")(stats)


def load_lengths(
    paths: list[str],
    recipe: Any,
    *,
    cache_dir: Path | None,
    workers: int | None,
    show_progress: bool,
) -> tuple[Lengths, DataFiles | None, dict[str, Any] | None]:
    """The lengths of the data named on the command line: data files, or one cache directory.

    A cache (``chute preprocess``) holds its lengths already (memory-mapped, no tokenizing).
    Returns the files read too (``None`` for a cache), with any set aside as holding no data,
    and for a cache its build's counts (``records`` read, rejects ``by_reason``).
    """
    from chute.cache import open_cache

    cache = the_cache_among(paths)
    if cache is not None:
        if recipe is not None:
            raise ConfigError(
                f"{cache} is a cache: its lengths come from the recipe that built it; leave "
                f"out --tokenizer and the other recipe options"
            )
        from chute.cli._cache_views import warn_if_stale

        opened = open_cache(cache, verify_sources=False)
        warn_if_stale(opened)
        built = opened.manifest
        counts = {"records": built.get("records"), "by_reason": built.get("by_reason", {})}
        return lengths_of(opened), None, counts
    data = open_data_files(paths, cache_dir=cache_dir)
    source = open_source(data.paths, cache_dir=cache_dir)
    lengths = lengths_of(
        source, recipe, workers=workers, cache_dir=cache_dir, progress=shown(show_progress)
    )
    return lengths, data, None


@guarded
@recipe_options(exclude=("max_length", "overflow", "truncation", "stride"))
@output_options
def stats(
    paths: list[str] = typer.Argument(
        ...,
        help="JSONL / JSON-array files or globs, or one cache directory, or a mixture YAML (or "
        "its caches) and key=value overrides of its keys.",
    ),
    max_length: int = typer.Option(
        ..., "--max-length", help="Longest sample fed, and the row length of packed plans."
    ),
    batch_size: int = typer.Option(
        ..., "--batch-size", help="Samples (packed: rows) per batch per rank."
    ),
    world_size: int = typer.Option(1, "--world-size", help="Ranks (data-parallel replicas)."),
    overflow: str | None = typer.Option(
        None,
        "--overflow",
        help="Samples over --max-length: truncate (the default), drop, or split (windows; every "
        "token kept). A mixture YAML's recipe.overflow (and stride) apply unless given here.",
    ),
    stride: int | None = typer.Option(
        None, "--stride", help="--overflow split: windows' overlap (default 0)."
    ),
    max_tokens: int | None = typer.Option(
        None, "--max-tokens", help="Budget plan: padded tokens per batch (default B x L)."
    ),
    group_size: int = typer.Option(
        50, "--group-size", help="Grouped/budget plans: optimizer steps per mega-batch."
    ),
    window: int | None = typer.Option(
        None, "--window", help="Packed plan: pack within windows of this many samples."
    ),
    seed: int = typer.Option(0, "--seed", help="The shuffle's seed (epoch 0 is planned)."),
    balance: str | None = typer.Option(
        None,
        "--balance",
        help="Budget and packed plans: even out tokens, image patches or compute across the "
        "ranks of each step (true, tokens+patches, patches, cost, or weights: "
        "tokens=1,patches=2,tolerance=0.1).",
    ),
    cost: str | None = typer.Option(
        None,
        "--cost",
        help="Compute per sample of n tokens, a + b*n + c*n^2, for the cost max/mean column and "
        "--balance cost: a model's name (llama3-8b, the default; llama3-70b, qwen3-8b), the "
        "constants (a=0,b=1,c=1.7e-5) or a shape (layers=32,hidden=4096,intermediate=14336,"
        "heads=32,kv_heads=8,vocab=128256).",
    ),
    plot: Path | None = typer.Option(
        None, "--plot", help="Draw the histogram and efficiencies to this PNG (chute[plot])."
    ),
    workers: int | None = typer.Option(
        None, min=1, help="Processes for the lengths pass (all cores)."
    ),
    cache_dir: Path | None = typer.Option(None, help="Index and lengths cache directory."),
    *,
    recipe: RecipeArgs,
    output: OutputArgs,
) -> None:
    """Length percentiles, a histogram, and the padding efficiency of every plan.

    Given a mixture (its YAML, or the caches chute preprocess built from it, then any dotted
    key=value overrides such as datasets.alpaca.weight=0.9): a table per dataset (records,
    tokens, mean and p99 length, its share of an epoch's samples and tokens, padding
    efficiency of every plan) and the plans over the epoch's selection.

    Plans one epoch of random, grouped (length-grouped), budget (token-budget) and packed
    batches over the same lengths and reports real tokens / tokens in padded rows, steps and
    rows per epoch, and samples dropped or truncated. Lengths are computed once and cached, so
    trying other --max-length / --batch-size values is instant. The recipe runs without a
    max_length; --max-length and --overflow are applied here, to every plan alike.
    """
    from chute.cache import is_cache_dir
    from chute.cli._mixture_args import mixture_args, refuse_recipe_flags
    from chute.cli._mixture_stats import mixture_stats_command

    mixture = mixture_args(paths, "stats")
    if mixture is not None and not mixture.cached:  # as the Loader cuts it, unless flags say
        run_wide = mixture.load().recipe or {}
        overflow = overflow or run_wide.get("overflow")
        stride = run_wide.get("stride") if stride is None else stride
    overflow, stride = overflow or "truncate", stride or 0
    if mixture is not None:
        refuse_recipe_flags(mixture, recipe)
        mixture_stats_command(
            mixture,
            dict(
                max_length=max_length,
                batch_size=batch_size,
                world_size=world_size,
                overflow=overflow,
                max_tokens=max_tokens,
                group_size=group_size,
                window=window,
                seed=seed,
                balance=parse_balance(balance),
                cost=parse_cost(cost),
            ),
            plot=plot,
            cache_dir=cache_dir,
            output=output,
            print_plans=_print,
            stride=stride,
        )
        return
    cache = next((p for p in paths if is_cache_dir(p)), None)
    if cache is not None and recipe.tokenizer is not None:
        raise ConfigError(
            f"{cache} is a cache: its lengths come from the recipe that built it; leave out "
            f"--tokenizer and the other recipe options"
        )
    recipe.refuse_without_tokenizer('leave them out for pre-tokenized records ({"input_ids": ...})')
    # the recipe runs without a max_length: --max-length and --overflow apply to every plan here
    built = recipe.build(max_length=None, overflow="truncate") if recipe.tokenizer else None
    if plot is not None:
        from chute.stats.plot import require_matplotlib

        try:
            require_matplotlib()  # fail before the lengths pass, not after
        except ImportError as exc:
            raise ConfigError(str(exc)) from None  # one line (and JSON with --json)
    lengths, data, build = load_lengths(
        paths, built, cache_dir=cache_dir, workers=workers, show_progress=output.progress
    )
    result = padding_stats(
        lengths,
        max_length=max_length,
        batch_size=batch_size,
        world_size=world_size,
        overflow=overflow,
        stride=stride,
        max_tokens=max_tokens,
        group_size=group_size,
        window=window,
        seed=seed,
        balance=parse_balance(balance),
        cost=parse_cost(cost),
    )
    result["input"] = {"paths": paths, "recipe": repr(built) if built else "pre-tokenized"}
    if build is not None and build["records"] is not None:
        # a cache holds the samples its build kept: count the records it read and rejected
        # too, as for the data files
        result["records"] = int(build["records"])
        for kind, n in build["by_reason"].items():
            result["rejected"][kind] = result["rejected"].get(kind, 0) + int(n)
    if result["records"] and not result["samples"]:
        # no plan has anything to say (each would read 100%): say why instead
        why = ", ".join(f"{kind} {n:,}" for kind, n in sorted(result["rejected"].items()))
        hint = (
            "records that are not tokenized need --tokenizer (and --template)"
            if built is None
            else "check them with `chute validate ... --rejects FILE`"
        )
        raise ConfigError(
            f"none of the {result['records']:,} records is a usable sample ({why or 'none kept'}); "
            f"{hint}"
        )
    if plot is not None:
        from chute.stats.plot import plot_stats

        plot_stats(result, plot)
        result["plot"] = str(plot)
    if data is not None:
        result["skipped"] = data.to_json()
        data.warn()
    if output.as_json:
        emit_json(result)
    else:
        _print(result)
    if data is not None and data.skipped:
        raise typer.Exit(1)


def parse_balance(text: str | None) -> Any:
    """``--balance``'s text as the plans' ``balance`` option.

    Example:
        >>> parse_balance("true"), parse_balance("patches"), parse_balance("tokens=1,patches=2")
        (True, 'patches', {'tokens': 1.0, 'patches': 2.0})
    """
    if text is None or text.strip().lower() in ("false", "off", "no", "none"):
        return None
    if text.strip().lower() in ("true", "on", "yes"):
        return True
    if "=" not in text:
        return text.strip()
    out: dict[str, float] = {}
    for key, value in parse_pairs(text, "--balance").items():
        try:
            out[key] = float(value)
        except ValueError:
            raise ConfigError(
                f"--balance: {key}={value!r} is not a number; give weights and a tolerance as "
                f"numbers, e.g. tokens=1,patches=2,tolerance=0.1"
            ) from None
    return out


def parse_cost(text: str | None) -> CostOption:
    """``--cost``'s text as the plans' ``cost`` option (``chute.plan.cost.CostModel.of``).

    Example:
        >>> parse_cost("llama3-70b"), parse_cost("b=1,c=1.7e-5"), parse_cost("layers=2,heads=4")
        ('llama3-70b', {'b': 1.0, 'c': 1.7e-05}, {'layers': 2, 'heads': 4})
    """
    if text is None:
        return None
    if "=" not in text:
        return text.strip()
    out: dict[str, float | str] = {}
    for key, value in parse_pairs(text, "--cost").items():
        if key == "name":
            out[key] = value
            continue
        try:
            # a shape's sizes are integers, the constants any number
            whole = value.lstrip("-").isdigit() and key not in ("a", "b", "c")
            out[key] = int(value) if whole else float(value)
        except ValueError:
            raise ConfigError(
                f"--cost: {key}={value!r} is not a number; give the constants (a=0,b=1,c=1.7e-5) "
                f"or a model shape (layers=32,hidden=4096,...) as numbers"
            ) from None
    return out


def _shows_cost(result: dict[str, Any]) -> bool:
    """The table shows compute when it is balanced or the data has long samples."""
    balanced = result.get("balance") or {}
    return "cost" in balanced.get("weights", {}) or bool(result.get("cost", {}).get("long_samples"))


def _imbalance(report: dict[str, Any], dim: str) -> str:
    figures = report.get("imbalance", {}).get(dim, {})
    if figures.get("mean") is None:
        return "-"
    return f"{figures['mean']:.2f} / {figures['worst']:.2f}"


def _print(result: dict[str, Any]) -> None:
    rejected = result["rejected"]
    why = ", ".join(f"{k} {n}" for k, n in sorted(rejected.items(), key=lambda kv: -kv[1]))
    # the tokens the plans feed are counted after max_length; the lengths below, before it
    cut = bool(result["truncated"] or result["dropped"])
    after = f" (after max_length {result['max_length']})" if cut else ""
    typer.echo(
        f"{result['records']:,} records: {result['samples']:,} samples, {result['tokens']:,} "
        f"tokens{after}" + (f"; rejected: {why}" if why else "")
    )
    typer.echo(
        f"over max_length {result['max_length']}: {result['truncated']:,} truncated, "
        f"{result['dropped']:,} dropped"
        + (f", {result['split']:,} split into windows" if result.get("split") else "")
    )
    lens = result["lengths"]
    label = f"lengths before max_length {result['max_length']}" if cut else "lengths"
    typer.echo(
        f"{label}: " + ", ".join(f"{k} {v}" for k, v in lens.items() if v is not None) + "\n"
    )
    hist = result["histogram"]
    top = max(hist["counts"] or [1]) or 1
    for lo, hi, count in zip(hist["edges"][:-1], hist["edges"][1:], hist["counts"], strict=True):
        bar = "#" * round(40 * count / top)
        typer.echo(f"  {lo:>7,}-{hi - 1:<7,} {count:>9,} {bar}")
    if hist.get("over"):
        typer.echo(f"  {'> max_length':<15} {hist['over']:>9,}")
    cost = _shows_cost(result)
    rows = [
        [
            name,
            f"{100 * r['efficiency']:.1f}%",
            *([_imbalance(r, "cost")] if cost else []),
            r["steps"],
            r["rows"],
            r["padded"],
            r["dropped"],
            r["truncated"],
            _imbalance(r, "tokens"),
            _imbalance(r, "patches"),
        ]
        for name, r in result["plans"].items()
    ]
    balanced = result.get("balance")
    typer.echo(
        "\n"
        + table(
            [
                "plan",
                "efficiency",
                *(["cost max/mean"] if cost else []),
                "steps",
                "rows",
                "padded tokens",
                "dropped",
                "truncated",
                "tokens max/mean",
                "patches max/mean",
            ],
            rows,
            title=f"one epoch, batch size {result['batch_size']} x {result['world_size']} ranks"
            + (f", budget and packed balanced ({balanced['weights']})" if balanced else "")
            + ":",
        )
    )
    if result["world_size"] > 1:
        typer.echo(
            "max/mean: the busiest rank's tokens (image patches"
            + (", compute" if cost else "")
            + ") over the mean across ranks, per step: mean / worst over steps"
        )
    if cost:
        model, about = result["cost"]["model"], result["cost"]
        typer.echo(
            f"compute: {CostModel(model['a'], model['b'], model['c'], model['name']).describe()}"
        )
        typer.echo(
            f"  the longest sample fed ({about['longest']:,} tokens) spends "
            f"{100 * about['attention_share']:.0f}% of its compute in attention"
        )
    bound = result["packing_bound"]
    typer.echo(
        f"\npacking bound: {bound['rows']:,} rows of {result['max_length']} "
        f"({100 * bound['efficiency']:.1f}%)"
    )
    mixed = result["plans"].get("grouped_by_modality", {}).get("mixed_batches")
    if mixed is not None:
        typer.echo(
            f"grouped_by_modality (plan_options={{'by_modality': True}}): {mixed:,} batch(es) mix "
            f"samples with images and text-only samples"
        )
    for warning in result["warnings"]:
        typer.secho(f"warning: {warning}", fg="yellow")
    if "plot" in result:
        typer.echo(f"plot written to {result['plot']}")

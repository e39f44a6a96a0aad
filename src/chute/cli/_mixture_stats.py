"""``chute stats MIXTURE``: the per-dataset table of a mixture and the plans over its epoch.

MIXTURE is a mixture YAML (its datasets are read with their own recipes, each run without a
``max_length`` so ``--max-length`` and ``--overflow`` apply here, as for plain data; with
``--overflow split`` each dataset's documents are cut into windows as the Loader cuts them) or the
directory of caches ``chute preprocess`` built from one, followed by any ``key=value``
overrides of the mixture's keys (over caches: the amounts, e.g. ``datasets.alpaca.weight=0.9``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import typer

from chute.cli._mixture_args import MixtureArgs
from chute.cli._options import OutputArgs
from chute.cli._output import emit_json, shown, table
from chute.errors import ConfigError


def mixture_stats_command(
    mixture: MixtureArgs,
    options: Mapping[str, Any],
    *,
    plot: Path | None,
    cache_dir: Path | None,
    output: OutputArgs,
    print_plans: Callable[[dict[str, Any]], None],
    stride: int = 0,
) -> None:
    """Compute, print (or emit as JSON) and plot the statistics of ``mixture``."""
    from chute.cache import open_cache
    from chute.mixture import open_cached_mixture, open_mixture
    from chute.stats.mixture import mixture_stats

    if plot is not None:
        from chute.stats.plot import require_matplotlib

        try:
            require_matplotlib()
        except ImportError as exc:
            raise ConfigError(str(exc)) from None  # one line (and JSON with --json)
    if mixture.cached:
        if options.get("overflow") == "split":
            raise ConfigError(
                "--overflow split: the caches hold the samples their recipes made (windows "
                "already, where built with overflow: split); give the mixture YAML to see "
                "other windows, or --overflow truncate / drop"
            )
        caches = open_cache(mixture.path, verify_sources=False)
        opened = open_cached_mixture(caches, mixture.load() if mixture.overrides else None)
    else:
        if options.get("overflow") == "split":
            # the samples are the documents' windows, cut by each dataset's recipe as the
            # Loader cuts them (the selection and the amounts count windows); every window fits
            pins = [
                f"recipe.max_length={options['max_length']}",
                "recipe.overflow=split",
                f"recipe.stride={stride}",
            ]
            options = {**options, "overflow": "truncate"}
        else:  # the recipe runs without a max_length: --max-length and --overflow apply here
            pins = ["recipe.max_length=null", "recipe.overflow=truncate", "recipe.stride=0"]
        pinned = MixtureArgs(mixture.path, [*mixture.overrides, *pins])
        opened = open_mixture(pinned.load(), cache_dir=cache_dir, progress=shown(output.progress))
    result = mixture_stats(opened, **options)
    result["input"] = {"mixture": mixture.path, "overrides": mixture.overrides}
    if plot is not None:
        from chute.stats.plot import plot_mixture

        plot_mixture(result, plot)
        result["plot"] = str(plot)
    if output.as_json:
        emit_json(result)
        return
    _print_datasets(result)
    print_plans(result)


def _print_datasets(result: dict[str, Any]) -> None:
    rows = []
    held = any(d["val"] for d in result["datasets"].values())  # a column only where one is
    for name, d in result["datasets"].items():
        eff = "  ".join(f"{p} {100 * e:.1f}%" for p, e in d["efficiency"].items())
        rows.append(
            [
                name,
                d["records"],
                *([d["val"]] if held else []),
                d["tokens"],
                d["mean"],
                d["p99"],
                d["epoch_samples"],
                _pct(d["sample_share"]),
                _pct(d["token_share"]),
                eff,
            ]
        )
    epoch = result["epoch"]
    typer.echo(
        table(
            [
                "dataset",
                "records",
                *(["val"] if held else []),
                "tokens",
                "mean",
                "p99",
                "epoch samples",
                "samples",
                "tokens",
                "padding efficiency (dataset alone)",
            ],
            rows,
            title=f"one epoch: {epoch['samples']:,} samples, {epoch['tokens']:,} tokens "
            f"(share of the epoch's samples and tokens per dataset):",
        )
    )
    typer.echo("\nthe whole mixture:")


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"

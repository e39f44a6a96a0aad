"""``chute stats MIXTURE``: the per-dataset table of a mixture and the plans over its epoch.

MIXTURE is a mixture YAML (its datasets are read with their own recipes, each run without a
``max_length`` so ``--max-length`` and ``--overflow`` apply here, as for plain data) or the
directory of caches ``chute preprocess`` built from one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import typer

from chute.cli._options import OutputArgs
from chute.cli._output import emit_json, fail, shown, table


def is_mixture_input(path: str) -> bool:
    """Whether ``path`` is a mixture YAML or the caches of a preprocessed mixture."""
    from chute.cache.cacheset import is_cache_set
    from chute.mixture import is_mixture_config

    return is_mixture_config(path) or is_cache_set(path)


def mixture_stats_command(
    path: str,
    options: Mapping[str, Any],
    *,
    plot: Path | None,
    cache_dir: Path | None,
    output: OutputArgs,
    print_plans: Callable[[dict[str, Any]], None],
) -> None:
    """Compute, print (or emit as JSON) and plot the statistics of the mixture at ``path``."""
    from chute.cache import open_cache
    from chute.cache.cacheset import is_cache_set
    from chute.mixture import Mixture, open_cached_mixture, open_mixture
    from chute.stats.mixture import mixture_stats

    if plot is not None:
        from chute.stats.plot import require_matplotlib

        try:
            require_matplotlib()
        except ImportError as exc:
            raise fail(str(exc)) from None
    if is_cache_set(path):
        opened = open_cached_mixture(open_cache(path, verify_sources=False))
    else:
        mixture = Mixture.load(path, ["recipe.max_length=null", "recipe.overflow=truncate"])
        opened = open_mixture(mixture, cache_dir=cache_dir, progress=shown(output.progress))
    result = mixture_stats(opened, **options)
    result["input"] = {"mixture": path}
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
    for name, d in result["datasets"].items():
        eff = "  ".join(f"{p} {100 * e:.1f}%" for p, e in d["efficiency"].items())
        rows.append(
            [
                name,
                d["records"],
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

"""The PNG of ``chute stats --plot``: the length histogram and each plan's padding efficiency.

matplotlib is an optional extra (``pip install 'chute[plot]'``); it is imported only here, with
the non-interactive Agg backend, so servers without a display can draw.

Example:
    >>> from chute.stats import padding_stats
    >>> from chute.lengths import Lengths
    >>> stats = padding_stats(Lengths.of([5, 9, 3, 12]), max_length=10, batch_size=2)
    >>> plot_stats(stats, "stats.png")  # doctest: +SKIP
"""

from __future__ import annotations

import itertools
import os
from typing import Any

from chute.errors import MissingDependency

__all__ = ["plot_stats", "require_matplotlib"]


def require_matplotlib() -> Any:
    """``matplotlib.pyplot`` on the Agg backend, or an ImportError saying how to install it."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise MissingDependency(
            f"chute stats --plot draws with matplotlib, which is an optional extra: "
            f"pip install 'chute[plot]' (import failed: {exc})"
        ) from exc
    return plt


def plot_stats(stats: dict[str, Any], path: str | os.PathLike[str]) -> None:
    """Draw ``padding_stats`` output to a PNG at ``path``: histogram left, efficiency right."""
    plt = require_matplotlib()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2), dpi=110)
    hist = stats["histogram"]
    if hist["counts"]:
        edges = hist["edges"]
        widths = [b - a for a, b in itertools.pairwise(edges)]
        left.bar(edges[:-1], hist["counts"], width=widths, align="edge", color="#4c72b0")
    left.axvline(stats["max_length"], color="#c44e52", linestyle="--", label="max_length")
    left.set_xlabel("tokens per sample")
    left.set_ylabel("samples")
    over = hist.get("over", 0)
    over_note = f"; {over:,} over max_length" if over else ""
    left.set_title(f"{stats['samples']:,} samples, {stats['tokens']:,} tokens{over_note}")
    left.legend()
    names = list(stats["efficiency"])
    values = [100 * stats["efficiency"][n] for n in names]
    bars = right.bar(
        names,
        values,
        color=["#8c8c8c", "#4c72b0", "#55a868", "#dd8452"][: len(names)],
        zorder=2,  # in front of the packing-bound line: it never crosses a bar or its label
    )
    for bar, value, name in zip(bars, values, names, strict=True):
        steps = stats["plans"][name]["steps"]
        # Inside the bar, below its top: the packing-bound line (drawn behind the bars) runs
        # near the best bars' tops, so a label above them would sit on it. A bar too short to
        # hold its label gets it above, on a white box.
        inside = value >= 15
        right.annotate(
            f"{value:.1f}%\n{steps:,} step{'s' if steps != 1 else ''}",
            (bar.get_x() + bar.get_width() / 2, value - 2 if inside else value + 1),
            ha="center",
            va="top" if inside else "bottom",
            fontsize=8,
            color="white" if inside else "black",
            fontweight="bold" if inside else "normal",
            bbox=None if inside else {"facecolor": "white", "edgecolor": "none", "pad": 1},
            zorder=3,
        )
    bound = 100 * stats["packing_bound"]["efficiency"]
    right.axhline(
        bound, color="#c44e52", linestyle=":", label=f"packing bound {bound:.1f}%", zorder=1
    )
    right.set_ylim(0, 122)  # room above the bars for their labels and the legend
    right.set_yticks(range(0, 101, 20))
    right.set_ylabel("padding efficiency (%)")
    right.set_title(
        f"max_length {stats['max_length']}, batch {stats['batch_size']} x "
        f"{stats['world_size']} ranks"
    )
    right.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)


def plot_mixture(stats: dict[str, Any], path: str | os.PathLike[str]) -> None:
    """Draw ``mixture_stats`` output to a PNG at ``path``.

    Left: each dataset's share of an epoch's samples and tokens; right: the padding
    efficiency of every plan over the whole mixture.
    """
    plt = require_matplotlib()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2), dpi=110)
    names = list(stats["datasets"])
    rows = [stats["datasets"][n] for n in names]
    at = list(range(len(names)))
    for shift, key, color, label in (
        (-0.2, "sample_share", "#4c72b0", "samples"),
        (0.2, "token_share", "#dd8452", "tokens"),
    ):
        values = [100 * (r[key] or 0) for r in rows]
        bars = left.bar([x + shift for x in at], values, width=0.4, color=color, label=label)
        for bar, value in zip(bars, values, strict=True):
            left.annotate(
                f"{value:.1f}%",
                (bar.get_x() + bar.get_width() / 2, value + 1),
                ha="center",
                va="bottom",
                fontsize=8,
            )
    left.set_xticks(at, names, rotation=20 if len(names) > 4 else 0)
    left.set_ylim(0, 115)
    left.set_ylabel("share of one epoch (%)")
    epoch = stats["epoch"]
    left.set_title(f"one epoch: {epoch['samples']:,} samples, {epoch['tokens']:,} tokens")
    left.legend(loc="upper right", fontsize=8)
    plans = list(stats["efficiency"])
    values = [100 * stats["efficiency"][p] for p in plans]
    bars = right.bar(
        plans, values, color=["#8c8c8c", "#4c72b0", "#55a868", "#dd8452", "#8172b2"][: len(plans)]
    )
    for bar, value in zip(bars, values, strict=True):
        right.annotate(
            f"{value:.1f}%",
            (bar.get_x() + bar.get_width() / 2, value + 1),
            ha="center",
            va="bottom",
            fontsize=8,
        )
    right.set_ylim(0, 115)
    right.set_ylabel("padding efficiency (%)")
    right.set_title(
        f"the mixture's epoch, max_length {stats['max_length']}, batch {stats['batch_size']} x "
        f"{stats['world_size']} ranks"
    )
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)

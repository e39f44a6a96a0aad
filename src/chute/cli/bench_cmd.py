"""``chute bench PATH... --batch-size B``: measure a loader configuration on your data.

For each worker count: time to first batch, samples/s, tokens/s (real and padded), starvation
under a simulated training step (``--step-ms``), padding efficiency and peak memory; then where
a sample's time goes, and what to change (``chute.bench.advice``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from chute.cli._data import the_cache_among
from chute.cli._options import (
    CACHE_DIR,
    RECIPE_FLAG_HELP,
    OutputArgs,
    RecipeArgs,
    output_options,
    parse_pairs,
    recipe_options,
)
from chute.cli._output import emit_json, guarded, table
from chute.errors import ConfigError


def register(app: typer.Typer) -> None:
    app.command("bench")(bench)


def parse_workers(text: str) -> tuple[int, ...]:
    """``"0,1,2"`` -> ``(0, 1, 2)``; ``"0-4"`` -> ``(0, 1, 2, 3, 4)``.

    Example:
        >>> parse_workers("0,2-4")
        (0, 2, 3, 4)
    """
    out: list[int] = []
    for item in text.split(","):
        item = item.strip()
        lo, sep, hi = item.partition("-")
        try:
            values = range(int(lo), int(hi) + 1) if sep else [int(item)]
        except ValueError:
            raise ConfigError(
                f"--workers: expected worker counts like '0,1,2' or '0-4', got {text!r}"
            ) from None
        out.extend(values)
    if not out or any(w < 0 for w in out):
        raise ConfigError(f"--workers: expected counts >= 0 like '0,1,2', got {text!r}")
    return tuple(out)


def parse_plan_options(text: str | None) -> dict[str, Any] | None:
    """``"max_tokens=16384,split=true"`` -> ``{"max_tokens": 16384, "split": True}``.

    Example:
        >>> parse_plan_options("max_length=4096,window=0.5,split=false")
        {'max_length': 4096, 'window': 0.5, 'split': False}
    """
    pairs = parse_pairs(text, "--plan-option")
    if not pairs:
        return None
    out: dict[str, Any] = {}
    for key, value in pairs.items():
        low = value.lower()
        if low in ("true", "false"):
            out[key] = low == "true"
            continue
        try:
            out[key] = int(value)
        except ValueError:
            try:
                out[key] = float(value)
            except ValueError:
                out[key] = value
    return out


@guarded
@recipe_options(
    help={
        "tokenizer": RECIPE_FLAG_HELP["tokenizer"] + " Without it, records must be tokenized "
        "samples ({'input_ids': [...], 'labels': [...]})."
    }
)
@output_options
def bench(
    paths: list[str] = typer.Argument(
        ...,
        help="JSONL / JSON-array files or globs, or one cache directory (chute preprocess), or "
        "a mixture YAML (or its caches) and key=value overrides of its keys.",
    ),
    batch_size: int = typer.Option(..., "--batch-size", "-b", help="Samples per batch (per rank)."),
    workers: str = typer.Option("0,1,2", "--workers", help="Worker counts to try: '0,1,2', '0-4'."),
    plan: str = typer.Option(
        "random", "--plan", help="Batching plan: random, grouped, budget, packed or shards."
    ),
    plan_option: str | None = typer.Option(
        None,
        "--plan-option",
        help="Plan options, e.g. 'max_tokens=16384' (budget) or 'max_length=4096' (packed; "
        "default: --max-length).",
    ),
    steps: int = typer.Option(50, "--steps", help="Batches to time per worker count."),
    step_ms: float | None = typer.Option(
        None,
        "--step-ms",
        help="Your training step time per batch (ms), simulated between batches to measure "
        "how long the model would wait for data (starvation).",
    ),
    world_size: int = typer.Option(1, "--world-size", help="Measure one rank of this many."),
    rank: int = typer.Option(0, "--rank", help="The rank to measure."),
    seed: int = typer.Option(0, "--seed", help="Shuffle seed."),
    profile_samples: int = typer.Option(
        256, "--profile-samples", help="Samples timed stage by stage (0: skip)."
    ),
    pad_to_multiple_of: int | None = typer.Option(
        None, "--pad-to-multiple-of", help="Round padded lengths up (e.g. 8)."
    ),
    media: str = typer.Option(
        "auto",
        "--media",
        help="Decode images in the workers, with a transform matching --image-tokens: auto "
        "(when the first records have images), on or off.",
    ),
    image_size: int = typer.Option(
        336, "--image-size", help="Side of fixed-size images (fixed image-token counts)."
    ),
    pixel_store: Path | None = typer.Option(
        None, "--pixel-store", help="A PixelStore of pre-decoded pixels to read images from."
    ),
    cache_dir: Path | None = CACHE_DIR,
    *,
    recipe: RecipeArgs,
    output: OutputArgs,
) -> None:
    """Measure the loader on your data for each worker count, and say what to change.

    Example: chute bench data/*.jsonl --tokenizer qwen3/ --template qwen3 --batch-size 16
    --workers 0,1,2 --step-ms 300
    """
    from chute.bench import BenchConfig
    from chute.cache import open_cache
    from chute.cli._mixture_args import mixture_args, refuse_recipe_flags

    config = BenchConfig(
        batch_size=batch_size,
        workers=parse_workers(workers),
        steps=steps,
        plan=plan,
        step_ms=step_ms,
        world_size=world_size,
        rank=rank,
        seed=seed,
        profile_samples=profile_samples,
        plan_options=parse_plan_options(plan_option),
    )
    mixture = mixture_args(paths, "bench")
    if mixture is not None:
        # each dataset's recipe, media and packed rows' length come from the mixture
        refuse_recipe_flags(mixture, recipe)
        if pixel_store is not None:
            raise ConfigError("--pixel-store applies to data files or one cache, not a mixture")
        source: Any = open_cache(mixture.path) if mixture.cached else mixture.load()
        options: dict[str, Any] = {"media": False} if media == "off" else {}
        if pad_to_multiple_of is not None:
            options["pad_to_multiple_of"] = pad_to_multiple_of
        _run(
            source,
            None,
            config,
            options,
            output,
            described=f"each dataset's own, from the mixture {mixture.describe()}",
        )
        return
    # without a recipe (a cache, pre-tokenized records) --max-length is still the packed
    # plan's row length and the budget plan's cap
    recipe.refuse_without_tokenizer(
        "drop them to bench pre-tokenized records",
        ignore=("max_length",) if plan in ("packed", "budget") else (),
    )
    built = recipe.build() if recipe.tokenizer is not None else None
    max_length = recipe.max_length
    if plan in ("packed", "budget") and max_length is not None:
        # rows (packed) or the length cap (budget) of --max-length, also over a cache, whose
        # recipe the loader does not run
        config.plan_options = {"max_length": max_length, **(config.plan_options or {})}
    if plan == "packed" and "max_length" not in (config.plan_options or {}):
        raise ConfigError(
            "--plan packed needs the row length: pass --max-length L (the recipe's, also "
            "used for rows) or --plan-option max_length=L"
        )
    source = open_data_or_cache(paths, cache_dir)
    options = {}
    if pad_to_multiple_of is not None:
        options["pad_to_multiple_of"] = pad_to_multiple_of
    stage = media_stage(source, built, media, image_size, pixel_store)
    if stage is not None:
        options["media"] = stage  # False: none (the Loader would build the recipe's default)
    _run(source, built, config, options, output)


def _run(
    source: Any,
    built: Any,
    config: Any,
    options: dict[str, Any],
    output: OutputArgs,
    *,
    described: str | None = None,
) -> None:
    """Measure and print (or emit as JSON); ``described`` names the recipe (a mixture's)."""
    from chute.bench import bench_loader

    def progress(line: str) -> None:
        if output.progress:
            typer.echo(line, err=True)

    report = bench_loader(source, built, config=config, loader_options=options, progress=progress)
    if output.as_json:
        recipe = described or (repr(built) if built is not None else None)
        emit_json({**report.to_json(), "recipe": recipe})
        return
    typer.echo(render(report, built, described=described))


def open_data_or_cache(paths: list[str], cache_dir: Path | None) -> Any:
    """One token cache directory (``chute preprocess --out``), or the data files as one source."""
    from chute.cache import open_cache
    from chute.sources import open_source

    cache = the_cache_among(paths)
    return open_source(paths, cache_dir=cache_dir) if cache is None else open_cache(cache)


def media_stage(
    source: Any, recipe: Any, media: str, image_size: int, pixel_store: Path | None
) -> Any:
    """The media stage to bench with, from ``--media``, ``--image-size``, ``--pixel-store``."""
    from chute.bench.media import has_media, stage_for_recipe

    if media not in ("auto", "on", "off"):
        raise ConfigError(f"--media must be auto, on or off, got {media!r}")
    cache_pixels = getattr(source, "pixels", None) is not None
    if media == "off" and cache_pixels:
        return False  # the Loader would otherwise read the cache's pre-decoded images
    if cache_pixels and pixel_store is None:
        return source.media_stage()  # the cache's own images and transform (--pixels)
    if recipe is None or media == "off":  # a cache's media rule is its recipe's: --tokenizer
        if pixel_store is not None or media == "on":
            raise ConfigError(
                "--media on and --pixel-store need --tokenizer (the recipe finds the images) "
                "and not --media off"
            )
        return False if media == "off" else None  # False: not even the recipe's default
    convert = None if callable(getattr(source, "check_recipe", None)) else recipe
    if media == "auto" and not has_media(source, convert, range(min(64, len(source)))):
        if pixel_store is not None:
            raise ConfigError(
                f"--pixel-store {pixel_store}: the first records have no images; pass "
                f"--media on to decode images anyway"
            )
        return False
    return stage_for_recipe(recipe, image_size=image_size, store=pixel_store)


def render(report: Any, recipe: Any, *, described: str | None = None) -> str:
    """The human report: one row per worker count, the stage profile, the advice.

    ``described`` names the recipe where it is no one object (a mixture: each dataset's own).
    """
    c = report.config
    recipe_line = (
        f"recipe: {recipe!r}" if recipe is not None else "recipe: none (tokenized records)"
    )
    lines = [
        f"{report.samples:,} samples in {report.source}",
        f"recipe: {described}" if described else recipe_line,
        f"media: {report.media}" if report.media else "media: none",
        f"plan {c.plan}"
        + (f" {c.plan_options}" if c.plan_options else "")
        + f", batch size {c.batch_size}, rank {c.rank} of {c.world_size} "
        f"({report.batches_per_epoch:,} batches per epoch), {report.cpus} core(s), "
        + (f"simulated step {c.step_ms:g} ms" if c.step_ms else "no simulated step"),
        f"loader set up in {report.setup_s:.2f} s"
        + (
            f"; {sum(report.excluded.values()):,} samples excluded by the lengths pass "
            f"({', '.join(f'{k}: {v}' for k, v in report.excluded.items())})"
            if report.excluded
            else ""
        ),
        "",
    ]
    rows = []
    for r in report.runs:
        mem = r.memory or {}
        rows.append(
            [
                r.workers,
                _num(r.first_batch_s, 2),
                _num(r.samples_per_s, 0),
                _num(r.tokens_per_s, 0),
                _num(r.padded_tokens_per_s, 0),
                _num(r.fetch_ms, 1),
                _pct(r.starvation),
                _pct(r.padding_efficiency),
                _num(mem.get("peak_rss_main_mb"), 0),
                _num(mem.get("peak_total_mb"), 0),
            ]
        )
    metric = next((r.memory["memory_metric"] for r in report.runs if r.memory), None) or "-"
    headers = [
        "workers",
        "first batch s",
        "samples/s",
        "tokens/s",
        "padded tokens/s",
        "ms/batch",
        "starvation",
        "padding eff",
        "main RSS MB",
        f"total {metric.upper()} MB",
    ]
    lines.append(table(headers, rows))
    if report.profile is not None:
        p = report.profile
        us, share = p.per_sample_us(), p.shares()
        parts = [f"{k} {100 * share[k]:.0f}% ({us[k]:,.0f} us)" for k in p.seconds]
        lines += ["", f"where a sample's time goes ({p.samples} samples, one process):"]
        lines.append("  " + ", ".join(parts))
    if report.advice:
        lines += ["", "advice:"]
        lines += [f"  - {a.message}" for a in report.advice]
    if report.notes:
        lines += ["", "notes:"]
        lines += [f"  - {n}" for n in report.notes]
    return "\n".join(lines)


def _num(value: float | None, digits: int) -> Any:
    if value is None:
        return "-"
    return round(value, digits) if digits else round(value)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"

"""``chute demo``: the whole job on generated (or your) data, each step printing what it proves.

1. data: a multimodal instruction set with images and planted faults (or ``--data``);
2. index it; 3. validate it with the real recipe and full image decoding (rejects shown);
4. padding statistics of every plan (and a PNG); 5. tokenize it once into a fingerprinted cache;
6. train a tiny vision-language model on packed batches from the cache;
7. stop mid-epoch, resume from the saved state, and check the rest of the stream is exactly
   what the uninterrupted run saw.

``run_demo`` returns the facts it checked, so the test suite runs a short version and asserts
them (loss falls, rejects counted, resume equality).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chute._internal.tables import table
from chute.errors import ConfigError

__all__ = ["DemoResult", "run_demo"]

Echo = Callable[[str], None]


@dataclass
class DemoResult:
    """What the demo checked; every field is asserted by the tests."""

    records: int = 0
    rejected: dict[str, int] = field(default_factory=dict)
    planted: dict[str, int] = field(default_factory=dict)
    efficiency: dict[str, float] = field(default_factory=dict)
    cached_samples: int = 0
    pre_decoded: int = 0
    pre_decode_failures: int = 0
    stale_cache_refused: bool = False
    losses: list[float] = field(default_factory=list)
    train_rejected: dict[str, int] = field(default_factory=dict)
    resumed_equal: bool = False
    resumed_batches: int = 0
    plot: str | None = None


def run_demo(
    out: Path,
    *,
    data: Path | None = None,
    tokenizer: Path | None = None,
    recipe_options: dict[str, Any] | None = None,
    records: int = 3000,
    steps: int = 100,
    batch_size: int = 8,
    max_length: int = 256,
    workers: int = 2,
    echo: Echo = print,
) -> DemoResult:
    """Run the demo in ``out`` (see the module docstring); returns what it checked."""
    from chute.demo.data import write_demo_tokenizer
    from chute.demo.multimodal import write_multimodal_demo
    from chute.recipe import Recipe
    from chute.sources import JsonlSource

    out.mkdir(parents=True, exist_ok=True)
    result = DemoResult()
    say = _Say(echo)

    say.step("Data")
    if data is None:
        made = write_multimodal_demo(out / "data", records)
        data = made.path
        tokenizer = write_demo_tokenizer(out / "tokenizer", made.corpus) / "tokenizer.json"
        options: dict[str, Any] = {
            "template": "chatml",
            "image_tokens": 4,
            "image_token": "<image>",
        }
        for kind in made.planted.values():
            result.planted[kind] = result.planted.get(kind, 0) + 1
        say(
            f"{data}: {records:,} LLaVA-style records over {len(list((made.root / 'images').iterdir()))} images"
        )
        say(
            f"planted faults: {', '.join(f'line {ln} -> {k}' for ln, k in sorted(made.planted.items()))}"
        )
        say(f"a byte-level BPE tokenizer trained on it, offline: {tokenizer}")
    else:
        if tokenizer is None:
            raise ConfigError(
                "data needs a tokenizer (a tokenizer.json, folder or tiktoken file)",
                param="tokenizer",
            )
        options = dict(recipe_options or {})
        say(f"your data: {data}, tokenizer {tokenizer}")
    recipe = Recipe(tokenizer=str(tokenizer), max_length=max_length, **options)

    say.step("Index: a byte offset per record, built by a vectorised scan, cached, memory-mapped")
    t0 = time.perf_counter()
    source = JsonlSource(data, rebuild=True)
    result.records = len(source)
    mid = len(source) // 2
    say(
        f"{len(source):,} records, {source.blank_lines} blank lines, {source.bytes / 1e6:.1f} MB "
        f"in {time.perf_counter() - t0:.3f} s; record {mid} lives at {source[mid].location}"
    )

    _validate(source, recipe, result, say, out)
    _stats(source, recipe, result, say, out, batch_size=batch_size, max_length=max_length)
    cache = _preprocess(data, tokenizer, options, recipe, result, say, out, max_length=max_length)
    with _training_threads(workers):
        _train_and_resume(
            cache,
            recipe,
            result,
            say,
            steps=steps,
            batch_size=batch_size,
            max_length=max_length,
            workers=workers,
        )
    say.step("Done")
    say(f"everything above ran from {out}")
    return result


@contextlib.contextmanager
def _training_threads(workers: int) -> Iterator[None]:
    """Torch's threads for the training steps: the cores the DataLoader workers leave free.

    By default torch runs one thread per core; with the workers busy on the same cores the
    threads wait for each other. On 2 cores with 2 workers one thread makes a demo step take a
    quarter of the CPU time two threads take (0.2 s against 0.8 s). Restored afterwards.
    """
    import torch

    before = torch.get_num_threads()
    free = _usable_cpus() - workers
    torch.set_num_threads(max(1, min(before, free)))
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _usable_cpus() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


class _Say:
    def __init__(self, echo: Echo):
        self.echo, self.n = echo, 0

    def step(self, title: str) -> None:
        self.n += 1
        self.echo(f"\n{self.n}. {title}")

    def __call__(self, text: str) -> None:
        for line in text.splitlines():
            self.echo(f"   {line}")


def _validate(source: Any, recipe: Any, result: DemoResult, say: _Say, out: Path) -> None:
    from chute.media.check import MediaCheck
    from chute.recipe.outcome import SampleCheck
    from chute.recipe.validate import validate_source

    say.step("Validate every record in parallel: the recipe, and every image decoded in full")
    report = validate_source(source, MediaCheck(SampleCheck(recipe)), rejects=out / "rejects.jsonl")
    result.rejected = dict(report.tally.counts)
    say(f"{report.valid:,} valid, {report.rejected} rejected in {report.seconds:.2f} s")
    say(
        table(
            ["reason", "records", "first example"],
            [
                [k, n, report.tally.examples[k][0].split(": ", 1)[0]]
                for k, n in report.tally.counts.most_common()
            ],
        )
    )
    say(f"every rejected line, with location and reason: {report.rejects_path}")
    if result.planted:
        found = "all" if result.rejected == result.planted else "NOT all"
        say(
            f"proves: {found} planted faults were found, each with its kind and path:line; "
            "none stopped the job"
        )


def _stats(
    source: Any,
    recipe: Any,
    result: DemoResult,
    say: _Say,
    out: Path,
    *,
    batch_size: int,
    max_length: int,
) -> None:
    from chute.lengths import lengths_of
    from chute.stats import padding_stats

    say.step("Padding: one lengths pass (cached), then one epoch of every plan")
    lengths = lengths_of(source, recipe)
    stats = padding_stats(lengths, max_length=max_length, batch_size=batch_size)
    result.efficiency = stats["efficiency"]
    rows = [
        [name, f"{100 * plan['efficiency']:.1f}%", plan.get("steps", ""), plan.get("rows", "")]
        for name, plan in stats["plans"].items()
    ]
    say(
        f"{stats['samples']:,} samples, {stats['tokens']:,} tokens; lengths p50 "
        f"{stats['lengths']['p50']}, p99 {stats['lengths']['p99']}, max {stats['lengths']['max']}"
    )
    say(table(["plan", "real tokens / padded", "steps", "rows"], rows))
    try:
        from chute.stats.plot import plot_stats

        plot_stats(stats, out / "lengths.png")
        result.plot = str(out / "lengths.png")
        say(f"histogram and efficiencies drawn to {result.plot}")
    except ImportError as exc:
        say(f"(no plot: {exc})")
    packed, random = result.efficiency.get("packed", 0.0), result.efficiency.get("random", 0.0)
    if packed > random:
        say(
            f"proves: packed rows carry {100 * packed:.1f}% real tokens where random batches carry "
            f"{100 * random:.1f}%: {packed / max(random, 1e-9):.1f}x the useful work per step"
        )
    else:
        say(f"(only {stats['samples']} samples: too few to fill packed rows better than batches)")


def _preprocess(
    data: Path,
    tokenizer: Path,
    options: dict[str, Any],
    recipe: Any,
    result: DemoResult,
    say: _Say,
    out: Path,
    *,
    max_length: int,
) -> Any:
    from chute.cache import open_cache, preprocess
    from chute.errors import FingerprintMismatch

    say.step("Tokenize once into a cache: parallel, atomic chunks, resumable, fingerprinted")
    config = {"tokenizer": str(tokenizer), "max_length": max_length, **options}
    # Images the tiny model can take (a fixed token count) are also decoded once, into the cache.
    pixels = _DEMO_IMAGE if _fixed_image_tokens(recipe) else None
    built = preprocess(
        sources=[str(data)], recipe=config, out=out / "cache", overwrite=True, pixels=pixels
    ).to_json()
    result.cached_samples = built["samples"]
    say(
        f"{built['samples']:,} samples ({built['rejected']} rejected), {built['tokens']:,} tokens "
        f"in {built['chunks']} chunks, {built['bytes_per_token']} bytes/token, {built['seconds']:.2f} s"
    )
    px = built["stage_outputs"].get("pixels")
    if px:
        result.pre_decoded = px["images"]
        result.pre_decode_failures = sum(px["failures"].values())
        say(
            f"{px['images']:,} images decoded and resized once into the cache (training reads "
            f"no image file); not decodable: {result.pre_decode_failures} (skipped and counted "
            f"when training reaches them)"
        )
    cache = open_cache(out / "cache", recipe=recipe)
    try:
        open_cache(out / "cache", recipe={**config, "max_length": 2 * max_length})
    except FingerprintMismatch as exc:
        result.stale_cache_refused = True
        say(f"a cache opened with another recipe is refused: {_first_reason(exc)}")
    return cache


def _first_reason(exc: Exception) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if "differs" in ln]
    return lines[0] if lines else str(exc).splitlines()[0]


# The tiny model's image input: 16x16 RGB, CLIP-normalised (``ImageTransform`` options).
_DEMO_IMAGE: dict[str, Any] = {"size": (16, 16), "crop": None, "normalize": "clip"}


def _loader(cache: Any, recipe: Any, *, batch_size: int, max_length: int, workers: int) -> Any:
    from chute.loader import Loader
    from chute.media import ImageTransform
    from chute.world import World

    media = None
    if _image_token_id(recipe) is not None and _fixed_image_tokens(recipe):
        # the cache's pre-decoded images have this geometry: the Loader reads them
        media = ImageTransform(**_DEMO_IMAGE, tokens_per_image=_fixed_image_tokens(recipe))
    return Loader(
        cache,
        recipe,
        batch_size=batch_size,
        plan="packed",
        seed=0,
        num_workers=workers,
        world=World(),
        media=media,
        plan_options={"max_length": max_length},
        persistent_workers=workers > 0,  # many short epochs on small data: start workers once
    )


def _fixed_image_tokens(recipe: Any) -> int | None:
    """Tokens per image when the recipe counts a fixed number (what the tiny model can use)."""
    from chute.media import FixedImageTokens

    rule = recipe.media.image_rule
    return rule.tokens if isinstance(rule, FixedImageTokens) else None


def _image_token_id(recipe: Any) -> int | None:
    if recipe.media.image_token_id is not None:
        return int(recipe.media.image_token_id)
    return recipe.tokenizer.token_to_id(recipe.media.tokens["image"])


def _train_and_resume(
    cache: Any,
    recipe: Any,
    result: DemoResult,
    say: _Say,
    *,
    steps: int,
    batch_size: int,
    max_length: int,
    workers: int,
) -> None:
    import numpy as np
    import torch

    from chute.demo.model import TinyVLM

    say.step(
        f"Train a tiny vision-language model for {steps} steps on packed batches from the cache"
    )
    torch.manual_seed(0)
    loader = _loader(cache, recipe, batch_size=batch_size, max_length=max_length, workers=workers)
    tokens_per_image = _fixed_image_tokens(recipe) or 4
    model = TinyVLM(
        recipe.tokenizer.vocab_size,
        _image_token_id(recipe),
        tokens_per_image=tokens_per_image,
        max_length=max_length,
        merge_size=getattr(recipe.media.image_rule, "merge_size", 2),  # dynamic resolution's
    )
    say(
        f"{sum(p.numel() for p in model.parameters()):,} parameters; {len(loader)} packed batches "
        f"of {batch_size} rows x {max_length} tokens per epoch; {workers} workers, "
        f"{torch.get_num_threads()} torch thread(s)"
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    lengths = np.asarray(cache.lengths)  # memory-mapped: the real tokens of every sample
    per_epoch = len(loader)
    # Stop 60% of the way through the run, mid-epoch where the epoch has more than one batch (a
    # checkpoint at an epoch boundary is the easy case). The comparison covers the rest of the
    # stop's epoch, or the whole next epoch when the stop falls on a boundary.
    stop = max(1, (steps * 3) // 5)
    if stop % per_epoch == 0 and per_epoch > 1:
        stop -= per_epoch // 2
    compare_until = -(-stop // per_epoch) * per_epoch  # the end of the stop's epoch
    if compare_until == stop:
        compare_until += per_epoch
    state: dict[str, Any] | None = None
    after_stop: list[list[int]] = []  # what the uninterrupted run saw after the stop
    window: list[float] = []
    real = padded = samples = 0
    t0 = time.perf_counter()
    step = 0
    epoch = 0
    while step < max(steps, compare_until):
        loader.set_epoch(epoch)
        for batch in loader:
            step += 1
            if step == stop:
                state = json.loads(json.dumps(loader.state_dict()))  # what a checkpoint stores
            elif stop < step <= compare_until:
                after_stop.append(batch["sample_ids"].tolist())
            if step > steps:  # training is over; reading on to the end of the comparison window
                if step >= compare_until:
                    break
                continue
            loss = model.loss(batch)
            optimizer.zero_grad()
            loss.backward()  # type: ignore[no-untyped-call]  # torch leaves Tensor.backward untyped
            optimizer.step()
            window.append(loss.item())
            ids = batch["sample_ids"].numpy()
            real += int(np.minimum(lengths[ids[ids >= 0]], max_length).sum())
            padded += batch["input_ids"].numel()
            samples += int((batch["sample_ids"] >= 0).sum())
            if step % max(1, steps // 10) == 0 or step == steps:
                result.losses.append(sum(window) / len(window))
                dt = time.perf_counter() - t0
                say(
                    f"step {step:4d}  epoch {epoch}  loss {result.losses[-1]:.3f}  "
                    f"{samples / dt:7.0f} samples/s  {real / dt:8.0f} tokens/s  "
                    f"padding efficiency {100 * real / max(1, padded):.1f}%"
                )
                window = []
            if step >= max(steps, compare_until):
                break
        epoch += 1
    result.train_rejected = dict(loader.stats)  # counted over the whole run
    say(
        f"loss {result.losses[0]:.3f} -> {result.losses[-1]:.3f}; samples skipped while training: "
        f"{result.train_rejected or 'none'}"
        + (
            " (a truncated image only shows when its pixels are decoded)"
            if result.train_rejected
            else ""
        )
    )

    say.step(f"Resume: a fresh loader restored from the state saved at step {stop}")
    resumed = _loader(cache, recipe, batch_size=batch_size, max_length=max_length, workers=workers)
    assert state is not None
    resumed.load_state_dict(state)
    again: list[list[int]] = []
    epoch = int(state["epoch"])
    while len(again) < len(after_stop):  # the usual epoch loop; set_epoch keeps a resumed position
        resumed.set_epoch(epoch)
        for batch in resumed:
            again.append(batch["sample_ids"].tolist())
            if len(again) == len(after_stop):
                break
        epoch += 1
    result.resumed_batches = len(again)
    result.resumed_equal = again == after_stop
    verdict = "identical to" if result.resumed_equal else "DIFFERENT from"
    say(
        f"the {len(again)} batches after step {stop} ({sum(len(b) for b in again):,} samples, by "
        f"sample id) are {verdict} what the uninterrupted run saw"
    )
    say(
        f"state size: {len(json.dumps(state)):,} bytes of JSON (epoch {state['epoch']}, batch "
        f"{state['batches']})"
    )

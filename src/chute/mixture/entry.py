"""``MixtureEntry``: one dataset of a mixture: its files, its own recipe options, its amount.

Named for what it is, an entry of a ``Mixture`` (one item of its ``datasets:`` mapping), and
not ``Dataset``: it holds no samples and is no ``torch.utils.data.Dataset`` (``chute.Dataset``
remains a deprecated alias). An entry names its files (paths, globs or URLs, like ``sources:``
of a preprocessing config), the recipe options that differ between datasets (``PER_DATASET``:
format, columns, tags, placeholders, system prompt, template variables, media root,
image/video/audio token rules, ...) and at most one amount rule:

==============================  ==================================================================
``weight`` (or ``proportion``)  its share of the samples the weighted datasets give per epoch
``repeat``                      an upsampling factor (2.5: every sample twice, plus a random half)
``samples``                     an absolute count per epoch (repeats only when above its size)
==============================  ==================================================================

plus ``max_samples`` (a fixed cap on the records it may give, before the rule) and ``val`` (a
fraction in (0, 1) or a count held out for validation, chosen by content hash). With no rule a
dataset gives each sample once per epoch. The run-wide options (``RUN_WIDE``: tokenizer,
template, max_length, overflow, special tokens, the image token) belong to the mixture's recipe:
they define the model.

Example:
    >>> ds = MixtureEntry("tools", "data/glaive.json", weight=0.2, format="sharegpt",
    ...                   columns={"messages": "conversations"}, val=0.01)
    >>> ds.share(300).weight, ds.recipe_options
    (0.2, {'format': 'sharegpt', 'columns': {'messages': 'conversations'}})
    >>> MixtureEntry("x", "a.jsonl", tokenizer="qwen3/")
    Traceback (most recent call last):
    ...
    chute.errors.ConfigError: invalid mixture:
      datasets.x.tokenizer: run-wide (it defines the model): set it in the mixture's recipe
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

from chute.cache.config import RecipeConfig
from chute.cache.config_checks import Problems, check_fields, raise_problems, unknown_keys
from chute.plan.mixture_selection import Share

__all__ = ["AMOUNT_KEYS", "PER_DATASET", "RUN_WIDE", "MixtureEntry", "dataset_problems"]

# Recipe options a dataset may set for itself; the others are the mixture's alone.
PER_DATASET = (
    "format",
    "columns",
    "tags",
    "placeholders",
    "system",
    "template_vars",
    "train_on",
    "media_root",
    "image_tokens",
    "video_tokens",
    "audio_tokens",
    "check_images",
    "allow_urls",
    "max_image_pixels",
    "media_allowed_roots",
)
RUN_WIDE = tuple(k for k in RecipeConfig.KINDS if k not in PER_DATASET)
AMOUNT_KEYS = ("weight", "proportion", "repeat", "samples", "max_samples", "val")


# How other tools name a dataset's files (LLaMA-Factory's ``file_name``, datasets' ``data_files``,
# XTuner's ``data_path``): a newcomer's first guess, which the nearest spelling ("repeat" for
# "path") would not explain.
SOURCES_ALIASES = {
    name: "sources (a list of paths or globs)"
    for name in ("path", "paths", "file", "files", "file_name", "data_files", "data_path", "source")
}


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _val_ok(v: Any) -> bool:
    if v is None:
        return True
    if isinstance(v, int) and not isinstance(v, bool):
        return v >= 0
    return isinstance(v, float) and 0 < v < 1


_AMOUNT_KINDS: dict[str, Any] = {
    "weight": (lambda v: v is None or (_number(v) and v >= 0), "a number >= 0 or null"),
    "proportion": (lambda v: v is None or (_number(v) and v >= 0), "a number >= 0 or null"),
    "repeat": (lambda v: v is None or (_number(v) and v >= 0), "a number >= 0 or null"),
    "samples": (
        lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool) and v >= 0),
        "an integer >= 0 or null",
    ),
    "max_samples": (
        lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool) and v >= 0),
        "an integer >= 0 or null",
    ),
    "val": (_val_ok, "a fraction in (0, 1), a count >= 0, or null"),
}


def dataset_problems(name: Any, entry: Mapping[str, Any], prefix: str) -> Problems:
    """Every problem of one dataset entry (its YAML mapping), each named by its dotted key."""
    out: Problems = []
    if not isinstance(name, str) or not name or "/" in name or name != name.strip():
        out.append(
            (
                prefix.rstrip("."),
                f"a dataset name must be a non-empty string without "
                f"'/' or surrounding spaces, got {name!r}",
            )
        )
    known = ["sources", *AMOUNT_KEYS, *PER_DATASET]
    for key in entry:
        if key in RUN_WIDE:
            out.append(
                (
                    f"{prefix}{key}",
                    "run-wide (it defines the model): set it in the mixture's recipe",
                )
            )
    rest = {k: v for k, v in entry.items() if k not in RUN_WIDE}
    out += unknown_keys(rest, known, prefix, SOURCES_ALIASES)
    sources = entry.get("sources")
    if isinstance(sources, str | os.PathLike):
        sources = [sources]
    if (
        not isinstance(sources, list | tuple)
        or not sources
        or not all(isinstance(s, str | os.PathLike) and os.fspath(s) for s in sources)
    ):
        out.append(
            (
                f"{prefix}sources",
                f"expected a non-empty list of paths or globs, got {entry.get('sources')!r}",
            )
        )
    out += [(f"{prefix}{k}", m) for k, m in check_fields(_AMOUNT_KINDS, entry)]
    recipe = {k: v for k, v in entry.items() if k in PER_DATASET}
    out += [(f"{prefix}{k}", m) for k, m in check_fields(RecipeConfig.KINDS, recipe)]
    rules = [k for k in ("weight", "proportion", "repeat", "samples") if entry.get(k) is not None]
    if len(rules) > 1:
        out.append(
            (
                f"{prefix}{rules[1]}",
                f"give one of weight, repeat or samples, not {' and '.join(rules)}",
            )
        )
    return out


class MixtureEntry:
    """One dataset of a ``Mixture``: its name, files, amount and own options (see the module).

    Args:
        name: a name of your choosing (reports, resume states, cache folders use it).
        sources: data files, globs or URLs, in order.
        weight: its share of the weighted datasets' samples (``proportion`` is the same).
        repeat: pool size multiplier per epoch (fractional allowed).
        samples: samples per epoch.
        max_samples: cap the records it may give (a fixed seeded subset), before the rule.
        val: held out for validation: a fraction in (0, 1) or a count, chosen by content hash.
        **recipe: its own recipe options (``PER_DATASET``), over the mixture's recipe.
    """

    def __init__(
        self,
        name: str,
        sources: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
        *,
        weight: float | None = None,
        proportion: float | None = None,
        repeat: float | None = None,
        samples: int | None = None,
        max_samples: int | None = None,
        val: float | int | None = None,
        **recipe: Any,
    ):
        entry: dict[str, Any] = {"sources": sources, **recipe}
        amounts = dict(
            weight=weight,
            proportion=proportion,
            repeat=repeat,
            samples=samples,
            max_samples=max_samples,
            val=val,
        )
        entry.update({k: v for k, v in amounts.items() if v is not None})
        raise_problems(dataset_problems(name, entry, f"datasets.{name}."), what="mixture")
        self.name = name
        if isinstance(sources, str | os.PathLike):
            sources = [sources]
        self.sources = [os.fspath(s) for s in sources]
        self.weight = weight if weight is not None else proportion
        self.repeat = repeat
        self.samples = samples
        self.max_samples = max_samples
        self.val = val or None
        self.recipe_options = dict(recipe)

    @classmethod
    def from_dict(cls, name: str, entry: Mapping[str, Any]) -> MixtureEntry:
        """A dataset from its YAML mapping (``sources``, amounts, recipe options)."""
        data = dict(entry)
        sources = data.pop("sources", None)
        return cls(name, sources, **data)

    def to_dict(self) -> dict[str, Any]:
        """The YAML mapping of this dataset (amounts and options that are set)."""
        out: dict[str, Any] = {"sources": list(self.sources)}
        for key in ("weight", "repeat", "samples", "max_samples", "val"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        out.update(self.recipe_options)
        return out

    def share(self, records: int) -> Share:
        """The plan-level rule of this dataset over ``records`` records."""
        return Share(
            self.name,
            records,
            weight=self.weight,
            repeat=self.repeat,
            samples=self.samples,
            max_samples=self.max_samples,
            tag={"val": self.val} if self.val else None,
        )

    def with_amounts(self, **amounts: Any) -> MixtureEntry:
        """A copy with other amounts (``weight``, ``repeat``, ``samples``, ``max_samples``)."""
        data = self.to_dict()
        for key in ("weight", "repeat", "samples"):
            if key in amounts:
                for other in ("weight", "repeat", "samples"):
                    data.pop(other, None)
        data.update({k: v for k, v in amounts.items()})
        return MixtureEntry.from_dict(self.name, {k: v for k, v in data.items() if v is not None})

    def __repr__(self) -> str:
        rule = next(
            (
                f"{k}={getattr(self, k)}"
                for k in ("weight", "repeat", "samples")
                if getattr(self, k) is not None
            ),
            "repeat=1",
        )
        return f"MixtureEntry({self.name!r}, {len(self.sources)} source(s), {rule})"

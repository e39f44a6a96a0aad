"""A mixture on the command line: every command that reads data takes one, with its overrides.

A mixture YAML (``datasets:``, docs/mixtures.md) stands where data files would, followed by
dotted ``key=value`` overrides of its keys, exactly as ``chute preprocess`` takes them::

    chute index    mixture.yaml
    chute validate mixture.yaml recipe.max_length=4096
    chute inspect  mixture.yaml --dataset tools --index 3 datasets.tools.system='Be brief.'
    chute stats    mixture.yaml datasets.alpaca.weight=0.9 --max-length 4096 --batch-size 8
    chute bench    mixture.yaml --batch-size 16

Each dataset is read with its own recipe (the mixture's, its own options over it), so the
recipe flags (``--tokenizer``, ``--max-length``, ...) are refused there: override the YAML's
keys instead. Overrides after data files are refused too, naming the flag to use, and a YAML
file that is no mixture is named as such, not read as JSON lines.

Example:
    >>> is_override("recipe.max_length=4096"), is_override("data/train.jsonl")
    (True, False)
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chute.errors import ConfigError

__all__ = ["MixtureArgs", "is_override", "mixture_args", "refuse_recipe_flags"]

_KEY = re.compile(r"[A-Za-z_][\w-]*(\.[A-Za-z_0-9][\w-]*)*")


def is_override(arg: str) -> bool:
    """Whether a command-line argument is a ``dotted.key=value`` override (not an existing path)."""
    key, sep, _ = arg.partition("=")
    return bool(sep) and _KEY.fullmatch(key.strip()) is not None and not os.path.exists(arg)


@dataclass(frozen=True)
class MixtureArgs:
    """The mixture a command line names: its YAML (or cache folder) and the overrides after it.

    Attributes:
        path: the mixture YAML, or the folder of caches ``chute preprocess`` built from one.
        overrides: ``dotted.key=value`` items, in order.
        cached: whether ``path`` is a folder of caches (its mixture is ``path/mixture.yaml``).
    """

    path: str
    overrides: list[str] = field(default_factory=list)
    cached: bool = False

    def load(self) -> Any:
        """The ``Mixture``, with the overrides applied."""
        from chute.mixture import Mixture
        from chute.mixture.opened import MIXTURE_FILE

        source = Path(self.path) / MIXTURE_FILE if self.cached else self.path
        return Mixture.load(source, self.overrides)

    def describe(self) -> str:
        """``mix.yaml`` or ``mix.yaml (recipe.max_length=4096)``, for reports."""
        return self.path + (f" ({' '.join(self.overrides)})" if self.overrides else "")


def mixture_args(paths: Sequence[str], command: str) -> MixtureArgs | None:
    """The mixture ``paths`` name (first, then its overrides), or ``None`` for data files.

    Args:
        paths: the command's positional arguments.
        command: the subcommand, for messages (``"validate"``).

    Raises:
        ConfigError: a path after a mixture (the mixture names its files), an override after
            data files (it overrides a YAML's keys: use the flags), or a YAML file that is no
            mixture (it holds no ``datasets:``).
    """
    from chute.cache.cacheset import is_cache_set
    from chute.mixture import is_mixture_config

    if not paths:
        return None
    first, rest = str(paths[0]), [str(p) for p in paths[1:]]
    if is_mixture_config(first) or is_cache_set(first):
        stray = [p for p in rest if not is_override(p)]
        if stray:
            raise ConfigError(
                f"{stray[0]}: after the mixture {first}, chute {command} takes only dotted "
                f"key=value overrides of its keys (e.g. recipe.max_length=4096 or "
                f"datasets.NAME.weight=0.5); the mixture names its data files itself: add the "
                f"file to a dataset's sources, or run chute {command} on the files alone"
            )
        return MixtureArgs(first, rest, cached=is_cache_set(first))
    overrides = [str(p) for p in paths if is_override(str(p))]
    if overrides:
        raise ConfigError(
            f"{overrides[0]}: dotted key=value overrides apply to a mixture YAML (chute "
            f"{command} mixture.yaml {overrides[0]}); for data files set the recipe with flags "
            f"(--max-length 4096, --system ...), see chute {command} --help"
        )
    for p in map(str, paths):
        if p.endswith((".yaml", ".yml")) and Path(p).is_file():
            raise ConfigError(
                f"{p}: a YAML file without datasets: is neither a mixture nor data; chute "
                f"{command} reads JSONL / JSON / Parquet files, or a mixture YAML (datasets: "
                f"..., docs/mixtures.md); a preprocessing config (sources:, recipe:) is read by "
                f"chute preprocess {p} --out DIR"
            )
    return None


def refuse_recipe_flags(mixture: MixtureArgs, given: Any) -> None:
    """Raise ``ConfigError`` when recipe flags come with a mixture (its YAML sets the recipe).

    ``given`` is the command's ``RecipeArgs``.
    """
    flags = list(given.given())
    if given.tokenizer is not None:
        flags.insert(0, "--tokenizer")
    if flags:
        raise ConfigError(
            f"{mixture.path} is a mixture: each dataset's recipe comes from it; leave out "
            f"{', '.join(flags)} and override its keys instead (e.g. recipe.max_length=4096 or "
            f"datasets.NAME.system=...)"
        )

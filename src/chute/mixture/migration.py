"""What a converter from another tool's config made, and what it could not carry over exactly.

``chute migrate`` turns a LLaMA-Factory or XTuner config into a mixture. Some keys have no
equivalent (a loader option, a Hub download, a tokenizer edit) and some only an approximate one
(a template that renders a little differently, a hold-out chosen by content instead of at
random). Each such key becomes a ``Note``: the command prints it as a warning and writes it as
a comment at the top of the mixture YAML, so nothing is lost in silence.

Example:
    >>> from chute.mixture import MixtureEntry, Mixture
    >>> note = Note("packing", True, "dropped", "a loader option: Loader(..., plan='packed')")
    >>> print(Migration(Mixture([MixtureEntry("a", "a.jsonl")]), [note], "train.yaml").to_yaml())
    ... # doctest: +ELLIPSIS
    # chute migrate from train.yaml. Not carried over exactly (also printed as warnings):
    #   packing: true: dropped: a loader option: Loader(..., plan='packed')
    datasets:
    ...
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from chute.mixture.config import Mixture

__all__ = ["Migration", "Note"]

KINDS = ("dropped", "approximated", "needs a local copy")


@dataclass(frozen=True)
class Note:
    """One key of the source config that the mixture does not carry over exactly.

    Attributes:
        key: the key in the source config (``template``, ``image_max_pixels``).
        value: its value there.
        kind: ``dropped`` (no equivalent), ``approximated`` (mapped, with a difference) or
            ``needs a local copy`` (kept, but chute cannot read it where it is).
        text: what the mixture does instead, and how to get closer.
    """

    key: str
    value: Any
    kind: str
    text: str

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind: expected one of {', '.join(KINDS)}, got {self.kind!r}")

    def line(self) -> str:
        """``key: value: kind: text`` on one line (the value as YAML writes it)."""
        value = yaml.safe_dump(self.value, default_flow_style=True, width=10**6).strip()
        value = value.removesuffix("\n...").removesuffix("...").strip()
        return f"{self.key}: {value}: {self.kind}: {self.text}"


@dataclass
class Migration:
    """A converted mixture with its notes (see the module docstring)."""

    mixture: Mixture
    notes: list[Note] = field(default_factory=list)
    source: str = ""

    def to_yaml(self) -> str:
        """The mixture YAML, its first lines comments naming every note."""
        head = f"# chute migrate from {self.source}." if self.source else "# chute migrate."
        lines = []
        if self.notes:
            lines.append(f"{head} Not carried over exactly (also printed as warnings):")
            lines += [f"#   {note.line()}" for note in self.notes]
        return "".join(f"{line}\n" for line in lines) + self.mixture.to_yaml()

"""One sample as a person reads it: decoded text, trained runs marked, images collapsed.

Shared by ``chute inspect`` on a data file and on a cache directory.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import typer

__all__ = ["decode_marked", "pretty_sample", "sample_summary"]


def sample_summary(sample: dict[str, Any]) -> dict[str, Any]:
    """A sample's counts as ``chute inspect`` shows them (a data file's record or a cache's)."""
    trained = sample["labels"] != -100
    return {
        "length": int(sample["length"]),
        "trained": int(trained.sum()),
        "masked": int((~trained).sum()),
        "image_tokens": int(sample["num_image_tokens"]),
        "images": len(sample["images"]),
        "truncated": bool(sample["truncated"]),
    }


def decode_marked(tok: Any, ids: np.ndarray) -> str:
    """Decode, writing runs of ids outside the vocabulary (e.g. LLaVA's -200) as ``<id x N>``."""
    vocab = tok.vocab_size
    out, run = [], []
    k = 0
    ids_list = ids.tolist()
    while k < len(ids_list):
        x = ids_list[k]
        if 0 <= x < vocab:
            run.append(x)
            k += 1
            continue
        if run:
            out.append(tok.decode(run))
            run = []
        j = k
        while j < len(ids_list) and ids_list[j] == x:
            j += 1
        out.append(f"<{x} x {j - k}>")
        k = j
    if run:
        out.append(tok.decode(run))
    return "".join(out)


def pretty_sample(
    tok: Any, ids: np.ndarray, labels: np.ndarray, images: list[dict[str, Any]], color: bool
) -> str:
    """The decoded text, trained runs marked, each image collapsed to ``<image x N>``."""
    image_at = {img["span"][0]: img["span"][1] for img in images}
    trained = (labels != -100).tolist()
    out: list[str] = []
    k, n = 0, len(ids)
    while k < n:
        if k in image_at:
            end = image_at[k]
            label = f"<image x {end - k}>"
            out.append(typer.style(label, fg="cyan") if color else label)
            k = end
            continue
        j = k
        while j < n and trained[j] == trained[k] and j not in image_at:
            j += 1
        text = tok.decode(ids[k:j].tolist())
        if trained[k]:
            out.append(typer.style(text, fg="green", bold=True) if color else f"[[{text}]]")
        else:
            out.append(typer.style(text, dim=True) if color else text)
        k = j
    return "".join(out)

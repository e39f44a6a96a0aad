"""Helpers for the cache tests: a tokenizer folder on disk, instruction data, directory digests."""

from __future__ import annotations

import hashlib
import json
import os
import random
from pathlib import Path
from typing import Any

from recipe_helpers import tiny_tokenizer

WORDS = ["hello", "there", "fox", "dog", "cat", "mat", "quick", "brown", "answer", "question"]


def write_tokenizer(folder: Path, extra_tokens: tuple[str, ...] = ()) -> Path:
    """The tiny byte-level BPE tokenizer (500 ids: the cache stores uint16) as a folder."""
    folder.mkdir(parents=True, exist_ok=True)
    rust = tiny_tokenizer().rust
    if extra_tokens:
        rust.add_special_tokens(list(extra_tokens))
    (folder / "tokenizer.json").write_text(rust.to_str())
    (folder / "tokenizer_config.json").write_text(
        json.dumps({"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>"})
    )
    return folder


def write_alpaca(path: Path, n: int, *, broken: tuple[int, ...] = (), seed: int = 0) -> Path:
    """``n`` alpaca records of varied lengths; indexes in ``broken`` get faulty records."""
    rng = random.Random(seed)
    faults = [b'{"instruction": "cut', b'{"instruction": "no output"}', b"[1, 2]"]
    with open(path, "wb") as f:
        for i in range(n):
            if i in broken:
                f.write(faults[broken.index(i) % len(faults)] + b"\n")
                continue
            words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 40)))
            rec = {"instruction": f"Question {i}: {words}?", "output": f"Answer {i}: {words}."}
            f.write(json.dumps(rec).encode() + b"\n")
    return path


def config(data: Path | list[Path], tok: Path, **recipe: Any) -> dict[str, Any]:
    sources = [str(p) for p in data] if isinstance(data, list) else [str(data)]
    return {
        "sources": sources,
        "recipe": {"tokenizer": str(tok), "template": "chatml", **recipe},
        "cache": {"chunk_size": 64, "workers": 1},
    }


def tree_digest(root: Path) -> dict[str, str]:
    """``{relative path: sha256}`` of every file under ``root`` (hidden temp files included)."""
    out = {}
    for folder, _, names in os.walk(root):
        for name in names:
            path = Path(folder, name)
            out[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out

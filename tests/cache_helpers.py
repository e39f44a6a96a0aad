"""Helpers for the cache tests: a tokenizer folder on disk, instruction data, directory digests."""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import time
from pathlib import Path
from typing import Any

from chute.cache import ChunkStage, register_stage
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


class FailsAt:
    """A recipe that raises a job-level error (not a bad record) at record ``index``.

    Picklable and importable by worker processes (``tests/`` on their ``PYTHONPATH``).
    """

    def __init__(self, recipe: Any, index: int):
        self.recipe, self.index = recipe, index

    def __call__(self, record: Any) -> Any:
        if record.index == self.index:
            from chute.errors import SourceError

            raise SourceError(f"record {self.index} cannot be read")
        return self.recipe(record)

    def batch(self, records: list[Any]) -> list[Any]:
        return [self(r) for r in records]


class SlowStage(ChunkStage):
    """A stage that marks where each chunk runs (``markers/<chunk>.<pid>``) and takes a while.

    It adds no column and no file, and its fingerprint has no options, so caches built with it
    compare byte for byte. ``fail_chunk`` raises in that chunk, as a bug would; ``die_once_in``
    SIGKILLs the worker in that chunk the first time it runs (as the OOM killer would).
    Registered as ``slow`` by ``register_slow_stage`` (config: ``stages: {slow: {markers: DIR}}``).
    """

    name = "slow"

    def __init__(
        self,
        markers: str,
        sleep: float = 0.1,
        fail_chunk: int | None = None,
        die_once_in: int | None = None,
    ):
        super().__init__(
            markers=markers, sleep=sleep, fail_chunk=fail_chunk, die_once_in=die_once_in
        )

    def fingerprint(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version}

    def files(self, chunk: int, samples: list[dict[str, Any]]) -> dict[str, bytes]:
        Path(self.options["markers"], f"{chunk}.{os.getpid()}").touch()
        if chunk == self.options["die_once_in"]:
            died = Path(f"{self.options['markers']}-died-{chunk}")
            if not died.exists():
                died.touch()
                os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(self.options["sleep"])
        if chunk == self.options["fail_chunk"]:
            raise RuntimeError(f"the slow stage fails in chunk {chunk}")  # as a bug would
        return {}


def register_slow_stage() -> None:
    register_stage("slow", lambda options, recipe: SlowStage(**options))


class GatedStage(ChunkStage):
    """A stage that holds the build while the file ``gate`` exists: in chunks from ``from_chunk``
    on, and in ``finish`` with ``in_finish`` (there the build holds the finalizing marker).

    Each held step first touches ``<entered>/<chunk or "finish">.<pid>``, so a test knows the
    build got there, and which process runs it, before it interrupts or kills it. It adds no
    column and no file, and its fingerprint has no options: the same command with the gate
    removed is the same build. Registered as ``gated`` by ``register_gated_stage``.
    """

    name = "gated"

    def __init__(
        self, gate: str, entered: str, from_chunk: int | None = None, in_finish: bool = False
    ):
        super().__init__(gate=gate, entered=entered, from_chunk=from_chunk, in_finish=in_finish)

    def fingerprint(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version}

    def files(self, chunk: int, samples: list[dict[str, Any]]) -> dict[str, bytes]:
        start = self.options["from_chunk"]
        if start is not None and chunk >= start:
            self._hold(str(chunk))
        return {}

    def finish(self, folder: Path, chunks: Any) -> None:
        if self.options["in_finish"]:
            self._hold("finish")

    def _hold(self, step: str) -> None:
        Path(self.options["entered"], f"{step}.{os.getpid()}").touch()
        while Path(self.options["gate"]).exists():
            time.sleep(0.02)


def register_gated_stage() -> None:
    register_stage("gated", lambda options, recipe: GatedStage(**options))


def entered(folder: Path) -> dict[str, set[int]]:
    """``{step: {pids}}`` of the steps a ``GatedStage`` held (``"3"``, ``"finish"``)."""
    out: dict[str, set[int]] = {}
    for path in folder.iterdir():
        step, pid = path.name.split(".")
        out.setdefault(step, set()).add(int(pid))
    return out


def markers(folder: Path) -> dict[int, set[int]]:
    """``{chunk: {pids that started it}}`` from a ``SlowStage``'s markers."""
    out: dict[int, set[int]] = {}
    for path in folder.iterdir():
        chunk, pid = path.name.split(".")
        out.setdefault(int(chunk), set()).add(int(pid))
    return out


def write_image_records(folder: Path, n: int) -> Path:
    """``n`` records, each with its own small PNG: a pixel store of ``n`` images."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    (folder / "img").mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(n):
        Image.fromarray(rng.integers(0, 255, (8 + i % 5, 8, 3), dtype=np.uint8)).save(
            folder / "img" / f"{i}.png"
        )
        rows.append(
            {
                "images": [f"img/{i}.png"],
                "messages": [
                    {"role": "user", "content": f"<image>What is {i}?"},
                    {"role": "assistant", "content": "A picture."},
                ],
            }
        )
    path = folder / "images.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path

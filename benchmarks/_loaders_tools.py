"""The loaders compared by bench_loaders.py, each written the way its users write it.

Every tool reads the same JSONL (``_loaders_common.write_data``), tokenizes with the same code
(``tokenize_record``, or chute's recipe, which gives the same tokens), pads with the same
``pad_collate`` (or chute's ``Collate``, the same tensors), and carries each record's
``sample_id`` to the batch, so the exact-once audit compares ids, not counts.

Every tool is told the rank and world size the way its documentation says: chute reads
``torch.distributed``; the naive dataset and ``split_dataset_by_node`` take
``RANK``/``WORLD_SIZE``; ``DistributedSampler`` and litdata read ``torch.distributed``;
mosaicml-streaming reads ``RANK``/``WORLD_SIZE``/``LOCAL_RANK``/``LOCAL_WORLD_SIZE``. The audit
starts the ranks as torchrun would (those variables set, a gloo process group initialised).

Tools that convert the data first (``offline``) have a ``prepare`` step, run and timed once
before any measurement, like a preprocessing job before training.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _loaders_chute import (
    chute_cache_loader,
    chute_cache_packed_loader,
    chute_cache_packed_prepare,
    chute_cache_prepare,
    chute_loader,
    chute_packed_loader,
    chute_packed_prepare,
)
from _loaders_common import Ctx, load_tokenizer, pad_collate, tokenize_record

# -- (a) the naive IterableDataset -----------------------------------------------------------


def naive_loader(ctx: Ctx, rank: int, world_size: int, *, shard: bool = True) -> Any:
    """Read lines, json.loads, template + tokenize, shard by i % (world * workers).

    ``shard=False`` is the same class without the modulo line, as often written: every rank
    and every worker reads the whole file.
    """
    from torch.utils.data import DataLoader, IterableDataset, get_worker_info

    class JsonlIterable(IterableDataset):
        def __init__(self, path: Path):
            self.path = path
            self.tok = load_tokenizer()

        def __iter__(self):  # type: ignore[no-untyped-def]
            info = get_worker_info()
            wid, nw = (info.id, info.num_workers) if info is not None else (0, 1)
            me, shards = rank * nw + wid, world_size * nw
            with open(self.path, encoding="utf-8") as f:
                for i, line in enumerate(f):
                    if shard and i % shards != me:
                        continue
                    yield tokenize_record(json.loads(line), self.tok)

    return DataLoader(
        JsonlIterable(ctx.data),
        batch_size=ctx.batch_size,
        num_workers=ctx.workers,
        collate_fn=pad_collate,
    )


# -- (b) Hugging Face datasets, streaming ----------------------------------------------------


def hf_streaming_loader(ctx: Ctx, rank: int, world_size: int) -> Any:
    """load_dataset(streaming=True) -> split_dataset_by_node -> shuffle buffer -> map(tokenize)."""
    from datasets import load_dataset
    from datasets.distributed import split_dataset_by_node
    from torch.utils.data import DataLoader

    tok = load_tokenizer()
    ds = load_dataset("json", data_files=str(ctx.data), split="train", streaming=True)
    ds = split_dataset_by_node(ds, rank=rank, world_size=world_size)
    ds = ds.shuffle(seed=ctx.seed, buffer_size=1000)
    ds = ds.map(lambda r: tokenize_record(r, tok), remove_columns=["messages"])
    return DataLoader(
        ds, batch_size=ctx.batch_size, num_workers=ctx.workers, collate_fn=pad_collate
    )


# -- (c) XTuner's way: datasets.map + save_to_disk, then load_from_disk + DistributedSampler --


def _map_tokenize(record: dict[str, Any]) -> dict[str, Any]:
    global _TOK
    if "_TOK" not in globals():
        _TOK = load_tokenizer()
    return tokenize_record(record, _TOK)


def xtuner_prepare(ctx: Ctx) -> None:
    """Offline: load_dataset("json") -> map(tokenize, num_proc=workers) -> save_to_disk."""
    from datasets import load_dataset

    ds = load_dataset("json", data_files=str(ctx.data), split="train")
    ds = ds.map(_map_tokenize, num_proc=max(1, ctx.workers), remove_columns=["messages"])
    ds.save_to_disk(str(ctx.work / "xtuner_disk"))


def xtuner_loader(ctx: Ctx, rank: int, world_size: int) -> Any:
    """Training: load_from_disk -> DataLoader(sampler=DistributedSampler(shuffle=True))."""
    from datasets import load_from_disk
    from torch.utils.data import DataLoader, DistributedSampler

    ds = load_from_disk(str(ctx.work / "xtuner_disk"))
    sampler = DistributedSampler(
        ds, num_replicas=world_size, rank=rank, shuffle=True, seed=ctx.seed
    )
    return DataLoader(
        ds,
        batch_size=ctx.batch_size,
        sampler=sampler,
        num_workers=ctx.workers,
        collate_fn=pad_collate,
    )


# -- (d) mosaicml-streaming: MDSWriter, then StreamingDataset ---------------------------------


def import_streaming() -> Any:
    """``import streaming`` without torchvision (see docs/benchmarks.md).

    ``streaming/__init__.py`` imports ``streaming.vision``, whose datasets subclass torchvision's
    ``VisionDataset``; nothing in ``MDSWriter`` or ``StreamingDataset`` uses torchvision. There
    is no CPU torchvision wheel here for torch 2.13, and installing mosaicml-streaming's
    declared dependencies would replace torch with a multi-GB CUDA build. So a stand-in module
    with those two names is registered before the import (transformers, which streaming also
    imports, is imported first so it sees no torchvision).
    """
    if "streaming" in sys.modules:
        return sys.modules["streaming"]
    import transformers.feature_extraction_utils  # noqa: F401

    if importlib.util.find_spec("torchvision") is None:
        tv, ds, tr, fn = (
            types.ModuleType(n)
            for n in (
                "torchvision",
                "torchvision.datasets",
                "torchvision.transforms",
                "torchvision.transforms.functional",
            )
        )
        ds.VisionDataset = type("VisionDataset", (), {})  # type: ignore[attr-defined]
        ds.CIFAR10 = type("CIFAR10", (), {})  # type: ignore[attr-defined]
        fn.to_tensor = None  # type: ignore[attr-defined]
        tv.datasets, tv.transforms, tr.functional = ds, tr, fn  # type: ignore[attr-defined]
        for m in (tv, ds, tr, fn):
            sys.modules[m.__name__] = m
    import streaming

    return streaming


def mosaic_prepare(ctx: Ctx) -> None:
    """Offline: tokenize each record, write MDS shards (one process, as streaming's scripts do)."""
    import numpy as np

    streaming = import_streaming()
    tok = load_tokenizer()
    columns = {"input_ids": "ndarray:int32", "labels": "ndarray:int32", "sample_id": "int"}
    with (
        streaming.MDSWriter(out=str(ctx.work / "mds"), columns=columns) as out,
        open(ctx.data) as f,
    ):
        for line in f:
            s = tokenize_record(json.loads(line), tok)
            out.write(
                {
                    "input_ids": np.asarray(s["input_ids"], dtype=np.int32),
                    "labels": np.asarray(s["labels"], dtype=np.int32),
                    "sample_id": s["sample_id"],
                }
            )


def mosaic_loader(ctx: Ctx, rank: int, world_size: int) -> Any:
    """Training: StreamingDataset(local=..., shuffle=True, batch_size=B) in a DataLoader."""
    from torch.utils.data import DataLoader

    streaming = import_streaming()
    streaming.base.util.clean_stale_shared_memory()
    ds = streaming.StreamingDataset(
        local=str(ctx.work / "mds"), shuffle=True, shuffle_seed=ctx.seed, batch_size=ctx.batch_size
    )
    return DataLoader(
        ds, batch_size=ctx.batch_size, num_workers=ctx.workers, collate_fn=pad_collate
    )


# -- (e) litdata: optimize, then StreamingDataset ---------------------------------------------


def _litdata_fn(line: str) -> dict[str, Any]:
    import numpy as np

    s = _map_tokenize(json.loads(line))
    return {
        "input_ids": np.asarray(s["input_ids"], dtype=np.int32),
        "labels": np.asarray(s["labels"], dtype=np.int32),
        "sample_id": s["sample_id"],
    }


def litdata_prepare(ctx: Ctx) -> None:
    """Offline: optimize(fn=tokenize, inputs=lines, num_workers=workers) into chunks."""
    from litdata import optimize

    lines = ctx.data.read_text(encoding="utf-8").splitlines()
    optimize(
        fn=_litdata_fn,
        inputs=lines,
        output_dir=str(ctx.work / "litdata"),
        chunk_bytes="64MB",
        num_workers=max(1, ctx.workers),
        verbose=False,
    )


def litdata_loader(ctx: Ctx, rank: int, world_size: int) -> Any:
    """Training: StreamingDataset(shuffle=True) in litdata's StreamingDataLoader."""
    from litdata import StreamingDataLoader, StreamingDataset

    ds = StreamingDataset(str(ctx.work / "litdata"), shuffle=True, seed=ctx.seed)
    return StreamingDataLoader(
        ds, batch_size=ctx.batch_size, num_workers=ctx.workers, collate_fn=pad_collate
    )


@dataclass(frozen=True)
class Tool:
    """One loader to compare.

    Attributes:
        name: key in results and on the command line.
        label: how the tables name it.
        module: the package it needs (``None``: torch only).
        imports: modules imported before the clock starts (chute imports lazily).
        offline: it reads a converted copy of the data, made by ``prepare``.
        audit_only: not timed (it does not deliver each sample once, so a rate means little).
    """

    name: str
    label: str
    loader: Any
    prepare: Any = None
    module: str | None = None
    imports: tuple[str, ...] = ()
    offline: bool = False
    audit_only: bool = False

    def missing(self) -> str | None:
        """Why this tool cannot run here, or ``None``."""
        if self.module and importlib.util.find_spec(self.module) is None:
            return f"python package {self.module!r} is not installed (see docs/benchmarks.md)"
        return None


CHUTE_IMPORTS = ("chute.loader", "chute.recipe", "chute.sources")
CACHE_IMPORTS = ("chute.loader", "chute.cache")


def _naive_unsharded(ctx: Ctx, rank: int, world_size: int) -> Any:
    return naive_loader(ctx, rank, world_size, shard=False)


TOOLS: dict[str, Tool] = {
    t.name: t
    for t in (
        Tool(
            "chute",
            "chute Loader (raw JSONL, recipe in workers)",
            chute_loader,
            module="chute",
            imports=CHUTE_IMPORTS,
        ),
        Tool(
            "chute_packed",
            "chute Loader, plan='packed' (rows of 1,024 tokens, 6 a batch)",
            chute_packed_loader,
            chute_packed_prepare,
            "chute",
            CHUTE_IMPORTS,
            offline=True,
        ),
        Tool(
            "chute_cache",
            "chute preprocess; Loader(open_cache(DIR))",
            chute_cache_loader,
            chute_cache_prepare,
            "chute",
            CACHE_IMPORTS,
            offline=True,
        ),
        Tool(
            "chute_cache_packed",
            "chute preprocess; Loader(open_cache(DIR), plan='packed')",
            chute_cache_packed_loader,
            chute_cache_packed_prepare,
            "chute",
            CACHE_IMPORTS,
            offline=True,
        ),
        Tool("naive", "naive IterableDataset, i % (world x workers)", naive_loader),
        Tool(
            "naive_unsharded",
            "naive IterableDataset, no sharding",
            _naive_unsharded,
            audit_only=True,
        ),
        Tool(
            "hf_streaming",
            "datasets streaming + split_dataset_by_node + map",
            hf_streaming_loader,
            module="datasets",
        ),
        Tool(
            "xtuner",
            "datasets map + save_to_disk; load_from_disk + DistributedSampler",
            xtuner_loader,
            xtuner_prepare,
            "datasets",
            offline=True,
        ),
        Tool(
            "mosaic",
            "mosaicml-streaming MDSWriter + StreamingDataset",
            mosaic_loader,
            mosaic_prepare,
            "streaming",
            offline=True,
        ),
        Tool(
            "litdata",
            "litdata optimize + StreamingDataset",
            litdata_loader,
            litdata_prepare,
            "litdata",
            offline=True,
        ),
    )
}


# where each offline tool's prepare step writes, under the work folder
OUTPUTS = {
    "xtuner": "xtuner_disk",
    "mosaic": "mds",
    "litdata": "litdata",
    "chute_packed": "chute_cache/lengths",  # the lengths cache (CHUTE_CACHE_DIR, per data file)
    "chute_cache": "chute_tc",
    "chute_cache_packed": "chute_tc_packed",
}


def rank_env() -> tuple[int, int]:
    """``(RANK, WORLD_SIZE)`` as torchrun sets them (0 and 1 when unset)."""
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))

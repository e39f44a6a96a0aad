"""mosaicml-streaming and litdata reading the same records from the same S3 server, for
``bench_shard_shuffle.py``: each writes its own shard format (offline), uploads it, then reads the
first samples of a shuffled epoch through its own bounded local cache.

Both tools are benchmark-only dependencies, installed without their declared dependencies
(``make bench-deps``; docs/benchmarks.md says why). Their shuffles, set to the closest
equivalent of ``plan="shards"``:

* mosaicml-streaming: ``shuffle_algo="py1b"`` with ``shuffle_block_size`` = window x records per
  shard, ``cache_limit`` = the same bytes of shards as chute's limit, one canonical node;
* litdata: ``shuffle=True`` (its ``FullShuffle``: chunk order shuffled, samples shuffled within
  the chunks a worker holds), ``max_cache_size`` = the same bytes.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from _loaders_tools import import_streaming


def read_records(paths: list[Path]) -> list[np.ndarray]:
    rows = []
    for path in paths:
        with open(path, "rb") as f:
            rows.extend(np.asarray(orjson.loads(line)["input_ids"], dtype=np.int32) for line in f)
    return rows


def upload_dir(client: Any, folder: Path, bucket: str, prefix: str) -> None:
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            client.upload_file(str(path), bucket, f"{prefix}/{path.relative_to(folder)}")


def shard_bytes(folder: Path, suffix: str) -> tuple[int, int]:
    sizes = [p.stat().st_size for p in folder.rglob(f"*{suffix}")]
    return len(sizes), max(sizes)


def mosaic_prepare(rows: list[np.ndarray], per_file: int, work: Path) -> Path:
    streaming = import_streaming()
    out = work / "mds"
    mean = sum(r.nbytes for r in rows) / len(rows)
    limit = int(per_file * (mean + 16))  # about per_file samples per shard, as the JSONL files
    with streaming.MDSWriter(
        out=str(out), columns={"input_ids": "ndarray:int32", "sample_id": "int"}, size_limit=limit
    ) as writer:
        for i, r in enumerate(rows):
            writer.write({"input_ids": r, "sample_id": i})
    return out


def mosaic_read(
    endpoint: str, work: Path, limit_shards: int, window: int, per_file: int, samples: int
) -> dict[str, Any]:
    from torch.utils.data import DataLoader

    streaming = import_streaming()
    streaming.base.util.clean_stale_shared_memory()
    os.environ["S3_ENDPOINT_URL"] = endpoint
    count, biggest = shard_bytes(work / "mds", ".mds")
    ds = streaming.StreamingDataset(
        remote="s3://bench/mds",
        local=str(work / f"mds-local-{time.time_ns()}"),
        shuffle=True,
        shuffle_algo="py1br",
        shuffle_block_size=window * per_file,
        shuffle_seed=0,
        cache_limit=limit_shards * biggest,
        num_canonical_nodes=1,
        batch_size=32,
    )
    loader = DataLoader(ds, batch_size=32, num_workers=0, collate_fn=lambda b: b)
    seen, start = 0, time.perf_counter()
    for batch in loader:
        seen += len(batch)
        if seen >= samples:
            break
    return {
        "seconds": time.perf_counter() - start,
        "samples": seen,
        "shards": count,
        "cache_limit_bytes": limit_shards * biggest,
    }


def _litdata_fn(item: tuple[int, list[int]]) -> dict[str, Any]:
    i, ids = item
    return {"input_ids": np.asarray(ids, dtype=np.int32), "sample_id": i}


def litdata_prepare(rows: list[np.ndarray], per_file: int, work: Path) -> Path:
    from litdata import optimize

    out = work / "litdata"
    mean = sum(r.nbytes for r in rows) / len(rows)
    optimize(
        fn=_litdata_fn,
        inputs=[(i, r.tolist()) for i, r in enumerate(rows)],
        output_dir=str(out),
        chunk_bytes=int(per_file * (mean + 16)),
        num_workers=1,
        verbose=False,
    )
    return out


def litdata_read(endpoint: str, work: Path, limit_shards: int, samples: int) -> dict[str, Any]:
    from litdata import StreamingDataLoader, StreamingDataset

    count, biggest = shard_bytes(work / "litdata", ".bin")
    ds = StreamingDataset(
        "s3://bench/litdata",
        cache_dir=str(work / f"litdata-local-{time.time_ns()}"),
        shuffle=True,
        seed=0,
        max_cache_size=limit_shards * biggest,
        storage_options={"endpoint_url": endpoint},
    )
    loader = StreamingDataLoader(ds, batch_size=32, num_workers=0, collate_fn=lambda b: b)
    seen, start = 0, time.perf_counter()
    for batch in loader:
        seen += len(batch)
        if seen >= samples:
            break
    return {
        "seconds": time.perf_counter() - start,
        "samples": seen,
        "shards": count,
        "cache_limit_bytes": limit_shards * biggest,
    }

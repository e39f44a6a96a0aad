"""Data in object storage: Loader throughput from a local S3 server against local files.

Usage:
    python benchmarks/bench_remote.py            # -> benchmarks/results/remote.json
    python benchmarks/bench_remote.py --quick    # smaller data, a smoke test

The S3 server is moto's server mode, started as a separate process on 127.0.0.1 (so it does not
share the benchmark's interpreter), with the same data uploaded as local files hold:
``--samples`` pre-tokenized records (64..1024 tokens each, about 2.9 KB of JSON on average) as
JSONL, and as Parquet (row groups of 1,000 rows).

Parts (each figure the best of ``--repeats`` runs, the runs of the compared loaders interleaved):

* throughput: ``Loader`` samples/s over one shuffled epoch, 2 DataLoader workers, batch 32:
  local JSONL, S3 JSONL (block cache defaults: 64 KiB blocks, 64 MiB; with 32 KiB blocks; and
  with a cache of two blocks, as for data far larger than the cache), local and
  S3 Parquet; and a token cache (``chute preprocess`` of C4 text with the Qwen3 tokenizer,
  from ../shared/data) built locally and in S3, the S3 one read through its local mirror: its
  first epoch downloads the chunks (cold), later ones read the mirror (warm).
* first batch: seconds from ``Loader(...)`` to the first batch (workers started), for a local
  file, S3 with the index to build (cold), S3 with the index cached (warm), and an S3 cache whose
  mirror is empty (cold) or filled (warm).
* read amplification: bytes fetched from S3 per sample, and requests per sample, for random
  access (2,000 records in random order, one process) at three block sizes, and for one
  sequential pass; against the record's own size.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from _common import SHARED_DATA, save

ACCESS = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench-secret"}


def _small_cache() -> Any:
    from chute import RemoteOptions

    return RemoteOptions(cache_bytes=2 * 64 * 1024)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server() -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(100):
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return proc, f"http://127.0.0.1:{port}"
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError("the moto server did not start")


def write_data(folder: Path, n: int) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    lengths = rng.integers(64, 1025, size=n)
    rows = [{"input_ids": rng.integers(0, 32_000, size=int(k)).tolist()} for k in lengths]
    jsonl = folder / "tokens.jsonl"
    jsonl.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    pq.write_table(pa.Table.from_pylist(rows), folder / "tokens.parquet", row_group_size=1000)
    return {
        "jsonl": jsonl,
        "parquet": folder / "tokens.parquet",
        "mean_record_bytes": round(jsonl.stat().st_size / n),
    }


def upload(endpoint: str, bucket: str, files: list[Path]) -> None:
    import boto3

    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", **_keys())
    client.create_bucket(Bucket=bucket)
    for f in files:
        client.upload_file(str(f), bucket, f.name)


def _keys() -> dict[str, str]:
    return {
        "aws_access_key_id": ACCESS["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": ACCESS["AWS_SECRET_ACCESS_KEY"],
    }


def epoch_rate(source: Any, workers: int) -> tuple[float, int]:
    from chute import Loader, World

    loader = Loader(source, batch_size=32, world=World(0, 1), num_workers=workers, seed=1)
    t0 = time.perf_counter()
    n = sum(int(b["input_ids"].shape[0]) for b in loader)
    return n / (time.perf_counter() - t0), n


def first_batch(make_source: Any, workers: int) -> float:
    from chute import Loader, World

    t0 = time.perf_counter()
    loader = Loader(make_source(), batch_size=32, world=World(0, 1), num_workers=workers, seed=1)
    next(iter(loader))
    return time.perf_counter() - t0


def fresh_cache_dir() -> None:
    """Point chute's local cache (indexes, mirrors) at a new empty folder."""
    os.environ["CHUTE_CACHE_DIR"] = tempfile.mkdtemp(prefix="chute-bench-cache-")


def throughput(srcs: dict[str, Any], workers: int, repeats: int) -> dict[str, Any]:
    runs: dict[str, list[float]] = {k: [] for k in srcs}
    for _ in range(repeats):
        for name, src in srcs.items():  # interleaved
            rate, _ = epoch_rate(src, workers)
            runs[name].append(rate)
    best = {k: round(max(v)) for k, v in runs.items()}
    return {
        "samples_per_s": best,
        "all_runs": {k: [round(x) for x in v] for k, v in runs.items()},
        "vs_local_jsonl": {k: round(v / best["local_jsonl"], 3) for k, v in best.items()},
    }


def amplification(url: str, n: int, mean_bytes: int) -> dict[str, Any]:
    """Bytes fetched per sample read at random when the data is far larger than the cache.

    The block cache holds two blocks here, so (as for a dataset of many GB against the default
    64 MiB) nearly every random read fetches a block of its own.
    """
    from chute import JsonlSource, RemoteOptions

    out: dict[str, Any] = {}
    order = random.Random(0).sample(range(n), min(2000, n))
    for block in (16 << 10, 64 << 10, 256 << 10):
        opts = RemoteOptions(block_size=block, cache_bytes=2 * block)
        src = JsonlSource(url, remote=opts)
        for i in order:
            src[i]
        b = src.blocks
        assert b is not None
        out[f"random_block_{block >> 10}k"] = {
            "bytes_per_sample": round(b.bytes_fetched / len(order)),
            "requests_per_sample": round(b.requests / len(order), 3),
            "amplification": round(b.bytes_fetched / len(order) / mean_bytes, 2),
        }
    src = JsonlSource(url)
    count = sum(1 for _ in src.records_between(0, n))
    b = src.blocks
    assert b is not None
    out["sequential_default"] = {
        "bytes_per_sample": round(b.bytes_fetched / count),
        "requests_per_sample": round(b.requests / count, 4),
        "amplification": round(b.bytes_fetched / count / mean_bytes, 2),
    }
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=8000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.samples, args.repeats = 1500, 1
    from chute import RemoteOptions, open_source

    work = Path(tempfile.mkdtemp(prefix="chute-bench-remote-"))
    server, endpoint = start_server()
    os.environ.update(ACCESS, AWS_DEFAULT_REGION="us-east-1", AWS_ENDPOINT_URL=endpoint)
    fresh_cache_dir()
    try:
        data = write_data(work, args.samples)
        upload(endpoint, "bench", [data["jsonl"], data["parquet"]])
        s3_jsonl, s3_parquet = "s3://bench/tokens.jsonl", "s3://bench/tokens.parquet"
        results: dict[str, Any] = {
            "samples": args.samples,
            "workers": args.workers,
            "mean_record_bytes": data["mean_record_bytes"],
            "server": "moto server mode on 127.0.0.1 (separate process)",
        }
        # -- first batch ----------------------------------------------------------------------
        latency: dict[str, list[float]] = {
            "local_jsonl_cold": [],
            "local_jsonl_warm": [],
            "s3_jsonl_cold": [],
            "s3_jsonl_warm": [],
        }
        first_batch(lambda: open_source(str(data["jsonl"])), args.workers)  # imports, page cache
        for _ in range(args.repeats):
            fresh_cache_dir()  # no index yet: "cold" includes building it
            for where, path in (("local_jsonl", str(data["jsonl"])), ("s3_jsonl", s3_jsonl)):
                for state in ("cold", "warm"):
                    latency[f"{where}_{state}"].append(
                        first_batch(lambda p=path: open_source(p), args.workers)
                    )
        results["first_batch_s"] = {k: round(min(v), 3) for k, v in latency.items()}
        # -- throughput -----------------------------------------------------------------------
        srcs = {
            "local_jsonl": open_source(str(data["jsonl"])),
            "s3_jsonl": open_source(s3_jsonl),
            "s3_jsonl_32k_blocks": open_source(s3_jsonl, remote=RemoteOptions(block_size=32 << 10)),
            # a block cache far smaller than the data, as for a dataset of many GB
            "s3_jsonl_data_much_larger_than_cache": open_source(s3_jsonl, remote=_small_cache()),
            "local_parquet": open_source(str(data["parquet"])),
            "s3_parquet": open_source(s3_parquet),
        }
        results["throughput"] = throughput(srcs, args.workers, args.repeats)
        # -- read amplification ---------------------------------------------------------------
        results["read_amplification"] = amplification(
            s3_jsonl, args.samples, data["mean_record_bytes"]
        )
        # -- a token cache, local and in S3 ---------------------------------------------------
        if SHARED_DATA.is_dir():
            results["token_cache"] = token_cache(work, args)
    finally:
        server.terminate()
        server.wait(timeout=10)
        shutil.rmtree(work, ignore_errors=True)
    save("remote", results)
    print(orjson.dumps(results, option=orjson.OPT_INDENT_2).decode())


def token_cache(work: Path, args: argparse.Namespace) -> dict[str, Any]:
    from chute import open_cache, preprocess

    docs = (SHARED_DATA / "llama-factory/c4_demo.jsonl").read_bytes().splitlines()
    text = work / "c4.jsonl"
    text.write_bytes(b"\n".join(docs[i % len(docs)] for i in range(args.samples)) + b"\n")
    config = {
        "sources": [str(text)],
        "recipe": {
            "tokenizer": str(SHARED_DATA / "tokenizers/qwen3"),
            "format": "text",
            "max_length": 1024,
        },
        "cache": {"chunk_size": 1000, "workers": args.workers},
    }
    t0 = time.perf_counter()
    preprocess(config, out=work / "cache")
    local_build = time.perf_counter() - t0
    t0 = time.perf_counter()
    preprocess(config, out="s3://bench/cache")
    s3_build = time.perf_counter() - t0
    runs: dict[str, list[float]] = {"cache_local": [], "cache_s3_cold": [], "cache_s3_warm": []}
    first: dict[str, list[float]] = {"cache_local": [], "cache_s3_cold": [], "cache_s3_warm": []}
    for _ in range(args.repeats):
        first["cache_local"].append(first_batch(lambda: open_cache(work / "cache"), args.workers))
        fresh_cache_dir()
        for state in ("cold", "warm"):
            first[f"cache_s3_{state}"].append(
                first_batch(lambda: open_cache("s3://bench/cache"), args.workers)
            )
        runs["cache_local"].append(epoch_rate(open_cache(work / "cache"), args.workers)[0])
        fresh_cache_dir()  # an empty mirror: this epoch downloads every chunk
        runs["cache_s3_cold"].append(epoch_rate(open_cache("s3://bench/cache"), args.workers)[0])
        runs["cache_s3_warm"].append(epoch_rate(open_cache("s3://bench/cache"), args.workers)[0])
    best = {k: round(max(v)) for k, v in runs.items()}
    return {
        "build_s": {"local": round(local_build, 2), "s3": round(s3_build, 2)},
        "first_batch_s": {k: round(min(v), 3) for k, v in first.items()},
        "samples_per_s": best,
        "all_runs": {k: [round(x) for x in v] for k, v in runs.items()},
        "vs_local": {k: round(v / best["cache_local"], 3) for k, v in best.items()},
    }


if __name__ == "__main__":
    main()

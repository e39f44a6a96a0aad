"""Shard-window shuffle vs a full permutation, over remote files behind a per-request latency.

Usage:
    python benchmarks/bench_shard_shuffle.py            # -> benchmarks/results/shard_shuffle.json
    python benchmarks/bench_shard_shuffle.py --quick    # smaller, a smoke test

Setup: moto's S3 server (a separate process on 127.0.0.1) holds ``--files`` JSONL files of
``--per-file`` pre-tokenized records (64..512 tokens, about 1.7 KB of JSON each). In front of it
runs a small HTTP proxy on 127.0.0.1 (this file, ``LatencyProxy``) that sleeps ``--latency-ms``
before forwarding each request and counts requests and bytes answered: the S3 round trip a
training node pays, and a count that does not depend on the reader's own bookkeeping.

Each configuration reads the first ``--samples`` samples of epoch 0 (one process, the
``Loader`` with ``num_workers=0``, batch 32), from a fresh local cache folder:

* ``random``: the full permutation (``plan="random"``), ranged reads through the block cache
  (64 KiB blocks, ``cache_bytes`` 1 MiB per process: data much larger than memory);
* ``random+limit``: the same order with ``cache_limit`` = ``--limit-files`` files' bytes
  (each file downloaded whole, least recently used evicted);
* ``shards``: ``plan="shards"`` with ``shard_window=--window``, ranged reads;
* ``shards+limit``: ``plan="shards"`` under the same ``cache_limit``.

Reported per configuration: samples/s, GET requests and bytes fetched per sample (from the
proxy), and shuffle quality of the whole epoch's order (``chute.plan.order_locality``; the
identity order and the full permutation as references), and the same for mosaicml-streaming
and litdata reading the same records (``_shard_peers``; ``--no-peers`` leaves them out). Image
samples (tar shards, loose images, MDS, LitData): ``bench_remote_images.py``, which reuses
``LatencyProxy``.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import os
import shutil
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from _common import save
from bench_remote import ACCESS, start_server, upload


class LatencyProxy:
    """An HTTP proxy on 127.0.0.1 that sleeps before forwarding each request, and counts them."""

    def __init__(self, target: str, latency: float):
        host, port = target.removeprefix("http://").split(":")
        self.requests = 0
        self.bytes = 0
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _forward(self) -> None:
                time.sleep(latency)
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                conn = http.client.HTTPConnection(host, int(port), timeout=60)
                headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                headers["Host"] = f"{host}:{port}"
                conn.request(self.command, self.path, body=body, headers=headers)
                answer = conn.getresponse()
                data = answer.read()
                self.send_response(answer.status)
                head = self.command == "HEAD"  # its Content-Length is the object's size
                for k, v in answer.getheaders():
                    skip = ("transfer-encoding", "connection") + (
                        () if head else ("content-length",)
                    )
                    if k.lower() not in skip:
                        self.send_header(k, v)
                if not head:
                    self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
                conn.close()
                if self.command == "GET":
                    with proxy._lock:
                        proxy.requests += 1
                        proxy.bytes += len(data)

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _forward  # noqa: N815  (http.server names)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def reset(self) -> None:
        with self._lock:
            self.requests = self.bytes = 0


def write_files(folder: Path, files: int, per_file: int) -> list[Path]:
    rng = np.random.default_rng(0)
    paths = []
    for f in range(files):
        path = folder / f"part-{f:04d}.jsonl"
        with open(path, "wb") as out:
            for _ in range(per_file):
                n = int(rng.integers(64, 513))
                out.write(orjson.dumps({"input_ids": rng.integers(0, 32000, n).tolist()}) + b"\n")
        paths.append(path)
    return paths


def run(urls: list[str], proxy: LatencyProxy, plan: str, limit: int | None, args: Any) -> Any:
    from chute import JsonlSource, Loader, RemoteOptions

    cache = Path(os.environ["CHUTE_CACHE_DIR"]) / "remote-files"
    shutil.rmtree(cache, ignore_errors=True)
    options = RemoteOptions(cache_bytes=1 << 20, cache_limit=limit)
    source = JsonlSource(urls, remote=options)  # indexes cached: built before the runs
    options_plan = {"shard_window": args.window} if plan == "shards" else None
    loader = Loader(source, batch_size=32, seed=0, plan=plan, plan_options=options_plan)
    proxy.reset()
    seen, start = 0, time.perf_counter()
    for batch in loader:
        seen += len(batch["sample_ids"])
        if seen >= args.samples:
            break
    elapsed = time.perf_counter() - start
    return {
        "samples": seen,
        "samples_per_s": round(seen / elapsed, 1),
        "get_requests_per_1000_samples": round(1000 * proxy.requests / seen, 1),
        "bytes_fetched_per_sample": round(proxy.bytes / seen),
    }, loader.plan.order.materialize()


def peers(
    paths: list[Path], endpoint: str, proxy: LatencyProxy, work: Path, args: Any
) -> dict[str, Any]:
    """mosaicml-streaming and litdata over the same records and server (``_shard_peers``)."""
    import boto3

    with contextlib.suppress(ImportError):
        # _common.machine() imports datasets, which looks torchvision up: before streaming's
        # stand-in for it is registered (_loaders_tools.import_streaming)
        import datasets  # noqa: F401

    import _shard_peers as tools

    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id=ACCESS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=ACCESS["AWS_SECRET_ACCESS_KEY"],
    )
    rows = tools.read_records(paths)
    out: dict[str, Any] = {}
    for name, prepare, prefix in (
        ("mosaicml-streaming py1br", tools.mosaic_prepare, "mds"),
        ("litdata", tools.litdata_prepare, "litdata"),
    ):
        try:
            folder = prepare(rows, args.per_file, work)  # offline, not timed
            tools.upload_dir(client, folder, "bench", prefix)
            proxy.reset()
            if prefix == "mds":
                got = tools.mosaic_read(
                    proxy.endpoint, work, args.limit_files, args.window, args.per_file, args.samples
                )
            else:
                got = tools.litdata_read(proxy.endpoint, work, args.limit_files, args.samples)
        except Exception as exc:  # reported in the results, never hidden
            out[name] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
            print(name, out[name], flush=True)
            continue
        seen = got["samples"]
        out[name] = {
            "samples": seen,
            "samples_per_s": round(seen / got["seconds"], 1),
            "get_requests_per_1000_samples": round(1000 * proxy.requests / seen, 1),
            "bytes_fetched_per_sample": round(proxy.bytes / seen),
            "shards": got["shards"],
            "cache_limit_bytes": got["cache_limit_bytes"],
        }
        print(name, out[name], flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=32)
    parser.add_argument("--per-file", type=int, default=500)
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--window", type=int, default=4)
    parser.add_argument("--limit-files", type=int, default=8)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-peers", action="store_true", help="chute only")
    args = parser.parse_args()
    if args.quick:
        args.files, args.per_file, args.samples = 8, 200, 400
    work = Path(tempfile.mkdtemp(prefix="bench-shards-"))
    os.environ["CHUTE_CACHE_DIR"] = str(work / "cache")
    server, endpoint = start_server()
    proxy = LatencyProxy(endpoint, args.latency_ms / 1000)
    try:
        paths = write_files(work, args.files, args.per_file)
        upload(endpoint, "bench", paths)
        os.environ.update(ACCESS)
        os.environ["AWS_ENDPOINT_URL"] = proxy.endpoint
        os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
        urls = [f"s3://bench/{p.name}" for p in paths]
        file_bytes = max(p.stat().st_size for p in paths)
        limit = args.limit_files * file_bytes
        from chute import JsonlSource
        from chute.plan import order_locality, permutation

        bounds = JsonlSource(urls).shard_bounds()  # builds and caches the indexes
        results: dict[str, Any] = {}
        orders: dict[str, np.ndarray] = {}
        for name, plan, lim in (
            ("random", "random", None),
            ("random+limit", "random", limit),
            ("shards", "shards", None),
            ("shards+limit", "shards", limit),
        ):
            results[name], orders[name] = run(urls, proxy, plan, lim, args)
            print(name, results[name], flush=True)
        if not args.no_peers:
            results.update(peers(paths, endpoint, proxy, work, args))
        n = int(bounds[-1])
        quality = {
            "identity (file order)": order_locality(np.arange(n), bounds),
            "full permutation (random)": order_locality(orders["random"], bounds),
            f"shard window {args.window}": order_locality(orders["shards"], bounds),
            "full permutation (seed 1)": order_locality(permutation(n, 1), bounds),
        }
        base = results["random"]
        ratios = {
            name: {
                "speed_vs_random": round(r["samples_per_s"] / base["samples_per_s"], 2),
                "requests_vs_random": round(
                    r["get_requests_per_1000_samples"] / base["get_requests_per_1000_samples"], 3
                ),
            }
            for name, r in results.items()
            if "samples_per_s" in r
        }
        save(
            "shard_shuffle",
            {
                "setup": {
                    "files": args.files,
                    "records_per_file": args.per_file,
                    "file_bytes": file_bytes,
                    "samples_read": args.samples,
                    "shard_window": args.window,
                    "cache_limit_bytes": limit,
                    "latency_ms_per_request": args.latency_ms,
                    "proxy": "HTTP proxy on 127.0.0.1 sleeping before each forwarded request",
                },
                "reads": results,
                "ratios": ratios,
                "shuffle_quality": quality,
            },
        )
    finally:
        proxy.server.shutdown()
        server.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

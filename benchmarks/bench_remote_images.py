"""Image-text samples from S3 behind a per-request latency: tar shards, loose images, MDS, LitData.

Usage:
    python benchmarks/bench_remote_images.py          # -> benchmarks/results/remote_images.json
    python benchmarks/bench_remote_images.py --quick  # smaller, a smoke test (not saved)

Data: ``--total`` LLaVA records (a question, an answer naming the sample), each with its own copy
of one of six real photos from ../shared/data (12-174 KB, ``bench_shards.PHOTOS``: the photos
repeat, every sample has a fresh id and its own file), written once as

* JSONL + loose images (``loose/train.jsonl``, ``loose/images/0000042.jpg``);
* tar shards of ``--shard-size`` (``chute shard``: the same records, images as members);
* MosaicML Streaming MDS shards (image bytes as a ``bytes`` column) and LitData chunks
  (``optimize()``, image bytes as a uint8 array), each about the tar shard's size;

and uploaded to moto's S3 server. Every read goes through ``LatencyProxy``
(``bench_shard_shuffle``): ``--latency-ms`` before each forwarded request, GET requests and bytes
counted on the wire. Each configuration reads the first ``--samples`` samples of a shuffled
epoch 0 in one process (``num_workers=0``, batch 32), from a fresh local cache folder, and
decodes every image to pixels at 224 x 224:

* ``chute tar, plan=shards + cache_limit``: ``plan="shards"`` (``--window`` shards at a time),
  each shard downloaded whole into the bounded folder (``--limit-shards`` shards' bytes), its
  records and image members read from the copy;
* ``chute tar, random (ranged)``: a full permutation; records through the block cache, each
  image member one ranged GET;
* ``chute JSONL + loose images``: a full permutation; the JSONL through the block cache, each
  image one GET under the remote media root;
* ``mosaicml-streaming (MDS)``: ``shuffle_algo="py1br"``, ``shuffle_block_size`` = window x
  samples per shard, ``cache_limit`` = the same bytes as chute's;
* ``litdata``: ``shuffle=True``, ``max_cache_size`` = the same bytes.

chute's images go through its ``MediaStage`` (decode, resize, crop to 224, normalize); the
peers' through the same ``decode_image`` and ``ImageTransform`` calls in their collate function,
so every row does the same pixel work per sample. Ratios are against the first configuration.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from _common import SHARED_DATA, save
from bench_remote import ACCESS, start_server
from bench_shard_shuffle import LatencyProxy
from bench_shards import make_jsonl, make_shards

BATCH = 32
SIZE = 224


def pixels(data: bytes) -> np.ndarray:
    """What the peers do per image: what chute's media stage does (decode, resize, crop, scale).

    The same decode and transform code as chute's ``MediaStage`` (``decode_image`` and
    ``ImageTransform``), so the rows differ in how samples and image bytes arrive, not in the
    pixel work.
    """
    from chute.media import ImageTransform
    from chute.media.images import decode_image

    global _TRANSFORM
    if _TRANSFORM is None:
        _TRANSFORM = ImageTransform(size=SIZE, crop=SIZE, tokens_per_image=16)
    return np.asarray(_TRANSFORM(decode_image(data)).pixels)


_TRANSFORM: Any = None


def s3_client(endpoint: str) -> Any:
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id=ACCESS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=ACCESS["AWS_SECRET_ACCESS_KEY"],
    )


def upload_tree(client: Any, folder: Path, prefix: str, pattern: str = "*") -> None:
    for path in sorted(folder.rglob(pattern)):
        if path.is_file():
            client.upload_file(str(path), "bench", f"{prefix}/{path.relative_to(folder)}")


def read_records(jsonl: Path) -> list[tuple[int, str, bytes]]:
    """``(id, answer, image bytes)`` of every record: what the peers' shards hold."""
    rows = []
    with open(jsonl, "rb") as f:
        for line in f:
            r = orjson.loads(line)
            image = (jsonl.parent / r["image"]).read_bytes()
            rows.append((r["id"], r["conversations"][1]["value"], image))
    return rows


# -- chute -------------------------------------------------------------------------------------


def make_recipe(media_root: str | None) -> Any:
    from chute import Recipe

    return Recipe(
        tokenizer=str(SHARED_DATA / "tokenizers/qwen3"),
        template="qwen3",
        image_tokens=16,
        image_token="<|image_pad|>",
        media_root=media_root,
    )


def chute_read(source: Any, recipe: Any, plan: str, args: Any) -> int:
    from chute import Loader
    from chute.media import ImageTransform, MediaStage

    loader = Loader(
        source,
        recipe,
        batch_size=BATCH,
        seed=0,
        plan=plan,
        plan_options={"shard_window": args.window} if plan == "shards" else None,
        media=MediaStage(ImageTransform(size=SIZE, crop=SIZE, tokens_per_image=16)),
    )
    seen = 0
    for batch in loader:
        seen += int((batch["sample_ids"] >= 0).sum())
        if seen >= args.samples:
            break
    if loader.stats:
        raise RuntimeError(f"samples rejected: {loader.stats}")
    return seen


# -- peers -------------------------------------------------------------------------------------


def mosaic_prepare(rows: list[tuple[int, str, bytes]], shard_bytes: int, work: Path) -> Path:
    from _loaders_tools import import_streaming

    streaming = import_streaming()
    out = work / "mds"
    columns = {"image": "bytes", "text": "str", "sample_id": "int"}
    with streaming.MDSWriter(out=str(out), columns=columns, size_limit=shard_bytes) as writer:
        for i, text, image in rows:
            writer.write({"image": image, "text": text, "sample_id": i})
    return out


def mosaic_read(endpoint: str, work: Path, limit: int, block: int, samples: int) -> int:
    from torch.utils.data import DataLoader

    from _loaders_tools import import_streaming

    streaming = import_streaming()
    streaming.base.util.clean_stale_shared_memory()
    os.environ["S3_ENDPOINT_URL"] = endpoint
    ds = streaming.StreamingDataset(
        remote="s3://bench/mds",
        local=str(work / f"mds-local-{time.time_ns()}"),
        shuffle=True,
        shuffle_algo="py1br",
        shuffle_block_size=block,
        shuffle_seed=0,
        cache_limit=limit,
        num_canonical_nodes=1,
        batch_size=BATCH,
    )
    loader = DataLoader(ds, batch_size=BATCH, num_workers=0, collate_fn=_decode_batch)
    seen = 0
    for batch in loader:
        seen += len(batch)
        if seen >= samples:
            break
    return seen


def _decode_batch(items: list[dict[str, Any]]) -> list[np.ndarray]:
    return [pixels(bytes(item["image"])) for item in items]


def _litdata_fn(row: tuple[int, str, bytes]) -> dict[str, Any]:
    i, text, image = row
    return {"image": np.frombuffer(image, dtype=np.uint8), "text": text, "sample_id": i}


def litdata_prepare(rows: list[tuple[int, str, bytes]], shard_bytes: int, work: Path) -> Path:
    from litdata import optimize

    out = work / "litdata"
    optimize(
        fn=_litdata_fn,
        inputs=rows,
        output_dir=str(out),
        chunk_bytes=shard_bytes,
        num_workers=1,
        verbose=False,
    )
    return out


def litdata_read(endpoint: str, work: Path, limit: int, samples: int) -> int:
    from litdata import StreamingDataLoader, StreamingDataset

    ds = StreamingDataset(
        "s3://bench/litdata",
        cache_dir=str(work / f"litdata-local-{time.time_ns()}"),
        shuffle=True,
        seed=0,
        max_cache_size=limit,
        storage_options={"endpoint_url": endpoint},
    )
    loader = StreamingDataLoader(ds, batch_size=BATCH, num_workers=0, collate_fn=_decode_batch)
    seen = 0
    for batch in loader:
        seen += len(batch)
        if seen >= samples:
            break
    return seen


# -- the run -----------------------------------------------------------------------------------


def measured(proxy: LatencyProxy, read: Any) -> dict[str, Any]:
    proxy.reset()
    start = time.perf_counter()
    try:
        seen = read()
    except Exception as exc:  # reported in the results, never hidden
        return {"error": f"{type(exc).__name__}: {exc}"[:500]}
    elapsed = time.perf_counter() - start
    return {
        "samples": seen,
        "samples_per_s": round(seen / elapsed, 1),
        "get_requests_per_sample": round(proxy.requests / seen, 3),
        "bytes_fetched_per_sample": round(proxy.bytes / seen),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--total", type=int, default=2000, help="samples in the data set")
    parser.add_argument("--samples", type=int, default=1000, help="samples read per config")
    parser.add_argument("--shard-size", default="8MB")
    parser.add_argument("--window", type=int, default=4)
    parser.add_argument("--limit-shards", type=int, default=8)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-peers", action="store_true", help="chute only")
    args = parser.parse_args()
    if args.quick:
        args.total, args.samples, args.shard_size = 400, 200, "4MB"
    work = Path(tempfile.mkdtemp(prefix="bench-remote-images-"))
    os.environ["CHUTE_CACHE_DIR"] = str(work / "cache")
    server, endpoint = start_server()
    proxy = LatencyProxy(endpoint, args.latency_ms / 1000)
    try:
        jsonl = make_jsonl(work / "loose", args.total)
        pattern, _ = make_shards(jsonl, work / "shards", shard_size=args.shard_size)
        shards = sorted(Path(pattern).parent.glob("train-*.tar"))
        shard_bytes = max(p.stat().st_size for p in shards)
        per_shard = args.total / len(shards)
        limit = args.limit_shards * shard_bytes
        client = s3_client(endpoint)
        client.create_bucket(Bucket="bench")
        upload_tree(client, work / "shards", "tar", "*.tar")
        upload_tree(client, work / "loose", "loose")
        os.environ.update(ACCESS)
        os.environ["AWS_ENDPOINT_URL"] = proxy.endpoint
        os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
        from chute import JsonlSource, RemoteOptions, TarSource

        tar_urls = [f"s3://bench/tar/{p.name}" for p in shards]
        jsonl_url = "s3://bench/loose/train.jsonl"
        TarSource(tar_urls), JsonlSource(jsonl_url)  # indexes built and cached before the runs
        cache = Path(os.environ["CHUTE_CACHE_DIR"])

        def fresh() -> None:  # each configuration starts from empty local copies
            for sub in ("remote-files", "media"):
                shutil.rmtree(cache / sub, ignore_errors=True)

        def chute(make: Any, plan: str, media_root: str | None) -> Any:
            recipe = make_recipe(media_root)  # the tokenizer loaded once, outside the timing

            def read() -> int:
                fresh()
                return chute_read(make(), recipe, plan, args)

            return read

        configs: dict[str, Any] = {
            "chute tar, plan=shards + cache_limit": chute(
                lambda: TarSource(tar_urls, remote=RemoteOptions(cache_limit=limit)), "shards", None
            ),
            "chute tar, random (ranged)": chute(lambda: TarSource(tar_urls), "random", None),
            "chute JSONL + loose images": chute(
                lambda: JsonlSource(jsonl_url), "random", "s3://bench/loose"
            ),
        }
        if not args.no_peers:
            with contextlib.suppress(ImportError):
                import datasets  # noqa: F401  (see bench_shard_shuffle.peers)
            rows = read_records(jsonl)
            prepared: dict[str, str] = {}
            for name, prepare, prefix in (
                ("mosaicml-streaming (MDS)", mosaic_prepare, "mds"),
                ("litdata", litdata_prepare, "litdata"),
            ):
                try:
                    upload_tree(client, prepare(rows, shard_bytes, work), prefix)  # offline
                    prepared[name] = prefix
                except Exception as exc:
                    prepared[name] = f"error: {type(exc).__name__}: {exc}"[:500]
            block = int(args.window * per_shard)
            for name, prefix in prepared.items():
                if prefix.startswith("error"):
                    configs[name] = _raiser(prefix)
                elif prefix == "mds":
                    configs[name] = lambda: mosaic_read(
                        proxy.endpoint, work, limit, block, args.samples
                    )
                else:
                    configs[name] = lambda: litdata_read(proxy.endpoint, work, limit, args.samples)
        results = {}
        for name, read in configs.items():
            results[name] = measured(proxy, read)
            print(name, results[name], flush=True)
        base = results["chute tar, plan=shards + cache_limit"]
        ratios = {
            name: {
                "speed_vs_chute_shards": round(r["samples_per_s"] / base["samples_per_s"], 3),
                "gets_vs_chute_shards": round(
                    r["get_requests_per_sample"] / base["get_requests_per_sample"], 2
                ),
                "bytes_vs_chute_shards": round(
                    r["bytes_fetched_per_sample"] / base["bytes_fetched_per_sample"], 2
                ),
            }
            for name, r in results.items()
            if "samples_per_s" in r and "samples_per_s" in base
        }
        image_bytes = sum(len(r[2]) for r in read_records(jsonl)) if not args.quick else None
        result = {
            "setup": {
                "samples_total": args.total,
                "samples_read": args.samples,
                "images": "6 photos from ../shared/data (bench_shards.PHOTOS), one copy per sample",
                "image_bytes_mean": round(image_bytes / args.total) if image_bytes else None,
                "tar_shards": len(shards),
                "shard_bytes": shard_bytes,
                "shard_window": args.window,
                "cache_limit_bytes": limit,
                "latency_ms_per_request": args.latency_ms,
                "decode": f"every image to {SIZE} x {SIZE} pixels",
            },
            "reads": results,
            "ratios": ratios,
        }
        if args.quick:
            print(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())
        else:
            save("remote_images", result)
    finally:
        proxy.server.shutdown()
        server.kill()
        shutil.rmtree(work, ignore_errors=True)


def _raiser(message: str) -> Any:
    def read() -> int:
        raise RuntimeError(message)

    return read


if __name__ == "__main__":
    main()

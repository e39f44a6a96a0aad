"""Tar shards against JSONL + loose images: samples/s of the Loader, local files.

Usage:
    python benchmarks/bench_shards.py            # -> benchmarks/results/shards.json
    python benchmarks/bench_shards.py --quick    # fewer samples, a smoke test

Data: ``--samples`` LLaVA-style records (a caption question and answer) each referencing one
of the real photos in ../shared/data (llama-factory/mllm_demo_data, llava/examples, qwen3-vl
images; 12-174 KB each), every record its own copy of the file, as a real dataset has one file
per image. The same records are written into tar shards with ``write_shards`` (``chute shard``).

Figures (each the best of ``--repeats`` runs, the layouts interleaved):

* ``records``: samples/s of the source alone (``source[i]`` in a shuffled order, no decode).
* ``loader``: samples/s of one shuffled epoch of ``Loader`` with a Qwen3 recipe (16 image tokens)
  and ``MediaStage(ImageTransform(224))``: every image read and decoded; ``--workers`` workers.
* ``decode``: images/s of ``decode_image`` on the references alone (a member read by byte
  range against a file opened by path), one process.
* ``index``: seconds to build the member indexes of all shards (JSONL: its offset index).
* ``reference_bytes``: bytes one image's reference takes in a sample (and so in a token cache
  row): a tar member reference, a file path, and a ``data:`` URL (what a Parquet image struct
  with bytes becomes) for comparison.
* ``cache_bytes``: the size on disk of a token cache (``chute preprocess``) of the same records
  read from the tar shards, from JSONL + loose images, and from a Parquet file whose image
  structs hold the bytes (the Hub's layout: each image becomes a ``data:`` URL).

``measure(layouts, ...)`` is the reusable part: give it named source factories (local or
remote, any tool wrapped as a source) and it returns samples/s of each, interleaved.
"""

from __future__ import annotations

import argparse
import random
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from _common import SHARED_DATA, save

PHOTOS = [
    "llama-factory/mllm_demo_data/1.jpg",
    "llama-factory/mllm_demo_data/2.jpg",
    "llama-factory/mllm_demo_data/3.jpg",
    "llava/examples/extreme_ironing.jpg",
    "llava/examples/waterview.jpg",
    "qwen3-vl/demo/images/COCO_train2014_000000580957.jpg",
]


def make_jsonl(folder: Path, samples: int) -> Path:
    """``samples`` LLaVA records, each with its own copy of a real photo, in ``folder``."""
    (folder / "images").mkdir(parents=True, exist_ok=True)
    lines = []
    for i in range(samples):
        photo = SHARED_DATA / PHOTOS[i % len(PHOTOS)]
        name = f"images/{i:07d}.jpg"
        shutil.copyfile(photo, folder / name)
        lines.append(
            orjson.dumps(
                {
                    "id": i,
                    "image": name,
                    "conversations": [
                        {"from": "human", "value": "<image>\nWhat is in the picture?"},
                        {"from": "gpt", "value": f"Picture number {i}."},
                    ],
                }
            )
        )
    path = folder / "train.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def make_shards(jsonl: Path, folder: Path, shard_size: str = "64MB") -> tuple[str, float]:
    """The records of ``jsonl`` as tar shards; returns their glob and the write time."""
    from chute import open_source
    from chute.recipe.shards import write_shards

    t0 = time.perf_counter()
    write_shards(open_source(str(jsonl)), folder, shard_size=shard_size)
    return str(folder / "train-*.tar"), time.perf_counter() - t0


def records_rate(make_source: Callable[[], Any], order: list[int]) -> float:
    """Samples/s of ``source[i]`` over ``order`` (records only: nothing decoded)."""
    source = make_source()
    t0 = time.perf_counter()
    for i in order:
        source[i].data  # noqa: B018  (parsing is part of reading a record)
    return len(order) / (time.perf_counter() - t0)


def loader_rate(make_source: Callable[[], Any], recipe: Any, workers: int) -> float:
    """Samples/s of one shuffled epoch of the Loader, every image decoded and transformed."""
    from chute import Loader
    from chute.media import ImageTransform, MediaStage

    stage = MediaStage(ImageTransform(size=224, crop=224, tokens_per_image=16))
    loader = Loader(make_source(), recipe, batch_size=16, media=stage, num_workers=workers, seed=0)
    t0 = time.perf_counter()
    n = sum(int((b["sample_ids"] >= 0).sum()) for b in loader)
    return n / (time.perf_counter() - t0)


def decode_rate(make_source: Callable[[], Any], recipe: Any, n: int = 200) -> float:
    """Images/s of ``decode_image`` over the first ``n`` samples' resolved image references."""
    from chute.media.images import decode_image

    source = make_source()
    refs = [recipe(source[i])["images"][0]["path"] for i in range(min(n, len(source)))]
    t0 = time.perf_counter()
    for ref in refs:
        decode_image(ref)
    return len(refs) / (time.perf_counter() - t0)


def measure(
    layouts: dict[str, Callable[[], Any]], recipe: Any, *, workers: int = 2, repeats: int = 3
) -> dict[str, dict[str, float]]:
    """``{layout: {"records", "decode", "loader": per second}}``, best of ``repeats``, interleaved."""
    out: dict[str, dict[str, float]] = {
        name: {"records": 0.0, "decode": 0.0, "loader": 0.0} for name in layouts
    }
    n = len(next(iter(layouts.values()))())
    order = list(range(n))
    random.Random(0).shuffle(order)
    for _ in range(repeats):
        for name, make in layouts.items():
            out[name]["records"] = max(out[name]["records"], records_rate(make, order))
            out[name]["decode"] = max(out[name]["decode"], decode_rate(make, recipe))
            out[name]["loader"] = max(out[name]["loader"], loader_rate(make, recipe, workers))
    return {name: {k: round(v, 1) for k, v in d.items()} for name, d in out.items()}


def cache_sizes(sources: dict[str, str], recipe: dict[str, Any], work: Path) -> dict[str, int]:
    """Bytes on disk of a token cache built from each source (the same records)."""
    from chute import preprocess

    out = {}
    for name, pattern in sources.items():
        folder = work / f"cache-{len(out)}"
        preprocess(sources=[pattern], recipe=recipe, out=folder, workers=1, progress=False)
        out[name] = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
    return out


def parquet_with_bytes(jsonl: Path, path: Path) -> Path:
    """The records of ``jsonl`` as Parquet, each image as a Hub ``Image`` struct with its bytes."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = []
    for line in jsonl.read_bytes().splitlines():
        rec = orjson.loads(line)
        image = (jsonl.parent / rec["image"]).read_bytes()
        rows.append(
            {
                "conversations": rec["conversations"],
                "images": [{"bytes": image, "path": rec["image"]}],
            }
        )
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=256)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=4000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.samples, args.repeats = 300, 1
    from chute import JsonlSource, Recipe, TarSource

    work = Path(tempfile.mkdtemp(prefix="chute-bench-shards-"))
    try:
        jsonl = make_jsonl(work / "loose", args.samples)
        pattern, write_s = make_shards(jsonl, work / "shards")
        cache = work / "index-cache"
        t0 = time.perf_counter()
        JsonlSource(jsonl, cache_dir=cache, rebuild=True)
        jsonl_index = time.perf_counter() - t0
        t0 = time.perf_counter()
        shards = TarSource(pattern, cache_dir=cache, rebuild=True)
        tar_index = time.perf_counter() - t0
        layouts = {
            "jsonl + loose images": lambda: JsonlSource(jsonl, cache_dir=cache),
            "tar shards": lambda: TarSource(pattern, cache_dir=cache),
        }
        recipe = Recipe(
            tokenizer=str(SHARED_DATA / "tokenizers/qwen3"),
            template="qwen3",
            image_tokens=16,
            image_token="<|image_pad|>",
        )
        rates = measure(layouts, recipe, workers=args.workers, repeats=args.repeats)
        from chute.formats.media import inline_url

        photo = (SHARED_DATA / PHOTOS[0]).read_bytes()
        sample = recipe(shards[0])
        result = {
            "samples": args.samples,
            "shards": len(shards.files),
            "shard_bytes": shards.bytes,
            "workers": args.workers,
            "rates": rates,
            "ratio_tar_to_jsonl": {
                k: round(rates["tar shards"][k] / rates["jsonl + loose images"][k], 2)
                for k in ("records", "decode", "loader")
            },
            "write_seconds": round(write_s, 2),
            "index_seconds": {"jsonl": round(jsonl_index, 3), "tar": round(tar_index, 3)},
            "reference_bytes": {
                "tar member": len(sample["images"][0]["path"]),
                "file path": len(str(work / "loose/images/0000000.jpg")),
                f"data: URL of a {len(photo):,}-byte photo": len(inline_url(photo)),
            },
        }
        recipe_spec = {
            "tokenizer": str(SHARED_DATA / "tokenizers/qwen3"),
            "template": "qwen3",
            "image_tokens": 16,
            "image_token": "<|image_pad|>",
        }
        sizes = cache_sizes(
            {
                "tar shards": pattern,
                "jsonl + loose images": str(jsonl),
                "parquet with image bytes": str(parquet_with_bytes(jsonl, work / "p.parquet")),
            },
            recipe_spec,
            work,
        )
        result["cache_bytes"] = sizes
        result["image_bytes"] = sum(f.stat().st_size for f in (work / "loose/images").iterdir())
        print(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())
        if not args.quick:
            save("shards", result)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

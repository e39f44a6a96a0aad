"""Media: decode + resize + normalise throughput, worker scaling, pre-decoded store vs decoding.

Usage: ``.venv/bin/python benchmarks/bench_media.py [--quick]``

Images: every real JPEG in ../shared/data (LLaVA-Bench photos up to 4800x3203, COCO, Qwen-VL,
LLaMA-Factory, skimage, llama-models: 0.01-1.7 MB each); LLaVA-Bench's WEBP and PNG files named
``.jpg`` are left out (they are not JPEGs). Transform: ``ImageTransform(size=336, crop=336,
normalize="clip")`` (LLaVA-1.5's CLIP-336 input), float32 ``(3, 336, 336)`` out.

1. One process: images/s for decode (``decode_image``: full, guarded, RGB) + resize/crop +
   normalise, and the share of each step.
2. Through the Loader: batches of 8 samples with one image each (pre-tokenized, 576 image
   tokens, so the recipe costs nothing), ``num_workers`` 0, 1, 2: images/s, and per worker.
3. Pre-decoded ``PixelStore`` vs decoding at training time, same images, same transform: one
   process (store read + normalise vs decode + resize + normalise), and through the Loader with
   2 workers. Target: the store >= 3x faster.
4. The same through the token cache, as users run it: ``chute preprocess --pixels`` over a
   JSONL of messages records (one real JPEG each, Qwen3's tokenizer, 576 tokens per image), then
   ``Loader(open_cache(DIR))`` (reads the cache's pixels) vs ``Loader(open_cache(DIR),
   media=MediaStage(..., store=False))`` (decodes every JPEG), 0 and 2 workers; and what the
   pixel phase adds to ``chute preprocess``.

Each timing is the best of 3 runs (the machine is shared).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import SHARED_DATA, best_of, save
from chute import Loader, World, open_cache, preprocess
from chute.media import (
    ImageTransform,
    MediaStage,
    PixelStore,
    build_pixel_store,
    decode_image,
)

TOKEN = 7
TOKENS = 576


def real_jpegs() -> list[str]:
    out = []
    for path in sorted(SHARED_DATA.rglob("*")):
        if path.suffix.lower() in (".jpg", ".jpeg") and path.is_file():
            with Image.open(path) as im:
                if im.format == "JPEG":
                    out.append(str(path))
    return out


def samples(paths: list[str], n: int) -> list[dict]:
    ids = np.array([1] + [TOKEN] * TOKENS + [2], dtype=np.int32)
    return [
        {"input_ids": ids, "images": [{"path": paths[i % len(paths)], "span": [1, 1 + TOKENS]}]}
        for i in range(n)
    ]


def loader_rate(data: Any, stage: MediaStage | None, workers: int) -> float:
    """Images/s of one epoch over ``data`` (samples or a cache), one image per sample."""

    def run() -> None:
        loader = Loader(
            data,
            batch_size=8,
            shuffle=False,
            media=stage,
            num_workers=workers,
            persistent_workers=False,
            world=World(0, 1),
        )
        for batch in loader:
            assert batch["pixel_values"].shape[1:] == (3, 336, 336)

    return len(data) / best_of(run)


def token_cache_with_pixels(paths: list[str], transform: ImageTransform, n: int) -> dict:
    """``chute preprocess --pixels``, then the Loader over the cache: pixels vs decoding."""
    import json

    tokenizer = SHARED_DATA / "tokenizers/qwen3/tokenizer.json"
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "mm.jsonl"
        with open(data, "w") as f:
            for i in range(n):
                rec = {
                    "images": [paths[i % len(paths)]],
                    "messages": [
                        {"role": "user", "content": f"<image>Describe picture {i}."},
                        {"role": "assistant", "content": "A photograph."},
                    ],
                }
                f.write(json.dumps(rec) + "\n")
        config = {
            "sources": [str(data)],
            "recipe": {
                "tokenizer": str(tokenizer),
                "template": "qwen3",
                "image_tokens": TOKENS,
                "media_root": "/",
            },
            "cache": {"workers": 2},
        }
        t0 = time.perf_counter()
        preprocess(config, out=Path(tmp) / "plain")
        plain_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        report = preprocess(config, out=Path(tmp) / "px", pixels={"size": 336, "crop": 336})
        pixels_s = time.perf_counter() - t0
        cache = open_cache(Path(tmp) / "px")
        decode = MediaStage(cache.media_stage().image, store=False)

        out = {
            "samples": len(cache),
            "preprocess_s": round(plain_s, 2),
            "preprocess_with_pixels_s": round(pixels_s, 2),
            "pixels": report.to_json()["stage_outputs"]["pixels"],
        }
        for workers in (0, 2):
            dec = loader_rate(cache, decode, workers)
            px = loader_rate(cache, None, workers)  # the cache's own stage, reading its pixels
            out[f"loader_{workers}_workers"] = {
                "decode_images_per_s": round(dec, 1),
                "cache_pixels_images_per_s": round(px, 1),
                "speedup": round(px / dec, 1),
            }
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    paths = real_jpegs()
    megapixels = [Image.open(p).size for p in paths]
    transform = ImageTransform(size=336, crop=336, normalize="clip", tokens_per_image=TOKENS)
    reps = 1 if args.quick else 3

    # 1. one process, by step
    def decode_all() -> None:
        for _ in range(reps):
            for p in paths:
                decode_image(p)

    def full_all() -> None:
        for _ in range(reps):
            for p in paths:
                transform(decode_image(p))

    n = len(paths) * reps
    t_decode = best_of(decode_all)
    t_full = best_of(full_all)
    prepared = [transform.prepare(decode_image(p)) for p in paths]

    def normalise_all() -> None:
        for _ in range(reps):
            for arr in prepared:
                transform.finish(arr)

    t_norm = best_of(normalise_all)
    one_process = {
        "images": len(paths),
        "mean_megapixels": round(float(np.mean([w * h for w, h in megapixels])) / 1e6, 2),
        "decode_resize_normalise_images_per_s": round(n / t_full, 1),
        "decode_only_images_per_s": round(n / t_decode, 1),
        "ms_per_image": {
            "decode": round(1000 * t_decode / n, 2),
            "resize_crop": round(1000 * (t_full - t_decode - t_norm) / n, 2),
            "normalise": round(1000 * t_norm / n, 3),
        },
    }

    # 2. the Loader, 0/1/2 workers
    data = samples(paths, 96 if args.quick else 240)
    stage = MediaStage(transform, token_ids={"image": TOKEN})
    scaling = {}
    for workers in (0, 1, 2):
        rate = loader_rate(data, stage, workers)
        scaling[f"workers_{workers}"] = {
            "images_per_s": round(rate, 1),
            "per_worker": round(rate / max(1, workers), 1),
        }

    # 3. pre-decoded store vs decoding
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        report = build_pixel_store(paths, transform, Path(tmp) / "px", workers=2)
        build_s = time.perf_counter() - t0
        store = PixelStore(Path(tmp) / "px", transform)

        def stored_all() -> None:
            for _ in range(reps):
                for p in paths:
                    transform.finish(store.get(p))

        t_store = best_of(stored_all)
        stored_stage = MediaStage(transform, store=store, token_ids={"image": TOKEN})
        loader_decode = loader_rate(data, stage, 2)
        loader_store = loader_rate(data, stored_stage, 2)
    store_result = {
        "build_seconds": round(build_s, 2),
        "store_bytes": report.bytes,
        "one_process": {
            "decode_images_per_s": round(n / t_full, 1),
            "store_images_per_s": round(n / t_store, 1),
            "speedup": round(t_full / t_store, 1),
        },
        "loader_2_workers": {
            "decode_images_per_s": round(loader_decode, 1),
            "store_images_per_s": round(loader_store, 1),
            "speedup": round(loader_store / loader_decode, 1),
        },
        "target_speedup": 3.0,
    }
    cache_result = token_cache_with_pixels(paths, transform, 96 if args.quick else 240)
    save(
        "media",
        {
            "transform": "ImageTransform(size=336, crop=336, normalize='clip'), float32 out",
            "one_process": one_process,
            "loader_scaling": scaling,
            "pixel_store": store_result,
            "token_cache_pixels": cache_result,
            "quick": args.quick,
        },
    )


if __name__ == "__main__":
    main()

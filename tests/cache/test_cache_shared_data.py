"""Real data, real tokenizer: the cache holds exactly the recipe's samples, image spans included."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pytest

from chute import JsonlSource, Recipe, SampleError, open_cache, preprocess

pytestmark = [pytest.mark.shared_data, pytest.mark.timeout(240)]

FILES = [
    "llama-factory/alpaca_en_demo.json",  # alpaca, long GPT-4 answers (some truncated)
    "fastchat/dummy_conversation.json",  # ShareGPT, 2-6 turns
    "llama-factory/glaive_toolcall_en_demo.json",  # tools, function calls, observations
    "llama-factory/mllm_demo.json",  # messages with <image> and an images list
    "qwen3-vl/demo/single_images.json",  # LLaVA style, <image> at the end
    "qwen-vl/qwen_vl_readme_example.json",  # Qwen-VL <img> tags: a URL, a missing image
    "xtuner/resource/openai_sft.jsonl",  # bare message lists
]


def test_cache_equals_the_recipe_on_real_data(shared_data: Path, tmp_path: Path) -> None:
    recipe_cfg = {
        "tokenizer": str(shared_data / "tokenizers/qwen3/tokenizer.json"),
        "template": "qwen3",
        "max_length": 768,
        "image_tokens": "qwen2-vl",
    }
    sources = [str(shared_data / f) for f in FILES]
    report = preprocess(
        {"sources": sources, "recipe": recipe_cfg, "cache": {"chunk_size": 400, "workers": 2}},
        out=tmp_path / "c",
    )
    cache = open_cache(tmp_path / "c", recipe=recipe_cfg)
    recipe = Recipe(**recipe_cfg)
    want, rejected = [], []
    for record in JsonlSource(sources):
        try:
            want.append(recipe(record))
        except SampleError as exc:
            rejected.append({"line": record.line, "reason": exc.kind, "path": record.path})
    assert len(cache) == len(want) == report.samples
    assert cache[0]["input_ids"].dtype == np.int32  # Qwen3's 151,669 ids do not fit uint16
    with_images = 0
    for i, w in enumerate(want):
        got = cache[i]
        assert np.array_equal(got["input_ids"], w["input_ids"]), i
        assert np.array_equal(got["labels"], w["labels"]), i
        assert got["images"] == w["images"] and got["path"] == w["path"], i
        assert (got["line"], got["index"], got["truncated"]) == (
            w["line"],
            w["index"],
            w["truncated"],
        )
        for image in got["images"]:
            a, b = image["span"]
            assert b - a == image["num_tokens"] and (got["input_ids"][a:b] == 151655).all()
            assert (got["labels"][a:b] == -100).all()
            with_images += 1
    assert with_images >= 8 and any(s["truncated"] for s in want)
    assert np.array_equal(cache.image_tokens, [s["num_image_tokens"] for s in want])
    lines = [orjson.loads(x) for x in (tmp_path / "c/rejects.jsonl").read_bytes().splitlines()]
    assert [{k: x[k] for k in ("line", "reason", "path")} for x in lines] == rejected
    assert {"image_missing"} <= {x["reason"] for x in lines}
    # ~4 bytes per token (int32 ids) plus per-sample columns: no labels array is stored
    assert cache.summary["bytes"] / cache.summary["tokens"] < 4.6

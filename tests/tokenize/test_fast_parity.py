"""Ids and labels identical on both engines: every record of the shared data, Qwen3 and Llama 3.2,
every built-in template and the tokenizers' own Jinja templates, SFT, preference and KTO.

Each configuration runs ``Recipe.batch`` over every record with ``tokenizer_backend="hf"``
(``tokenizers``, the reference) and with the tiktoken fast path, and compares every sample
(``input_ids``, ``labels``, media spans) and every rejection (its message) one by one.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from chute import Recipe
from chute.errors import SampleError
from chute.formats import FormatSpec
from chute.sources import JsonlSource
from chute.tokenize import HFTokenizer, load_tokenizer

pytestmark = pytest.mark.shared_data

# file -> FormatSpec it is read with (``auto`` where the format is detected)
SFT = {
    "fastchat/dummy_conversation.json": FormatSpec("auto"),
    "fastchat/question.jsonl": FormatSpec(
        "alpaca", columns={"prompt": "turns.0", "query": "turns.1", "response": "reference.0"}
    ),
    "llama-factory/alpaca_en_demo.json": FormatSpec("auto"),
    "llama-factory/alpaca_zh_demo.json": FormatSpec("auto"),
    "llama-factory/glaive_toolcall_en_demo.json": FormatSpec("auto"),
    "llama-factory/identity.json": FormatSpec("auto"),
    "llama-factory/mllm_demo.json": FormatSpec("auto"),
    "llama-factory/v1_sft_demo.jsonl": FormatSpec("auto"),
    "stanford_alpaca/seed_tasks.jsonl": FormatSpec(
        "alpaca", columns={"query": "instances.0.input", "response": "instances.0.output"}
    ),
    "torchtune/alpaca_tiny.json": FormatSpec("auto"),
    "qwen3-vl/demo/single_images.json": FormatSpec("auto"),
    "xtuner/resource/mllm_sft_single_image_example_data.jsonl": FormatSpec(
        "messages", placeholders={"image": "<IMG_CONTEXT>"}
    ),
    "xtuner/resource/mllm_sft_text_example_data.jsonl": FormatSpec("auto"),
    "xtuner/resource/openai_sft.jsonl": FormatSpec("auto"),
}
BUILTIN = [
    "chatml",
    "qwen3",
    "qwen2-vl",
    "llama3",
    "llama2",
    "mistral",
    "vicuna",
    "llava-v1",
    "alpaca",
]
JINJA = {
    "qwen3": "tokenizers/qwen3/tokenizer_config.json",
    "llama3.2": "tokenizers/llama3.2/meta-llama-Llama-3.2-3B-Instruct.jinja",
}
DATE = {"date_string": "26 Jul 2024"}


@functools.cache
def _tokenizers(root: str, name: str) -> tuple[HFTokenizer, HFTokenizer]:
    path = Path(root) / "tokenizers" / name / "tokenizer.json"
    slow = load_tokenizer(path, backend="hf")
    fast = load_tokenizer(path, backend="tiktoken")
    assert isinstance(slow, HFTokenizer) and isinstance(fast, HFTokenizer)
    assert (slow.engine, fast.engine) == ("tokenizers", "tiktoken")
    return slow, fast


@functools.cache
def _records(root: str, name: str) -> list[Any]:
    return list(JsonlSource(Path(root) / name))


def compare(slow: Recipe, fast: Recipe, records: list[Any], what: str) -> int:
    """Assert every outcome is the same on both engines; return how many samples were made."""
    made = 0
    for record, a, b in zip(records, slow.batch(records), fast.batch(records), strict=True):
        where = f"{what}, {record.path}:{record.line}"
        if isinstance(a, SampleError) or isinstance(b, SampleError):
            assert (type(a), str(a)) == (type(b), str(b)), where
            continue
        made += 1
        assert set(a) == set(b), where
        for key in a:
            if isinstance(a[key], np.ndarray):
                assert np.array_equal(a[key], b[key]), f"{where}: {key}"
            else:
                assert a[key] == b[key], f"{where}: {key}"
    assert fast.tokenizer.engine == "tiktoken", f"{what}: {fast.tokenizer.engine_note}"
    return made


@pytest.mark.parametrize("template", [*BUILTIN, "jinja"])
@pytest.mark.parametrize("tokenizer", ["qwen3", "llama3.2"])
def test_sft_ids_and_labels_identical(shared_data: Path, tokenizer: str, template: str) -> None:
    slow_tok, fast_tok = _tokenizers(str(shared_data), tokenizer)
    chosen = str(shared_data / JINJA[tokenizer]) if template == "jinja" else template
    made = 0
    for name, spec in SFT.items():
        options: dict[str, Any] = {"format": spec, "template": chosen, "template_vars": DATE}
        slow = Recipe(tokenizer=slow_tok, **options)
        fast = Recipe(tokenizer=fast_tok, **options)
        assert slow.fingerprint() == fast.fingerprint()
        made += compare(slow, fast, _records(str(shared_data), name), f"{template} {name}")
    assert made > 3000


@pytest.mark.parametrize("tokenizer", ["qwen3", "llama3.2"])
def test_preference_kto_and_text_identical(shared_data: Path, tokenizer: str) -> None:
    slow_tok, fast_tok = _tokenizers(str(shared_data), tokenizer)
    runs = [
        ("llama-factory/dpo_en_demo.json", {"task": "preference"}),
        ("llama-factory/kto_en_demo.json", {"task": "kto"}),
        ("llama-factory/c4_demo.jsonl", {"format": "text"}),
        ("llama-factory/c4_demo.jsonl", {"format": "text", "max_length": 512, "overflow": "split"}),
        ("llama-factory/alpaca_en_demo.json", {"train_on": "all", "max_length": 64}),
        (
            "fastchat/dummy_conversation.json",
            {"train_on": "last", "truncation": "turns", "max_length": 48},
        ),
    ]
    for name, options in runs:
        options = {"template": str(shared_data / JINJA[tokenizer]), **options}
        if options.get("format") == "text":
            options.pop("template")
        slow = Recipe(tokenizer=slow_tok, **options)
        fast = Recipe(tokenizer=fast_tok, **options)
        assert compare(slow, fast, _records(str(shared_data), name), f"{options} {name}") > 0


def test_caches_built_on_either_engine_are_byte_identical(
    shared_data: Path, tmp_path: Path
) -> None:
    """The engine is not in the fingerprint nor in config.yaml: either engine builds the same
    cache, file for file, and a cache built on one opens for a recipe on the other."""
    from cache_helpers import tree_digest
    from chute import open_cache, preprocess

    sources = [
        str(shared_data / "llama-factory/alpaca_zh_demo.json"),
        str(shared_data / "llama-factory/glaive_toolcall_en_demo.json"),
    ]
    recipe = {
        "tokenizer": str(shared_data / "tokenizers/qwen3/tokenizer.json"),
        "template": str(shared_data / JINJA["qwen3"]),
        "max_length": 512,
    }
    digests = {}
    for backend in ("hf", "tiktoken"):
        out = tmp_path / backend
        preprocess(
            {
                "sources": sources,
                "recipe": {**recipe, "tokenizer_backend": backend},
                "cache": {"chunk_size": 300, "workers": 2},
            },
            out=out,
        )
        digests[backend] = tree_digest(out)
        assert "tokenizer_backend" not in (out / "config.yaml").read_text()
    assert digests["hf"] == digests["tiktoken"]
    # the recipe's fingerprint is the same, so each cache opens for the other engine's recipe
    cache = open_cache(tmp_path / "hf", recipe={**recipe, "tokenizer_backend": "tiktoken"})
    assert len(cache) > 1000

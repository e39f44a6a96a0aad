"""Every JSON and JSONL file in ../shared/data reads as a source, element for element."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chute import JsonlSource, SourceError
from chute.recipe.validate import validate_source

pytestmark = pytest.mark.shared_data

# rows as listed in ../shared/data/SOURCES.md
EXPECTED_ROWS = {
    "llama-factory/alpaca_en_demo.json": 999,
    "llama-factory/alpaca_zh_demo.json": 1000,
    "llama-factory/identity.json": 91,
    "llama-factory/glaive_toolcall_en_demo.json": 300,
    "llama-factory/mllm_demo.json": 6,
    "llama-factory/v1_sft_demo.jsonl": 500,
    "llama-factory/v1_multimodal_demo.jsonl": 24,
    "llama-factory/mllm_video_demo.json": 3,
    "llama-factory/mllm_audio_demo.json": 3,
    "llama-factory/mllm_video_audio_demo.json": 3,
    "llama-factory/dpo_en_demo.json": 300,
    "llama-factory/kto_en_demo.json": 300,
    "llama-factory/v1_dpo_demo.jsonl": 10,
    "llama-factory/c4_demo.jsonl": 300,
    "fastchat/dummy_conversation.json": 500,
    "fastchat/question.jsonl": 80,
    "stanford_alpaca/seed_tasks.jsonl": 175,
    "torchtune/alpaca_tiny.json": 100,
    "xtuner/resource/openai_sft.jsonl": 128,
    "xtuner/resource/mllm_sft_text_example_data.jsonl": 200,
    "xtuner/resource/mllm_sft_single_image_example_data.jsonl": 22,
    "xtuner/resource/mllm_sft_multi_image_example_data.jsonl": 11,
    "llava/coco2014_val_gpt4_qa_30x3.jsonl": 90,
    "llava/llava_bench_in_the_wild/questions.jsonl": 60,
    "llava/llava_bench_in_the_wild/context.jsonl": 24,
    "fastervlm/blip_laion_cc_200_test_samples.json": 200,
    "qwen3-vl/demo/single_images.json": 3,
    "qwen-vl/qwen_vl_readme_example.json": 3,
}
NOT_RECORDS = {
    "llama-factory/dataset_info.json",
    "tokenizers/qwen3/tokenizer.json",
    "tokenizers/qwen3/tokenizer_config.json",
    "tokenizers/llama3.2/tokenizer.json",
    "tokenizers/llama3.2/tokenizer_config.json",
}


def test_every_data_file_is_covered(shared_data: Path) -> None:
    found = {str(p.relative_to(shared_data)) for p in shared_data.rglob("*.json*")}
    assert found == set(EXPECTED_ROWS) | NOT_RECORDS


@pytest.mark.parametrize("name", sorted(EXPECTED_ROWS))
def test_records_equal_a_plain_json_parse(shared_data: Path, name: str) -> None:
    path = shared_data / name
    src = JsonlSource(path)
    assert len(src) == EXPECTED_ROWS[name]
    text = path.read_text(encoding="utf-8")
    if src.files[0].kind == "json_array":
        expected = json.loads(text)
    else:
        expected = [json.loads(line) for line in text.splitlines() if line.strip()]
    assert [r.data for r in src] == expected
    # random access agrees with sequential reading, and lines point at the record's first line
    lines = text.splitlines()
    for i in range(0, len(src), max(1, len(src) // 17)):
        r = src[i]
        assert r.data == expected[i]
        assert lines[r.line - 1].strip()[:1] in "{[", f"{r.location} should start a record"


def test_bare_list_lines_are_valid_json_but_not_objects(shared_data: Path) -> None:
    report = validate_source(
        JsonlSource(shared_data / "xtuner/resource/openai_sft.jsonl"), workers=1
    )
    assert report.records == 128 and dict(report.tally.counts) == {"not_an_object": 128}


def test_a_registry_object_is_refused_with_a_clear_message(shared_data: Path) -> None:
    with pytest.raises(SourceError, match="dataset_info.json: the top level is one JSON object"):
        JsonlSource(shared_data / "llama-factory/dataset_info.json")

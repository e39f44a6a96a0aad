"""Recipe end to end: samples, every sample error kind with its location, media, identity."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from chute import Recipe
from chute.errors import SAMPLE_ERROR_KINDS, ConfigError, SampleError
from chute.formats import FormatSpec
from chute.recipe import RECIPE_VERSION
from chute.recipe.validate import validate_source
from chute.sources import JsonlSource
from recipe_helpers import real_tokenizer, tiny_tokenizer

TOK = tiny_tokenizer()


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text(
        "".join(
            (r if isinstance(r, str) else json.dumps(r, ensure_ascii=False)) + "\n" for r in rows
        )
    )
    return path


def trained_text(recipe: Recipe, sample: dict) -> str:
    return recipe.tokenizer.decode(sample["input_ids"][sample["labels"] != -100].tolist())


def test_sample_keys_types_and_provenance(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "d.jsonl", [{"instruction": "Hi", "output": "Hello!"}, {"text": "A doc."}]
    )
    recipe = Recipe(tokenizer=TOK, template="chatml")
    source = JsonlSource(path)
    sample = recipe(source[0])
    assert set(sample) == {
        "input_ids",
        "labels",
        "length",
        "index",
        "path",
        "line",
        "images",
        "videos",
        "audios",
        "num_image_tokens",
        "truncated",
    }
    assert sample["input_ids"].dtype == np.int32 and sample["labels"].dtype == np.int32
    assert sample["length"] == len(sample["input_ids"]) == len(sample["labels"])
    assert (sample["index"], sample["path"], sample["line"]) == (0, str(path), 1)
    assert (
        sample["images"] == [] and sample["num_image_tokens"] == 0 and sample["truncated"] is False
    )
    assert TOK.decode(sample["input_ids"].tolist()) == (
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n"
    )
    assert trained_text(recipe, sample) == "Hello!<|im_end|>"
    doc = recipe(source[1])  # a pretraining document in the same file: <s>text</s>, all trained
    assert TOK.decode(doc["input_ids"].tolist()) == "<s>A doc.</s>"
    assert (doc["labels"] == doc["input_ids"]).all()
    # A dict works too, with or without provenance.
    same = recipe.process(
        {"instruction": "Hi", "output": "Hello!"}, path="x.jsonl", line=9, index=3
    )
    assert same["input_ids"].tolist() == sample["input_ids"].tolist() and same["line"] == 9
    assert recipe({"instruction": "Hi", "output": "Hello!"})["path"] is None


def test_format_text_defaults_to_the_raw_template() -> None:
    recipe = Recipe(tokenizer=TOK, format="text")
    assert recipe.template.name == "raw"
    assert TOK.decode(recipe({"text": "abc"})["input_ids"].tolist()) == "<s>abc</s>"


# Each row of this file triggers one kind of sample error; line numbers are 1-based.
BAD_ROWS = [
    ("bad_json", '{"instruction": "x", "output": ', r"bad_json"),
    (
        "unknown_format",
        {"question": "x", "answer": "y"},
        r"unknown_format: no format recognises a record with keys answer, question",
    ),
    (
        "missing_field",
        {"instruction": "x"},
        r"missing_field: an alpaca record needs 'output'.*\(field 'output'\)",
    ),
    (
        "wrong_type",
        {"instruction": "x", "output": 5},
        r"wrong_type: expected a string, got a number \(field 'output'\)",
    ),
    (
        "empty_conversation",
        {"conversations": []},
        r"empty_conversation: the conversation has no message",
    ),
    (
        "bad_role_order",
        {"conversations": [{"from": "gpt", "value": "hi"}, {"from": "human", "value": "yo"}]},
        r"bad_role_order: the first message has role 'assistant'.*\(field 'conversations\[0\]'\)",
    ),
    (
        "unknown_role",
        {"conversations": [{"from": "robot", "value": "hi"}]},
        r"unknown_role: role 'robot' is not one of .*\(field 'conversations\[0\]\.from'\)",
    ),
    (
        "no_trainable_tokens",
        {"messages": [{"role": "user", "content": "only a question"}]},
        r"no_trainable_tokens: no token is trained",
    ),
    (
        "too_long",
        {"instruction": "x " * 40, "output": "y"},
        r"too_long: \d+ tokens, more than max_length=40 \(overflow='drop'\)",
    ),
    (
        "image_placeholder_mismatch",
        {
            "messages": [
                {"role": "user", "content": "<image><image>what"},
                {"role": "assistant", "content": "a"},
            ],
            "images": ["a.png"],
        },
        r"image_placeholder_mismatch: 2 <image> placeholder\(s\) in the messages but 1 image\(s\) in 'images'",
    ),
    (
        "template_error",
        {
            "messages": [
                {"role": "user", "content": "a"},
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [{"name": "f", "arguments": {}}],
                },
            ]
        },
        r"template_error: the 'vicuna' template has no way to write tools",
    ),
    (
        "image_missing",
        {
            "images": ["nope.png"],
            "messages": [
                {"role": "user", "content": "<image>a"},
                {"role": "assistant", "content": "b"},
            ],
        },
        r"image_missing: .*nope.png: no such file \(relative paths resolve against the data file's folder",
    ),
    (
        "image_corrupt",
        {
            "images": ["corrupt.png"],
            "messages": [
                {"role": "user", "content": "<image>a"},
                {"role": "assistant", "content": "b"},
            ],
        },
        r"image_corrupt: .*corrupt.png: cannot read an image header",
    ),
    (
        "image_unsupported",
        {
            "images": ["thin.png"],
            "messages": [
                {"role": "user", "content": "<image>a"},
                {"role": "assistant", "content": "b"},
            ],
        },
        r"image_unsupported: aspect ratio 300 .* above 200",
    ),
    ("bad_utf8", b'{"text": "\xff\xfe"}', r"bad_utf8"),
    ("not_an_object", "[1, 2]", r"unknown_format: no format recognises a JSON list record"),
]


@pytest.fixture
def bad_file(tmp_path: Path) -> Path:
    Image.new("RGB", (600, 2)).save(tmp_path / "thin.png")
    (tmp_path / "corrupt.png").write_bytes(b"\x89PNG\r\n\x1a\nnot really")
    lines = []
    for _, row, _ in BAD_ROWS:
        if isinstance(row, bytes):
            lines.append(row)
        elif isinstance(row, str):
            lines.append(row.encode())
        else:
            lines.append(json.dumps(row).encode())
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


@pytest.mark.parametrize(
    ("i", "kind", "match"), [(i, k, m) for i, (k, _, m) in enumerate(BAD_ROWS)]
)
def test_every_sample_error_kind(bad_file: Path, i: int, kind: str, match: str) -> None:
    recipe = Recipe(
        tokenizer=TOK,
        template="vicuna",
        system="S",
        max_length=40,
        overflow="drop",
        image_tokens="qwen2-vl",
    )
    record = JsonlSource(bad_file)[i]
    with pytest.raises(SampleError, match=f"^{bad_file}:{i + 1}: {match}") as info:
        recipe(record)
    assert info.value.kind in SAMPLE_ERROR_KINDS
    assert (info.value.path, info.value.line) == (str(bad_file), i + 1)
    assert pickle.loads(pickle.dumps(info.value)).kind == info.value.kind


def test_every_recipe_kind_is_documented_and_tested() -> None:
    tested = {kind for kind, _, _ in BAD_ROWS}
    recipe_kinds = {
        "unknown_format",
        "missing_field",
        "wrong_type",
        "empty_conversation",
        "bad_role_order",
        "unknown_role",
        "template_error",
        "no_trainable_tokens",
        "too_long",
        "image_placeholder_mismatch",
        "image_missing",
        "image_corrupt",
        "image_unsupported",
    }
    assert recipe_kinds <= set(SAMPLE_ERROR_KINDS)
    assert recipe_kinds <= tested


def test_validate_source_with_a_recipe_counts_every_kind(bad_file: Path) -> None:
    recipe = Recipe(
        tokenizer=TOK,
        template="vicuna",
        system="S",
        max_length=40,
        overflow="drop",
        image_tokens="qwen2-vl",
    )
    report = validate_source(
        JsonlSource(bad_file), recipe, workers=2, rejects=bad_file.with_suffix(".rej")
    )
    assert report.valid == 0
    assert report.tally.counts["unknown_format"] == 2
    assert set(report.tally.counts) == {k for k, _, _ in BAD_ROWS if k != "not_an_object"}
    lines = [json.loads(x) for x in bad_file.with_suffix(".rej").read_text().splitlines()]
    assert [r["line"] for r in lines] == list(range(1, len(BAD_ROWS) + 1))


def test_config_errors_name_the_parameter(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="max_length: expected a positive integer or None, got 0"):
        Recipe(tokenizer=TOK, template="chatml", max_length=0)
    with pytest.raises(
        ConfigError, match="overflow: expected one of truncate, drop, split, got 'cut'"
    ):
        Recipe(tokenizer=TOK, template="chatml", overflow="cut")
    with pytest.raises(ConfigError, match="train_on: expected one of assistant, last, all"):
        Recipe(tokenizer=TOK, template="chatml", train_on="both")
    with pytest.raises(ConfigError, match="media_root: .* is not a folder"):
        Recipe(tokenizer=TOK, template="chatml", media_root=tmp_path / "nope")
    with pytest.raises(ConfigError, match="columns/tags/placeholders: put them in the FormatSpec"):
        Recipe(
            tokenizer=TOK, template="chatml", format=FormatSpec("alpaca"), columns={"prompt": "q"}
        )
    with pytest.raises(ConfigError, match="image_token_id: expected an integer"):
        Recipe(tokenizer=TOK, template="chatml", image_token_id="x")
    # a plain value meets its declared check first (the message a config's key gets)
    with pytest.raises(ConfigError, match=r"video_tokens: expected a token count, .*got -1"):
        Recipe(tokenizer=TOK, template="chatml", video_tokens=-1)
    with pytest.raises(ConfigError, match="none given and the tokenizer has no chat_template"):
        Recipe(tokenizer=TOK)


def mm_record(*images: str) -> dict:
    return {
        "messages": [
            {"role": "user", "content": "<image>" * len(images) + "What?"},
            {"role": "assistant", "content": "Cats."},
        ],
        "images": list(images),
    }


@pytest.fixture
def pics(tmp_path: Path) -> Path:
    (tmp_path / "img").mkdir()
    Image.new("RGB", (300, 168)).save(tmp_path / "img" / "a.png")
    Image.new("RGB", (640, 480)).save(tmp_path / "img" / "b.jpg")
    return tmp_path


def test_dynamic_image_tokens_from_headers(pics: Path) -> None:
    recipe = Recipe(tokenizer=TOK, template="chatml", image_tokens="qwen2-vl")
    sample = recipe.process(mm_record("img/a.png", "img/b.jpg"), path=str(pics / "data.jsonl"))
    a, b = sample["images"]
    assert (a["num_tokens"], a["size"], a["grid_thw"]) == (66, [300, 168], [1, 12, 22])
    assert (b["num_tokens"], b["size"], b["grid_thw"]) == (391, [640, 480], [1, 34, 46])
    assert a["source"] == "img/a.png" and a["path"] == str(pics / "img" / "a.png")
    ids = sample["input_ids"]
    image_id = TOK.token_to_id("<|image_pad|>")
    assert ids[a["span"][0] : a["span"][1]].tolist() == [image_id] * 66
    assert ids[a["span"][0] - 1] == TOK.token_to_id("<|vision_start|>")
    assert ids[b["span"][1]] == TOK.token_to_id("<|vision_end|>")
    assert sample["num_image_tokens"] == 66 + 391 == int((ids == image_id).sum())
    assert trained_text(recipe, sample) == "Cats.<|im_end|>"


def test_a_missing_image_found_above_the_data_files_folder_names_the_media_root(
    pics: Path,
) -> None:
    # LLaVA-style data names images from the folder above its own: img/a.png beside
    # PICS/img, the data in PICS/demo/data.jsonl
    recipe = Recipe(tokenizer=TOK, template="chatml", image_tokens=4)
    (pics / "demo").mkdir()
    with pytest.raises(SampleError, match=r"the path is there under (.*): set media_root=") as e:
        recipe.process(mm_record("img/a.png"), path=str(pics / "demo" / "data.jsonl"))
    assert f"media_root={str(pics.resolve())!r}" in str(e.value)
    fixed = Recipe(tokenizer=TOK, template="chatml", image_tokens=4, media_root=pics)
    assert fixed.process(mm_record("img/a.png"), path=str(pics / "demo" / "data.jsonl"))
    # nowhere above: the plain advice
    with pytest.raises(SampleError, match="set media_root if they are relative to another"):
        recipe.process(mm_record("img/none.png"), path=str(pics / "demo" / "data.jsonl"))
    # there, but not a file: said so, not "no such file"
    os.mkfifo(pics / "demo" / "pipe.png")
    (pics / "demo" / "folder.png").mkdir()
    where = str(pics / "demo" / "data.jsonl")
    with pytest.raises(SampleError, match=r"image_unsupported: .*pipe.png: not a regular file"):
        recipe.process(mm_record("pipe.png"), path=where)
    with pytest.raises(SampleError, match=r"image_missing: .*folder.png: a directory, not an"):
        recipe.process(mm_record("folder.png"), path=where)


def test_media_root_and_absolute_paths(pics: Path) -> None:
    recipe = Recipe(tokenizer=TOK, template="chatml", image_tokens=4, media_root=pics / "img")
    sample = recipe.process(
        mm_record("a.png", str(pics / "img" / "b.jpg")), path="/elsewhere/d.jsonl"
    )
    assert [i["path"] for i in sample["images"]] == [
        str(pics / "img" / "a.png"),
        str(pics / "img" / "b.jpg"),
    ]
    assert [i["num_tokens"] for i in sample["images"]] == [4, 4]
    with pytest.raises(
        SampleError,
        match="image_missing: .*a.png: no such file \\(relative paths resolve against the data file's folder",
    ):
        Recipe(tokenizer=TOK, template="chatml", image_tokens=4).process(
            mm_record("a.png"), path=str(pics / "d.jsonl")
        )
    urls = Recipe(tokenizer=TOK, template="chatml", image_tokens=4, allow_urls=True)
    assert urls.process(mm_record("https://x/y.png"))["images"][0]["path"] == "https://x/y.png"
    with pytest.raises(SampleError, match="url_not_allowed: https://x/y.png is a URL"):
        Recipe(tokenizer=TOK, template="chatml", image_tokens=4).process(
            mm_record("https://x/y.png")
        )
    with pytest.raises(SampleError, match="url_not_allowed: .*needs the image's size"):
        Recipe(tokenizer=TOK, template="chatml", image_tokens="qwen2-vl", allow_urls=True).process(
            mm_record("https://x/y.png")
        )


def test_image_configuration_errors(pics: Path) -> None:
    data_path = str(pics / "d.jsonl")
    with pytest.raises(ConfigError, match="image_tokens: the data has images but image tokens"):
        Recipe(tokenizer=TOK, template="chatml", image_tokens=None).process(
            mm_record("img/a.png"), path=data_path
        )
    # the default counts them: Qwen2-VL's rule for a Qwen vocabulary (<|image_pad|>), else 576
    auto = Recipe(tokenizer=TOK, template="chatml")
    rule = "qwen2-vl" if auto.media.tokens["image"] == "<|image_pad|>" else 576
    explicit = Recipe(tokenizer=TOK, template="chatml", image_tokens=rule)
    record = mm_record("img/a.png")
    got = auto.process(record, path=data_path)["num_image_tokens"]
    assert got == explicit.process(record, path=data_path)["num_image_tokens"] > 0
    tok = tiny_tokenizer(image=None)
    llava = Recipe(tokenizer=tok, template="vicuna", image_tokens=576)
    with pytest.raises(
        ConfigError,
        match="image token '<image>' is not in the tokenizer's vocabulary; pass image_token_id ",
    ):
        llava.process(mm_record("img/a.png"), path=data_path)
    # LLaVA's original convention: one -200 per image, split text around "<image>".
    llava = Recipe(tokenizer=tok, template="vicuna", image_tokens=1, image_token_id=-200)
    sample = llava.process(mm_record("img/a.png"), path=data_path)
    assert (sample["input_ids"] == -200).sum() == 1
    with pytest.raises(
        ConfigError, match=r"video_tokens: the data has videos .*video_tokens=.fps. to"
    ):
        Recipe(tokenizer=TOK, template="chatml").process(
            {
                "messages": [
                    {"role": "user", "content": "<video>x"},
                    {"role": "assistant", "content": "y"},
                ],
                "videos": ["v.mp4"],
            }
        )
    video = Recipe(tokenizer=TOK, template="chatml", video_tokens=8).process(
        {
            "messages": [
                {"role": "user", "content": "<video>x"},
                {"role": "assistant", "content": "y"},
            ],
            "videos": ["v.mp4"],
        }
    )
    assert (
        video["videos"][0]["num_tokens"] == 8
        and video["videos"][0]["span"][1] - video["videos"][0]["span"][0] == 8
    )


def test_literal_image_token_in_text_only_data() -> None:
    recipe = Recipe(tokenizer=TOK, template="chatml")
    with pytest.raises(
        SampleError, match="image_placeholder_mismatch: the rendered text contains the media token"
    ):
        recipe({"instruction": "say <|image_pad|>", "output": "no"})


def test_truncation_with_images(pics: Path) -> None:
    recipe = Recipe(tokenizer=TOK, template="chatml", image_tokens=50, max_length=60)
    record = {
        "messages": [
            {"role": "user", "content": "Hello there"},
            {"role": "assistant", "content": "Hi, how are you today?"},
            {"role": "user", "content": "<image>What?"},
            {"role": "assistant", "content": "A cat."},
        ],
        "images": ["img/a.png"],
    }
    sample = recipe.process(record, path=str(pics / "d.jsonl"))
    assert sample["truncated"] and sample["images"] == []  # the cut fell inside the image
    assert sample["length"] < 60 and (sample["input_ids"] != TOK.token_to_id("<|image_pad|>")).all()
    full = Recipe(tokenizer=TOK, template="chatml", image_tokens=50).process(
        record, path=str(pics / "d.jsonl")
    )
    assert full["input_ids"][: sample["length"]].tolist() == sample["input_ids"].tolist()
    assert trained_text(recipe, sample) == "Hi, how are you today?<|im_end|>"


def test_recipe_pickles_and_keeps_its_fingerprint(tmp_path: Path) -> None:
    (tmp_path / "tok").mkdir()
    (tmp_path / "tok" / "tokenizer.json").write_text(TOK.rust.to_str())
    recipe = Recipe(
        tokenizer=tmp_path / "tok" / "tokenizer.json",
        template="{% for m in messages %}<{{ m.role }}>{{ m.content }}</s>{% endfor %}",
        max_length=128,
    )
    blob = pickle.dumps(recipe)
    assert len(blob) < 20_000  # the tokenizer travels as its path
    back = pickle.loads(blob)
    row = {"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]}
    assert back(row)["input_ids"].tolist() == recipe(row)["input_ids"].tolist()
    assert back.fingerprint() == recipe.fingerprint()
    json.dumps(recipe.fingerprint())


def test_fingerprint_names_what_changed() -> None:
    base = Recipe(tokenizer=TOK, template="chatml", max_length=512)
    fp = base.fingerprint()
    assert fp["recipe_version"] == RECIPE_VERSION and fp["template"]["name"] == "chatml"
    variants = {
        "max_length": Recipe(tokenizer=TOK, template="chatml", max_length=1024),
        "overflow": Recipe(tokenizer=TOK, template="chatml", max_length=512, overflow="drop"),
        "template": Recipe(tokenizer=TOK, template="qwen3", max_length=512),
        "format": Recipe(tokenizer=TOK, template="chatml", max_length=512, format="alpaca"),
        "train_on": Recipe(tokenizer=TOK, template="chatml", max_length=512, train_on="last"),
        "tokenizer": Recipe(
            tokenizer=tiny_tokenizer(eos="<|im_end|>"), template="chatml", max_length=512
        ),
        "media": Recipe(tokenizer=TOK, template="chatml", max_length=512, image_tokens=576),
        "system": Recipe(tokenizer=TOK, template="chatml", max_length=512, system="sys"),
        "template_vars": Recipe(
            tokenizer=TOK, template="chatml", max_length=512, template_vars={"x": 1}
        ),
    }
    for field, other in variants.items():
        diff = {k for k in fp if fp[k] != other.fingerprint()[k]}
        assert diff == {field}, field
    assert Recipe(tokenizer=TOK, template="chatml", max_length=512).fingerprint() == fp


def test_cheap_to_call() -> None:
    recipe = Recipe(tokenizer=TOK, template="chatml")
    row = {"instruction": "Hello there", "output": "Hi"}
    import time

    t0 = time.perf_counter()
    for _ in range(2000):
        recipe(row)
    assert (time.perf_counter() - t0) / 2000 < 1e-3  # well under a millisecond on a tiny vocab


# -- real data ---------------------------------------------------------------------------------


@pytest.mark.shared_data
def test_multimodal_datasets_end_to_end(shared_data: Path) -> None:
    qwen = real_tokenizer(str(shared_data / "tokenizers/qwen3/tokenizer.json"))
    recipe = Recipe(tokenizer=qwen, template="qwen3", image_tokens="qwen2-vl")
    samples = [recipe(r) for r in JsonlSource(shared_data / "llama-factory/mllm_demo.json")]
    first = samples[0]["images"]
    assert [i["size"] for i in first] == [[300, 168], [300, 168]]  # 1.jpg, used twice
    assert [i["num_tokens"] for i in first] == [66, 66]
    for s in samples:
        ids = s["input_ids"]
        assert int((ids == qwen.token_id("image")).sum()) == s["num_image_tokens"]
        assert all(
            ids[i["span"][0] - 1] == qwen.token_to_id("<|vision_start|>") for i in s["images"]
        )
    # qwen3-vl demo: paths are relative to qwen3-vl/, not to the data file's folder.
    demo = shared_data / "qwen3-vl/demo/single_images.json"
    with pytest.raises(SampleError, match="image_missing"):
        recipe(JsonlSource(demo)[0])
    rooted = Recipe(
        tokenizer=qwen,
        template="qwen3",
        image_tokens="qwen2-vl",
        media_root=shared_data / "qwen3-vl",
    )
    s = rooted(JsonlSource(demo)[0])
    assert s["images"][0]["path"].endswith("qwen3-vl/demo/images/10095.png")
    text = qwen.decode(s["input_ids"][s["input_ids"] != qwen.token_id("image")].tolist())
    assert text.startswith(
        "<|im_start|>user\nIs the value of Favorable 38 in 2015?\n<|vision_start|><|vision_end|><|im_end|>"
    )
    # xtuner: explicit image parts bound to <IMG_CONTEXT> placeholders; Chinese text.
    xt = Recipe(
        tokenizer=qwen,
        template="qwen3",
        image_tokens="qwen2-vl",
        placeholders={"image": "<IMG_CONTEXT>"},
        media_root=shared_data / "xtuner",  # urls are "resource/...", relative to xtuner/
    )
    s = xt(JsonlSource(shared_data / "xtuner/resource/mllm_sft_multi_image_example_data.jsonl")[0])
    assert [i["size"] for i in s["images"]] == [[375, 500], [640, 480]]
    assert "两幅图片中都存在动物。<|im_end|>" in qwen.decode(
        s["input_ids"][s["labels"] != -100].tolist()
    )


@pytest.mark.shared_data
def test_llava_and_qwen_vl_fixed_counts(shared_data: Path) -> None:
    llama = real_tokenizer(str(shared_data / "tokenizers/llama3.2/tokenizer.json"))
    recipe = Recipe(
        tokenizer=llama, template="llama3", image_tokens="llava-1.5", check_images=False
    )
    s = recipe(JsonlSource(shared_data / "fastervlm/blip_laion_cc_200_test_samples.json")[0])
    assert s["num_image_tokens"] == 576 and s["images"][0]["source"] == "001166603.jpg"
    assert int((s["input_ids"] == llama.token_to_id("<|image|>")).sum()) == 576
    qwen = real_tokenizer(str(shared_data / "tokenizers/qwen3/tokenizer.json"))
    qvl = Recipe(tokenizer=qwen, template="chatml", format="qwen_vl", image_tokens="qwen-vl")
    source = JsonlSource(shared_data / "qwen-vl/qwen_vl_readme_example.json")
    with pytest.raises(SampleError, match="url_not_allowed: https://qianwen-res.*is a URL"):
        qvl(source[1])
    with pytest.raises(SampleError, match="image_missing: .*Beijing.jpeg: no such file"):
        qvl(source[2])
    s = Recipe(
        tokenizer=qwen,
        template="chatml",
        format="qwen_vl",
        image_tokens="qwen-vl",
        check_images=False,
    )(source[2])
    assert s["num_image_tokens"] == 512
    assert "Picture 1: <|vision_start|>" in qwen.decode(s["input_ids"][:20].tolist())


@pytest.mark.shared_data
def test_tiktoken_recipe_matches_tokenizer_json(shared_data: Path) -> None:
    qwen_json = real_tokenizer(str(shared_data / "tokenizers/qwen3/tokenizer.json"))
    a = Recipe(tokenizer=shared_data / "tokenizers/qwen/qwen.tiktoken", template="chatml")
    b = Recipe(tokenizer=qwen_json, template="chatml")
    for record in list(JsonlSource(shared_data / "llama-factory/alpaca_zh_demo.json"))[:30]:
        sa, sb = a(record), b(record)
        assert sa["input_ids"].tolist() == sb["input_ids"].tolist()
        assert sa["labels"].tolist() == sb["labels"].tolist()


@pytest.mark.shared_data
def test_pretraining_text_with_llama(shared_data: Path) -> None:
    llama = real_tokenizer(str(shared_data / "tokenizers/llama3.2/tokenizer.json"))
    recipe = Recipe(tokenizer=llama, format="text", columns={"text": "output"})
    record = JsonlSource(shared_data / "torchtune/alpaca_tiny.json")[0]
    s = recipe(record)
    text = llama.decode(s["input_ids"].tolist())
    assert text.startswith("<|begin_of_text|>1.Eat a balanced diet") and text.endswith(
        "<|end_of_text|>"
    )
    assert (s["labels"] == s["input_ids"]).all()


@pytest.mark.shared_data
def test_alpaca_template_reproduces_torchtune_text(shared_data: Path) -> None:
    qwen = real_tokenizer(str(shared_data / "tokenizers/qwen3/tokenizer.json"))
    recipe = Recipe(tokenizer=qwen, template="alpaca")
    rows = json.loads((shared_data / "torchtune/alpaca_tiny.json").read_text())
    checked = 0
    for record in JsonlSource(shared_data / "torchtune/alpaca_tiny.json"):
        row = rows[record.index]
        if row["input"]:
            continue  # torchtune's prompt has an "### Input:" section; chute joins input to the instruction
        assert recipe.render(record).text == row["text"] + "<|im_end|>"
        checked += 1
    assert checked > 50


def test_batch_equals_one_call_per_record(bad_file: Path, pics: Path) -> None:
    recipe = Recipe(
        tokenizer=TOK,
        template="vicuna",
        system="S",
        max_length=40,
        overflow="drop",
        image_tokens="qwen2-vl",
    )
    good = write_jsonl(
        pics / "good.jsonl",
        [
            {"instruction": "Hi", "output": "Hello"},
            mm_record("img/a.png"),
            {"text": "doc"},
        ],
    )
    records = list(JsonlSource(bad_file)) + list(JsonlSource(good))
    out = recipe.batch(records)
    assert len(out) == len(records)
    for record, got in zip(records, out, strict=True):
        try:
            want = recipe(record)
        except SampleError as exc:
            assert isinstance(got, SampleError) and str(got) == str(exc)
            continue
        assert not isinstance(got, SampleError)
        assert got["input_ids"].tolist() == want["input_ids"].tolist()
        assert got["labels"].tolist() == want["labels"].tolist()
        assert {k: v for k, v in got.items() if k not in ("input_ids", "labels")} == {
            k: v for k, v in want.items() if k not in ("input_ids", "labels")
        }
    assert sum(not isinstance(s, SampleError) for s in out) == 2  # the image sample is too_long
    assert recipe.batch([{"instruction": "a", "output": "b"}])[0]["path"] is None
    roomy = Recipe(tokenizer=TOK, template="chatml", image_tokens="qwen2-vl")
    [mm] = roomy.batch([JsonlSource(good)[1]])
    assert mm["images"][0]["num_tokens"] == 66
    assert mm["input_ids"].tolist() == roomy(JsonlSource(good)[1])["input_ids"].tolist()

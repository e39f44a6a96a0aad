"""Format adapters on small synthetic records: shapes, detection, mappings, media binding, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chute.errors import ConfigError, SampleError
from chute.formats import FormatReader, FormatSpec, detect_format, sniff_format, to_conversation
from chute.sample.conversation import Message, Part


def roles_and_text(conv) -> list[tuple[str, object]]:
    return [(m.role, m.content) for m in conv.messages]


# -- alpaca ------------------------------------------------------------------------------------


def test_alpaca_with_input_system_history() -> None:
    conv = to_conversation(
        {
            "instruction": "Translate",
            "input": "bonjour",
            "output": "hello",
            "system": "Be brief.",
            "history": [["hi", "hello!"], ["who?", "me"]],
        }
    )
    assert roles_and_text(conv) == [
        ("system", "Be brief."),
        ("user", "hi"),
        ("assistant", "hello!"),
        ("user", "who?"),
        ("assistant", "me"),
        ("user", "Translate\nbonjour"),
        ("assistant", "hello"),
    ]


def test_alpaca_empty_input_and_prompt_completion() -> None:
    assert roles_and_text(to_conversation({"instruction": "Q", "input": "", "output": "A"})) == [
        ("user", "Q"),
        ("assistant", "A"),
    ]
    conv = to_conversation({"prompt": "2+2=", "completion": "4"})
    assert roles_and_text(conv) == [("user", "2+2="), ("assistant", "4")]


def test_alpaca_columns_with_dotted_paths() -> None:
    # stanford_alpaca's seed_tasks.jsonl keeps input/output inside a list of instances.
    spec = FormatSpec(
        "alpaca", columns={"query": "instances.0.input", "response": "instances.0.output"}
    )
    record = {"instruction": "Name a fruit", "instances": [{"input": "", "output": "apple"}]}
    assert roles_and_text(to_conversation(record, spec)) == [
        ("user", "Name a fruit"),
        ("assistant", "apple"),
    ]


@pytest.mark.parametrize(
    ("record", "kind", "match"),
    [
        ({"instruction": "Q"}, "missing_field", r"needs 'output'.*\(field 'output'\)"),
        ({"instruction": 3, "output": "A"}, "wrong_type", r"expected a string, got a number"),
        (
            {"instruction": "Q", "output": ["A", "B"]},
            "wrong_type",
            r"got a list \(field 'output'\)",
        ),
        (
            {"instruction": "Q", "output": "A", "history": [["only one"]]},
            "wrong_type",
            r"history entry 0 must be a \[user, assistant\] pair",
        ),
        ({"instruction": "Q", "output": "A", "history": "x"}, "wrong_type", r"field 'history'"),
    ],
)
def test_alpaca_errors(record: dict, kind: str, match: str) -> None:
    with pytest.raises(SampleError, match=match) as info:
        to_conversation(record, "alpaca")
    assert info.value.kind == kind


# -- sharegpt / llava / qwen-vl ---------------------------------------------------------------


def test_sharegpt_roles_system_tools_and_function_calls() -> None:
    record = {
        "system": "You can call tools.",
        "tools": json.dumps([{"name": "get_time", "parameters": {}}]),
        "conversations": [
            {"from": "human", "value": "What time is it?"},
            {"from": "function_call", "value": '{"name": "get_time", "arguments": {}}'},
            {"from": "observation", "value": '{"time": "12:00"}'},
            {"from": "gpt", "value": "It is noon."},
        ],
    }
    conv = to_conversation(record)
    assert [m.role for m in conv.messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert conv.messages[2].tool_calls == [
        {"type": "function", "function": {"name": "get_time", "arguments": {}}}
    ]
    assert conv.messages[2].content == ""
    assert conv.tools == [{"type": "function", "function": {"name": "get_time", "parameters": {}}}]


def test_sharegpt_custom_tags() -> None:
    spec = FormatSpec(
        "sharegpt",
        columns={"messages": "dialog"},
        tags={"role_tag": "speaker", "content_tag": "text", "user_tag": "Q", "assistant_tag": "A"},
    )
    record = {"dialog": [{"speaker": "Q", "text": "1+1?"}, {"speaker": "A", "text": "2"}]}
    assert roles_and_text(to_conversation(record, spec)) == [("user", "1+1?"), ("assistant", "2")]


def test_llava_image_placeholder_anywhere() -> None:
    record = {
        "id": "x",
        "image": "pics/a.jpg",
        "conversations": [
            {"from": "human", "value": "What is this?\n<image>"},
            {"from": "gpt", "value": "A cat."},
        ],
    }
    assert detect_format(record) == "llava"
    conv = to_conversation(record)
    assert conv.messages[0].content == [
        Part("text", "What is this?\n"),
        Part("image", "pics/a.jpg"),
    ]


def test_llava_without_placeholder_puts_images_first() -> None:
    record = {"image": ["a.jpg", "b.jpg"], "instruction": "Compare.", "output": "Same."}
    conv = to_conversation(record)
    assert conv.messages[0].content == [
        Part("image", "a.jpg"),
        Part("image", "b.jpg"),
        Part("text", "Compare."),
    ]


def test_qwen_vl_inline_tags_and_ref_box_pass_through() -> None:
    record = {
        "conversations": [
            {
                "from": "user",
                "value": "Picture 1: <img>a.jpg</img>\nPicture 2: <img>b.jpg</img>\nDiff?",
            },
            {"from": "assistant", "value": "<ref>shirt</ref><box>(1,2),(3,4)</box>"},
        ]
    }
    assert detect_format(record) == "qwen_vl"
    conv = to_conversation(record)
    assert conv.messages[0].content == [
        Part("text", "Picture 1: "),
        Part("image", "a.jpg"),
        Part("text", "\nPicture 2: "),
        Part("image", "b.jpg"),
        Part("text", "\nDiff?"),
    ]
    assert conv.messages[1].content == "<ref>shirt</ref><box>(1,2),(3,4)</box>"


@pytest.mark.parametrize(
    ("record", "kind", "match"),
    [
        ({"conversations": "hi"}, "wrong_type", r"expected a list of messages.*'conversations'"),
        ({"conversations": [{"value": "hi"}]}, "missing_field", r"conversations\[0\]\.from"),
        (
            {"conversations": [{"from": "narrator", "value": "x"}]},
            "unknown_role",
            r"role 'narrator' is not one of .*map it with tags .*\(field 'conversations\[0\]\.from'\)",
        ),
        ({"conversations": [{"from": "human"}]}, "missing_field", r"conversations\[0\]\.value"),
        ({"conversations": [{"from": "human", "value": 7}]}, "wrong_type", r"got a number"),
        ({"conversations": []}, "empty_conversation", r"no message"),
        (
            {"conversations": [{"from": "gpt", "value": "hi"}]},
            "bad_role_order",
            r"first message has role 'assistant'.*\(field 'conversations\[0\]'\)",
        ),
        (
            {
                "conversations": [
                    {"from": "human", "value": "a"},
                    {"from": "function_call", "value": "nope"},
                ]
            },
            "wrong_type",
            r"function_call turn must hold JSON",
        ),
        ({"conversations": [{"from": "human", "value": "a"}], "tools": 5}, "wrong_type", "tools"),
    ],
)
def test_sharegpt_errors(record: dict, kind: str, match: str) -> None:
    with pytest.raises(SampleError, match=match) as info:
        to_conversation(record, "sharegpt")
    assert info.value.kind == kind


# -- messages (OpenAI, LLaMA-Factory v1, xtuner) -------------------------------------------------


def test_openai_messages_content_parts_and_tool_calls() -> None:
    record = {
        "messages": [
            {"role": "system", "content": "sys"},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Look: "},
                    {"type": "image_url", "image_url": {"url": "http://x/y.png"}},
                ],
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"type": "function", "function": {"name": "zoom", "arguments": '{"x": 1}'}}
                ],
            },
            {"role": "tool", "content": "zoomed"},
            {"role": "assistant", "content": "A dog.", "reasoning_content": "It barks."},
        ]
    }
    conv = to_conversation(record)
    assert conv.messages[1].content == [Part("text", "Look: "), Part("image", "http://x/y.png")]
    assert conv.messages[2].tool_calls[0]["function"] == {"name": "zoom", "arguments": '{"x": 1}'}
    assert conv.messages[4].reasoning == "It barks."


def test_bare_list_per_line_is_messages() -> None:
    record = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    assert detect_format(record) == "messages"
    assert roles_and_text(to_conversation(record)) == [("user", "a"), ("assistant", "b")]


def test_v1_parts_with_value_and_loss_weight() -> None:
    record = {
        "messages": [
            {"role": "user", "content": [{"type": "text", "value": "hi"}], "loss_weight": 0.0},
            {"role": "assistant", "content": [{"type": "text", "value": "yo"}], "loss_weight": 1.0},
            {"role": "user", "content": [{"type": "image_url", "value": "d/1.jpg"}]},
            {"role": "assistant", "content": "x", "loss": False},
        ]
    }
    conv = to_conversation(record)
    assert [m.loss for m in conv.messages] == [False, True, None, False]
    assert conv.messages[0].content == [Part("text", "hi")]
    assert conv.messages[2].content == [Part("image", "d/1.jpg")]


def test_top_level_images_with_placeholders_in_order() -> None:
    record = {
        "messages": [
            {"role": "user", "content": "<image>Who?"},
            {"role": "assistant", "content": "Them."},
            {"role": "user", "content": "And<image> here? <video>"},
            {"role": "assistant", "content": "Same."},
        ],
        "images": ["1.jpg", "2.jpg"],
        "videos": ["v.mp4"],
    }
    conv = to_conversation(record)
    assert conv.messages[0].content == [Part("image", "1.jpg"), Part("text", "Who?")]
    assert conv.messages[2].content == [
        Part("text", "And"),
        Part("image", "2.jpg"),
        Part("text", " here? "),
        Part("video", "v.mp4"),
    ]


def test_xtuner_style_text_placeholders_take_explicit_parts() -> None:
    record = {
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": "a.jpg", "image_wh": [3, 4]}},
                    {"type": "image_url", "image_url": {"url": "b.jpg"}},
                    {"type": "text", "text": "<IMG_CONTEXT>\n<IMG_CONTEXT>\nSame?"},
                ],
            },
            {"role": "assistant", "content": "Yes."},
        ]
    }
    spec = FormatSpec("messages", placeholders={"image": "<IMG_CONTEXT>"})
    conv = to_conversation(record, spec)
    assert conv.messages[0].content == [
        Part("image", "a.jpg"),
        Part("text", "\n"),
        Part("image", "b.jpg"),
        Part("text", "\nSame?"),
    ]
    # Without the placeholder setting the parts stay where they are and the text is literal.
    plain = to_conversation(record)
    assert plain.messages[0].content[0] == Part("image", "a.jpg")
    assert "<IMG_CONTEXT>" in plain.messages[0].content[2].value


def test_source_less_image_parts_bind_to_the_list() -> None:
    record = {
        "messages": [
            {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Hm?"}]},
            {"role": "assistant", "content": "Ok."},
        ],
        "images": ["z.png"],
    }
    assert to_conversation(record).messages[0].content == [
        Part("image", "z.png"),
        Part("text", "Hm?"),
    ]


@pytest.mark.parametrize(
    ("record", "match"),
    [
        (
            {
                "messages": [
                    {"role": "user", "content": "<image><image>x"},
                    {"role": "assistant", "content": "y"},
                ],
                "images": ["a.jpg"],
            },
            r"2 <image> placeholder\(s\) in the messages but 1 image\(s\) in 'images'.*\(field 'images'\)",
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": "<image>x"},
                    {"role": "assistant", "content": "y"},
                ]
            },
            r"1 <image> placeholder\(s\) in the messages but the record has no 'images'",
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": "x <video>"},
                    {"role": "assistant", "content": "y"},
                ],
                "videos": [],
            },
            r"<video> placeholder",
        ),
    ],
)
def test_placeholder_mismatch(record: dict, match: str) -> None:
    with pytest.raises(SampleError, match=match) as info:
        to_conversation(record)
    assert info.value.kind == "image_placeholder_mismatch"


def test_placeholder_can_be_turned_off() -> None:
    record = {
        "messages": [
            {"role": "user", "content": "Write <image> in HTML"},
            {"role": "assistant", "content": "ok"},
        ]
    }
    conv = to_conversation(record, FormatSpec("messages", placeholders={"image": None}))
    assert conv.messages[0].content == "Write <image> in HTML"


@pytest.mark.parametrize(
    ("record", "kind", "match"),
    [
        ({"messages": {"role": "user"}}, "wrong_type", r"expected a list of messages"),
        (
            {"messages": ["hi"]},
            "wrong_type",
            r"expected a message object, got a string \(field 'messages\[0\]'\)",
        ),
        (
            {"messages": [{"role": "user", "content": [{"type": "sticker"}]}]},
            "wrong_type",
            r"unknown content part type 'sticker'.*\(field 'messages\[0\]\.content\[0\]\.type'\)",
        ),
        (
            {"messages": [{"role": "user", "content": [{"type": "text"}]}]},
            "wrong_type",
            r"a text part needs a 'text'",
        ),
        (
            {"messages": [{"role": "user", "content": "a", "loss": "yes"}]},
            "wrong_type",
            r"messages\[0\]\.loss",
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": "a"},
                    {"role": "assistant", "content": "", "tool_calls": [{"x": 1}]},
                ]
            },
            "wrong_type",
            r"tool call 0 needs a 'name'",
        ),
        (
            {"messages": [{"role": "user", "content": "a"}], "images": [3]},
            "wrong_type",
            r"images\[0\]",
        ),
        ({"messages": [{"role": "user", "content": "a"}], "images": 3}, "wrong_type", r"'images'"),
        ({"messages": [{"role": "robot", "content": "a"}]}, "unknown_role", r"'robot'"),
    ],
)
def test_messages_errors(record: dict, kind: str, match: str) -> None:
    with pytest.raises(SampleError, match=match) as info:
        to_conversation(record, "messages")
    assert info.value.kind == kind


# -- text, detection, specs ---------------------------------------------------------------------


def test_text_documents() -> None:
    conv = to_conversation({"text": "Once upon a time."})
    assert conv.kind == "text" and conv.messages[0].content == "Once upon a time."
    conv = to_conversation(
        {"caption": "A dog.", "image": "d.jpg"}, FormatSpec("text", columns={"text": "caption"})
    )
    assert conv.messages[0].content == [Part("image", "d.jpg"), Part("text", "A dog.")]
    with pytest.raises(SampleError, match="empty_conversation: the text is empty"):
        to_conversation({"text": ""})
    with pytest.raises(SampleError, match=r"missing_field: a text record needs 'text'"):
        to_conversation({"body": "x"}, "text")
    with pytest.raises(SampleError, match=r"wrong_type: expected a string, got a list"):
        to_conversation({"text": ["x"]}, "text")


@pytest.mark.parametrize(
    ("record", "name"),
    [
        ([{"role": "user", "content": "a"}], "messages"),
        ({"messages": []}, "messages"),
        ({"conversations": [], "image": "a.jpg"}, "llava"),
        ({"conversations": [{"from": "user", "value": "<img>a</img>"}]}, "qwen_vl"),
        ({"conversations": []}, "sharegpt"),
        ({"instruction": "a", "output": "b", "text": "c"}, "alpaca"),
        ({"prompt": "a", "completion": "b"}, "prompt_completion"),
        ({"text": "a"}, "text"),
        ({"question_id": 1, "turns": []}, None),
        ("a string", None),
        ([1, 2], None),
    ],
)
def test_detect_format(record: object, name: str | None) -> None:
    assert detect_format(record) == name


def test_unknown_format() -> None:
    with pytest.raises(
        SampleError,
        match=r"unknown_format: no format recognises a record with keys category, turns",
    ):
        to_conversation({"turns": ["a"], "category": "x"})
    with pytest.raises(SampleError, match=r"unknown_format: .*JSON int record"):
        to_conversation(5)


def test_sniff_format() -> None:
    assert sniff_format([{"conversations": []}, {"conversations": [], "image": "a.jpg"}]) == "llava"
    with pytest.raises(ConfigError, match=r"different formats: alpaca \(1\), text \(1\)"):
        sniff_format([{"instruction": "a", "output": "b"}, {"text": "c"}])
    with pytest.raises(ConfigError, match="none of the first 1 records matches"):
        sniff_format([{"x": 1}])


def test_spec_validation() -> None:
    with pytest.raises(
        ConfigError, match="format: unknown format 'csv'; choose one of auto, alpaca"
    ):
        FormatSpec("csv")
    with pytest.raises(ConfigError, match="columns: unknown key 'answer'"):
        FormatSpec("alpaca", columns={"answer": "a"})
    with pytest.raises(ConfigError, match="tags: unknown key 'bot_tag'"):
        FormatSpec("sharegpt", tags={"bot_tag": "b"})
    with pytest.raises(ConfigError, match=r"columns\['prompt'\]: expected a non-empty string"):
        FormatSpec("alpaca", columns={"prompt": ""})
    with pytest.raises(ConfigError, match="columns/tags need an explicit format"):
        FormatSpec("auto", columns={"prompt": "q"})


def test_dataset_info(tmp_path) -> None:
    info = {
        "glaive": {
            "file_name": "g.json",
            "formatting": "sharegpt",
            "columns": {"messages": "conversations", "tools": "tools"},
        },
        "mllm": {
            "file_name": "m.json",
            "formatting": "sharegpt",
            "columns": {"messages": "messages", "images": "images"},
            "tags": {
                "role_tag": "role",
                "content_tag": "content",
                "user_tag": "user",
                "assistant_tag": "assistant",
            },
        },
        "c4": {"file_name": "c4.jsonl", "columns": {"prompt": "text"}},
        "dpo": {
            "file_name": "d.json",
            "ranking": True,
            "formatting": "sharegpt",
            "columns": {"messages": "conversations", "chosen": "chosen"},
        },
        "odd": {"file_name": "o.json", "formatting": "openai"},
    }
    path = tmp_path / "dataset_info.json"
    path.write_text(json.dumps(info))
    mllm = FormatSpec.from_dataset_info(path, "mllm")
    conv = to_conversation(
        {
            "messages": [
                {"role": "user", "content": "<image>hi"},
                {"role": "assistant", "content": "yo"},
            ],
            "images": ["a.jpg"],
        },
        mllm,
    )
    assert conv.messages[0].content == [Part("image", "a.jpg"), Part("text", "hi")]
    assert FormatSpec.from_dataset_info(path, "c4") == FormatSpec("text", columns={"text": "text"})
    # ranking columns are kept: Recipe(task="preference") reads them
    dpo = FormatSpec.from_dataset_info(path, "dpo").columns
    assert dpo == {"messages": "conversations", "chosen": "chosen"}
    with pytest.raises(ConfigError, match="no entry 'nope'; entries: c4, dpo, glaive, mllm, odd"):
        FormatSpec.from_dataset_info(path, "nope")
    with pytest.raises(ConfigError, match="formatting 'openai'"):
        FormatSpec.from_dataset_info(path, "odd")


def test_reader_is_reusable_and_keeps_tables() -> None:
    reader = FormatReader(FormatSpec("auto"))
    a = reader({"instruction": "a", "output": "b"})
    b = reader({"text": "c"})
    assert a.messages[1] == Message("assistant", "b") and b.kind == "text"
    assert set(reader._resolved) == {"alpaca", "text"}


def test_what_the_probe_found_in_the_adapters() -> None:
    def user_parts(record: dict, fmt: object = "messages") -> list:
        return list(to_conversation(record, fmt).messages[0].content)

    # OpenAI's inline audio is base64 bytes and a format: a data: URL, not a path
    audio = {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}}
    record = {
        "messages": [
            {"role": "user", "content": [audio, {"type": "text", "text": "Transcribe."}]},
            {"role": "assistant", "content": "hello"},
        ]
    }
    part = user_parts(record)[0]
    assert (part.kind, part.value) == ("audio", "data:audio/wav;base64,UklGRg==")
    # a part's null keys (Parquet / HF datasets store parts as a union of every part's keys)
    # are absent keys: the source is the one that is set, or the images list's
    for image in ({"image": None, "url": "a.jpg"}, {"image_url": None, "image": "a.jpg"}):
        parts = [{"type": "image", **image}, {"type": "text", "text": "q"}]
        record = {
            "messages": [{"role": "user", "content": parts}, {"role": "assistant", "content": "b"}]
        }
        assert user_parts(record)[0].value == "a.jpg"
    listed = [{"type": "image", "image": None}, {"type": "text", "text": "q", "image": None}]
    record = {
        "messages": [{"role": "user", "content": listed}, {"role": "assistant", "content": "b"}],
        "images": ["a.jpg"],
    }
    assert user_parts(record)[0].value == "a.jpg"
    # alpaca: an empty instruction and an input is the input alone (LLaMA-Factory joins the
    # non-empty ones)
    conv = to_conversation({"instruction": "", "input": "What is 2+2?", "output": "4"}, "alpaca")
    assert conv.messages[0].content == "What is 2+2?"
    # text: a prompt column (LLaMA-Factory's name for a pretraining text) is the text
    spec = FormatSpec("text", columns={"prompt": "content"})
    assert to_conversation({"content": "a web page"}, spec).messages[0].content == "a web page"
    both = FormatSpec("text", columns={"text": "body", "prompt": "p"})  # the text column wins
    assert to_conversation({"body": "hello", "p": "x"}, both).messages[0].content == "hello"


def test_a_malformed_dataset_info_is_a_config_error_naming_the_entry(tmp_path: Path) -> None:
    info = {
        "str_columns": {"file_name": "a.json", "columns": "messages"},
        "list_tags": {"file_name": "a.json", "formatting": "sharegpt", "tags": ["role"]},
        "not_a_dict": "a.json",
    }
    path = tmp_path / "dataset_info.json"
    path.write_text(json.dumps(info))
    expected = {
        "str_columns": "entry 'str_columns' columns must be an object, got str",
        "list_tags": "entry 'list_tags' tags must be an object, got list",
        "not_a_dict": "entry 'not_a_dict' must be an object, got str",
    }
    for name, message in expected.items():
        with pytest.raises(ConfigError, match=message):
            FormatSpec.from_dataset_info(path, name)
    path.write_text("[1, 2]")
    with pytest.raises(ConfigError, match="expected an object of entries by name, got list"):
        FormatSpec.from_dataset_info(path, "x")


def test_qwen_vl_is_detected_by_tags_in_user_turns_of_records_without_an_image_list() -> None:
    qwen = {
        "conversations": [
            {"from": "user", "value": "Picture 1: <img>a.jpg</img>\nWhat is it?"},
            {"from": "assistant", "value": "A cat."},
        ]
    }
    assert detect_format(qwen) == "qwen_vl"
    # markup written about in an answer is text; a LLaVA record's XML answer stays LLaVA's
    about = {
        "conversations": [
            {"from": "human", "value": "How do I reference a file?"},
            {"from": "gpt", "value": "Write Picture 1: <img>path.jpg</img> first."},
        ]
    }
    assert detect_format(about) == "sharegpt"
    llava = {
        "image": "a.jpg",
        "conversations": [
            {"from": "human", "value": "<image>\nWrite the XML."},
            {"from": "gpt", "value": "<figure><img>a.jpg</img></figure>"},
        ],
    }
    assert detect_format(llava) == "llava"


def test_an_image_struct_with_neither_bytes_nor_path_says_so() -> None:
    from chute.formats.media import media_list

    with pytest.raises(SampleError, match="entry 0 has no media: its bytes and its path are both"):
        media_list([{"bytes": None, "path": None}], "images")
    assert media_list([{"bytes": None, "path": "a.png"}], "images") == ["a.png"]

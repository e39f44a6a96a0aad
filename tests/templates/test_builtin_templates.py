"""Built-in templates: exact text, exact trained spans, label policies, tools, documents."""

from __future__ import annotations

import pytest

from chute.errors import ConfigError, SampleError
from chute.sample.conversation import Conversation, Message, Part
from chute.templates import BUILTIN, RenderContext, get_template

CTX = RenderContext(bos="<s>", eos="</s>", media_text={"image": "<image>"})


def conv(system: bool = True) -> Conversation:
    msgs = [
        Message("user", "Hi"),
        Message("assistant", "Hello!"),
        Message("user", "2+2?"),
        Message("assistant", "4"),
    ]
    if system:
        msgs.insert(0, Message("system", "Be brief."))
    return Conversation(msgs)


EXPECTED = {
    "chatml": (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n"
        "<|im_start|>assistant\n4<|im_end|>\n",
        ["Hello!<|im_end|>", "4<|im_end|>"],
    ),
    "qwen2-vl": (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n"
        "<|im_start|>assistant\n4<|im_end|>\n",
        ["Hello!<|im_end|>", "4<|im_end|>"],
    ),
    "qwen3": (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n\n</think>\n\n4<|im_end|>\n",
        ["Hello!<|im_end|>", "<think>\n\n</think>\n\n4<|im_end|>"],
    ),
    "llama3": (
        "<s><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\n2+2?<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n4<|eot_id|>",
        ["Hello!<|eot_id|>", "4<|eot_id|>"],
    ),
    "llama2": (
        "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello! </s><s>[INST] 2+2? [/INST] 4 </s>",
        ["Hello! </s>", "4 </s>"],
    ),
    "mistral": (
        "<s>[INST] Be brief.\n\nHi [/INST]Hello!</s>[INST] 2+2? [/INST]4</s>",
        ["Hello!</s>", "4</s>"],
    ),
    "vicuna": (
        "<s>Be brief. USER: Hi ASSISTANT: Hello!</s>USER: 2+2? ASSISTANT: 4</s>",
        ["Hello!</s>", "4</s>"],
    ),
    "llava-v1": (
        "<s>Be brief. USER: Hi ASSISTANT: Hello!</s>USER: 2+2? ASSISTANT: 4</s>",
        ["Hello!</s>", "4</s>"],
    ),
    "alpaca": (
        "<s>Be brief.\n\n### Instruction:\nHi\n\n### Response:\nHello!</s>\n\n"
        "### Instruction:\n2+2?\n\n### Response:\n4</s>",
        ["Hello!</s>", "4</s>"],
    ),
    "raw": ("<s>Be brief.HiHello!2+2?4</s>", ["Hello!", "4</s>"]),
}


@pytest.mark.parametrize("name", sorted(BUILTIN))
def test_exact_text_and_trained_spans(name: str) -> None:
    text, trained = EXPECTED[name]
    r = BUILTIN[name].render(conv(), CTX)
    assert r.text == text
    assert [r.text[a:b] for a, b in r.spans] == trained


EXPECTED["qwen2.5-vl"] = EXPECTED["qwen2-vl"]

DEFAULT_SYSTEMS = {
    "qwen2-vl": "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user",
    "qwen2.5-vl": "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user",
    "vicuna": "A chat between a curious user and an artificial intelligence assistant. ",
    "llava-v1": "A chat between a curious human and an artificial intelligence assistant. ",
    "alpaca": "Below is an instruction that describes a task. ",
}


@pytest.mark.parametrize("name", sorted(BUILTIN))
def test_default_system_and_override(name: str) -> None:
    r = BUILTIN[name].render(conv(system=False), CTX)
    if name in DEFAULT_SYSTEMS:
        assert DEFAULT_SYSTEMS[name] in r.text
    else:
        assert "Be brief" not in r.text and "system" not in r.text
    ctx = RenderContext(bos="<s>", eos="</s>", system="Custom sys.")
    assert "Custom sys." in BUILTIN[name].render(conv(system=False), ctx).text
    # The conversation's own system message wins over the context's.
    assert "Custom sys." not in BUILTIN[name].render(conv(), ctx).text


def test_train_on_policies_and_loss_flags() -> None:
    chatml = BUILTIN["chatml"]
    last = chatml.render(conv(), RenderContext(train_on="last"))
    assert last.trained_text() == "4<|im_end|>"
    everything = chatml.render(conv(), RenderContext(train_on="all"))
    assert everything.spans == [(0, len(everything.text))]
    c = conv()
    c.messages[2].loss = False  # first assistant turn masked
    c.messages[1].loss = True  # the user turn trained
    r = chatml.render(c, RenderContext())
    assert [r.text[a:b] for a, b in r.spans] == ["Hi", "4<|im_end|>"]
    r = chatml.render(c, RenderContext(train_on="all"))
    assert "Hello!<|im_end|>" not in r.trained_text()
    assert r.trained_text().startswith("<|im_start|>system\nBe brief.")
    with pytest.raises(
        ConfigError, match="train_on: expected one of assistant, last, all, got 'user'"
    ):
        RenderContext(train_on="user")


def test_qwen3_think_rules() -> None:
    qwen3 = BUILTIN["qwen3"]
    c = Conversation(
        [
            Message("user", "a"),
            Message("assistant", "<think>\nfirst thoughts\n</think>\n\nA1"),
            Message("user", "b"),
            Message("assistant", "A2", reasoning="second thoughts"),
        ]
    )
    r = qwen3.render(c, RenderContext())
    # Reasoning before the last user query is dropped; after it, kept and trained.
    assert "first thoughts" not in r.text
    assert r.text.endswith(
        "<|im_start|>assistant\n<think>\nsecond thoughts\n</think>\n\nA2<|im_end|>\n"
    )
    assert r.trained_text() == "A1<|im_end|><think>\nsecond thoughts\n</think>\n\nA2<|im_end|>"


def tool_conv() -> Conversation:
    return Conversation(
        [
            Message("user", "Time?"),
            Message(
                "assistant",
                "",
                tool_calls=[
                    {"type": "function", "function": {"name": "now", "arguments": {"tz": "UTC"}}}
                ],
            ),
            Message("tool", '{"t": "12:00"}'),
            Message("assistant", "Noon."),
        ],
        tools=[{"type": "function", "function": {"name": "now", "parameters": {}}}],
    )


def test_chatml_tools() -> None:
    r = BUILTIN["chatml"].render(tool_conv(), RenderContext())
    assert r.text.startswith("<|im_start|>system\n# Tools\n\nYou may call one or more functions")
    assert (
        '\n{"type": "function", "function": {"name": "now", "parameters": {}}}\n</tools>' in r.text
    )
    assert (
        '<|im_start|>assistant\n<tool_call>\n{"name": "now", "arguments": {"tz": "UTC"}}\n</tool_call><|im_end|>\n'
        '<|im_start|>user\n<tool_response>\n{"t": "12:00"}\n</tool_response><|im_end|>\n'
    ) in r.text
    assert [r.text[a:b] for a, b in r.spans] == [
        '<tool_call>\n{"name": "now", "arguments": {"tz": "UTC"}}\n</tool_call><|im_end|>',
        "Noon.<|im_end|>",
    ]


def test_llama3_tools() -> None:
    r = BUILTIN["llama3"].render(tool_conv(), RenderContext(bos="<|begin_of_text|>"))
    assert r.text.startswith(
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\n<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nGiven the following functions"
    )
    assert '{"name": "now", "parameters": {"tz": "UTC"}}<|eot_id|>' in r.trained_text()
    assert (
        '<|start_header_id|>ipython<|end_header_id|>\n\n"{\\"t\\": \\"12:00\\"}"<|eot_id|>'
        in r.text
    )
    two_calls = tool_conv()
    two_calls.messages[1].tool_calls = two_calls.messages[1].tool_calls * 2
    with pytest.raises(
        SampleError, match="template_error: message 1: Llama 3 writes one tool call"
    ):
        BUILTIN["llama3"].render(two_calls, RenderContext())


@pytest.mark.parametrize("name", ["llama2", "mistral", "vicuna", "llava-v1", "alpaca", "raw"])
def test_templates_without_tools_refuse_tool_data(name: str) -> None:
    with pytest.raises(
        SampleError, match=f"template_error: the '{name}' template has no way to write tools"
    ):
        BUILTIN[name].render(tool_conv(), CTX)


@pytest.mark.parametrize("name", ["llama2", "mistral", "vicuna", "alpaca"])
def test_templates_needing_eos(name: str) -> None:
    with pytest.raises(
        SampleError, match=f"the '{name}' template writes the tokenizer's eos token"
    ):
        BUILTIN[name].render(conv(), RenderContext())


@pytest.mark.parametrize("name", sorted(BUILTIN))
def test_documents_are_bos_text_eos_all_trained(name: str) -> None:
    doc = Conversation(
        [Message("assistant", [Part("image", "a.jpg"), Part("text", "A cat.")])], kind="text"
    )
    r = BUILTIN[name].render(doc, CTX)
    assert r.text == "<s><image>A cat.</s>"
    assert r.spans == [(0, 3), (10, len(r.text))]  # all but the image's text
    assert r.media == [Part("image", "a.jpg")]


def test_media_text_in_content() -> None:
    c = Conversation(
        [
            Message("user", [Part("image", "x.png"), Part("text", "What?")]),
            Message("assistant", "A."),
        ]
    )
    ctx = RenderContext(media_text={"image": "<|vision_start|><|image_pad|><|vision_end|>"})
    r = BUILTIN["chatml"].render(c, ctx)
    assert "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>What?<|im_end|>" in r.text
    assert r.media == [Part("image", "x.png")]


def test_get_template_resolution(tmp_path) -> None:
    assert get_template("qwen3") is BUILTIN["qwen3"]
    assert get_template("{{ messages[0]['content'] }}").spec()["kind"] == "jinja"
    j = tmp_path / "t.jinja"
    j.write_text("{{ messages[0]['content'] }}")
    assert get_template(j).name == "t"
    cfg = tmp_path / "tokenizer_config.json"
    cfg.write_text('{"chat_template": "{{ 1 }}"}')
    assert get_template(cfg).source == "{{ 1 }}"
    assert get_template(str(tmp_path)).source == "{{ 1 }}"
    cfg.write_text("{}")
    with pytest.raises(ConfigError, match="has no 'chat_template'"):
        get_template(cfg)
    with pytest.raises(ConfigError, match="'chatgpt' is not a built-in template"):
        get_template("chatgpt")
    with pytest.raises(ConfigError, match="none given and the tokenizer has no chat_template"):
        get_template(None)
    with pytest.raises(ConfigError, match="not a valid Jinja template"):
        get_template("{% for %}")


@pytest.mark.parametrize("name", ["qwen2-vl", "qwen2.5-vl"])
def test_qwen_vl_templates_render_as_the_models_own(name: str) -> None:
    """Qwen2-VL's and Qwen2.5-VL's chat template (their tokenizer_config.json): ChatML, a
    default system prompt, an image as vision_start + image_pad + vision_end; no think block."""
    from chute.templates.jinja import JinjaTemplate

    qwen2_vl = (
        "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
        "<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}"
        "{{ message['content'] }}<|im_end|>\n{% else %}{% for content in message['content'] %}"
        "{% if content['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
        "{% elif content['type'] == 'text' %}{{ content['text'] }}{% endif %}{% endfor %}"
        "<|im_end|>\n{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    c = Conversation(
        [
            Message("user", [Part("image", "x.png"), Part("text", "What?")]),
            Message("assistant", "A cat."),
            Message("user", "Sure?"),
            Message("assistant", "Yes."),
        ]
    )
    ctx = RenderContext(media_text={"image": "<|vision_start|><|image_pad|><|vision_end|>"})
    ours = BUILTIN[name].render(c, ctx)
    theirs = JinjaTemplate(qwen2_vl, name="qwen2-vl.jinja").render(c, ctx)
    assert ours.text == theirs.text and "<think>" not in ours.text
    assert [ours.text[a:b] for a, b in ours.spans] == ["A cat.<|im_end|>", "Yes.<|im_end|>"]
    tools = Conversation(c.messages, tools=[{"type": "function", "function": {"name": "f"}}])
    with pytest.raises(SampleError, match="template_error"):
        BUILTIN[name].render(tools, ctx)


def test_control_tokens_a_vocabulary_lacks_are_named(caplog: pytest.LogCaptureFixture) -> None:
    # a vocabulary without <|im_start|> / <|eot_id|> encodes them as text: the wrong template
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    from chute.recipe import Recipe
    from chute.tokenize import HFTokenizer
    from recipe_helpers import tiny_tokenizer

    rust = Tokenizer(models.BPE())
    rust.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    rust.train_from_iterator(["hello world"] * 5, trainer)
    plain = HFTokenizer(rust, special={"bos": "<s>", "eos": "</s>"})
    assert BUILTIN["chatml"].missing_control_tokens(plain) == ["<|im_start|>", "<|im_end|>"]
    assert BUILTIN["llama3"].missing_control_tokens(plain) == [
        "<|start_header_id|>",
        "<|end_header_id|>",
        "<|eot_id|>",
    ]
    assert BUILTIN["vicuna"].missing_control_tokens(plain) == []  # bos/eos only
    with caplog.at_level("WARNING", logger="chute.recipe"):
        Recipe(tokenizer=plain, template="qwen3")
    assert (
        "'qwen3' writes <|im_start|>, <|im_end|>, which this tokenizer has no token" in caplog.text
    )
    caplog.clear()
    with caplog.at_level("WARNING", logger="chute.recipe"):
        Recipe(tokenizer=tiny_tokenizer(), template="qwen3")  # a vocabulary made for it
    assert "has no token" not in caplog.text


def test_the_markers_around_a_media_token_are_not_trained() -> None:
    # Qwen2-VL writes an image as <|vision_start|><|image_pad|><|vision_end|>: the pads were
    # masked, the markers trained, in an assistant turn with an image and in caption records
    media = {"image": "<|vision_start|><|image_pad|><|vision_end|>"}
    ctx = RenderContext(media_text=media)
    answer = Message("assistant", [Part("text", "Here: "), Part("image", "a.jpg")])
    conv = Conversation([Message("user", "Show it"), answer])
    assert BUILTIN["chatml"].render(conv, ctx).trained_text() == "Here: <|im_end|>"
    caption = Conversation(
        [Message("assistant", [Part("image", "cat.jpg"), Part("text", "A cat.")])], kind="text"
    )
    trained = BUILTIN["chatml"].render(caption, RenderContext(eos="</s>", media_text=media))
    assert "vision" not in trained.trained_text() and "A cat." in trained.trained_text()

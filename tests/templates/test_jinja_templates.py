"""Jinja templates: rendering like apply_chat_template, and trained spans found without
{% generation %} tags — on small synthetic templates, and on the real Qwen3 and Llama 3.2 ones."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

from chute.errors import SampleError
from chute.recipe import Recipe
from chute.sample.conversation import Conversation, Message
from chute.sources import JsonlSource
from chute.templates import BUILTIN, JinjaTemplate, RenderContext
from chute.templates.jinja import _as_dict
from recipe_helpers import auto_tokenizer, real_tokenizer

SIMPLE = "{% for m in messages %}<{{ m.role }}>{{ m.content }}</s>{% endfor %}"


def chat(*pairs: tuple[str, str], **kw) -> Conversation:
    return Conversation([Message(role, text) for role, text in pairs], **kw)


def spans(r) -> list[str]:
    return [r.text[a:b] for a, b in r.spans]


def test_simple_template_spans_include_end_of_turn() -> None:
    r = JinjaTemplate(SIMPLE).render(
        chat(("user", "hi"), ("assistant", "yo"), ("user", "again"), ("assistant", "sure")),
        RenderContext(),
    )
    assert r.text == "<user>hi</s><assistant>yo</s><user>again</s><assistant>sure</s>"
    assert spans(r) == ["yo</s>", "sure</s>"]


def test_hf_environment_helpers_and_variables() -> None:
    source = (
        "{{ bos_token }}{% for m in messages %}{% generation %}{{ m.content | tojson }}"
        "{% endgeneration %}{% endfor %}{{ flag }}{% if strftime_now is defined %}!{% endif %}"
        "{% if messages | length > 2 %}{{ raise_exception('too many: ' ~ messages|length) }}{% endif %}"
    )
    t = JinjaTemplate(source)
    ctx = RenderContext(special={"bos": "<s>", "image": "<image>"}, variables={"flag": "F"})
    r = t.render(chat(("user", "héllo"), ("assistant", "ok")), ctx)
    assert r.text == '<s>"héllo""ok"F!'  # tojson keeps non-ASCII, as transformers' filter does
    with pytest.raises(SampleError, match="template_error: the chat template refused: too many: 3"):
        t.render(chat(("user", "a"), ("assistant", "b"), ("user", "c")), ctx)


def test_undefined_variable_is_a_template_error() -> None:
    t = JinjaTemplate("{{ messages[0].content + nothing.attr }}")
    with pytest.raises(
        SampleError, match="template_error: the chat template failed: UndefinedError"
    ):
        t.render(chat(("user", "a"), ("assistant", "b")), RenderContext())


def test_trimmed_content_is_found() -> None:
    t = JinjaTemplate(
        "{% for m in messages %}[{{ m.role }}] {{ m.content | trim }}<eot>{% endfor %}"
    )
    r = t.render(chat(("user", " q "), ("assistant", "\n  answer  \n")), RenderContext())
    assert r.text == "[user] q<eot>[assistant] answer<eot>"
    assert spans(r) == ["answer<eot>"]


def test_header_text_after_the_generation_prompt_is_trained() -> None:
    # Like Qwen3's empty think block: template text after the generation header is generated.
    t = JinjaTemplate(
        "{% for m in messages %}{% if m.role == 'user' %}U:{{ m.content }}\n"
        "{% else %}A:{% if loop.last %}<think></think>{% endif %}{{ m.content }}<end>\n{% endif %}"
        "{% endfor %}{% if add_generation_prompt %}A:{% endif %}"
    )
    r = t.render(
        chat(("user", "a"), ("assistant", "b"), ("user", "c"), ("assistant", "d")), RenderContext()
    )
    assert spans(r) == ["b<end>", "<think></think>d<end>"]


def test_template_that_rewrites_content_uses_prefix_renders() -> None:
    t = JinjaTemplate(
        "{% for m in messages %}{% if m.role == 'assistant' %}A: {{ m.content | upper }}</s>"
        "{% else %}U: {{ m.content }}\n{% endif %}{% endfor %}{% if add_generation_prompt %}A: {% endif %}"
    )
    r = t.render(
        chat(("user", "hi"), ("assistant", "hello"), ("user", "bye"), ("assistant", "ciao")),
        RenderContext(),
    )
    assert r.text == "U: hi\nA: HELLO</s>U: bye\nA: CIAO</s>"
    assert spans(r) == ["HELLO</s>", "CIAO</s>"]


def test_unalignable_template_is_rejected_not_mismasked() -> None:
    # The header depends on the number of messages (no prefix stability) and the assistant text
    # is written twice (no single place to diff): chute refuses rather than guess.
    t = JinjaTemplate(
        "{{ messages | length }}|{% for m in messages %}{% if m.role == 'assistant' %}"
        "{{ m.content }}+{{ m.content }}{% else %}{{ m.content }}{% endif %};{% endfor %}"
    )
    with pytest.raises(SampleError, match="template_error: cannot find message 1 \\(assistant\\)"):
        t.render(chat(("user", "x"), ("assistant", "y")), RenderContext())


def test_all_mode_masks_only_loss_false_messages() -> None:
    c = chat(("user", "hi"), ("assistant", "yo"), ("user", "again"), ("assistant", "sure"))
    c.messages[1].loss = False
    r = JinjaTemplate(SIMPLE).render(c, RenderContext(train_on="all"))
    assert spans(r) == ["<user>hi</s><assistant>", "<user>again</s><assistant>sure</s>"]
    r = JinjaTemplate(SIMPLE).render(
        chat(("user", "a"), ("assistant", "b")), RenderContext(train_on="all")
    )
    assert r.spans == [(0, len(r.text))]


def test_loss_true_user_message_trains_its_content() -> None:
    c = chat(("user", "hi"), ("assistant", "yo"))
    c.messages[0].loss = True
    assert spans(JinjaTemplate(SIMPLE).render(c, RenderContext())) == ["hi", "yo</s>"]


def test_pickles_without_the_compiled_template() -> None:
    t = JinjaTemplate(SIMPLE, name="simple", origin="x.jinja")
    back = pickle.loads(pickle.dumps(t))
    assert back.spec() == t.spec()
    c = chat(("user", "a"), ("assistant", "b"))
    assert back.render(c, RenderContext()) == t.render(c, RenderContext())


# -- the real templates -------------------------------------------------------------------------

TEXT_DATASETS = [
    "fastchat/dummy_conversation.json",
    "llama-factory/alpaca_en_demo.json",
    "llama-factory/alpaca_zh_demo.json",
    "llama-factory/glaive_toolcall_en_demo.json",
    "llama-factory/identity.json",
    "llama-factory/v1_sft_demo.jsonl",
    "xtuner/resource/openai_sft.jsonl",
    "xtuner/resource/mllm_sft_text_example_data.jsonl",
]
PER_FILE = 40
DATE = {"date_string": "26 Jul 2024"}


def records(shared_data: Path):
    for name in TEXT_DATASETS:
        source = JsonlSource(shared_data / name)
        step = max(1, len(source) // PER_FILE)
        for i in range(0, len(source), step):
            yield name, source[i]


def qwen3_recipes(shared_data: Path) -> tuple[Recipe, Recipe, Recipe]:
    tok = real_tokenizer(str(shared_data / "tokenizers/qwen3/tokenizer.json"))
    jinja = Recipe(tokenizer=tok, template=shared_data / "tokenizers/qwen3/tokenizer_config.json")
    return jinja, Recipe(tokenizer=tok, template="qwen3"), Recipe(tokenizer=tok, template="chatml")


def llama_recipes(shared_data: Path) -> tuple[Recipe, Recipe]:
    tok = real_tokenizer(str(shared_data / "tokenizers/llama3.2/tokenizer.json"))
    jinja = Recipe(
        tokenizer=tok,
        template=shared_data / "tokenizers/llama3.2/meta-llama-Llama-3.2-3B-Instruct.jinja",
        template_vars=DATE,
    )
    return jinja, Recipe(tokenizer=tok, template="llama3")


def check_sample(recipe: Recipe, record) -> dict:
    """The invariants every sample satisfies, checked against independent computations."""
    sample = recipe(record)
    tok = recipe.tokenizer
    rendered = recipe.render(record)
    ids, labels = sample["input_ids"], sample["labels"]
    # ids are exactly rendering-then-encoding, and decode back to the rendered text.
    assert ids.tolist() == tok.encode(rendered.text)
    assert tok.decode(ids.tolist()) == rendered.text
    # Trained tokens are exactly the assistant spans: decoding them gives the spans' text.
    trained = labels != -100
    assert (labels[trained] == ids[trained]).all()
    assert tok.decode(ids[trained].tolist()) == rendered.trained_text()
    return sample


@pytest.mark.shared_data
def test_qwen3_jinja_equals_render_then_encode_and_transformers(shared_data: Path) -> None:
    pytest.importorskip("transformers")
    hf = auto_tokenizer(str(shared_data / "tokenizers/qwen3"))
    jinja, _, _ = qwen3_recipes(shared_data)
    n = 0
    for _, record in records(shared_data):
        sample = check_sample(jinja, record)
        conv = jinja.conversation(record)
        msgs = [_as_dict(m, jinja._ctx) for m in conv.messages]
        reference = hf.apply_chat_template(msgs, tools=conv.tools, tokenize=False)
        assert jinja.render(record).text == reference
        assert sample["input_ids"].tolist() == hf(reference, add_special_tokens=False)["input_ids"]
        n += 1
    assert n > 250


@pytest.mark.shared_data
def test_llama32_jinja_equals_render_then_encode_and_transformers(shared_data: Path) -> None:
    pytest.importorskip("transformers")
    hf = auto_tokenizer(str(shared_data / "tokenizers/llama3.2"))
    source = (
        shared_data / "tokenizers/llama3.2/meta-llama-Llama-3.2-3B-Instruct.jinja"
    ).read_text()
    jinja, _ = llama_recipes(shared_data)
    for _, record in records(shared_data):
        sample = check_sample(jinja, record)
        conv = jinja.conversation(record)
        msgs = [_as_dict(m, jinja._ctx) for m in conv.messages]
        reference = hf.apply_chat_template(
            msgs, tools=conv.tools, tokenize=False, chat_template=source, **DATE
        )
        assert jinja.render(record).text == reference
        assert sample["input_ids"].tolist() == hf(reference, add_special_tokens=False)["input_ids"]


@pytest.mark.shared_data
def test_builtin_qwen3_is_identical_to_the_jinja_template(shared_data: Path) -> None:
    jinja, builtin, chatml = qwen3_recipes(shared_data)
    for name, record in records(shared_data):
        a, b = jinja(record), check_sample(builtin, record)
        assert a["input_ids"].tolist() == b["input_ids"].tolist(), (name, record.line)
        assert a["labels"].tolist() == b["labels"].tolist(), (name, record.line)
        # chatml (Qwen2.5 style) differs only by Qwen3's empty think block on the final turn.
        c = check_sample(chatml, record)
        jt, ct = jinja.render(record).text, chatml.render(record).text
        k = jt.rfind("<|im_start|>assistant\n") + len("<|im_start|>assistant\n")
        assert jt[k:].startswith("<think>\n\n</think>\n\n")
        assert jt[:k] + jt[k + len("<think>\n\n</think>\n\n") :] == ct
        assert len(c["input_ids"]) == len(a["input_ids"]) - 4  # <think> \n\n </think> \n\n


@pytest.mark.shared_data
def test_builtin_llama3_agrees_with_llama32_after_its_date_header(shared_data: Path) -> None:
    jinja, builtin = llama_recipes(shared_data)
    for name, record in records(shared_data):
        conv = builtin.conversation(record)
        if conv.tools or conv.messages[0].role == "system":
            continue  # the system block is where Llama 3.2 adds its dates
        a, b = jinja(record), check_sample(builtin, record)
        # Llama 3.2 opens with a system block (knowledge cutoff and date); the rest agrees.
        eot = builtin.tokenizer.token_to_id("<|eot_id|>")
        cut = a["input_ids"].tolist().index(eot) + 1
        assert a["input_ids"][cut:].tolist() == b["input_ids"][1:].tolist(), (name, record.line)
        assert a["labels"][cut:].tolist() == b["labels"][1:].tolist()


@pytest.mark.shared_data
def test_tool_calls_train_the_call_and_mask_the_result(shared_data: Path) -> None:
    jinja, _, _ = qwen3_recipes(shared_data)
    llama, _ = llama_recipes(shared_data)
    record = JsonlSource(shared_data / "llama-factory/glaive_toolcall_en_demo.json")[0]
    q = jinja.render(record).trained_text()
    assert (
        '<tool_call>\n{"name": "search_recipes", "arguments": {"ingredients": ["chicken", "bell peppers", "rice"]}}\n</tool_call><|im_end|>'
        in q
    )
    assert "<tool_response>" not in q and 'recipes": [' not in q
    ll = llama.render(record).trained_text()
    assert (
        '{"name": "search_recipes", "parameters": {"ingredients": ["chicken", "bell peppers", "rice"]}}<|eot_id|>'
        in ll
    )
    assert "ipython" not in ll


@pytest.mark.shared_data
def test_qwen3_reasoning_multi_turn(shared_data: Path) -> None:
    # Reasoning in a non-final turn is dropped by the template; in the final turn it is trained,
    # think tags included. Markers cannot place these turns; the fallbacks must, and agree with
    # the built-in qwen3.
    jinja, builtin, _ = qwen3_recipes(shared_data)
    record = {
        "messages": [
            {"role": "user", "content": "1+1?"},
            {"role": "assistant", "content": "<think>\nadd them\n</think>\n\n2"},
            {"role": "user", "content": "and 2+2?"},
            {"role": "assistant", "content": "4", "reasoning_content": "double 2"},
        ]
    }
    a, b = jinja(record), builtin(record)
    assert a["input_ids"].tolist() == b["input_ids"].tolist()
    assert a["labels"].tolist() == b["labels"].tolist()
    trained = jinja.tokenizer.decode(a["input_ids"][a["labels"] != -100].tolist())
    assert trained == "2<|im_end|><think>\ndouble 2\n</think>\n\n4<|im_end|>"
    inline = {
        **record,
        "messages": [
            *record["messages"][:3],
            {"role": "assistant", "content": "<think>\ndouble 2\n</think>\n\n4"},
        ],
    }
    assert np.array_equal(jinja(inline)["labels"], a["labels"])


@pytest.mark.shared_data
def test_qwen3_enable_thinking_false_masks_the_empty_think_block(shared_data: Path) -> None:
    tok = real_tokenizer(str(shared_data / "tokenizers/qwen3/tokenizer.json"))
    recipe = Recipe(
        tokenizer=tok,
        template=shared_data / "tokenizers/qwen3/tokenizer_config.json",
        template_vars={"enable_thinking": False},
    )
    sample = recipe({"instruction": "hi", "output": "hello"})
    assert tok.decode(sample["input_ids"][sample["labels"] != -100].tolist()) == "hello<|im_end|>"
    default = Recipe(tokenizer=tok, template="qwen3")({"instruction": "hi", "output": "hello"})
    assert tok.decode(default["input_ids"][default["labels"] != -100].tolist()) == (
        "<think>\n\n</think>\n\nhello<|im_end|>"
    )


def test_builtin_names_are_all_documented() -> None:
    from chute.templates import builtin

    for name in BUILTIN:
        assert f"\n{name} " in builtin.__doc__


@pytest.mark.parametrize(
    "source",
    [
        "{{ ''.__class__.__mro__ }}",
        "{{ messages[0].__class__ }}",
        "{{ messages[0].__class__.__mro__ }}",
        "{% for m in messages %}{{ loop.__class__ }}{{ loop.__class__.__init__ }}{% endfor %}",
        "{{ messages[0].update({'role': 'x'}) }}",
        "{{ messages.append(1) }}",
        "{{ '{0.__class__}'.format(messages) }}",
        "{% set ns = namespace(a=1) %}{{ ns.__class__.__init__ }}",
    ],
)
def test_the_sandbox_still_refuses_unsafe_access(source: str) -> None:
    # Exactly what the plain sandbox does: either the same refusal or the same (empty) output.
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    messages = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    plain = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True).from_string(source)
    try:
        expected = plain.render(messages=messages, tools=None, add_generation_prompt=False)
    except Exception as exc:
        with pytest.raises(SampleError, match=f"template_error: .*{type(exc).__name__}"):
            JinjaTemplate(source).render_messages(messages, RenderContext())
    else:
        assert JinjaTemplate(source).render_messages(messages, RenderContext()) == expected
        assert "class" not in expected and "object" not in expected


def test_fast_lookups_match_the_plain_sandbox() -> None:
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    source = (
        "{% set ns = namespace(n=0) %}{% for m in messages %}{{ loop.index0 }}{{ m.role }}"
        "{{ m.missing is defined }}{{ m.items() | list | length }}{{ m.content.upper() }}"
        "{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}"
    )
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "yo", "items": 1},
    ]
    plain = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True).from_string(source)
    assert JinjaTemplate(source).render_messages(messages, RenderContext()) == plain.render(
        messages=messages, tools=None, add_generation_prompt=False
    )


@pytest.mark.shared_data
def test_an_empty_system_message_before_tools_renders_as_qwen3_writes_it(
    shared_data: Path,
) -> None:
    jinja, builtin, _ = qwen3_recipes(shared_data)
    record = {
        "messages": [
            {"role": "system", "content": ""},
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Yo"},
        ],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
    }
    assert builtin.render(record).text == jinja.render(record).text
    assert builtin.render(record).text.startswith("<|im_start|>system\n\n\n# Tools")


@pytest.mark.shared_data
def test_llama_factory_options_change_only_what_they_name(shared_data: Path) -> None:
    """think_every_turn, train_newline, tools_blank_line: LLaMA-Factory 0.9.5's renderings."""
    _, qwen3, _ = qwen3_recipes(shared_data)
    tok = qwen3.tokenizer
    lf = Recipe(
        tokenizer=tok,
        template="qwen3",
        template_vars={"think_every_turn": True, "train_newline": True, "tools_blank_line": True},
    )
    newline = tok.encode("\n")
    for name, record in records(shared_data):
        a, b = qwen3(record), check_sample(lf, record)
        conv = qwen3.conversation(record)
        turns = sum(m.role == "assistant" for m in conv.messages)
        if not conv.tools and turns == 1 and conv.messages[-1].role == "assistant":
            # one turn: the same ids; one more trained token, the "\n" after <|im_end|>
            assert a["input_ids"].tolist() == b["input_ids"].tolist(), (name, record.line)
            trained_a, trained_b = (a["labels"] != -100).sum(), (b["labels"] != -100).sum()
            assert trained_b == trained_a + (b["input_ids"][-1:].tolist() == newline)
        text = lf.render(record).text
        if turns > 1:
            assert text.count("<think>") >= turns  # a think block in every assistant turn
        if conv.tools and conv.messages[0].role != "system":
            assert text.startswith("<|im_start|>system\n\n\n# Tools")

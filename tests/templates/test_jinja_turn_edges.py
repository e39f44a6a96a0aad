"""Jinja templates: the trained span of turns the markers cannot place, and of turns that depart
from the generation header — empty assistant turns, Qwen3 under ``enable_thinking: false``,
data that writes marker-like text — on small templates shaped like the real ones, then on the
real Qwen3 and Llama 3.2 templates, with the built-in ``qwen3`` giving the same labels."""

from __future__ import annotations

from pathlib import Path

import pytest

from chute.recipe import Recipe
from chute.sample.conversation import Conversation, Message
from chute.templates import BUILTIN, JinjaTemplate, RenderContext

# Qwen3's shape: the final assistant turn writes a think block; under enable_thinking: false the
# generation prompt ends with an empty one (so the model is prompted past it)
THINKING = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n"
    "{% if m.role == 'assistant' and loop.last %}"
    "<think>\n{{ m.reasoning_content or '' }}\n</think>\n\n{% endif %}"
    "{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}"
    "<think>\n\n</think>\n\n{% endif %}{% endif %}"
)
# Llama 3's shape: a system block that ends with the same end-of-turn token as every turn
HEADED = (
    "<sys>date<eot>{% for m in messages %}<h>{{ m.role }}</h>\n\n{{ m.content | trim }}<eot>"
    "{% endfor %}{% if add_generation_prompt %}<h>assistant</h>\n\n{% endif %}"
)
NO_THINKING = RenderContext(variables={"enable_thinking": False})


def marked(template: object, conv: Conversation, ctx: RenderContext = RenderContext()) -> str:
    """The rendering with each trained span in [[ ]]."""
    r = template.render(conv, ctx)  # type: ignore[attr-defined]
    out, pos = [], 0
    for a, b in r.spans:
        out += [r.text[pos:a], "[[", r.text[a:b], "]]"]
        pos = b
    return "".join([*out, r.text[pos:]])


def turns(*texts: str, reasoning: str | None = None) -> Conversation:
    roles = ["user", "assistant"] * len(texts)
    messages = [Message(role, text) for role, text in zip(roles, texts, strict=False)]
    if reasoning is not None:
        last = messages[-1]
        messages[-1] = Message(last.role, last.content, reasoning=reasoning)
    return Conversation(messages)


def test_an_empty_turn_trains_its_own_end_of_turn_not_an_earlier_one() -> None:
    headed = JinjaTemplate(HEADED)
    assert marked(headed, turns("hi", "", "again", "ok")) == (
        "<sys>date<eot><h>user</h>\n\nhi<eot><h>assistant</h>\n\n[[<eot>]]"
        "<h>user</h>\n\nagain<eot><h>assistant</h>\n\n[[ok<eot>]]"
    )
    thinking = JinjaTemplate(THINKING)
    middle = marked(thinking, turns("hi", "", "again", "ok"), NO_THINKING)
    assert middle.startswith(
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n[[<|im_end|>]]"
    )
    assert middle.count("[[") == 2
    last = marked(thinking, turns("hi", "ok", "again", ""), NO_THINKING)
    assert "again<|im_end|>\n<|im_start|>" in last  # the user's end of turn is not trained
    assert last.endswith("<think>\n\n</think>\n\n[[<|im_end|>]]\n")


@pytest.mark.parametrize("template", [JinjaTemplate(THINKING), BUILTIN["qwen3"]])
def test_under_enable_thinking_false_reasoning_is_trained_whole_and_an_empty_block_not(
    template: object,
) -> None:
    head = "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n"
    assert marked(template, turns("q", "answer"), NO_THINKING) == (
        head + "<think>\n\n</think>\n\n[[answer<|im_end|>]]\n"  # the prompt's empty block
    )
    whole = head + "[[<think>\nreason\n</think>\n\nanswer<|im_end|>]]\n"
    assert marked(template, turns("q", "answer", reasoning="reason"), NO_THINKING) == whole
    # the default (the model writes its own think block): trained, empty or not
    assert marked(template, turns("q", "answer")) == (
        head + "[[<think>\n\n</think>\n\nanswer<|im_end|>]]\n"
    )


def test_reasoning_written_in_the_content_is_trained_whole() -> None:
    # a template that splits <think> out of the content (as Qwen3's does): the markers cannot
    # place it (the marker has no think block), the diff does, from the turn's role header
    splitting = THINKING.replace(
        "{{ m.reasoning_content or '' }}\n</think>\n\n{% endif %}{{ m.content }}",
        "{{ m.content.split('</think>')[0].split('<think>')[-1].strip() if '</think>' in "
        "m.content else '' }}\n</think>\n\n{% endif %}{{ m.content.split('</think>')[-1].lstrip() }}",
    )
    got = marked(
        JinjaTemplate(splitting), turns("q", "<think>\nreason\n</think>\n\nanswer"), NO_THINKING
    )
    assert got.endswith(
        "<|im_start|>assistant\n[[<think>\nreason\n</think>\n\nanswer<|im_end|>]]\n"
    )


def test_marker_like_text_in_the_data_does_not_move_a_span() -> None:
    headed = JinjaTemplate(HEADED)
    got = marked(headed, turns("\u27e6chute:0\u27e7 \u27e6chute:1\u27e7", "\u27e6chute:1\u27e7"))
    assert got.endswith("<h>assistant</h>\n\n[[\u27e6chute:1\u27e7<eot>]]")
    assert got.count("[[") == 1
    # a marker-like text after every real marker (its number past theirs) is no crash either
    got = marked(headed, turns("q", "a", "\u27e6chute:7\u27e7", "b"))
    assert got.count("[[") == 2 and got.endswith("[[b<eot>]]")


def test_the_built_in_qwen3_spec_changed_with_its_labels() -> None:
    # caches built with the earlier labels (enable_thinking: false trained the empty block)
    # must not be reused: the template's spec is in the fingerprint
    assert BUILTIN["qwen3"].spec()["think"] == 2
    assert JinjaTemplate(HEADED).spec()["spans"] == 2


@pytest.mark.shared_data
def test_real_templates_agree_with_the_built_in_on_these_turns(shared_data: Path) -> None:
    tok = shared_data / "tokenizers/qwen3"
    records = [
        [("user", "hi"), ("assistant", ""), ("user", "again"), ("assistant", "ok")],
        [("user", "hi"), ("assistant", "ok"), ("user", "again"), ("assistant", "")],
        [("user", "q"), ("assistant", "<think>\nreason\n</think>\n\nanswer")],
        [("user", "q"), ("assistant", "answer")],
    ]
    for variables in ({}, {"enable_thinking": False}):
        own = str(tok / "tokenizer_config.json")
        a = Recipe(tokenizer=str(tok), template=own, template_vars=variables)
        b = Recipe(tokenizer=str(tok), template="qwen3", template_vars=variables)
        for record in records:
            messages = [{"role": r, "content": c} for r, c in record]
            x, y = a.process({"messages": messages}), b.process({"messages": messages})
            assert x["input_ids"].tolist() == y["input_ids"].tolist()
            assert x["labels"].tolist() == y["labels"].tolist(), (variables, record)
    llama = shared_data / "tokenizers/llama3.2"
    recipe = Recipe(
        tokenizer=str(llama), template=str(llama / "meta-llama-Llama-3.2-3B-Instruct.jinja")
    )
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": ""},
        {"role": "user", "content": "again"},
        {"role": "assistant", "content": "ok"},
    ]
    sample = recipe.process({"messages": messages})
    trained = [
        t for t, label in zip(sample["input_ids"], sample["labels"], strict=True) if label >= 0
    ]
    assert recipe.tokenizer.decode(trained) == "<|eot_id|>ok<|eot_id|>"
    ids = sample["input_ids"].tolist()
    eot = recipe.tokenizer.token_to_id("<|eot_id|>")
    first_trained = next(i for i, label in enumerate(sample["labels"]) if label >= 0)
    assert ids[:first_trained].count(eot) == 2  # the system's and the user's, not trained

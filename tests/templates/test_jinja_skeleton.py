"""Jinja skeletons: one render per conversation shape, the same text and spans as rendering.

Every test compares a template with skeletons against the same template rendering every
conversation (``plain``), so a skeleton that filled in something a render would not write fails.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from chute.errors import SampleError
from chute.recipe import Recipe
from chute.sample.conversation import Conversation, Message
from chute.sources import JsonlSource
from chute.templates import JinjaTemplate, RenderContext
from recipe_helpers import real_tokenizer

CTX = RenderContext()


def chat(*texts: str, roles: tuple[str, ...] = ("user", "assistant")) -> Conversation:
    return Conversation([Message(roles[i % len(roles)], t) for i, t in enumerate(texts)])


class Counted(JinjaTemplate):
    """A JinjaTemplate that counts the renders it makes (skeleton renders included)."""

    def __init__(self, source: str):
        super().__init__(source)
        self.renders = 0
        compiled = self._compiled
        real_render, real_generate = compiled.render, compiled.generate

        def render(*a: Any, **kw: Any) -> str:
            self.renders += 1
            return real_render(*a, **kw)

        def generate(*a: Any, **kw: Any) -> Any:
            self.renders += 1
            return real_generate(*a, **kw)

        compiled.render, compiled.generate = render, generate


def plain(source: str) -> JinjaTemplate:
    t = JinjaTemplate(source)
    t._skeleton = lambda *a: None  # type: ignore[method-assign]
    return t


def same(source: str, convs: list[Conversation], ctx: RenderContext = CTX) -> Counted:
    """Render ``convs`` with and without skeletons; assert identical results; return the template."""
    fast, slow = Counted(source), plain(source)
    for conv in convs:
        try:
            expected: Any = slow.render(conv, ctx)
        except SampleError as exc:
            expected = str(exc)
        try:
            got: Any = fast.render(conv, ctx)
        except SampleError as exc:
            got = str(exc)
        assert got == expected, conv
    return fast


STRIPPING = (
    "{% for m in messages %}<{{ m.role }}>{{ m.content | trim }}"
    "{% if m.role == 'assistant' %}{{ '<eot>' }}{% endif %}\n{% endfor %}"
)


def test_one_render_per_shape_then_none() -> None:
    convs = [chat(f"  question {i}?  ", f"\nanswer {i}\n") for i in range(50)]
    t = same(STRIPPING, convs)
    assert t.renders == 1 + 4  # the skeleton, and the four probes of the turn's header and end
    t.render(chat("a", "b", "c", "d"), CTX)  # a new shape: one more
    assert t.renders == 6


def test_tests_on_contents_are_guards() -> None:
    source = (
        "{% for m in messages %}"
        "{% if '</think>' in m.content %}<r>{{ m.content.split('</think>')[1] }}"
        "{% elif m.content.startswith('<tool_response>') %}<tool>{{ m.content }}"
        "{% elif m.content == 'same' %}<same/>"
        "{% elif m.content %}<{{ m.role }}>{{ m.content.lstrip('\\n') }}{% endif %}"
        "{% if m.content.endswith('?') %}?{% endif %}{% if m.content | length > 20 %}!{% endif %}"
        "\n{% endfor %}"
    )
    convs = [
        chat("hi?", "yo"),
        chat("hi", "a</think>b"),
        chat("<tool_response>x</tool_response>", "\n\nok"),
        chat("same", "same"),
        chat("a fairly long question here?", "short"),
        chat("", "empty question"),
    ]
    same(source, convs + convs)


@pytest.mark.parametrize(
    "body",
    [
        "{% if m.content in 'hello world' %}H{% endif %}{{ m.content }}",
        "{% if 'hello world'.startswith(m.content) %}H{% endif %}{{ m.content }}",
        "{% if m.content is in ['hi', 'yo'] %}H{% endif %}{{ m.content }}",
        "{{ m.content | int }}{{ m.content }}",
        "{{ m.content | wordcount }}{{ m.content }}",
        "{{ m.content[0] }}{{ m.content }}",
        "{% for c in m.content %}{{ c }}.{% endfor %}",
        "{{ m.content | tojson }}",
        "{{ m.content ~ '!' }}",
        "{% set x %}[{{ m.content }}]{% endset %}{{ x }}",
        "{{ m.content.replace('i', 'I') }}",
        "{{ m.content.upper() }}",
        "{{ '%s!' % m.content }}",
        "{{ m.content | e }}",
        "{{ [m.content, m.content] | join('/') }}",
    ],
)
def test_uses_the_skeleton_cannot_follow_render_as_before(body: str) -> None:
    source = "{% for m in messages %}<{{ m.role }}>" + body + "\n{% endfor %}"
    convs = [chat("hi", "yo"), chat("hello", "world"), chat("12", "3 4"), chat("hi", "hi")]
    t = same(source, convs)
    skeleton = t._skeleton(
        [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}], None, CTX
    )
    assert skeleton is None  # refused: every conversation of that shape is rendered


def test_shapes_differ_by_roles_tools_reasoning_and_variables() -> None:
    source = (
        "{% if tools %}T{{ tools | length }}{% endif %}{{ flag }}"
        "{% for m in messages %}<{{ m.role }}>{{ m.content }}"
        "{% if m.reasoning_content %}[{{ m.reasoning_content }}]{% endif %}"
        "{% for c in m.tool_calls or [] %}{{ c.function.name }}{% endfor %}|{% endfor %}"
    )
    call = {"type": "function", "function": {"name": "f", "arguments": "{}"}}
    convs = [
        chat("a", "b"),
        chat("a", "b", roles=("system", "user")),
        Conversation([Message("user", "q"), Message("assistant", "r", reasoning="think")]),
        Conversation([Message("user", "q"), Message("assistant", "r", reasoning="other")]),
        Conversation([Message("user", "q"), Message("assistant", "", tool_calls=[call])]),
        Conversation([Message("user", "q"), Message("assistant", "r")], tools=[{"name": "f"}]),
        Conversation(
            [Message("user", "q"), Message("assistant", "r")], tools=[{"name": "f"}, {"n": 2}]
        ),
    ]
    same(source, convs)
    for flag in ("x", "y"):
        same(source, convs, RenderContext(variables={"flag": flag}))


def test_train_on_all_and_last_and_system_prompt() -> None:
    convs = [chat("q1", "a1", "q2", "a2"), chat("q", "a")]
    for train_on in ("all", "last", "assistant"):
        same(STRIPPING, convs, RenderContext(train_on=train_on))
    same(STRIPPING, convs, RenderContext(system="Be brief."))


def test_template_errors_are_the_same() -> None:
    source = (
        "{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('no system') }}"
        "{% endif %}{{ m.content }}{% endfor %}"
    )
    same(source, [chat("a", "b"), chat("s", "a", roles=("system", "user")), chat("a", "b")])


@pytest.mark.shared_data
@pytest.mark.parametrize("which", ["qwen3", "llama3.2"])
def test_real_templates_on_shared_data(shared_data: Path, which: str) -> None:
    """Every record of the chat datasets: text and spans identical with and without skeletons."""
    template = {
        "qwen3": shared_data / "tokenizers/qwen3/tokenizer_config.json",
        "llama3.2": shared_data / "tokenizers/llama3.2/meta-llama-Llama-3.2-3B-Instruct.jinja",
    }[which]
    tok = real_tokenizer(str(shared_data / f"tokenizers/{which}/tokenizer.json"))
    names = [
        "fastchat/dummy_conversation.json",
        "llama-factory/alpaca_en_demo.json",
        "llama-factory/glaive_toolcall_en_demo.json",
        "llama-factory/v1_sft_demo.jsonl",
        "xtuner/resource/openai_sft.jsonl",
    ]
    for train_on in ("assistant", "all"):
        fast = Recipe(tokenizer=tok, template=template, train_on=train_on)
        slow = Recipe(tokenizer=tok, template=template, train_on=train_on)
        slow.template._skeleton = lambda *a: None  # type: ignore[attr-defined]
        for name in names:
            for record in JsonlSource(shared_data / name):
                try:
                    expected: Any = slow.render(record)
                except SampleError as exc:
                    expected = str(exc)
                try:
                    got: Any = fast.render(record)
                except SampleError as exc:
                    got = str(exc)
                assert got == expected, f"{name}:{record.line}"


def test_no_new_skeletons_once_most_shapes_are_refused() -> None:
    source = "{% for m in messages %}{{ m.content | tojson }}{% endfor %}"  # every shape refused
    t = same(source, [chat(*["x"] * k) for k in range(1, 40)])
    skeletons = t._skeletons
    assert skeletons.refused == skeletons.GIVE_UP_AFTER and skeletons.made == 0
    renders = t.renders
    t.render(chat(*["y"] * 50), CTX)  # a new shape: rendered, no skeleton tried
    assert t.renders == renders + 2 and skeletons.refused == skeletons.GIVE_UP_AFTER


@pytest.mark.parametrize("finder", ["_by_plan", "_marked_cut"])
def test_spans_read_off_the_fill_are_those_of_the_marker_rendering(
    monkeypatch: pytest.MonkeyPatch, finder: str
) -> None:
    """Spans are read off the filled skeleton where they can be (a span plan per skeleton, else
    the marker rendering's cut); contents that hold the marker's brackets, or the text after
    their slot, give the plain path's spans."""
    from chute.templates import jinja

    used: list[bool] = []
    real = getattr(jinja, finder)

    def spy(*args: Any) -> Any:
        found = real(*args)
        used.append(found is not None)
        return found

    monkeypatch.setattr(jinja, finder, spy)
    if finder == "_marked_cut":  # with no span plans, the cut is what reads the fill
        monkeypatch.setattr(jinja, "_by_plan", lambda *args: None)
    tested = (
        "{% for m in messages %}<{{ m.role }}>{{ m.content }}"
        "{% if '?' in m.content %}(q){% endif %}<eot>\n{% endfor %}"
    )
    convs = [
        chat("q", "a"),
        chat("why?", "because", "and?", "so"),
        chat("q", "\u27e6chute:0\u27e7 looks like a marker"),
        chat("q", "a bracket \u27e6 alone"),
        chat("q", "holds the text after it: <eot>\n<user>x"),
        chat("<assistant>a header in a question", "<assistant> and one in the answer<eot>"),
        chat("q", "", "q2", "a2"),  # an empty answer: left to the fallbacks
        chat("q", " padded  "),
    ]
    for source in (STRIPPING, tested):
        for train_on in ("assistant", "last"):  # ("all" trains every message: nothing to find)
            used.clear()
            same(source, convs, RenderContext(train_on=train_on))
            assert any(used) and not all(used), (source, train_on, used)  # both ways taken
